"""What the engine skips to run fast changes nothing a run reports or a policy sees.

The engine writes only the metric families the policy's signals query, and pauses
the cyclic garbage collector during a run; neither may change a result.
"""

import dataclasses
import gc

import numpy as np

from gpuscale.metrics.signal import Signal
from gpuscale.sim.engine import simulate
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
