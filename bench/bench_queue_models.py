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

From the cases the benchmark fits the per-request run's time as ``a x seconds + b x
requests`` (least squares), takes the fluid run's time per simulated second ``f``
(median over cases: it does not grow with the load), and prints the mean arrival
rate at which the per-request run costs ``queue_model.AUTO_COST_RATIO`` times the
fluid one:

    rate* = (AUTO_COST_RATIO x f - a) / b

``queue_model.AUTO_MAX_RATE`` is set at or below it.

A second grid runs LLM fleets (``ServingConfig.for_llm``: Llama-2-70B on 2 H100s a
replica, continuous batching, TTFT and TPOT objectives) of 2 to 16 replicas at
80-91 % load, 1,024-token prompts and 256 output tokens (lognormal), and reports
the attainment of each model: how far the fluid's TTFT is from the exact one.

With ``--trace azure-conv`` (needs the shared traces) a third grid runs that trace at
``--scale`` (default 100) on static fleets of 0.8-1.2x the oracle's peak need with
each model: the busy fleets ``auto`` leaves to the fluid.

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
from gpuscale.sim.llm import TENSOR_PARALLEL
from gpuscale.sim.queue_model import AUTO_COST_RATIO, AUTO_MAX_RATE, choose
from gpuscale.sim.serving import ServingConfig, llm_work_seconds, replica_slots
from gpuscale.sim.workload import RequestProfile, Workload

ROOT = Path(__file__).resolve().parent
SERVERS = (1, 2, 4, 16, 64, 256)
LOADS = (0.5, 0.9, 0.95)
LLM_CASES = ((2, 3.2), (2, 3.6), (4, 7.0), (8, 14.4), (16, 28.8), (32, 57.6))
"""(replicas, requests per second): 80-91 % busy slots."""


def llm_scenario(replicas: int, rate: float, seconds: int, model: str) -> Scenario:
    """A static LLM fleet at ``rate`` requests per second, served by queue ``model``."""
    rng = np.random.default_rng(1)
    ctx = np.rint(rng.lognormal(np.log(1024) - 0.5, 1.0, 20_000)).clip(1)
    gen = np.rint(rng.lognormal(np.log(256) - 0.5, 1.0, 20_000)).clip(1)
    work = llm_work_seconds(ctx, gen)
    a = np.full(seconds, rate)
    tokens = np.stack([a * ctx.mean(), a * gen.mean()], axis=1)
    profile = RequestProfile.from_samples(work, ctx, gen)
    wl = Workload("llm", a, a * work.mean(), tokens, profile)
    nodes = -(-replicas * TENSOR_PARALLEL // 8)
    cluster = ClusterConfig(initial_nodes=nodes, max_nodes=nodes, cold_start=ColdStart.fixed(30.0))
    return Scenario(
        wl,
        cluster,
        ServingConfig.for_llm(),
        slo_latency_s=60.0,
        timeout_s=600.0,
        initial_replicas=replicas,
        queue_model=model,  # type: ignore[arg-type]
    )


def llm_grid(seconds: int) -> list[dict[str, float | str]]:
    """Attainment of each queue model on the LLM fleets, and which one ``auto`` takes."""
    rows: list[dict[str, float | str]] = []
    print(
        f"{'LLM reps':>8} {'req/s':>6} {'busy':>5} {'att fluid':>9} {'att req':>8} "
        f"{'gap':>7} {'auto':>8}"
    )
    for replicas, rate in LLM_CASES:
        got = {}
        for model in ("fluid", "requests"):
            sc = llm_scenario(replicas, rate, seconds, model)
            res = simulate(sc, StaticPolicy(replicas))
            got[model] = res.within_slo / max(res.requests - res.in_flight_requests, 1.0)
        slots = replica_slots(sc.serving, "H100", sc.workload)
        auto = choose("auto", sc.workload, slots=slots)
        busy = float(sc.workload.work_s.mean()) * slots / (replicas * slots)
        gap = got["fluid"] - got["requests"]
        rows.append({
            "replicas": replicas, "rate_rps": rate, "busy_share": round(busy, 3),
            "attainment_fluid": round(got["fluid"], 4),
            "attainment_requests": round(got["requests"], 4), "gap": round(gap, 4),
            "auto": auto,
        })  # fmt: skip
        print(
            f"{replicas:>8} {rate:>6} {busy:>5.2f} {got['fluid']:>9.4f} "
            f"{got['requests']:>8.4f} {gap:>+7.4f} {auto:>8}"
        )
    return rows


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


def trace_grid(trace: str, scale: float) -> list[dict[str, float]]:
    """Cost and attainment of each model on a shared trace at fleet scale."""
    import dataclasses

    from gpuscale.evaluate.runner import default_slo_s, plan, serving_for
    from gpuscale.sim.traces import load_trace

    wl = load_trace(trace, scale=scale)
    serving = serving_for(trace)
    slo = default_slo_s(wl, serving, "H100")
    prepared = plan(
        wl, trace=trace, policies=["static"], scale=scale, slo_latency_s=slo, timeout_s=600.0,
        seed=0,
    )  # fmt: skip
    sc = prepared.scenario
    sc = dataclasses.replace(sc, cluster=dataclasses.replace(
        sc.cluster, initial_nodes=sc.cluster.max_nodes))  # fmt: skip
    peak = int(prepared.required.max())
    rows: list[dict[str, float]] = []
    print(f"{trace} x{scale:g}: {wl.arrivals.sum():.0f} requests, peak need {peak} replicas")
    for share in (0.8, 0.9, 1.0, 1.2):
        n = int(peak * share)
        got = {}
        for model in ("fluid", "requests"):
            run_sc = dataclasses.replace(sc, queue_model=model, initial_replicas=n)
            start = time.process_time()
            res = simulate(run_sc, StaticPolicy(n))
            got[model] = (
                time.process_time() - start,
                res.within_slo / max(res.requests - res.in_flight_requests, 1.0),
            )
        (tf, af), (tr, ar) = got["fluid"], got["requests"]
        rows.append({
            "replicas": n, "share_of_peak": share, "fluid_s": round(tf, 3),
            "requests_s": round(tr, 3), "attainment_fluid": round(af, 4),
            "attainment_requests": round(ar, 4), "gap": round(af - ar, 4),
        })  # fmt: skip
        print(
            f"{n:>5} ({share:.1f}x) fluid {tf:.2f} s {af:.4f}; per request {tr:.2f} s "
            f"{ar:.4f}; gap {af - ar:+.4f}"
        )
    return rows


def main() -> None:
    """Run the grid, print it, and store it in bench/results.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=3600, help="simulated seconds per run")
    ap.add_argument("--repeats", type=int, default=3, help="runs per case (median)")
    ap.add_argument("--llm-seconds", type=int, default=3600, help="simulated seconds per LLM run")
    ap.add_argument("--trace", default="", help="also run this shared trace (azure-conv)")
    ap.add_argument("--scale", type=float, default=100.0, help="its request-rate multiplier")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    rows, fluid_per_s, fit = [], [], []
    print(
        f"{'k':>4} {'load':>5} {'req/s':>7} {'fluid s':>8} {'req s':>7} {'ratio':>6} "
        f"{'us/req':>7} {'att fluid':>9} {'att req':>8} {'gap':>7}"
    )
    for k in SERVERS:
        for load in LOADS:
            tf, af, _ = timed(scenario(k, load, args.seconds, "fluid"), k, args.repeats)
            tr, ar, n = timed(scenario(k, load, args.seconds, "requests"), k, args.repeats)
            us = (tr - tf) / max(n, 1.0) * 1e6
            fit.append((n, tr))
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
    n_req, t_req = (np.array(x, dtype=float) for x in zip(*fit, strict=True))
    design = np.stack([np.full(n_req.size, float(args.seconds)), n_req], axis=1)
    (per_sec, per_req), *_ = np.linalg.lstsq(design, t_req, rcond=None)
    per_s = statistics.median(fluid_per_s)
    rate_star = (AUTO_COST_RATIO * per_s - per_sec) / per_req
    print(
        f"per-request run: {per_sec * 1e6:.1f} us per simulated second + {per_req * 1e6:.2f} us "
        f"per request; fluid run {per_s * 1e6:.1f} us per simulated second; "
        f"{AUTO_COST_RATIO:g}x the fluid at {rate_star:.1f} req/s (AUTO_MAX_RATE = "
        f"{AUTO_MAX_RATE:g})"
    )
    llm = llm_grid(args.llm_seconds)
    traced = trace_grid(args.trace, args.scale) if args.trace else []
    if args.no_write:
        return
    path = ROOT / "results.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    data["queue_models"] = {
        "seconds": args.seconds,
        "repeats": args.repeats,
        "cases": rows,
        "requests_us_per_second": round(per_sec * 1e6, 2),
        "requests_us_per_request": round(per_req * 1e6, 3),
        "fluid_us_per_second": round(per_s * 1e6, 2),
        "cost_ratio": AUTO_COST_RATIO,
        "rate_at_cost_ratio_rps": round(rate_star, 2),
        "auto_max_rate_rps": AUTO_MAX_RATE,
        "llm_seconds": args.llm_seconds,
        "llm_cases": llm,
    }
    if traced:
        data["queue_models"]["trace"] = {"name": args.trace, "scale": args.scale, "cases": traced}
    path.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
