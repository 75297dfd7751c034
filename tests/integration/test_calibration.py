"""Calibration of the simulator against production telemetry: GPU duty cycle and queue time.

The GenTD26 generative request rate (Alibaba, production Stable Diffusion
serving) drives a simulated deployment of the trace's own size; the
``DCGM_FI_DEV_GPU_UTIL`` samples the simulated GPUs export (read back through the
metric store, as a policy would see them) are compared with the per-pod GPU duty
cycle measured in the same trace.

What is fixed from the data, not fitted:
  * replicas: the median number of pods reporting a duty cycle per timestamp (109);
  * service time: the mean measured inference time, 39.0 s (``GENTD26_SERVICE_S``),
    with its measured squared coefficient of variation, 0.41;
  * sampling: one sample per pod every 57 s, the trace's own step.
What is fitted: the request-rate scale. GenTD26 anonymises values by scaling, so
the QPS is known only up to a factor; it is fitted so that the mean simulated
utilisation equals the measured mean (7.0 %), by two runs (utilisation is
proportional to the rate at this light load).

Bounds asserted, and why:
  * mean utilisation within 0.5 percentage points (the fit);
  * fleet-average utilisation per step tracks the measured one: Pearson r >= 0.85;
  * per-pod distribution: Kolmogorov-Smirnov distance <= 0.40, p50 and p90 within
    5 and 10 points. The per-pod tail is NOT reproduced: the simulator spreads a
    deployment's load evenly over its Ready replicas, while the production gateway
    concentrates requests on a few pods (67 % of measured samples are exactly 0,
    and p99 is 79 %). So the simulated p99 is asserted to lie below the measured
    one, by at most 60 points; policies here act on fleet averages, which match.

Every bound below is a regression check, not evidence: each was set from what
the simulator produced when it was written (0.375 KS, p99 gap 52.6 points, r
0.92), with some room, so that a change that moves the fit shows up. The
evidence is the measured-against-simulated table the report prints.

``DCGM_FI_DEV_GPU_UTIL`` is the share of each sample period some kernel runs
(one request in service on a one-slot replica: 100 %); it equals the share of
time a replica serves here, so the duty-cycle figures did not move when the
engine began to feed it (refreshed: scale 0.130, KS 0.375, r 0.923).

Queue time (``gentd26_queue_time_ms``, 23,478 gateway samples: mean 238 ms,
median 203 ms, min 78 ms, p99 627 ms, max 4.3 s) against the fluid queue's
wait at the same fitted load (the deployment's one FIFO in front of 109
replicas, waits from ``latency.summarise_latency``'s model). At 7 % mean
utilisation on 109 servers Erlang C is about 0: the simulated wait is 0 for
nearly every request. The measured floor (78 ms with GPUs 93 % idle) is the
gateway's dispatch time, which the simulator does not model, so the test
asserts what follows from that, not a fit: the simulated mean wait is below
the measured minimum (a principle: no GPU wait at this load), and the
simulated share of requests that wait at all is below 1 % (regression check).

Run ``python tests/integration/test_calibration.py`` to print the report.
"""

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuscale.metrics.signal import Signal
from gpuscale.scaling.policy import PROMETHEUS_QUERY, Decision, Observation
from gpuscale.scaling.static import StaticState
from gpuscale.sim.cluster import ClusterConfig
from gpuscale.sim.engine import Scenario, simulate
from gpuscale.sim.fluid import FluidQueue, residual_arrival_scv
from gpuscale.sim.latency import SPREAD_RHO_CAP, centred_mean
from gpuscale.sim.queueing import erlang_c
from gpuscale.sim.serving import ServingConfig
from gpuscale.sim.traces import (
    GENTD26_DUTY_CYCLE_FILE,
    GENTD26_QPS_FILE,
    GENTD26_QUEUE_TIME_FILE,
    GENTD26_SERVICE_S,
    gentd26_workload,
    read_gentd26_qps,
)
from tests.support.policystate import Stateless

TRACES = Path(
    os.environ.get("GPUSCALE_TRACES_DIR", Path(__file__).parents[2] / ".." / "shared" / "traces")
)
SERVICE_SCV = 0.41  # var/mean^2 of gentd26_model_predict_ms (std 25.1 s, mean 39.0 s)
STEP_S = 57.0
FIRST_SCALE = 0.1

pytestmark = pytest.mark.skipif(
    not (TRACES / GENTD26_QPS_FILE).is_file(), reason=f"GenTD26 trace files absent from {TRACES}"
)


class UtilisationProbe(Stateless):
    """A static policy that records every pod's GPU_UTIL as the store serves it."""

    def __init__(self, replicas: int) -> None:
        self.name = "probe"
        self.interval_s = STEP_S
        self.history_s = 0.0
        self.signals: dict[str, Signal] = {}
        self.pod_signals = {"util": Signal("DCGM_FI_DEV_GPU_UTIL")}
        self.min_replicas = self.max_replicas = replicas
        self.signal_path = PROMETHEUS_QUERY  # read at decision time
        self.samples: list[tuple[float, list[float]]] = []

    def decide(self, observation: Observation, state: StaticState) -> Decision[StaticState]:
        values = list(observation.pod_metrics.get("util", {}).values())
        self.samples.append((observation.now, values))
        return Decision(self.max_replicas, "calibration probe", state)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Fitted and fixed parameters, and the distances between simulation and trace."""

    scale: float
    replicas: int
    service_s: float
    measured_quantiles: tuple[float, float, float]
    simulated_quantiles: tuple[float, float, float]
    measured_mean: float
    simulated_mean: float
    ks_distance: float
    fleet_correlation: float
    samples: int
    queue: "QueueTime"

    def report(self) -> str:
        m, s = self.measured_quantiles, self.simulated_quantiles
        return "\n".join(
            [
                "GenTD26 calibration (DCGM_FI_DEV_GPU_UTIL vs pod GPU duty cycle, percent)",
                f"  fitted:  request-rate scale = {self.scale:.4f}",
                f"  fixed:   replicas = {self.replicas}, service time = {self.service_s:.1f} s "
                f"(scv {SERVICE_SCV}), sample every {STEP_S:.0f} s",
                f"  mean     measured {self.measured_mean:6.2f}  "
                f"simulated {self.simulated_mean:6.2f}",
                *(
                    f"  {name}      measured {a:6.2f}  simulated {b:6.2f}  error {b - a:+6.2f}"
                    for name, a, b in zip(("p50", "p90", "p99"), m, s, strict=True)
                ),
                f"  Kolmogorov-Smirnov distance (per pod sample) = {self.ks_distance:.3f}",
                f"  fleet-average correlation per step (Pearson r) = {self.fleet_correlation:.3f}",
                f"  simulated samples = {self.samples}",
                "GenTD26 queue time (gateway queue_time_ms vs simulated wait, ms)",
                *(
                    f"  {name:<8} measured {a:8.1f}  simulated {b:8.1f}"
                    for name, a, b in zip(
                        ("mean", "min", "p50", "p90", "p99"),
                        self.queue.measured,
                        self.queue.simulated,
                        strict=True,
                    )
                ),
                f"  simulated share of requests that wait at all = {self.queue.wait_share:.2e}",
            ]
        )


@dataclass(frozen=True, slots=True)
class QueueTime:
    """Queue time, measured and simulated: mean, min, p50, p90, p99 (ms), and the waiting share."""

    measured: tuple[float, ...]
    simulated: tuple[float, ...]
    wait_share: float


def simulated_queue_time(scale: float, replicas: int) -> QueueTime:
    """The fluid queue's waits at ``scale`` on ``replicas`` one-slot replicas.

    A portion of requests that waited a mean ``D`` is split as ``summarise_latency``
    splits it: with probability ``pe = min(C, D / theta)`` it waits ``d0 +
    Exp(theta)``, else ``d0``, with Erlang C, ``theta`` and ``d0`` as there.
    """
    workload = gentd26_workload(TRACES / GENTD26_QPS_FILE).scaled(scale)
    queue = FluidQueue(
        timeout_s=3600.0, service_scv=SERVICE_SCV, arrival_scv=residual_arrival_scv(workload)
    )
    for t in range(workload.duration_s):
        arrivals, work = float(workload.arrivals[t]), float(workload.work_s[t])
        queue.step(t, arrivals, work, replicas, float(replicas))
    rec = queue.records
    n, step = np.asarray(rec.count), np.asarray(rec.step)
    k = float(replicas)
    rho = np.minimum(centred_mean(np.asarray(rec.offered_s), 60) / k, SPREAD_RHO_CAP)[step]
    m = np.asarray(rec.size_s) * np.asarray(rec.per_size_s)[step]
    theta = 0.5 * (1.0 + SERVICE_SCV) * m / (k * (1.0 - rho))
    delay = np.asarray(rec.wait_s)
    pe = np.minimum(erlang_c(k, rho * k), delay / theta)
    d0 = delay - pe * theta
    grid = np.linspace(0.0, 5.0, 5001)  # seconds
    cdf = np.zeros(grid.size)
    for lo in range(0, n.size, 4096):
        sl = slice(lo, lo + 4096)
        x = grid[None, :] - d0[sl, None]
        part = np.where(x >= 0, 1.0 - pe[sl, None] * np.exp(-np.maximum(x, 0) / theta[sl, None]), 0)
        cdf += (n[sl, None] * part).sum(axis=0)
    cdf /= n.sum()
    quantiles = [float(grid[np.searchsorted(cdf, q)]) * 1e3 for q in (0.5, 0.9, 0.99)]
    mean_ms = float((n * delay).sum() / n.sum()) * 1e3
    min_ms = float(grid[np.searchsorted(cdf, 1e-9)]) * 1e3
    measured = pd.read_csv(TRACES / GENTD26_QUEUE_TIME_FILE)["value"].to_numpy(dtype=float)
    m_stats = (measured.mean(), measured.min(), *np.quantile(measured, (0.5, 0.9, 0.99)))
    return QueueTime(
        tuple(float(v) for v in m_stats),
        (mean_ms, min_ms, *quantiles),
        float((n * pe).sum() / n.sum()),
    )


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Largest gap between the two empirical CDFs."""
    a, b = np.sort(a), np.sort(b)
    grid = np.union1d(a, b)
    fa = np.searchsorted(a, grid, side="right") / a.size
    fb = np.searchsorted(b, grid, side="right") / b.size
    return float(np.max(np.abs(fa - fb)))


def _simulate(scale: float, replicas: int) -> list[tuple[float, list[float]]]:
    workload = gentd26_workload(TRACES / GENTD26_QPS_FILE).scaled(scale)
    nodes = -(-replicas // 8)
    scenario = Scenario(
        workload,
        ClusterConfig(initial_nodes=nodes, max_nodes=nodes),
        ServingConfig(service_scv=SERVICE_SCV),
        slo_latency_s=600.0,
        timeout_s=3600.0,
        seed=0,
        initial_replicas=replicas,
        scrape_interval_s=STEP_S,
    )
    probe = UtilisationProbe(replicas)
    simulate(scenario, probe)
    return probe.samples[1:]  # the first decision precedes the first full scrape window


def _three(values: np.ndarray) -> tuple[float, float, float]:
    return float(values[0]), float(values[1]), float(values[2])


def calibrate() -> Calibration:
    """Fit the scale, run once more at it, and measure the distances."""
    duty = pd.read_csv(TRACES / GENTD26_DUTY_CYCLE_FILE)
    measured = duty["value"].to_numpy(dtype=float)
    per_step = duty.groupby("timestamp_anon")["value"]
    replicas = int(per_step.size().median())
    target = float(measured.mean())

    first = np.concatenate([v for _, v in _simulate(FIRST_SCALE, replicas)])
    scale = FIRST_SCALE * target / float(first.mean())
    samples = _simulate(scale, replicas)
    simulated = np.concatenate([v for _, v in samples])

    start = read_gentd26_qps(TRACES / GENTD26_QPS_FILE).start_s
    sim_fleet = pd.Series({start + t: float(np.mean(v)) for t, v in samples if v})
    both = pd.concat([sim_fleet, per_step.mean()], axis=1, keys=["sim", "trace"]).dropna()
    qs = (0.5, 0.9, 0.99)
    return Calibration(
        scale=scale,
        replicas=replicas,
        service_s=GENTD26_SERVICE_S,
        measured_quantiles=_three(np.quantile(measured, qs)),
        simulated_quantiles=_three(np.quantile(simulated, qs)),
        measured_mean=target,
        simulated_mean=float(simulated.mean()),
        ks_distance=ks_distance(simulated, measured),
        fleet_correlation=float(both["sim"].corr(both["trace"])),
        samples=int(simulated.size),
        queue=simulated_queue_time(scale, replicas),
    )


@pytest.fixture(scope="module")
def calibration() -> Calibration:
    result = calibrate()
    print("\n" + result.report())
    return result


def test_fitted_scale_reproduces_the_measured_mean_utilisation(calibration):
    assert abs(calibration.simulated_mean - calibration.measured_mean) <= 0.5
    assert 0.05 < calibration.scale < 0.3
    assert calibration.replicas == 109


def test_fleet_average_utilisation_tracks_the_trace_step_by_step(calibration):
    assert calibration.fleet_correlation >= 0.85


def test_per_pod_utilisation_distribution_is_within_the_stated_bounds(calibration):
    (m50, m90, m99), (s50, s90, s99) = (
        calibration.measured_quantiles,
        calibration.simulated_quantiles,
    )
    assert calibration.ks_distance <= 0.40
    assert abs(s50 - m50) <= 5.0
    assert abs(s90 - m90) <= 10.0
    # Known gap (see the module docstring): even load spreading understates the per-pod tail.
    assert s99 < m99
    assert m99 - s99 <= 60.0


if __name__ == "__main__":
    print(calibrate().report())
    sys.exit(0)


def test_measured_queue_time_is_the_figure_the_calibration_states(calibration):
    mean, low, p50, _, _ = calibration.queue.measured
    assert (round(mean), low, p50) == (238, 78.0, 203.0)


def test_simulated_queue_time_is_no_gpu_wait_at_the_trace_load(calibration):
    mean, low, *_ = calibration.queue.measured
    sim_mean, _, sim_p50, _, sim_p99 = calibration.queue.simulated
    # Principle: with GPUs 93 % idle on 109 servers a request finds one free, so the
    # measured 78-238 ms is the gateway's own time, not a wait the simulator models.
    assert sim_mean < low
    assert sim_p50 == 0.0
    # Regression checks (measured when written: share 0, p99 0 ms).
    assert calibration.queue.wait_share < 0.01
    assert sim_p99 < mean
