"""What the engine skips to run fast changes nothing a run reports or a policy sees.

The engine writes only the metric families the policy's signals query, pauses
the cyclic garbage collector during a run, and advances the queue past decisions
that change nothing; none may change a result.
"""

import dataclasses
import gc

import numpy as np

from gpuscale.metrics.signal import Signal
from gpuscale.scaling.kpa import KpaConfig, KpaPolicy
from gpuscale.sim import engine
from gpuscale.sim.engine import simulate
from gpuscale.sim.faults import parse_sim_fault
from tests.support.sim import UTIL, Recorder, scenario, workload

OTHERS = ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_SM_ACTIVE", "gpuscale_serving_requests_total")


def _flat(result: object) -> dict[str, object]:
    out = {}
    for f in dataclasses.fields(result):  # type: ignore[arg-type]
        v = getattr(result, f.name)
        if dataclasses.is_dataclass(v):
            out |= {
                f"{f.name}.{g.name}": getattr(v, g.name).tolist() for g in dataclasses.fields(v)
            }
        else:
            out[f.name] = v.tolist() if isinstance(v, np.ndarray) else v
    return out


def test_unread_families_change_neither_the_run_nor_what_the_policy_sees() -> None:
    wl = workload(np.concatenate([np.full(900, 1.0), np.full(900, 3.0)]))
    alone = Recorder(replicas=[2, 3, 4, 3])
    among = Recorder(
        replicas=[2, 3, 4, 3],
        pod_signals={
            "util": UTIL,
            **{n: Signal(n, aggregation="max", by=("pod",)) for n in OTHERS},
        },
        signals={"queue": Signal("gpuscale_serving_queue_requests", aggregation="sum")},
    )
    a, b = simulate(scenario(wl), alone), simulate(scenario(wl), among)
    assert _flat(a) == _flat(b)  # NaN-free: every field compares equal
    seen_alone = [o.pod_metrics["util"] for o in alone.seen]
    seen_among = [o.pod_metrics["util"] for o in among.seen]
    assert seen_alone == seen_among
    assert any(v for v in seen_alone)  # the policy did see GPU_UTIL values


def test_a_run_leaves_the_garbage_collector_as_it_found_it() -> None:
    wl = workload(np.full(120, 1.0))
    assert gc.isenabled()
    simulate(scenario(wl), Recorder())
    assert gc.isenabled()
    gc.disable()
    try:
        simulate(scenario(wl), Recorder())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_looking_past_decisions_that_change_nothing_changes_no_result(monkeypatch) -> None:

    rate = np.concatenate([np.full(600, 2.0), np.full(300, 9.0), np.full(900, 1.0)])
    wl = workload(rate, service_s=2.0, seed=3)
    specs = ("gpu-lost@700:duration=300", "thermal@200:duration=400")
    faults = tuple(parse_sim_fault(f) for f in specs)
    runs, decisions, looked = [], [], []
    original = engine._Run._look_ahead

    def counted(self, *args):
        looked.append(args[0])
        return original(self, *args)

    monkeypatch.setattr(engine._Run, "_look_ahead", counted)
    for ahead in (False, True):
        monkeypatch.setattr(engine, "LOOK_AHEAD", ahead)
        policy = KpaPolicy(KpaConfig(target=2.0, max_replicas=16))
        seen: list[tuple[float, float, int]] = []
        decide = policy.decide

        def recorded(observation, state, decide=decide, seen=seen):
            decision = decide(observation, state)
            newest = observation.series["concurrency"][-1][1]
            seen.append((observation.now, newest, decision.replicas))
            return decision

        policy.decide = recorded  # type: ignore[method-assign]
        runs.append(_flat(simulate(scenario(wl, faults=faults, seed=2), policy)))
        decisions.append(seen)
        if not ahead:
            assert not looked
    assert looked  # blocks were looked past
    assert decisions[0] == decisions[1]
    assert len({d[2] for d in decisions[0]}) > 2  # the policy scaled, in and out
    assert runs[0] == runs[1]
