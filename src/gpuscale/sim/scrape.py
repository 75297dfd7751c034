"""The simulated GPUs' DCGM readings and Prometheus' scrapes, from the per-second serving state.

A policy reading ``DCGM_FI_DEV_GPU_UTIL`` sees neither the simulator's queue nor
the GPU as it is now: it sees what dcgm-exporter last collected, as Prometheus
last scraped it. This module owns that path for the engine:

* Every second the engine appends the requests in service per batch slot of
  each Ready replica (``occupancy``), adds the completions (``done``) and the
  sequence-seconds of each draining pod (``drain_seq``).
* ``flush`` (when the Ready set changes, and before each collect) turns the
  buffered seconds into each Ready GPU's busy seconds, with
  ``activity.kernel_busy_share(m, slots)`` for ``m`` requests in service per
  replica (one numpy call per flush), and sequence-seconds.
* ``collect`` (dcgm-exporter's collect, every ``collect_interval_s``, 30 s by
  default) advances the GPU physics over the interval since the last collect:
  busy share ``load``, ``batch_fill`` (sequence-seconds over busy seconds and
  slots), ``prefill_share`` (1 for one-slot serving; for batched serving the
  window's share of the workload's ``prefill_work_s`` when the workload has one,
  else the activity model's typical share), ``kv_cache_bytes`` (KV bytes per
  request x requests in service per pod now) and ``sampled_busy`` (the busy share
  of the last second, NVML's last utilisation sample). A draining pod's busy
  share is taken from its mean requests over the interval. The fields the
  writer writes (``SeriesWriter.dcgm_series``) are kept until the next collect.
* ``scrape`` (Prometheus, every ``scrape_interval_s``) writes the last collected
  DCGM fields and the pods' serving metrics into the metric store, unless the
  engine says nothing reads the store (``scraped=False``: a policy with no
  signals, or one on the direct path); the physics advances all the same. The
  engine's writer writes only the families the policy's signals query: a
  family nothing reads cannot change a run.

docs/telemetry-model.md states each field's formula; docs/baselines.md the paths.
"""

import logging
from typing import Any

import numpy as np

from gpuscale.metrics.store import MetricStore
from gpuscale.sim.cluster import Cluster
from gpuscale.sim.series import SeriesWriter
from gpuscale.sim.serving import ServingConfig
from gpuscale.sim.workload import Workload
from gpuscale.telemetry.activity import batch_fill, kernel_busy_share, nan_to
from gpuscale.telemetry.physics import FleetPhysics

logger = logging.getLogger(__name__)

Loading = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Devices of starting pods, when each becomes Ready, and its cold start length."""


SMALL_SUM = 16
"""``add_reduce`` takes fewer values than this."""


def add_reduce(values: list[float]) -> float:
    """``np.add.reduce`` of fewer than ``SMALL_SUM`` floats, bit for bit, in Python scalars.

    numpy's pairwise sum adds fewer than 8 values one by one from 0.0, and up to 15 as
    eight in a tree and the rest one by one (tests/unit/sim/test_scrape_pending.py
    checks it against numpy); a numpy call costs more than these few additions.

    Returns:
        The sum.
    """
    if len(values) < 8:
        total = 0.0
        for v in values:
            total += v
        return total
    a = values
    total = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
    for v in a[8:]:
        total += v
    return total


def busy_share(m: np.ndarray, slots: int) -> np.ndarray:
    """Share of each second some kernel runs, for ``m`` requests in service per replica.

    Returns:
        ``kernel_busy_share(m, slots)``; ``min(m, 1)`` for one slot, without the general formula.
    """
    if slots == 1:  # np.clip's values, without its wrapper's cost on small arrays
        return np.asarray(np.minimum(np.maximum(m, 0.0), 1.0), dtype=float)
    return kernel_busy_share(m, slots)


class Telemetry:
    """The fleet's physics fed by the serving state, and the series written at each scrape.

    Args:
        cluster: The simulated cluster (its devices and pods).
        physics: The fleet's GPU physics.
        writer: Writes scrapes into the metric store.
        serving: The serving model (memory footprint).
        workload: The demand (for ``prefill_work_s``, when it has one).
        slots: Batch slots per replica.
        scraped: Whether scrapes are written into the store; False when nothing reads it.
    """

    def __init__(
        self,
        cluster: Cluster,
        physics: FleetPhysics,
        writer: SeriesWriter,
        serving: ServingConfig,
        workload: Workload,
        slots: int,
        *,
        scraped: bool = True,
    ) -> None:
        n = cluster.n_devices
        self.scraped = scraped
        self.physics, self.writer, self.slots = physics, writer, slots
        self.model_bytes = serving.model_bytes
        self.kv_bytes = serving.kv_bytes_per_request
        self.occupancy: list[float] = []  # in service per slot of the Ready replicas, per second
        self.done = 0.0  # completions since the last flush
        self.drain_seq = np.zeros(n)  # sequence-seconds of draining pods since the last collect
        self._busy = np.zeros(n)  # busy seconds since the last collect
        self._seq = np.zeros(n)  # sequence-seconds since the last collect
        # Busy share in the last second flushed: (devices, share), 0 elsewhere; kept
        # as a pair since only a collect reads it, and most flushes are not followed by one.
        self._last_busy: tuple[np.ndarray, float] | None = None
        # Flushes not yet added to ``_busy``/``_seq``, all to the same Ready GPUs: (their
        # devices, busy seconds of each flush, sequence-seconds of each). Most flushes find
        # the Ready set of the last one, so each is a scalar kept here, and the GPUs' arrays
        # take them one by one (the same additions) when the set changes or at a collect.
        self._pending: tuple[np.ndarray, list[float], list[float]] | None = None
        self._last_collect: float | None = None
        self._fields: dict[str, np.ndarray] = {}
        self._work = workload.work_s
        prefill: Any = getattr(workload, "prefill_work_s", None)
        self._prefill = None if prefill is None else np.asarray(prefill, dtype=float)

    @property
    def store(self) -> MetricStore:
        """The metric store the scrapes go to."""
        return self.writer.store

    def flush(
        self, devs: np.ndarray, slots_of: np.ndarray, uids: np.ndarray, shares: np.ndarray
    ) -> None:
        """Credit the buffered seconds to the Ready GPUs they were served on.

        Args:
            devs: Devices of the Ready pods (the set the buffered seconds belong to).
            slots_of: Their GPU slots.
            uids: Their pod uids.
            shares: Their shares of the completions.
        """
        occupancy = self.occupancy
        if self.slots == 1 and 0 < len(occupancy) < SMALL_SUM and devs.size:
            # The usual flush, a few seconds after the last one, in scalars: the same
            # clips (times one slot is the value itself) and sums as the numpy path below.
            shares_busy = [min(max(m, 0.0), 1.0) for m in occupancy]
            self._credit(devs, add_reduce(shares_busy), add_reduce(occupancy))
            self._last_busy = (devs, shares_busy[-1])
            self.writer.add_completions(slots_of, uids, shares, self.done)
        elif occupancy and devs.size:
            m = np.asarray(occupancy, dtype=float)
            if self.slots != 1:  # times one is the value itself
                m = m * self.slots
            u = busy_share(m, self.slots)
            # ``sum()``'s reduction, without its wrappers
            self._credit(devs, float(np.add.reduce(u)), float(np.add.reduce(m)))
            self._last_busy = (devs, float(u[-1]))
            self.writer.add_completions(slots_of, uids, shares, self.done)
        elif self.occupancy:
            self._last_busy = None
        self.occupancy.clear()
        self.done = 0.0

    def _credit(self, devs: np.ndarray, busy_s: float, seq_s: float) -> None:
        """Add one flush's busy and sequence-seconds to each of ``devs`` (kept while pending)."""
        pending = self._pending
        if pending is not None and pending[0] is devs:  # the same Ready GPUs as last time
            pending[1].append(busy_s)
            pending[2].append(seq_s)
            return
        self._settle()
        self._pending = (devs, [busy_s], [seq_s])

    def _settle(self) -> None:
        """Add the pending flushes to their GPUs' seconds, flush by flush as ``+=`` would."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        devs, busy_s, seq_s = pending
        for seconds, adds in ((self._busy, busy_s), (self._seq, seq_s)):
            if len(adds) == 1:
                seconds[devs] += adds[0]
                continue
            x = seconds[devs]
            for add in adds:  # each flush in turn, as one ``seconds[devs] += add`` each
                x += add
            seconds[devs] = x

    def _prefill_share(self, t: float, dt: float) -> float | None:
        if self.slots == 1:
            return 1.0  # one request at a time: compute-bound throughout (diffusion)
        if self._prefill is None:
            return None  # the activity model's typical share
        lo, hi = max(int(t - dt), 0), max(int(t), 1)
        work = float(self._work[lo:hi].sum())
        return float(self._prefill[lo:hi].sum()) / work if work > 0 else None

    def collect(
        self,
        t: float,
        ready: np.ndarray,
        stopping: np.ndarray,
        loading: Loading,
        per_pod: float,
    ) -> None:
        """dcgm-exporter's collect at ``t``: advance the physics over the interval since the last.

        Call ``flush`` first.

        Args:
            t: Collect time, seconds.
            ready: Devices of the Ready pods.
            stopping: Devices of terminating pods (the model is still loaded).
            loading: Starting pods (the model fills the GPU as it loads).
            per_pod: Requests in service per Ready pod now (for the KV cache).
        """
        self._settle()
        last = self._last_collect
        dt = max(t - last, 1.0) if last is not None else 1.0
        self._last_collect = t
        busy, seq, sampled = self._busy, self._seq, np.zeros(self._busy.size)
        if self._last_busy is not None:
            sampled[self._last_busy[0]] = self._last_busy[1]
        draining = np.flatnonzero(self.drain_seq > 0)
        if draining.size:
            d_busy = busy_share(self.drain_seq[draining] / dt, self.slots)
            busy[draining] += d_busy * dt
            seq[draining] += self.drain_seq[draining]
            sampled[draining] = np.maximum(sampled[draining], d_busy)
        load = np.minimum(np.maximum(busy / dt, 0.0), 1.0)  # np.clip's values, cheaper
        fill = batch_fill(seq, busy, self.slots)
        working = np.zeros(busy.size)
        working[stopping] = self.model_bytes
        working[ready] = self.model_bytes
        devs, due, span = loading
        if devs.size:  # most collects find no pod starting
            with np.errstate(invalid="ignore"):
                # np.clip's values (1.0 - x is never -0.0), without its wrapper's cost
                done = np.minimum(np.maximum(1.0 - (due - t) / np.maximum(span, 1.0), 0.0), 1.0)
            working[devs] = self.model_bytes * nan_to(done, 0.0)
        kv = np.zeros(busy.size)
        kv[ready] = self.kv_bytes * per_pod
        self.physics.step(
            dt,
            load,
            working,
            batch_fill=fill,
            prefill_share=self._prefill_share(t, dt),
            kv_cache_bytes=kv,
            sampled_busy=sampled,
        )
        self.physics.drain_xid_events()
        names = self.writer.dcgm_series
        if self.scraped and names:  # the fields as collected now, written at the next scrapes
            self._fields = self.physics.fields(names)
        busy[:] = 0.0
        seq[:] = 0.0
        self.drain_seq[:] = 0.0

    def scrape(self, t: float, per_pod: float, waiting: float, received: float = 0.0) -> None:
        """Prometheus' scrape at ``t``: the last collected DCGM fields and the serving metrics.

        Does nothing when ``scraped`` is False.

        Args:
            t: Scrape time, seconds.
            per_pod: Requests in service per Ready pod.
            waiting: Requests queued in the deployment.
            received: Requests that reached the deployment since the run began.
        """
        if self.scraped:
            self.writer.write(t, self._fields, per_pod, waiting, received)
