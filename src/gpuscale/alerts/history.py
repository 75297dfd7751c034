"""Labelled GPU history for backtests: simulated hosts with injected faults, as OpenMetrics.

A backtest needs history in which the truth is known: which GPU broke, how and
when. Each simulated host is the ``sim`` source the exporter serves (same
physics, same faults, same UUIDs for a seed), sampled on a simulated clock at
the scrape interval, and written as dcgm-exporter would expose it with every
field switched on: the DCGM series, ``gpuscale_gpu_up`` and
``DCGM_EXP_XID_ERRORS_COUNT`` over its trailing window. The text is
OpenMetrics with timestamps, which ``promtool tsdb create-blocks-from
openmetrics`` turns into TSDB blocks.
"""

from collections import Counter, defaultdict, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuscale.fields import DCGM_FIELDS
from gpuscale.telemetry.base import Snapshot
from gpuscale.telemetry.faults import Fault
from gpuscale.telemetry.sim import SimSource

XID_WINDOW_S = 300.0
"""dcgm-exporter's default XID count window (``--xid-count-window-size`` 300000 ms)."""
GPU_UP = "gpuscale_gpu_up"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"


@dataclass(frozen=True, slots=True)
class HostRun:
    """One simulated host of a backtest.

    Attributes:
        hostname: Its ``Hostname`` label (unique in the backtest).
        gpus: Number of GPUs.
        seed: Seed of its physics, UUIDs and load phases.
        faults: Faults injected, times from the start of the history.
        models: GPU model short names, cycled over the GPUs.
    """

    hostname: str
    gpus: int
    seed: int
    faults: tuple[Fault, ...] = ()
    models: tuple[str, ...] = ("H100",)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _samples(
    run: HostRun, start_s: float, duration_s: float, step_s: float
) -> Iterator[tuple[str, str, float, float]]:
    """``(series name, label text, value, timestamp)`` of one host, in time order."""
    now = [start_s]
    source = SimSource(
        run.gpus,
        run.models,
        seed=run.seed,
        clock=lambda: now[0],
        hostname=run.hostname,
        faults=run.faults,
    )
    xids: deque[tuple[float, int, int]] = deque()
    steps = int(duration_s // step_s) + 1
    for i in range(steps):
        now[0] = start_s + i * step_s
        snapshot: Snapshot = source.sample()
        for device in snapshot.devices:
            for event in device.xid_events:
                xids.append((event.timestamp, device.info.index, event.xid))
        while xids and xids[0][0] < now[0] - XID_WINDOW_S:
            xids.popleft()
        counts = Counter((gpu, xid) for _, gpu, xid in xids)
        for device in snapshot.devices:
            info = device.info
            base = (
                ("gpu", str(info.index)),
                ("UUID", str(info.uuid)),
                ("pci_bus_id", info.pci_bus_id),
                ("device", info.device),
                ("modelName", info.model),
                ("Hostname", snapshot.hostname),
            )
            text = _labels(base)
            for name, value in device.values.items():
                if name in DCGM_FIELDS:
                    yield name, text, value, now[0]
            yield GPU_UP, text, 1.0 if device.up else 0.0, now[0]
            for (gpu, xid), count in sorted(counts.items()):
                if gpu == info.index:
                    labels = (*base, ("xid", str(xid)), ("window_size_in_ms", "300000"))
                    yield XID_COUNT, _labels(labels), float(count), now[0]


def write_openmetrics(
    runs: Sequence[HostRun], start_s: float, duration_s: float, step_s: float, path: Path
) -> int:
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

    Returns:
        Number of samples written.
    """
    families: dict[str, list[str]] = defaultdict(list)
    for run in runs:
        for name, labels, value, ts in _samples(run, start_s, duration_s, step_s):
            families[name].append(f"{name}{labels} {value!r} {ts:.3f}")
    total = 0
    with path.open("w", encoding="utf-8") as out:
        for name, lines in families.items():
            out.write(f"# TYPE {name} unknown\n")
            out.write("\n".join(lines))
            out.write("\n")
            total += len(lines)
        out.write("# EOF\n")
    return total
