"""Simulator benchmark: every baseline on a day at 1 s on 100 GPUs, and an hour on 10,000.

Targets: each policy's 24-hour, 100-GPU run takes at most 2.5 times static's CPU
seconds on one core, measured in the same run, predictive and hybrid included; on 2
cores, the 24-hour run of the default policies under 2 minutes and the 1-hour,
10,000-GPU run under 5 minutes.

* ``24h_100gpu_one_core``: each policy's run (``run_one``: building the policy and
  simulating; the trace is loaded once before, and the compiled queue block by a
  two-second advance, as a sweep's worker loads it once) in this process, pinned to one core
  where the OS allows it, timed with ``time.process_time`` (CPU seconds, so other
  load on a shared machine counts less than in wall time). Every policy runs once
  per repeat, in turn, each repeat starting at the next policy, so the machine's
  load moves all alike. Reported: each
  policy's median over ``--repeats``, its ratio to static's median (the target
  2.5), the ratio of medians' spread (each repeat's own ratio to static's run of that
  repeat), with the date and the load average before and after (``--one-core-only``
  updates only this case).
* ``24h_100gpu_POLICY_replay`` (``--replay POLICY``, repeatable; ``--kpa-replay`` is
  ``--replay kpa``): where a policy's one-core time goes. Its run, and the same run
  with its recorded decisions replayed by a policy that reads no signal (the same
  signal path, so on the direct path the engine still samples its ring each second;
  on the Prometheus path no family is written for it): the replay is the simulation
  of the policy's dynamics alone (the pods it starts and stops, the queue's blocks
  its changes cut), the difference the cost of its signals, observing and deciding.
  CPU seconds on one core, median of ``--repeats``, with the replay's share of
  static's run in the same case (what even decisions at no cost would leave).
* ``24h_100gpu`` and ``1h_10000gpu``: the policies in a two-worker process pool, as
  ``gpuscale evaluate --jobs 2`` does, each worker timing its own run. Reported: wall
  seconds of the whole case (median of ``--repeats``), each policy's wall and CPU
  seconds in its worker (median; the CPU seconds count less of other load on a
  shared machine), the ratio of wall time to the target, and each policy's CPU time
  relative to ``static`` in the same run (the cost of the policy's observations and
  decisions over the bare simulation).

Run:

    python bench/bench_sim.py                 # writes bench/results.json["sim"]
    python bench/bench_sim.py --repeats 1     # quicker
    python bench/bench_sim.py --one-core-only # only the one-core CPU figure
    python bench/bench_sim.py --one-core-only --replay kpa --replay hybrid  # where their time goes
"""

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gpuscale.evaluate.pool import RunPool, decisions_at_debug
from gpuscale.evaluate.runner import (
    POLICY_NAMES,
    EvaluationRequest,
    PreparedEvaluation,
    build_policy,
    run_one,
)
from gpuscale.scaling.policy import Decision, Observation, ScalingPolicy
from gpuscale.sim.engine import simulate
from gpuscale.sim.fluid import FluidQueue

ROOT = Path(__file__).resolve().parent

ONE_CORE_POLICIES = (*POLICY_NAMES, *(p for p in ("predictive", "hybrid") if p not in POLICY_NAMES))
"""Every policy of the one-core case: the defaults and the two forecast-driven ones."""

ONE_CORE_TARGET_X_STATIC = 2.5
"""Each policy's one-core run in at most this multiple of static's CPU seconds, same run."""

# name -> (trace, scale, seconds, target wall seconds)
CASES = {
    # diurnal peaks at 16 req/s x 5.5 = 88 req/s of 1 GPU-second each: ~94 GPUs needed.
    "24h_100gpu": ("diurnal", 5.5, 86_400, 120.0),
    # the diurnal trough (4.8 req/s) x 2000 at 1 GPU-second each: ~9,600 GPUs needed.
    "1h_10000gpu": ("diurnal", 2000.0, 3_600, 300.0),
}


def timed_run(
    prepared: PreparedEvaluation, name: str, *, progress: Callable[[float], None] | None = None
) -> tuple[float, float, float, float]:
    """One policy's run, timed inside its worker.

    Returns:
        (wall seconds, CPU seconds, GPU-hours, SLO attainment).
    """
    start, cpu = time.perf_counter(), time.process_time()
    result = run_one(prepared, name, progress=progress)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    slo = result.within_slo / max(result.requests, 1.0)
    return seconds, cpu, result.gpu_seconds / 3600.0, slo


def pin_to_one_core() -> tuple[set[int] | None, int | None]:
    """Pin this process to the first core it may use.

    Returns:
        (the previous affinity to restore, or None where the OS has no affinity; the core).
    """
    if not hasattr(os, "sched_getaffinity"):
        return None, None
    before = os.sched_getaffinity(0)
    core = min(before)
    os.sched_setaffinity(0, {core})
    return before, core


def load_compiled_queue() -> None:
    """Advance a fluid queue two seconds, so its compiled block is loaded before any timing.

    numba compiles ``fluid_kernel`` once per machine and caches it on disk; each new
    process loads it at its first call, as each sweep worker does once.
    """
    ones = np.ones(2)
    FluidQueue(timeout_s=60.0).advance(0, 2, ones, ones, 1, 1.0)


def bench_one_core(repeats: int) -> dict[str, object]:
    """Each policy's 24-hour, 100-GPU run on one core, in CPU seconds (median of ``repeats``)."""
    trace, scale, duration, _ = CASES["24h_100gpu"]
    request = EvaluationRequest(trace, policies=ONE_CORE_POLICIES, scale=scale, duration_s=duration)
    prepared = request.prepare()
    load_compiled_queue()
    before, core = pin_to_one_core()
    cpu: dict[str, list[float]] = {p: [] for p in ONE_CORE_POLICIES}
    try:
        for r in range(repeats):  # each repeat runs every policy in turn, from a new first
            shift = r % len(ONE_CORE_POLICIES)
            for policy in ONE_CORE_POLICIES[shift:] + ONE_CORE_POLICIES[:shift]:
                start = time.process_time()
                run_one(prepared, policy, quiet=True)
                cpu[policy].append(time.process_time() - start)
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)
    medians = {p: statistics.median(v) for p, v in cpu.items()}
    x_static = {p: s / medians["static"] for p, s in medians.items()}
    per_repeat = {  # each repeat's ratio to static's run in that repeat: the spread
        p: [s / base for s, base in zip(v, cpu["static"], strict=True)] for p, v in cpu.items()
    }
    return {
        "trace": trace,
        "scale": scale,
        "duration_s": duration,
        "core": core,
        "repeats": repeats,
        "clock": "time.process_time (CPU seconds of this process)",
        "target_x_static": ONE_CORE_TARGET_X_STATIC,
        "cpu_s": medians,
        "cpu_s_all": cpu,
        "policy_cpu_s": medians,
        "policy_x_static": x_static,
        "x_static_per_repeat": per_repeat,
        "meets_target": {p: r <= ONE_CORE_TARGET_X_STATIC for p, r in x_static.items()},
    }


class Recording:
    """A policy that decides as ``inner`` does and keeps each decision."""

    def __init__(self, inner: ScalingPolicy[Any]) -> None:
        self.inner, self.decisions = inner, list[Decision[Any]]()
        self.name, self.interval_s = inner.name, inner.interval_s
        self.signals, self.pod_signals = inner.signals, inner.pod_signals
        self.history_s = inner.history_s
        self.min_replicas, self.max_replicas = inner.min_replicas, inner.max_replicas
        self.signal_path, self.reads_node_slots = inner.signal_path, inner.reads_node_slots

    def initial_state(self) -> Any:
        return self.inner.initial_state()

    def load_state(self, data: Mapping[str, Any]) -> Any:
        return self.inner.load_state(data)

    def decide(self, observation: Observation, state: Any) -> Decision[Any]:
        decision = self.inner.decide(observation, state)
        self.decisions.append(decision)
        return decision


class Replay(Recording):
    """The recorded decisions, in order, with no signal to read (``signal_path`` kept)."""

    def __init__(self, recording: Recording) -> None:
        super().__init__(recording.inner)
        self.signals = self.pod_signals = {}
        self.history_s = 0.0
        self._next = iter(recording.decisions).__next__

    def decide(self, observation: Observation, state: Any) -> Decision[Any]:
        return self._next()


def bench_replay(name: str, repeats: int) -> dict[str, object]:
    """A policy's one-core run against the same run with its decisions replayed (CPU s).

    Static runs beside them in each repeat, so the replay is also read as a multiple of
    static's run under the same load.
    """
    trace, scale, duration, _ = CASES["24h_100gpu"]
    policies = tuple(dict.fromkeys((name, "static")))
    prepared = EvaluationRequest(
        trace, policies=policies, scale=scale, duration_s=duration
    ).prepare()
    recording = Recording(build_policy(name, prepared.configs[name], prepared.required))
    with decisions_at_debug():
        reference = simulate(prepared.scenario, recording)
    before, core = pin_to_one_core()
    own, replay, static = [], [], []
    try:
        for _ in range(repeats):
            start = time.process_time()
            run_one(prepared, name, quiet=True)
            own.append(time.process_time() - start)
            start = time.process_time()
            with decisions_at_debug():
                replayed = simulate(prepared.scenario, Replay(recording))
            replay.append(time.process_time() - start)
            start = time.process_time()
            run_one(prepared, "static", quiet=True)
            static.append(time.process_time() - start)
            same = (replayed.gpu_seconds, replayed.scale_events, replayed.within_slo)
            assert same == (reference.gpu_seconds, reference.scale_events, reference.within_slo)
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)
    o, r, s = statistics.median(own), statistics.median(replay), statistics.median(static)
    return {
        "policy": name,
        "core": core,
        "repeats": repeats,
        "decisions": len(recording.decisions),
        "scale_events": reference.scale_events,
        "run_cpu_s": o,
        "replay_cpu_s": r,
        "static_cpu_s": s,
        "observe_and_decide_cpu_s": o - r,
        "observe_and_decide_ms_per_decision": 1000.0 * (o - r) / len(recording.decisions),
        "run_x_static": o / s,
        "replay_x_static": r / s,
        "run_cpu_s_all": own,
        "replay_cpu_s_all": replay,
        "static_cpu_s_all": static,
    }


def print_one_core(r: dict[str, object]) -> None:
    cpu, ratio, spread = r["cpu_s"], r["policy_x_static"], r["x_static_per_repeat"]
    assert isinstance(cpu, dict)
    assert isinstance(ratio, dict)
    assert isinstance(spread, dict)
    print(f"one 24 h / 100-GPU run on one core (core {r['core']}), CPU seconds, median of "
          f"{r['repeats']}; target {r['target_x_static']:.1f} x static")  # fmt: skip
    print(f"{'policy':<11}{'CPU s':>9}{'x static':>10}{'range of repeats':>19}")
    for p in ONE_CORE_POLICIES:
        verdict = "meets" if ratio[p] <= ONE_CORE_TARGET_X_STATIC else "MISSES"
        low, high = min(spread[p]), max(spread[p])
        print(f"{p:<11}{cpu[p]:>9.2f}{ratio[p]:>10.2f}{low:>10.2f} to {high:.2f}  {verdict}")


def bench_case(name: str, repeats: int, pool: RunPool) -> dict[str, object]:
    trace, scale, duration, target = CASES[name]
    start = time.perf_counter()
    prepared = EvaluationRequest(trace, scale=scale, duration_s=duration).prepare()
    prepare_s = time.perf_counter() - start
    walls: list[float] = []
    per_policy: dict[str, list[float]] = {p: [] for p in POLICY_NAMES}
    per_policy_cpu: dict[str, list[float]] = {p: [] for p in POLICY_NAMES}
    outcome: dict[str, tuple[float, float]] = {}
    for _ in range(repeats):
        start = time.perf_counter()
        runs = pool.run(timed_run, [(p, (prepared, p)) for p in POLICY_NAMES])
        walls.append(time.perf_counter() - start + prepare_s)
        for policy, (seconds, cpu, gpu_hours, slo) in zip(POLICY_NAMES, runs, strict=True):
            per_policy[policy].append(seconds)
            per_policy_cpu[policy].append(cpu)
            outcome[policy] = (gpu_hours, slo)
    wall = statistics.median(walls)
    medians = {p: statistics.median(v) for p, v in per_policy.items()}
    cpu_medians = {p: statistics.median(v) for p, v in per_policy_cpu.items()}
    return {
        "trace": trace,
        "scale": scale,
        "duration_s": duration,
        "peak_required_gpus": int(prepared.required.max()),
        "cluster_max_gpus": prepared.scenario.cluster.max_gpus,
        "repeats": repeats,
        "prepare_s": prepare_s,
        "wall_s": wall,
        "target_s": target,
        "ratio_to_target": wall / target,
        "meets_target": wall <= target,
        "policy_s": medians,
        "policy_cpu_s": cpu_medians,
        "policy_x_static": {p: s / cpu_medians["static"] for p, s in cpu_medians.items()},
        "gpu_hours": {p: o[0] for p, o in outcome.items()},
        "slo_attainment": {p: o[1] for p, o in outcome.items()},
    }


def print_table(results: dict[str, dict[str, object]]) -> None:
    head = f"{'case':<13}{'policy':<8}{'seconds':>9}{'CPU s':>8}{'x static':>10}"
    print(f"{head}{'GPU-h':>10}{'SLO':>8}")
    for case, r in results.items():
        policy_s = r["policy_s"]
        policy_cpu = r["policy_cpu_s"]
        assert isinstance(policy_cpu, dict)
        ratio = r["policy_x_static"]
        hours = r["gpu_hours"]
        slo = r["slo_attainment"]
        assert isinstance(policy_s, dict)
        assert isinstance(ratio, dict)
        assert isinstance(hours, dict)
        assert isinstance(slo, dict)
        for p in POLICY_NAMES:
            print(
                f"{case:<13}{p:<8}{policy_s[p]:>9.1f}{policy_cpu[p]:>8.1f}{ratio[p]:>10.2f}"
                f"{hours[p]:>10.1f}{slo[p] * 100:>7.1f}%"
            )
        print(
            f"{case:<13}{'ALL':<8}{r['wall_s']:>9.1f}  wall (2 workers), "
            f"target {r['target_s']:.0f} s, ratio {r['ratio_to_target']:.2f}, "
            f"{'meets' if r['meets_target'] else 'MISSES'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the 100-GPU case")
    parser.add_argument("--big-repeats", type=int, default=1, help="repeats of the 10k case")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--out", type=Path, default=ROOT / "results.json")
    parser.add_argument(
        "--one-core-only", action="store_true", help="only the one-core CPU-seconds case"
    )
    parser.add_argument(
        "--replay",
        action="append",
        default=[],
        choices=ONE_CORE_POLICIES,
        help="also this policy against its decisions replayed (repeatable)",
    )
    parser.add_argument("--kpa-replay", action="store_true", help="as --replay kpa")
    args = parser.parse_args()
    results: dict[str, dict[str, object]] = {}
    when = {  # CPU seconds on a shared machine depend on its load: keep both with the figures
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average_1min_before": round(os.getloadavg()[0], 2),
    }
    one_core = bench_one_core(args.repeats)  # before the pool: its workers must not be pinned
    one_core.update(when, load_average_1min_after=round(os.getloadavg()[0], 2))
    if not args.one_core_only:
        with RunPool(args.jobs) as pool:
            results = {
                "24h_100gpu": bench_case("24h_100gpu", args.repeats, pool),
                "1h_10000gpu": bench_case("1h_10000gpu", args.big_repeats, pool),
            }
        print_table(results)
    print_one_core(one_core)
    for name in dict.fromkeys([*(["kpa"] if args.kpa_replay else []), *args.replay]):
        replay = bench_replay(name, args.repeats)
        replay.update(when, load_average_1min_after=round(os.getloadavg()[0], 2))
        results[f"24h_100gpu_{name}_replay"] = replay
        print(
            f"{name} {replay['run_cpu_s']:.2f} CPU s ({replay['run_x_static']:.2f} x "
            f"static's {replay['static_cpu_s']:.2f}); its decisions replayed (no observation) "
            f"{replay['replay_cpu_s']:.2f} ({replay['replay_x_static']:.2f} x static); its "
            f"signals, observing and deciding {replay['observe_and_decide_cpu_s']:.2f} "
            f"({replay['observe_and_decide_ms_per_decision']:.3f} ms a decision, "
            f"{replay['decisions']} decisions, {replay['scale_events']} scale changes)"
        )
    document = json.loads(args.out.read_text()) if args.out.exists() else {}
    previous = document.get("sim", {}) if args.one_core_only else {}
    results = {**previous.get("results", {}), **results, "24h_100gpu_one_core": one_core}
    when["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    # The header dates the pool cases: a one-core-only run keeps theirs (its own date
    # and load are in its result).
    header = {k: v for k, v in previous.items() if k != "results"} or {
        "machine": f"{os.cpu_count()} cores",
        "jobs": args.jobs,
        **when,
    }
    document["sim"] = {**header, "results": results}
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.out} ['sim']")


if __name__ == "__main__":
    main()
