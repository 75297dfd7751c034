"""Benchmark: how long one ``hybrid`` decision takes with a day of history behind it.

A policy runs every 15 s in the controller and every simulated 15 s in each of
thousands of sweep runs, so a decision has a 5 ms budget. This benchmark builds
the state ``hybrid`` has after three days of diurnal demand (the seasonal model
fitted, 864 five-minute buckets) and 20 Ready pods with their DCGM and serving
series, then times:

* ``steady``: decisions between refits, on the history the policy receives
  (``history_s`` = 600 s at the 15 s scrape interval: 41 points per signal);
* ``refit``: the decision that refits the Holt-Winters model;
* ``amortised``: the mean over one refit period (240 decisions, one refit);
* ``day_in_observation``: steady decisions when the observation carries a full
  24 h of points per signal (5761), for a source that returns more than asked;
* ``hpa``: an HPA decision on the same pods, the baseline measured in the same run.

Run: ``.venv/bin/python bench/bench_decision.py`` (writes ``decision`` in
bench/results.json, keeping the other keys).
"""

import argparse
import dataclasses
import json
import math
import statistics
import time
from pathlib import Path

from gpuscale.scaling import forecast as fc
from gpuscale.scaling import health
from gpuscale.scaling.hpa import HpaPolicy
from gpuscale.scaling.hybrid import HybridPolicy, HybridState
from gpuscale.scaling.policy import Observation, PodStatus, S, ScalingPolicy, TargetStatus
from gpuscale.scaling.predictive import DEMAND_METRICS

STEP_S = 15.0
PODS = 20
TARGET_MS = 5.0
RESULTS = Path(__file__).with_name("results.json")


def demand(t: float) -> float:
    """Diurnal demand, requests in flight plus queued, with a deterministic wiggle."""
    return 100.0 + 60.0 * math.sin(2 * math.pi * t / 86400.0) + 5.0 * math.sin(t / 37.0)


def observation(now: float, history_s: float) -> Observation:
    n = int(history_s / STEP_S) + 1
    points = tuple(
        (now - STEP_S * (n - 1 - i), demand(now - STEP_S * (n - 1 - i))) for i in range(n)
    )
    series = {DEMAND_METRICS[0]: points, DEMAND_METRICS[1]: tuple((t, 0.0) for t, _ in points)}
    pods = tuple(PodStatus(f"p{i}", True, 0.0, 40.0) for i in range(PODS))
    names = [p.name for p in pods]
    pod_metrics = {
        health.SM: dict.fromkeys(names, 0.5),
        health.XID: dict.fromkeys(names, 0.0),
        health.DBE: dict.fromkeys(names, 0.0),
        health.THERMAL: dict.fromkeys(names, 0.0),
        health.DONE: {name: now * 0.3 for name in names},
        "DCGM_FI_DEV_GPU_UTIL": dict.fromkeys(names, 70.0),
    }
    return Observation(now, TargetStatus(PODS, pods), pod_metrics, series)


def warm_state(policy: HybridPolicy, days: int) -> tuple[HybridState, float]:
    """The state after ``days`` of demand (buckets filled, model fitted), and its time."""
    cfg = policy.config.forecast
    end = days * 86400.0
    points = tuple((t, demand(t)) for t in (STEP_S * i for i in range(int(end / STEP_S) + 1)))
    fstate = fc.refit(fc.ingest(fc.ForecastState(), points, cfg), end, cfg)
    obs = observation(end, policy.history_s)
    decision = policy.decide(obs, HybridState(forecast=fstate))
    if "seasonal forecast" not in decision.reason:
        raise RuntimeError(f"the warmed policy does not use its seasonal model: {decision.reason}")
    return decision.state, end


def timed(policy: ScalingPolicy[S], obs: Observation, state: S) -> tuple[float, S]:
    start = time.perf_counter()
    decision = policy.decide(obs, state)
    return (time.perf_counter() - start) * 1000.0, decision.state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=240, help="decisions per measurement")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    policy = HybridPolicy()
    state, now = warm_state(policy, 3)
    refit_s = policy.config.forecast.refit_s
    steady, amortised, refits, day = [], [], [], []
    for i in range(args.repeats):  # one refit period: the last decision refits
        now += STEP_S
        if i == args.repeats - 1:
            due = dataclasses.replace(state.forecast.fit, at=now - refit_s)  # due now
            state = dataclasses.replace(
                state, forecast=dataclasses.replace(state.forecast, fit=due)
            )
        ms, state = timed(policy, observation(now, policy.history_s), state)
        amortised.append(ms)
        (refits if state.forecast.fit.at == now else steady).append(ms)
    day_state = state
    for _ in range(min(args.repeats, 60)):
        now += STEP_S
        ms, day_state = timed(policy, observation(now, 86400.0), day_state)
        day.append(ms)
    hpa = HpaPolicy()
    hpa_ms, hpa_state = [], hpa.initial_state()
    for _ in range(args.repeats):
        now += STEP_S
        ms, hpa_state = timed(hpa, observation(now, policy.history_s), hpa_state)
        hpa_ms.append(ms)
    median = statistics.median(steady)
    result = {
        "machine": "2 cores, shared",
        "history": "3 days in state (864 buckets); 600 s observed at 15 s (41 points)",
        "steady_median_ms": round(median, 3),
        "steady_p99_ms": round(sorted(steady)[int(0.99 * (len(steady) - 1))], 3),
        "refit_ms": round(statistics.median(refits), 1),
        "refits": len(refits),
        "amortised_mean_ms": round(statistics.fmean(amortised), 3),
        "day_in_observation_median_ms": round(statistics.median(day), 3),
        "hpa_median_ms": round(statistics.median(hpa_ms), 3),
        "steady_ratio_vs_hpa": round(median / statistics.median(hpa_ms), 1),
        "target_ms": TARGET_MS,
        "meets_target": median < TARGET_MS and statistics.fmean(amortised) < TARGET_MS,
    }
    print(json.dumps(result, indent=1))
    if not args.no_write:
        results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        results["decision"] = result
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
