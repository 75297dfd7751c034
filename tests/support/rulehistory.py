"""A labelled fleet history that exercises every rule of the catalogue, for differential tests.

NVIDIA hosts are the ``sim`` telemetry source (the exporter's physics and
faults) sampled on a simulated clock, written as dcgm-exporter's series with
the ``instance``/``job`` labels a scrape adds, ``up``, the snapshot age and
the XID counts over dcgm-exporter's 5-minute window. One AMD host and two
vLLM workloads' TTFT counters are synthesised so the AMD mappings and the SLO
burn-rate rules see data too. The history is a matrix per family (a row per
scrape, NaN where a series is absent), written the same way to the in-process
store and to a ``promtool test rules`` file.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from gpuscale.fields import DCGM_FIELDS
from gpuscale.telemetry.faults import Fault
from gpuscale.telemetry.sim import SimSource
from gpuscale.telemetry.xid_window import XidWindow

JOB = "gpuscale-exporter"


@dataclass
class History:
    """Samples on a regular grid: ``values[family][labels]`` is one value per step (NaN: absent)."""

    step_s: float
    steps: int
    values: dict[str, dict[tuple[tuple[str, str], ...], np.ndarray]] = field(default_factory=dict)

    def put(self, family: str, labels: dict[str, str], i: int, value: float) -> None:
        """Set one sample at step ``i``."""
        row = self.values.setdefault(family, {})
        key = tuple(sorted(labels.items()))
        if key not in row:
            row[key] = np.full(self.steps, np.nan)
        row[key][i] = value

    def sample_count(self) -> int:
        """Samples present in the history."""
        return sum(int(np.sum(~np.isnan(v))) for fam in self.values.values() for v in fam.values())


def nvidia_host(
    h: History,
    hostname: str,
    gpus: int,
    seed: int,
    faults: tuple[Fault, ...] = (),
    pods: dict[int, str] | None = None,
    down: tuple[float, float] | None = None,
    stale: tuple[float, float] | None = None,
) -> None:
    """Sample one simulated host into ``h``.

    ``down`` is a (start, end) when the exporter is down, ``stale`` one when it
    serves an old snapshot (its age above the GpuMetricsStale threshold).
    """
    now = [0.0]
    source = SimSource(
        gpus, ("H100",), seed=seed, clock=lambda: now[0], hostname=hostname, faults=faults
    )
    xids = XidWindow()
    scrape = {"instance": f"{hostname}:9400", "job": JOB}
    for i in range(h.steps):
        now[0] = i * h.step_s
        snapshot = source.sample()
        is_down = down is not None and down[0] <= now[0] < down[1]
        h.put("up", scrape, i, 0.0 if is_down else 1.0)
        if is_down:
            continue
        old = stale is not None and stale[0] <= now[0] < stale[1]
        h.put("gpuscale_exporter_snapshot_age_seconds", scrape, i, 120.0 if old else 0.5)
        for device in snapshot.devices:
            xids.add(str(device.info.index), device.xid_events)
        counts = xids.counts(now[0])
        for device in snapshot.devices:
            info = device.info
            base = {
                "gpu": str(info.index),
                "UUID": str(info.uuid),
                "modelName": info.model,
                "Hostname": hostname,
                **scrape,
            }
            if pods and info.index in pods:
                base |= {"namespace": "serving", "pod": pods[info.index], "container": "vllm"}
            for name, value in device.values.items():
                if name in DCGM_FIELDS:
                    h.put(name, base, i, value)
            h.put("gpuscale_gpu_up", base, i, 1.0 if device.up else 0.0)
            for code, count in counts.get(str(info.index), {}).items():
                h.put("DCGM_EXP_XID_ERRORS_COUNT", base | {"xid": str(code)}, i, float(count))


def amd_host(h: History, hostname: str, hot_at_s: float, ecc_at_s: float) -> None:
    """Two AMD GPUs with AMD exporter names.

    GPU 0 has a ``gpu_uuid`` and a pod, and idles after 10 minutes; GPU 1 has no
    ``gpu_uuid``, fills its memory, heats up at ``hot_at_s`` and errs at ``ecc_at_s``.
    """
    for i in range(h.steps):
        t = i * h.step_s
        for gpu in (0, 1):
            labels = {
                "gpu_id": str(gpu),
                "hostname": hostname,
                "card_model": "MI300X",
                "instance": f"{hostname}:5000",
                "job": "amd-exporter",
            }
            if gpu == 0:
                labels |= {"gpu_uuid": f"amd-{hostname}-0", "namespace": "batch", "pod": "idle-0"}
            load = 50 + 40 * math.sin(t / 600 + gpu)
            if gpu == 0 and t >= 600:
                load = 0.0
            h.put("gpu_gfx_activity", labels, i, round(load, 3))
            h.put("gpu_used_vram", labels, i, min(196_000.0, 150_000 + 100 * gpu * i))
            h.put("gpu_total_vram", labels, i, 196_608.0)
            h.put("gpu_power_usage", labels, i, 300 + 4 * load)
            hot = 25.0 if gpu == 1 and t >= hot_at_s else 0.0
            h.put("gpu_junction_temperature", labels, i, 55 + load / 5 + hot)
            errors = 1.0 if gpu == 1 and t >= ecc_at_s else 0.0
            h.put("gpu_ecc_uncorrect_total", labels, i, errors)


def vllm_counters(h: History, outage: tuple[float, float], reset_at_s: float) -> None:
    """TTFT counters of two workloads; ``chat`` misses its TTFT in ``outage``, ``code`` restarts."""
    totals = {"chat": [0.0, 0.0], "code": [0.0, 0.0]}
    for i in range(h.steps):
        t = i * h.step_s
        for model, acc in totals.items():
            if model == "code" and abs(t - reset_at_s) < h.step_s / 2:
                acc[0] = acc[1] = 0.0  # a restarted server's counters begin again
            n = 20.0 * h.step_s
            good_share = 0.5 if model == "chat" and outage[0] <= t < outage[1] else 0.995
            acc[0] += round(n * good_share)
            acc[1] += n
            labels = {
                "namespace": "serving",
                "model_name": model,
                "instance": f"{model}:8000",
                "job": "vllm",
            }
            h.put("vllm:time_to_first_token_seconds_bucket", labels | {"le": "2.5"}, i, acc[0])
            h.put("vllm:time_to_first_token_seconds_count", labels, i, acc[1])
