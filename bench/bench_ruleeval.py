"""What the in-process rule evaluator costs: per evaluation, and inside a simulated run.

Two measurements, each the median of ``--repeats`` runs on this (shared) machine:

- one evaluation of the whole default catalogue (34 rules today) over a store holding
  an hour of 15 s scrapes of N simulated GPUs (the ``sim`` telemetry source,
  every DCGM field), for N in 4, 16 and 64: milliseconds per evaluation;
- one simulated hour (``simulate``, 4 replicas on one 4-GPU node, a
  ``gpu-lost`` fault at 600 s) with ``Scenario.alerting`` off and on (rules
  every 15 s): seconds, and their ratio.

Run: ``python bench/bench_ruleeval.py`` (about a minute); ``--json`` prints the numbers.
"""

import argparse
import json
import statistics
import time

import numpy as np

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.evaluate import RuleEvaluator
from gpuscale.fields import DCGM_FIELDS
from gpuscale.metrics.store import MetricStore
from gpuscale.scaling.policy import PROMETHEUS_QUERY, Decision
from gpuscale.scaling.static import StaticState
from gpuscale.sim.cluster import ClusterConfig, ColdStart
from gpuscale.sim.engine import Scenario, simulate
from gpuscale.sim.faults import parse_sim_fault
from gpuscale.sim.serving import ServingConfig
from gpuscale.sim.workload import Workload
from gpuscale.telemetry.sim import SimSource

STEP_S = 15.0


def _store(gpus: int, hours: float = 1.0) -> tuple[MetricStore, float]:
    now = [0.0]
    source = SimSource(gpus, ("H100",), seed=1, clock=lambda: now[0], hostname="bench")
    store = MetricStore(retention_s=8 * 3600)
    steps = int(hours * 3600 / STEP_S)
    labels = None
    for i in range(steps):
        now[0] = i * STEP_S
        snap = source.sample()
        if labels is None:
            labels = [
                {"gpu": str(d.info.index), "UUID": str(d.info.uuid), "Hostname": "bench",
                 "modelName": d.info.model, "job": "gpuscale-exporter", "instance": "bench:9400"}
                for d in snap.devices
            ]  # fmt: skip
        names = {n for d in snap.devices for n in d.values if n in DCGM_FIELDS}
        for name in sorted(names):
            vals = np.array([d.values.get(name, np.nan) for d in snap.devices], dtype=float)
            store.ingest(now[0], name, labels, vals)
    return store, now[0]


def evaluation_ms(gpus: int, repeats: int) -> float:
    """Median milliseconds of one catalogue evaluation over ``gpus`` GPUs' hour."""
    store, end = _store(gpus)
    times = []
    for k in range(repeats):
        ev = RuleEvaluator(build_catalogue(), store)
        started = time.perf_counter()
        ev.evaluate(end + k * 0.001)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


class _Hold:
    name, interval_s, history_s = "hold", 15.0, 0.0
    signals: dict = {}  # noqa: RUF012 - a policy's declared signals
    pod_signals: dict = {}  # noqa: RUF012
    min_replicas, max_replicas = 0, 8
    signal_path, reads_node_slots = PROMETHEUS_QUERY, False

    def initial_state(self):
        return StaticState()

    def load_state(self, data):
        return StaticState.from_json(data)

    def decide(self, observation, state):
        return Decision(4, "hold", state)


def sim_seconds(alerting: bool, repeats: int) -> float:
    """Median seconds of a simulated hour with a gpu-lost fault."""
    rate = np.full(3600, 2.0)
    sc = Scenario(
        workload=Workload("flat", rate, rate.copy()),
        cluster=ClusterConfig(gpus_per_node=4, initial_nodes=1, max_nodes=1,
                              cold_start=ColdStart.fixed(60.0)),
        serving=ServingConfig(),
        slo_latency_s=5.0,
        timeout_s=120.0,
        initial_replicas=4,
        faults=(parse_sim_fault("gpu-lost@600"),),
        queue_model="fluid",
        alerting=alerting,
    )  # fmt: skip
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        simulate(sc, _Hold())  # type: ignore[arg-type]
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    per_eval = {n: evaluation_ms(n, args.repeats) for n in (4, 16, 64)}
    off, on = sim_seconds(False, args.repeats), sim_seconds(True, args.repeats)
    result = {
        "evaluation_ms": per_eval,
        "sim_hour_s": {"alerting_off": off, "alerting_on": on, "ratio": on / off},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for n, ms in per_eval.items():
        print(f"catalogue evaluation, {n:3d} GPUs: {ms:7.1f} ms")
    print(f"simulated hour, 4 GPUs: {off:.2f} s without rules, {on:.2f} s with ({on / off:.1f}x)")


if __name__ == "__main__":
    main()
