"""Typed policy state: exact JSON round trips, safe loading, and what ``essential()`` keeps.

The live controller saves every policy's state in an annotation and reads it back after a
restart; the simulator keeps it in memory. A state that did not come back equal, or a
policy that decided differently from a reloaded state, would make the two loops differ.
"""

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.evaluate import registry
from gpuscale.evaluate.runner import EvaluationRequest, build_policy
from gpuscale.scaling.forecast import FittedModel, ForecastState
from gpuscale.scaling.health import HealthState, PodHealth
from gpuscale.scaling.hpa import DEFAULT_BEHAVIOR, HpaConfig, HpaPolicy
from gpuscale.scaling.hybrid import HybridPolicy, HybridState
from gpuscale.scaling.keda import KedaConfig, KedaPolicy, KedaState
from gpuscale.scaling.kpa import KpaPolicy, KpaState
from gpuscale.scaling.oracle import OraclePolicy, OracleState
from gpuscale.scaling.policy import Observation, PodStatus, TargetStatus
from gpuscale.scaling.predictive import (
    DEMAND_METRICS,
    ColdStarts,
    PredictivePolicy,
    PredictiveState,
)
from gpuscale.scaling.recommendations import HpaState, prune
from gpuscale.scaling.state import StateError
from gpuscale.scaling.static import StaticPolicy, StaticState
from gpuscale.sim.engine import simulate
from tests.support.policystate import through_json

FAULTS = ("gpu-lost@300:duration=300", "thermal@400:duration=400", "straggler@200", "ecc-dbe@700")
"""Faults that make ``hybrid`` quarantine, replace and remember pods."""


class Capture:
    """The wrapped policy, keeping every state it returns; optionally reloading each one.

    With ``via_json`` every state the engine hands back is first saved and loaded as the
    controller's annotation would be, so the run decides from reloaded states only.
    """

    def __init__(self, policy, *, via_json: bool) -> None:
        self.inner, self.via_json, self.states = policy, via_json, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def decide(self, observation, state):
        if self.via_json:
            state = through_json(self.inner, state)
        decision = self.inner.decide(observation, state)
        self.states.append(decision.state)
        return decision


def flat(result) -> dict[str, object]:
    """A RunResult's fields, its timeline's arrays included (as ``bench/check_sim_equal``)."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(result):
        value = getattr(result, f.name)
        if dataclasses.is_dataclass(value):
            for g in dataclasses.fields(value):
                out[f"{f.name}.{g.name}"] = np.asarray(getattr(value, g.name))
        else:
            out[f.name] = value
    return out


def same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


@pytest.fixture(scope="module")
def prepared():
    request = EvaluationRequest(
        "bursty", policies=registry.names(), scale=2.0, duration_s=1200, seed=3, faults=FAULTS
    )
    return request.prepare()


@pytest.mark.parametrize("name", registry.names())
def test_every_state_of_a_run_round_trips_and_a_run_from_reloaded_states_is_the_same(
    prepared, name
):
    config = prepared.configs[name]
    plain = Capture(build_policy(name, config, prepared.required), via_json=False)
    reloaded = Capture(build_policy(name, config, prepared.required), via_json=True)
    first, second = simulate(prepared.scenario, plain), simulate(prepared.scenario, reloaded)
    assert len(plain.states) == len(reloaded.states) >= 1200 // plain.inner.interval_s - 1
    for state in plain.states:
        assert through_json(plain.inner, state) == state
    assert reloaded.states == plain.states
    a, b = flat(first), flat(second)
    assert [k for k in a if not same(a[k], b[k])] == []
    if name != "static":  # it remembers nothing; every other policy's memory moves
        assert len({json.dumps(s.to_json(), sort_keys=True) for s in plain.states}) > 5


HPA_STATE = HpaState(((0.0, 5), (15.0, 3)), ((0.0, 2),), ((15.0, 1),))
FIT = FittedModel(0.3, 0.01, 0.1, 0.98, 12.5, -0.1, (1.0, -1.0, 0.5), 7, 2.0, 3600.0)
FORECAST = ForecastState(
    900.0, (1.0, 2.5), 3, (5, 3.25, 2), dataclasses.replace(FIT, err=(1.0,) * 5, pending=(8, 0.1))
)
TEMPLATES = {
    "static": (StaticPolicy(2), StaticState()),
    "hpa": (HpaPolicy(), HPA_STATE),
    "keda": (
        KedaPolicy(KedaConfig(threshold=4.0)),
        KedaState(0.0, 30.0, 45.0, 30.0, True, HPA_STATE),
    ),
    "kpa": (KpaPolicy(), KpaState(0.0, 12.0, 7, "inactive", 30.0, True, 40.0)),
    "predictive": (
        PredictivePolicy(),
        PredictiveState(FORECAST, ColdStarts((30.5, 41.0), ("p0",)), ((900.0, 4),), 0.0, 600.0),
    ),
    "hybrid": (
        HybridPolicy(),
        HybridState(
            FORECAST,
            ColdStarts((30.5,), ("p0", "p1")),
            ((900.0, 4),),
            0.0,
            None,
            HealthState(885.0, {"p1": PodHealth(1485.0, "xid 79", 79.0, 0.0, 1e9, 12.0)}),
            {"p1": "xid 79"},
            ((885.0, 12.0, 30.0, 4.0),),
            {"p1": 885.0},
            ("p1",),
            beyond_since=870.0,
        ),
    ),
    "oracle": (OraclePolicy([4] * 100, 30.0), OracleState(3, 20.0, ((20.0, 4.0, 200.0),))),
}
"""Each policy with a state whose every field is set."""


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_a_state_with_every_field_set_round_trips_exactly(name):
    policy, state = TEMPLATES[name]
    data = state.to_json()
    text = json.dumps(data)  # no default=: plain JSON types only
    assert policy.load_state(json.loads(text)) == state
    assert json.loads(text) == data
    assert policy.initial_state() == policy.load_state(policy.initial_state().to_json())


def test_infinite_floats_round_trip_as_floats():
    state = KpaState(created_at=-math.inf, panic_time=math.inf)
    assert through_json(KpaPolicy(), state) == state


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
"""Any value ``json.loads`` can return (unbounded integers and non-finite floats included)."""


def mutated(value: object) -> st.SearchStrategy[object]:
    """``value``'s JSON with any part of it, at any depth, possibly replaced by any JSON."""
    if isinstance(value, dict):
        kept = st.fixed_dictionaries({k: mutated(v) for k, v in value.items()})
    elif isinstance(value, list):
        kept = st.tuples(*(mutated(v) for v in value)).map(list)
    else:
        kept = st.just(value)
    return kept | JSON


@pytest.mark.parametrize("name", list(TEMPLATES))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_loading_any_json_gives_a_state_or_a_state_error_naming_the_key(name, data):
    policy, state = TEMPLATES[name]
    raw = data.draw(mutated(state.to_json()) | JSON)
    try:
        loaded = policy.load_state(raw)
    except StateError as exc:
        message = str(exc)
        assert message.startswith(f"{type(state).__name__} key ")
        assert "\n" not in message
    else:
        assert type(loaded) is type(state)
        assert through_json(policy, loaded) == loaded or _has_nan(loaded.to_json())


def _has_nan(value: object) -> bool:
    if isinstance(value, dict):
        return any(_has_nan(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_nan(v) for v in value)
    return isinstance(value, float) and math.isnan(value)


def test_a_state_error_names_the_key_path_and_not_the_value():
    data = {"hpa": {"recommendations": [[0.0, 3], [15.0, "s3cr3t"]]}}
    with pytest.raises(StateError) as info:
        KedaPolicy(KedaConfig(threshold=4.0)).load_state(data)
    assert str(info.value) == (
        "KedaState key hpa.recommendations.1.1: Input should be a valid integer, "
        "unable to parse string as an integer"
    )


# ------------------------------------------------------------------ essential()

READY = tuple(PodStatus(f"p{i}", True, -1000.0, -900.0) for i in range(8))


def hpa_at(now: float, replicas: int, total_util: float) -> Observation:
    pods = READY[:replicas]
    util = {p.name: total_util / replicas for p in pods}
    return Observation(now, TargetStatus(replicas, pods), {"DCGM_FI_DEV_GPU_UTIL": util})


def essentials(policy, observations) -> tuple[list[str], list[str], int]:
    """(essential() of each decision, to_json() of each, the last decision's replicas)."""
    state, kept, whole, replicas = policy.initial_state(), [], [], None
    for make in observations:
        decision = policy.decide(make(replicas), state)
        state, replicas = decision.state, decision.replicas
        kept.append(json.dumps(state.essential(), sort_keys=True))
        whole.append(json.dumps(state.to_json(), sort_keys=True))
    return kept, whole, replicas


@pytest.mark.parametrize("behavior", [None, DEFAULT_BEHAVIOR], ids=["legacy", "behavior"])
def test_hpa_essential_state_is_unchanged_under_steady_load(behavior):
    # 200 % of GPU utilisation over 4 pods at a 50 % target: the recommendation is 4 at
    # every sync. Only the newest recommendation's time moves.
    policy = HpaPolicy(HpaConfig(target_average_value=50.0, behavior=behavior))
    steps = [lambda r, t=15.0 * i: hpa_at(t, r or 4, 200.0) for i in range(40)]
    kept, whole, replicas = essentials(policy, steps)
    assert replicas == 4
    assert len(set(kept)) == 1
    assert len(set(whole)) == 40
    assert json.loads(kept[-1])["recommendations"] == [[None, 4]]


def test_hpa_essential_state_settles_once_a_scale_in_leaves_the_window():
    # From 8 replicas the steady load asks for 4: the initial recommendation (8) holds the
    # count for the 300 s window, then the HPA scales in and the state stops changing.
    policy = HpaPolicy(HpaConfig(target_average_value=50.0))
    steps = [lambda r, t=15.0 * i: hpa_at(t, r or 8, 200.0) for i in range(60)]
    kept, _, replicas = essentials(policy, steps)
    assert replicas == 4
    scaled_in = 21  # the sync at 315 s, the first past the window
    before, after = set(kept[:scaled_in]), set(kept[scaled_in:])
    assert [json.loads(k)["recommendations"] for k in before] == [[[0.0, 8], [None, 4]]]
    assert [json.loads(k)["recommendations"] for k in after] == [[[None, 4]]]


def keda_at(now: float, replicas: int, value: float) -> Observation:
    series = {"query_0": ((now - 15.0, value), (now, value)), "query_1": ((now, 0.0),)}
    return Observation(now, TargetStatus(replicas, READY[:replicas]), series=series)


def test_keda_essential_state_is_unchanged_under_steady_load():
    # 8 requests at a threshold of 4 keep 2 replicas: active at every poll, the HPA's
    # recommendation 2 at every sync; only the loops' times move.
    policy = KedaPolicy(KedaConfig(threshold=4.0))
    kept, whole, replicas = essentials(
        policy, [lambda r, t=15.0 * i: keda_at(t, r or 2, 8.0) for i in range(40)]
    )
    assert replicas == 2
    assert len(set(kept)) == 1
    assert len(set(whole)) == 40
    essential = json.loads(kept[-1])
    assert (essential["last_poll"], essential["last_hpa"], essential["active"]) == (
        True,
        True,
        True,
    )


def test_keda_essential_state_changes_when_the_trigger_goes_idle():
    # The poll that finds no load flips ``active``: the state written then holds the last
    # active time, which the cooldown counts from.
    policy = KedaPolicy(KedaConfig(threshold=4.0))
    values = [8.0] * 4 + [0.0] * 4
    steps = [lambda r, t=15.0 * i, v=v: keda_at(t, r or 2, v) for i, v in enumerate(values)]
    kept, _, _ = essentials(policy, steps)
    assert kept[3] != kept[4]
    assert json.loads(kept[4])["active"] is False


def kpa_at(now: float, replicas: int, concurrency: float) -> Observation:
    points = tuple((now - 59.0 + i, concurrency) for i in range(60))
    series = {"concurrency": points, "queue": tuple((t, 0.0) for t, _ in points)}
    return Observation(now, TargetStatus(replicas, READY[:replicas]), series=series)


def test_kpa_essential_state_is_unchanged_under_steady_load_in_and_out_of_panic():
    policy = KpaPolicy()
    # One Ready pod, 30 requests at a target of 70 x 0.7 = 49 per pod: one pod, no panic.
    stable = [lambda r, t=2.0 * i: kpa_at(t, r or 1, 30.0) for i in range(40)]
    kept, _, replicas = essentials(policy, stable)
    assert replicas == 1
    assert len(set(kept)) == 1
    assert json.loads(kept[-1])["panic_time"] is None
    # A decider created with 4 Ready pods starts in panic and, at a steady load over the
    # panic threshold, extends it at every tick: ``panic_time`` moves, its essence does not.
    panicked = [lambda r, t=2.0 * i: kpa_at(t, 4, 600.0) for i in range(20)]
    kept, whole, _ = essentials(policy, panicked)
    assert json.loads(kept[-1])["panic_time"] is True
    assert len(set(kept)) == 1
    assert len(set(whole)) == 20


def test_static_essential_state_is_always_empty():
    policy = StaticPolicy(3)
    kept, _, _ = essentials(policy, [lambda r, t=60.0 * i: hpa_at(t, 3, 0.0) for i in range(5)])
    assert set(kept) == {"{}"}


def test_predictive_hybrid_and_oracle_essential_state_moves_at_every_decision():
    # The forecaster's open bucket adds each decision's points, and the oracle counts the
    # pods created since its last decision's time: none of it is mere time-keeping.
    def demand_at(now, replicas):
        points = tuple((now - 600.0 + 15.0 * i, 5.0) for i in range(41))
        series = dict.fromkeys(DEMAND_METRICS, points)
        return Observation(now, TargetStatus(replicas or 2, READY[: replicas or 2]), series=series)

    for policy in (PredictivePolicy(), HybridPolicy()):
        steps = [lambda r, t=600.0 + 15.0 * i: demand_at(t, r) for i in range(12)]
        kept, _, _ = essentials(policy, steps)
        assert len(set(kept)) == 12
    oracle = OraclePolicy([4] * 200, 30.0)
    kept, _, _ = essentials(
        oracle, [lambda r, t=5.0 * i: Observation(t, TargetStatus(r or 0)) for i in range(12)]
    )
    assert len(set(kept)) == 12


# ------------------------------------------------------------------ prune


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 30), st.integers(0, 9)), min_size=1, max_size=25),
    st.sampled_from([0.0, 15.0, 60.0, 300.0]),
    st.sampled_from([None, 0.0, 30.0, 300.0]),
    st.lists(st.floats(0.0, 400.0), min_size=1, max_size=5),
)
def test_pruned_recommendations_give_every_later_window_the_same_extremes(
    steps, high_s, low_s, later
):
    # Times advance by 1..30 s; each later sync reads the highest over (now - high_s, now]
    # and the lowest over (now - low_s, now], as the HPA's stabilisation does.
    recs, t = [], 0.0
    for gap, r in steps:
        t += gap
        recs.append((t, r))
    kept = prune(recs, t, highest_s=high_s, lowest_s=low_s)
    assert kept[-1] == recs[-1]
    assert list(kept) == sorted(kept)
    for wait in later:
        now = t + wait
        for window, pick in ((high_s, max), (low_s, min)):
            if window is None:
                continue
            full = [r for s, r in recs if s > now - window]
            some = [r for s, r in kept if s > now - window]
            assert (pick(full) if full else None) == (pick(some) if some else None)


def test_a_steady_recommendation_is_one_entry():
    recs = [(15.0 * i, 4) for i in range(20)]
    assert prune(recs, 285.0, highest_s=300.0, lowest_s=None) == ((285.0, 4),)
    assert prune(recs, 285.0, highest_s=300.0, lowest_s=0.0) == ((285.0, 4),)
