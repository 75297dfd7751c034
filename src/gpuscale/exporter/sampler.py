"""Collection decoupled from scraping.

A sampler thread asks the source for a snapshot every ``interval`` seconds
and publishes it with its rendered exposition; scrapes only read what was
published. A source that hangs cannot stall scrapes: each collect runs on a
worker thread and is abandoned (and counted) when it overruns its timeout.
A snapshot older than three intervals is withdrawn rather than served as fresh.
A source that raises ``TransientError`` is asked again no sooner than the
error's ``delay`` (and never sooner than the next interval).
"""

import gzip
import logging
import threading
import time
import zlib
from collections import Counter as TallyCounter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

from gpuscale import __version__
from gpuscale.errors import TransientError
from gpuscale.exporter.collector import Rendering, SnapshotCollector, SnapshotFamilies
from gpuscale.exporter.dcgm import CLOCK_EVENTS, CLOCK_REASONS_FIELD
from gpuscale.exporter.exposition import render
from gpuscale.telemetry.base import GpuSource, Snapshot, XidEvent
from gpuscale.telemetry.xid_window import XidWindow

logger = logging.getLogger(__name__)

STALE_AFTER_INTERVALS = 3


@dataclass(slots=True)
class _Published:
    snapshot: Snapshot
    xid_counts: Mapping[str, TallyCounter[int]]
    clock_counts: Mapping[str, TallyCounter[int]]
    at: float  # monotonic time of the collect
    text: bytes
    _gz: tuple[bytes, "zlib._Compress"] | None = field(default=None)

    def gzipped(self, tail: bytes) -> bytes:
        """One gzip stream of ``text + tail``; the GPU part is compressed once per collect.

        Many HTTP clients read only the first member of a multi-member gzip body, so the
        per-scrape tail continues the stream from a saved compressor state instead.
        """
        if self._gz is None:
            compressor = zlib.compressobj(1, zlib.DEFLATED, 31)  # 31: gzip container
            head = compressor.compress(self.text) + compressor.flush(zlib.Z_SYNC_FLUSH)
            self._gz = (head, compressor)
        head, compressor = self._gz
        rest = compressor.copy()
        return head + rest.compress(tail) + rest.flush()


class _Worker:
    """One daemon thread that runs collects, so a hung call never blocks the sampler."""

    def __init__(self, fn: Callable[[], Snapshot]) -> None:
        self._fn = fn
        self._request = threading.Event()
        self._done = threading.Event()
        self._result: Snapshot | None = None
        self._error: BaseException | None = None
        self.busy = False
        threading.Thread(target=self._loop, name="gpuscale-collect", daemon=True).start()

    def _loop(self) -> None:
        while True:
            self._request.wait()
            self._request.clear()
            try:
                self._result, self._error = self._fn(), None
            except Exception as exc:  # noqa: BLE001 - any source failure is reported, not fatal
                self._result, self._error = None, exc
            self.busy = False
            self._done.set()

    def run(self, timeout: float) -> Snapshot | None:
        """Run one collect; None on timeout. Re-raises the source's exception."""
        self.busy = True
        self._done.clear()
        self._request.set()
        if not self._done.wait(timeout):
            return None
        if self._error is not None:
            raise self._error
        return self._result


class Sampler:
    """Collects snapshots on a schedule and serves the latest fresh one.

    Args:
        source: The GPU backend.
        families: Builds dcgm-exporter families from a snapshot.
        source_name: Which backend ``source`` is (``sim``, ``nvml``, ``amd``), served as
            ``gpuscale_exporter_info{source=...}``.
        interval_s: Seconds between collects (dcgm-exporter's --collect-interval).
        timeout_s: A collect that takes longer is abandoned and counted.
        xid_window_ms: Trailing window of DCGM_EXP_XID_ERRORS_COUNT.
        monotonic: Clock for scheduling and staleness (injectable for tests).
    """

    def __init__(
        self,
        source: GpuSource,
        families: SnapshotFamilies,
        *,
        source_name: str,
        interval_s: float = 1.0,
        timeout_s: float | None = None,
        xid_window_ms: int = 300_000,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.interval_s = interval_s
        self.timeout_s = timeout_s if timeout_s is not None else max(interval_s, 1.0)
        self._xids = XidWindow(xid_window_ms)
        # Each collect that sees a clock-event bit counts once, as each DCGM sample does.
        self._clock_events = (
            XidWindow(families.clock_window_ms) if families.wants_clock_events else None
        )
        self._monotonic = monotonic
        self._published: _Published | None = None
        self._last_error = "no collect yet"
        self._retry_at = float("-inf")  # monotonic time a TransientError asked to wait for
        self._down: set[str] = set()
        self._worker = _Worker(source.sample)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self._duration = Histogram(
            "gpuscale_exporter_collect_duration_seconds",
            "Time one collect of every GPU took.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=r,
        )
        self._errors = Counter(
            "gpuscale_exporter_collect_errors_total",
            "Collect failures by reason: timeout, source, field, device_lost.",
            ["reason"],
            registry=r,
        )
        for reason in ("timeout", "source", "field", "device_lost"):
            self._errors.labels(reason)
        self._collects = Counter(
            "gpuscale_exporter_collects_total", "Successful collects.", registry=r
        )
        self._last_success = Gauge(
            "gpuscale_exporter_last_successful_collect_timestamp_seconds",
            "Unix time of the last successful collect.",
            registry=r,
        )
        age = Gauge(
            "gpuscale_exporter_snapshot_age_seconds",
            "Age of the snapshot being served; GPU series are withdrawn past three intervals.",
            registry=r,
        )
        age.set_function(self._age)
        # Simulated GPUs must be told from real ones by any dashboard or alert that reads them.
        Info(
            "gpuscale_exporter",
            "The exporter: source is sim for simulated GPUs, nvml or amd for real ones.",
            registry=r,
        ).info({"source": source_name, "version": __version__})
        # The GPU families go through a registry of their own, rendered once per collect
        # (with dcgm-exporter's counter names) instead of once per scrape.
        self._rendering: Rendering | None = None
        self.collector = SnapshotCollector(families, lambda: self._rendering)
        self.gpu_registry = CollectorRegistry(auto_describe=False)
        self.gpu_registry.register(self.collector)

    def replace_families(self, families: SnapshotFamilies) -> None:
        """Serve ``families`` (a reloaded counters file) from the next collect on.

        The XID window carries over; the clock-event window starts afresh when the
        new file lists DCGM_EXP_CLOCK_EVENTS_COUNT and the old one did not.
        """
        if families.wants_clock_events and self._clock_events is None:
            self._clock_events = XidWindow(families.clock_window_ms)
        elif not families.wants_clock_events:
            self._clock_events = None
        self.collector.families = families

    def _age(self) -> float:
        published = self._published
        return float("inf") if published is None else self._monotonic() - published.at

    def _fresh(self) -> Rendering | None:
        published = self._published
        if published is None or self._age() > STALE_AFTER_INTERVALS * self.interval_s:
            return None
        return published.snapshot, published.xid_counts, published.clock_counts

    def collect_once(self) -> bool:
        """Run one collect now and publish it.

        Returns:
            True when a snapshot was published.
        """
        if self._worker.busy:
            self._errors.labels("timeout").inc()
            self._last_error = "previous collect still running"
            return False
        started = self._monotonic()
        try:
            snapshot = self._worker.run(self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - the exporter must keep serving
            self._errors.labels("source").inc()
            self._last_error = f"source failed: {exc}"
            if isinstance(exc, TransientError):
                self._retry_at = started + exc.delay
                logger.warning(
                    "collect failed: %s; next try in %.1f s at the earliest", exc, exc.delay
                )
            else:
                logger.warning("collect failed: %s", exc)
            return False
        if snapshot is None:
            self._errors.labels("timeout").inc()
            self._last_error = f"collect timed out after {self.timeout_s:g} s"
            logger.warning("collect timed out after %.1f s", self.timeout_s)
            return False
        self._duration.observe(self._monotonic() - started)
        self._account(snapshot)
        counts = self._xids.counts(snapshot.timestamp)
        clocks = {} if self._clock_events is None else self._clock_events.counts(snapshot.timestamp)
        self._rendering = (snapshot, counts, clocks)
        text = render(self.gpu_registry.collect())
        self._published = _Published(snapshot, counts, clocks, self._monotonic(), text)
        self._collects.inc()
        self._last_success.set(time.time())
        return True

    def _account(self, snapshot: Snapshot) -> None:
        for device in snapshot.devices:
            key = device.info.key
            self._xids.add(key, device.xid_events)
            reasons = device.values.get(CLOCK_REASONS_FIELD)
            if self._clock_events is not None and reasons is not None:
                bits = [XidEvent(snapshot.timestamp, b) for b in CLOCK_EVENTS if int(reasons) & b]
                self._clock_events.add(key, bits)
            if device.failed_fields:
                self._errors.labels("field").inc(len(device.failed_fields))
            if not device.up and key not in self._down:
                self._down.add(key)
                self._errors.labels("device_lost").inc()
                logger.error("GPU %s lost: %s", key, device.error)
            elif device.up:
                self._down.discard(key)

    def exposition(self, *, gzipped: bool = False) -> bytes:
        """The /metrics body: the latest fresh GPU families, then the exporter's own."""
        own = generate_latest(self.registry)
        published = self._published
        if published is None or self._fresh() is None:
            body = own
            return gzip.compress(body, compresslevel=1) if gzipped else body
        if gzipped:
            return published.gzipped(own)
        return published.text + own

    def health(self) -> tuple[bool, str]:
        """Whether fresh data is being served, and why not when it is not."""
        if self._fresh() is not None:
            return True, "ok"
        age = self._age()
        if age == float("inf"):
            return False, f"no successful collect yet ({self._last_error})"
        return False, f"no successful collect for {age:.1f} s ({self._last_error})"

    def start(self) -> None:
        """Collect once now, then every interval on a background thread."""
        self._thread = threading.Thread(target=self._loop, name="gpuscale-sampler", daemon=True)
        self._thread.start()

    def next_collect_at(self, previous: float) -> float:
        """When the background loop collects next, on the ``monotonic`` clock.

        Args:
            previous: When the last collect was due.

        Returns:
            One interval after ``previous``; now when the loop fell behind (missed
            ticks are skipped, not burst); and no sooner than the delay of the last
            ``TransientError`` from the source.
        """
        now = self._monotonic()
        due = max(previous + self.interval_s, now)
        return max(due, self._retry_at)

    def _loop(self) -> None:
        next_at = self._monotonic()
        while not self._stop.is_set():
            self.collect_once()
            next_at = self.next_collect_at(next_at)
            self._stop.wait(max(0.0, next_at - self._monotonic()))

    def stop(self) -> None:
        """Stop collecting and close the source."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 1.0)
        self.source.close()
