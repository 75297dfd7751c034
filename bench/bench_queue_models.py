"""Cost and answer of the two queue models in the engine, by fleet size and load.

``Scenario.queue_model`` picks the fluid queue (``sim/fluid.py``) or the exact
per-request queue (``sim/requests.py``); ``auto`` (``queue_model.choose``) takes the
per-request one up to a mean arrival rate. This benchmark is what sets that bound.

Each case is one engine run (``simulate``) of a static fleet of ``k`` one-slot
replicas on an H100 node pool, serving Poisson arrivals at ``load x k`` requests per
second of exponential 1 s requests (SLO 2 s, timeout 120 s), for ``--seconds``
seconds, once with each queue model. Reported per case: CPU seconds of each run
(``time.process_time``, median of ``--repeats``), their ratio, the per-request
queue's extra cost per request (microseconds), and the SLO attainment each model
gives with its gap (fluid minus per-request).

From the cases the benchmark fits the per-request queue's extra cost per request
(the median over cases of extra seconds / requests) and the fluid run's cost per
simulated second (median), and prints the mean arrival rate at which the
per-request run costs ``queue_model.AUTO_COST_RATIO`` times the fluid one:

    rate* = (AUTO_COST_RATIO - 1) x fluid seconds per simulated second / extra per request

``queue_model.AUTO_MAX_RATE`` is set at or below it.

Run:

    python bench/bench_queue_models.py                 # writes bench/results.json["queue_models"]
    python bench/bench_queue_models.py --seconds 900 --repeats 1   # quicker
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from gpuscale.scaling.static import StaticPolicy
from gpuscale.sim.cluster import ClusterConfig, ColdStart
from gpuscale.sim.engine import Scenario, simulate
from gpuscale.sim.queue_model import AUTO_COST_RATIO, AUTO_MAX_RATE
from gpuscale.sim.serving import ServingConfig
from gpuscale.sim.workload import Workload

ROOT = Path(__file__).resolve().parent
SERVERS = (1, 2, 4, 16, 64, 256)
LOADS = (0.5, 0.9, 0.95)


def scenario(k: int, load: float, seconds: int, model: str) -> Scenario:
    """A static fleet of ``k`` replicas at ``load``, served by queue ``model``."""
    a = np.random.default_rng(1).poisson(np.full(seconds, load * k)).astype(float)
    nodes = max((k + 7) // 8, 1)
    cluster = ClusterConfig(
        gpus_per_node=8, initial_nodes=nodes, max_nodes=nodes, cold_start=ColdStart.fixed(10.0)
    )
    return Scenario(
        Workload("poisson", a, a * 1.0),
        cluster,
        ServingConfig(),
        slo_latency_s=2.0,
        timeout_s=120.0,
        initial_replicas=k,
        queue_model=model,  # type: ignore[arg-type]
    )


def timed(sc: Scenario, k: int, repeats: int) -> tuple[float, float, float]:
    """Median CPU seconds of ``repeats`` runs, the attainment and the request count."""
    times, res = [], None
    for _ in range(repeats):
        start = time.process_time()
        res = simulate(sc, StaticPolicy(k))
        times.append(time.process_time() - start)
    assert res is not None
    return statistics.median(times), res.within_slo / max(res.requests, 1.0), res.requests


def main() -> None:
    """Run the grid, print it, and store it in bench/results.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=3600, help="simulated seconds per run")
    ap.add_argument("--repeats", type=int, default=3, help="runs per case (median)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    rows, extra, fluid_per_s = [], [], []
    print(
        f"{'k':>4} {'load':>5} {'req/s':>7} {'fluid s':>8} {'req s':>7} {'ratio':>6} "
        f"{'us/req':>7} {'att fluid':>9} {'att req':>8} {'gap':>7}"
    )
    for k in SERVERS:
        for load in LOADS:
            tf, af, _ = timed(scenario(k, load, args.seconds, "fluid"), k, args.repeats)
            tr, ar, n = timed(scenario(k, load, args.seconds, "requests"), k, args.repeats)
            us = (tr - tf) / max(n, 1.0) * 1e6
            extra.append((tr - tf) / max(n, 1.0))
            fluid_per_s.append(tf / args.seconds)
            row = {
                "servers": k,
                "load": load,
                "rate_rps": round(n / args.seconds, 2),
                "fluid_s": round(tf, 3),
                "requests_s": round(tr, 3),
                "ratio": round(tr / tf, 2),
                "extra_us_per_request": round(us, 2),
                "attainment_fluid": round(af, 4),
                "attainment_requests": round(ar, 4),
                "gap": round(af - ar, 4),
            }
            rows.append(row)
            print(
                f"{k:>4} {load:>5} {row['rate_rps']:>7} {tf:>8.3f} {tr:>7.3f} "
                f"{tr / tf:>6.2f} {us:>7.2f} {af:>9.4f} {ar:>8.4f} {af - ar:>+7.4f}"
            )
    per_req, per_s = statistics.median(extra), statistics.median(fluid_per_s)
    rate_star = (AUTO_COST_RATIO - 1.0) * per_s / per_req
    print(
        f"extra per request {per_req * 1e6:.2f} us; fluid run {per_s * 1e6:.1f} us per "
        f"simulated second; {AUTO_COST_RATIO:g}x the fluid at {rate_star:.1f} req/s "
        f"(AUTO_MAX_RATE = {AUTO_MAX_RATE:g})"
    )
    if args.no_write:
        return
    path = ROOT / "results.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    data["queue_models"] = {
        "seconds": args.seconds,
        "repeats": args.repeats,
        "cases": rows,
        "extra_us_per_request": round(per_req * 1e6, 3),
        "fluid_us_per_second": round(per_s * 1e6, 2),
        "cost_ratio": AUTO_COST_RATIO,
        "rate_at_cost_ratio_rps": round(rate_star, 2),
        "auto_max_rate_rps": AUTO_MAX_RATE,
    }
    path.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
