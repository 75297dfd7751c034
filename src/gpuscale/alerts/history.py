"""Labelled GPU history for backtests: simulated hosts with injected faults, as OpenMetrics.

A backtest needs history in which the truth is known: which GPU broke, how and
when. Each simulated host is the ``sim`` source the exporter serves (same
physics, same faults, same UUIDs for a seed), sampled on a simulated clock at
the scrape interval, and written as dcgm-exporter would expose it with every
field switched on and the Kubernetes pod mapping on (every GPU is held by a
serving pod): the DCGM series, ``gpuscale_gpu_up`` and
``DCGM_EXP_XID_ERRORS_COUNT`` over its trailing window, with the ``instance``
and ``job`` Prometheus gives a scraped target, and the scrape's own ``up``,
0 while an ``exporter-down`` fault lasts (and no GPU series then). The text is
OpenMetrics with timestamps, which ``promtool tsdb create-blocks-from
openmetrics`` turns into TSDB blocks.

While writing, the history notes for each fault the first sample where what
each rule watches shows it (``onsets``): the backtest reports detection delays
from the injection and from that observable onset.
"""

from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuscale.alerts.config import AlertConfig
from gpuscale.alerts.promql_text import duration_seconds
from gpuscale.errors import TransientError
from gpuscale.fields import DCGM_FIELDS
from gpuscale.telemetry.base import Snapshot
from gpuscale.telemetry.faults import HOST_KINDS, Fault
from gpuscale.telemetry.loads import parse_load_spec
from gpuscale.telemetry.sim import SimSource
from gpuscale.telemetry.xid_window import DEFAULT_WINDOW_MS, XidWindow

XID_WINDOW_S = DEFAULT_WINDOW_MS / 1000
"""dcgm-exporter's default XID count window (``--xid-count-window-size`` 300000 ms)."""
GPU_UP = "gpuscale_gpu_up"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
JOB = "gpuscale-exporter"
"""The scrape job of the simulated exporters (matches the default ``exporter_job``)."""
PORT = 9400
"""dcgm-exporter's port: each host's ``instance`` is ``Hostname:9400``."""
NAMESPACE, CONTAINER = "serving", "server"
"""Where the pod holding each simulated GPU runs: ``pod`` is ``Hostname-gpuN``."""

Values = Mapping[str, float]
Watch = Callable[[Values, Values, AlertConfig], bool]
"""Whether a GPU's sample (after the previous one) shows what an alert watches."""
_D = "DCGM_FI_DEV_"


def _rose(name: str) -> Watch:
    return lambda now, before, _: now.get(name, 0.0) > before.get(name, now.get(name, 0.0))


def _fb_share(v: Values) -> float:
    used = v.get(f"{_D}FB_USED", 0.0)
    return used / max(used + v.get(f"{_D}FB_FREE", 0.0), 1.0)


WATCHES: dict[str, Watch] = {
    "GpuThermalThrottling": _rose(f"{_D}THERMAL_VIOLATION"),
    "GpuPowerCapped": _rose(f"{_D}POWER_VIOLATION"),
    "GpuTemperatureHigh": lambda v, _, c: (
        v.get(f"{_D}GPU_TEMP", 0.0) > c.alerts.GpuTemperatureHigh.threshold
    ),
    "GpuMemoryNearFull": lambda v, _, c: _fb_share(v) > c.alerts.GpuMemoryNearFull.threshold,
    "GpuIdleWhileAllocated": lambda v, _, c: (
        f"{_D}GPU_UTIL" in v
        and v[f"{_D}GPU_UTIL"] / 100 <= c.alerts.GpuIdleWhileAllocated.threshold
    ),
    # A GPU is compared with its peers only while busy: a straggler injected in a
    # load dip shows at the first busy sample.
    "GpuStraggler": lambda v, _, c: (
        v.get(f"{_D}GPU_UTIL", 0.0) / 100 >= c.alerts.GpuStraggler.min_utilization
    ),
}
"""The observable onset of a fault for the alerts that watch a gradual signal: the first
sample from the injection on where the raw series show it (the violation counter
rises, the temperature or memory share crosses the threshold, utilisation drops to
it, a straggler is busy enough to be compared; ``GpuTemperatureAnomaly``'s is
``unusually_hot``). For every other alert the fault
is observable at the sample it is injected in: an XID, a vanished GPU, a frozen value,
a failed scrape or a capped clock shows at once."""
ANOMALY = "GpuTemperatureAnomaly"


def unusually_hot(temp_c: float, past: Sequence[float], config: AlertConfig) -> bool:
    """Whether one temperature sample is what ``GpuTemperatureAnomaly`` looks for.

    Args:
        temp_c: The sample, Celsius.
        past: The GPU's samples over the rule's ``window`` ending ``gap`` before it.
        config: The settings whose ``threshold`` (sigma) and ``min_rise_c`` apply.

    Returns:
        True when the sample is more than ``threshold`` standard deviations and
        ``min_rise_c`` above the mean of ``past``: the first such sample is the
        fault's onset for that rule, whose mean over ``recent`` then follows.
    """
    z = config.alerts.GpuTemperatureAnomaly
    if len(past) < 2:
        return False
    mean = sum(past) / len(past)
    sd = (sum((x - mean) ** 2 for x in past) / len(past)) ** 0.5
    rise = temp_c - mean
    return rise > z.min_rise_c and rise > z.threshold * sd


@dataclass(frozen=True, slots=True)
class HostRun:
    """One simulated host of a backtest.

    Attributes:
        hostname: Its ``Hostname`` label (unique in the backtest).
        gpus: Number of GPUs.
        seed: Seed of its physics, UUIDs and load phases.
        faults: Faults injected, times from the start of the history.
        models: GPU model short names, cycled over the GPUs.
        load: Load spec (``telemetry.loads.parse_load_spec``); None: the sim
            source's default, a 5-minute sine around 50 % busy.
    """

    hostname: str
    gpus: int
    seed: int
    faults: tuple[Fault, ...] = ()
    models: tuple[str, ...] = ("H100",)
    load: str | None = None


Onsets = dict[tuple[str, int], dict[str, float]]
"""``(hostname, index of the fault in its run)`` to ``alert -> onset time`` (seconds)."""


@dataclass(slots=True)
class _Watcher:
    """Notes, per fault of one host, the first sample where each watched alert sees it."""

    run: HostRun
    start_s: float
    config: AlertConfig
    onsets: Onsets = field(default_factory=dict)
    _before: dict[int, Values] = field(default_factory=dict)
    _temps: dict[int, deque[tuple[float, float]]] = field(default_factory=dict)

    def _past(self, gpu: int, now_s: float) -> list[float]:
        """The GPU's temperatures over the anomaly rule's window, ``gap`` before now."""
        z = self.config.alerts.GpuTemperatureAnomaly
        end = now_s - duration_seconds(z.gap)
        begin = end - duration_seconds(z.window)
        return [c for t, c in self._temps.get(gpu, ()) if begin <= t <= end]

    def _remember(self, now_s: float, values: Mapping[int, Values]) -> None:
        z = self.config.alerts.GpuTemperatureAnomaly
        keep = duration_seconds(z.window) + duration_seconds(z.gap)
        for gpu, v in values.items():
            if f"{_D}GPU_TEMP" in v:
                temps = self._temps.setdefault(gpu, deque())
                temps.append((now_s, v[f"{_D}GPU_TEMP"]))
                while temps[0][0] < now_s - keep:
                    temps.popleft()

    def see(self, now_s: float, snapshot: Snapshot | None) -> None:
        values = {} if snapshot is None else {d.info.index: d.values for d in snapshot.devices}
        for n, fault in enumerate(self.run.faults):
            if fault.kind in HOST_KINDS or now_s < self.start_s + fault.at_s:
                continue
            gpu = int(fault.gpu or 0)
            now = values.get(gpu, {})
            found = self.onsets.setdefault((self.run.hostname, n), {})
            for alert, watch in WATCHES.items():
                if (
                    alert not in found
                    and now
                    and watch(now, self._before.get(gpu, {}), self.config)
                ):
                    found[alert] = now_s
            temp = now.get(f"{_D}GPU_TEMP")
            past = self._past(gpu, now_s) if ANOMALY not in found else []
            if temp is not None and unusually_hot(temp, past, self.config):
                found[ANOMALY] = now_s
        self._before.update(values)
        self._remember(now_s, values)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _samples(
    run: HostRun, start_s: float, duration_s: float, step_s: float, watcher: _Watcher
) -> Iterator[tuple[str, str, float, float]]:
    """``(series name, label text, value, timestamp)`` of one host, in time order."""
    now = [start_s]
    source = SimSource(
        run.gpus,
        run.models,
        load=None if run.load is None else parse_load_spec(run.load, run.seed),
        seed=run.seed,
        clock=lambda: now[0],
        hostname=run.hostname,
        faults=run.faults,
    )
    target = (("instance", f"{run.hostname}:{PORT}"), ("job", JOB))
    xids = XidWindow()  # DCGM_EXP_XID_ERRORS_COUNT's window, as the exporter keeps it
    steps = int(duration_s // step_s) + 1
    for i in range(steps):
        now[0] = start_s + i * step_s
        try:
            snapshot: Snapshot = source.sample()
        except TransientError:  # the exporter does not answer: the scrape fails
            watcher.see(now[0], None)
            yield "up", _labels(target), 0.0, now[0]
            continue
        watcher.see(now[0], snapshot)
        yield "up", _labels(target), 1.0, now[0]
        for device in snapshot.devices:
            xids.add(str(device.info.index), device.xid_events)
        counts = xids.counts(now[0])
        for device in snapshot.devices:
            info = device.info
            base = (
                ("gpu", str(info.index)),
                ("UUID", str(info.uuid)),
                ("pci_bus_id", info.pci_bus_id),
                ("device", info.device),
                ("modelName", info.model),
                ("Hostname", snapshot.hostname),
                ("namespace", NAMESPACE),
                ("pod", f"{snapshot.hostname}-gpu{info.index}"),
                ("container", CONTAINER),
                *target,
            )
            text = _labels(base)
            for name, value in device.values.items():
                if name in DCGM_FIELDS:
                    yield name, text, value, now[0]
            yield GPU_UP, text, 1.0 if device.up else 0.0, now[0]
            for xid, count in sorted(counts.get(str(info.index), {}).items()):
                labels = (*base, ("xid", str(xid)), ("window_size_in_ms", str(DEFAULT_WINDOW_MS)))
                yield XID_COUNT, _labels(labels), float(count), now[0]


def write_openmetrics(
    runs: Sequence[HostRun],
    start_s: float,
    duration_s: float,
    step_s: float,
    path: Path,
    config: AlertConfig | None = None,
) -> int:
    """Write the history of ``runs`` as one OpenMetrics file (``write_history``'s samples).

    Returns:
        Number of samples written.
    """
    return write_history(runs, start_s, duration_s, step_s, path, config)[0]


def write_history(
    runs: Sequence[HostRun],
    start_s: float,
    duration_s: float,
    step_s: float,
    path: Path,
    config: AlertConfig | None = None,
) -> tuple[int, Onsets]:
    """Write the history of ``runs`` as one OpenMetrics file.

    OpenMetrics wants each family's samples together, so samples are grouped by
    series name before writing; every family is ``unknown``-typed, as DCGM's
    counters lack the ``_total`` suffix OpenMetrics requires of counters.

    Args:
        runs: The simulated hosts.
        start_s: Time of the first sample, seconds since the epoch.
        duration_s: Seconds of history.
        step_s: Scrape interval, seconds.
        path: Output file.
        config: Alert settings whose thresholds define the onsets (defaults when None).

    Returns:
        Number of samples written, and each fault's observable onset per alert.
    """
    families: dict[str, list[str]] = defaultdict(list)
    onsets: Onsets = {}
    for run in runs:
        watcher = _Watcher(run, start_s, config or AlertConfig())
        for name, labels, value, ts in _samples(run, start_s, duration_s, step_s, watcher):
            families[name].append(f"{name}{labels} {value!r} {ts:.3f}")
        onsets |= watcher.onsets
    total = 0
    with path.open("w", encoding="utf-8") as out:
        for name, lines in families.items():
            out.write(f"# TYPE {name} unknown\n")
            out.write("\n".join(lines))
            out.write("\n")
            total += len(lines)
        out.write("# EOF\n")
    return total, onsets
