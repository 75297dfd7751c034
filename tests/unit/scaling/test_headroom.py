"""The learned headroom floor (``scaling.headroom``) and hybrid's use of it when told its
target attainment (``HybridConfig.target_attainment``)."""

import dataclasses
import math
from functools import partial

import pytest

from gpuscale.errors import ConfigError
from gpuscale.scaling import headroom, hybrid
from gpuscale.scaling.hybrid import HybridConfig, HybridPolicy, HybridState
from gpuscale.scaling.policy import Observation, PodStatus, TargetStatus
from gpuscale.scaling.predictive import DEMAND_METRICS, per_replica_sizing
from tests.support.policystate import through_json
from tests.support.series import idle

IN_FLIGHT, QUEUE = DEMAND_METRICS
STEP_S = 15.0


def flat_then(level: float, burst: float, n: int = 60, burst_at: int = 56) -> tuple:
    """``n`` points 15 s apart from t = 0: ``level``, then ``burst`` from point ``burst_at``."""
    return tuple((STEP_S * i, burst if i >= burst_at else level) for i in range(n))


def test_a_burst_ratio_is_the_last_windows_peak_over_the_mean_before_it():
    points = flat_then(10.0, 60.0)
    ratio, peak, base = headroom.burst_ratio(points, STEP_S * 59, 60.0, 600.0)
    assert (ratio, peak, base) == (pytest.approx(6.0), 60.0, 10.0)


def test_a_burst_is_measured_against_the_level_one_lead_time_before():
    # A crowd that rises over its first minute: 10, then 20, 30, 40, 50, then 60 from
    # point 60 on. Read at point 63, a baseline ending where the burst window starts
    # takes in the rise and reads it lower; one ending a lead time (240 s) before reads
    # the level capacity asked for then was sized at.
    rise = {56: 20.0, 57: 30.0, 58: 40.0, 59: 50.0}
    points = tuple((STEP_S * i, 60.0 if i >= 60 else rise.get(i, 10.0)) for i in range(64))
    adjacent, _, _ = headroom.burst_ratio(points, STEP_S * 63, 60.0, 600.0)
    ratio, burst, base = headroom.burst_ratio(points, STEP_S * 63, 60.0, 600.0, lead_s=240.0)
    assert (ratio, burst, base) == (pytest.approx(6.0), 60.0, 10.0)
    assert adjacent < ratio
    # A lead shorter than the burst window changes nothing.
    assert headroom.burst_ratio(points, STEP_S * 63, 60.0, 600.0, lead_s=30.0)[0] == adjacent
    # The level the floor scales is read the same lead back: the crowd's start, not its rise.
    assert headroom.level(points, STEP_S * 63, 60.0, 600.0, lead_s=240.0) == pytest.approx(10.0)


def test_no_ratio_until_the_baseline_window_is_covered_or_while_it_is_empty():
    short = flat_then(
        10.0, 60.0, n=20, burst_at=16
    )  # 285 s of history: < 300 s before the burst window
    assert headroom.burst_ratio(short, STEP_S * 19, 60.0, 600.0) is None
    idle = flat_then(0.0, 5.0)
    assert headroom.burst_ratio(idle, STEP_S * 59, 60.0, 600.0) is None


def test_the_quantile_is_request_weighted_and_read_within_its_bin():
    weights: tuple[float, ...] = ()
    for _ in range(98):
        weights = headroom.record(weights, 1.0, 10.0)  # quiet windows: 980 requests
    weights = headroom.record(weights, 6.0, 60.0)  # one burst window: 60 requests
    # The burst holds 60 of 1040 requests (5.8 %): at 0.9 the quiet ratio is enough, at
    # 0.99 the burst's bin (6 lies in (2^(20/8), 2^(21/8)] = (5.66, 6.17]), read where
    # 0.99 of the weight falls in it: 49.6 of its 60, log-linearly between its edges.
    assert headroom.quantile(weights, 0.9) == 1.0
    assert headroom.quantile(weights, 0.99) == pytest.approx(2 ** ((20 + 49.6 / 60) / 8))
    assert 2 ** (20 / 8) < headroom.quantile(weights, 0.99) < 2 ** (21 / 8)
    assert headroom.quantile((), 0.99) is None
    assert headroom.record((), 1000.0, 1.0)[-1] == 1.0  # beyond 32: the last bin


def test_the_floor_is_the_quantile_ratio_times_the_level_per_replica():
    weights = headroom.record((), 3.0, 1.0)  # bin (2^(12/8), 2^(13/8)] = (2.83, 3.08]
    two = per_replica_sizing(2.0)
    assert headroom.floor_replicas(weights, 0.99, 10.0, two) == 16  # ceil(3.08 x 10 / 2)
    assert headroom.floor_replicas((), 0.99, 10.0, two) == 0
    assert headroom.floor_replicas(weights, 0.99, None, two) == 0


def test_the_demand_quantile_is_request_weighted_and_read_within_its_bin():
    levels: tuple = ()
    for _ in range(98):
        levels = headroom.record_level(levels, 10.0, 10.0)  # 980 requests at 10
    levels = headroom.record_level(levels, 60.0, 60.0)  # 60 requests at 60
    # 10 lies in (2^(26/8), 2^(27/8)] = (9.51, 10.37], where 936 of its 980 fall at 0.9;
    # 60 in (2^(47/8), 2^6] = (58.7, 64], where 49.6 of its 60 fall at 0.99.
    assert headroom.level_quantile(levels, 0.9) == pytest.approx(2 ** ((26 + 936 / 980) / 8))
    assert headroom.level_quantile(levels, 0.99) == pytest.approx(2 ** ((47 + 49.6 / 60) / 8))
    assert headroom.level_quantile((), 0.99) is None
    assert headroom.record_level(levels, 0.0, 5.0) == levels  # no demand, nothing recorded


def test_forgetting_halves_every_weight_and_drops_bins_that_no_longer_count():
    assert headroom.forget((4.0, 2.0), 0.5) == (2.0, 1.0)
    levels = ((1, 1e-7), (30, 1.0))
    assert headroom.forget_levels(levels, 0.5) == ((30, 0.5),)


def test_late_share_is_erlangs_delay_formula():
    # Two erlangs on three servers: Erlang C is 4/9 (the textbook case); a request that
    # waits, waits past t with chance exp(-(3 - 2) t / s).
    assert headroom.late_share(3, 2.0, 1.0, 0.0) == pytest.approx(4 / 9)
    assert headroom.late_share(3, 2.0, 1.0, 2.0) == pytest.approx(4 / 9 * math.exp(-2.0))
    assert headroom.late_share(2, 2.0, 1.0, 5.0) == 1.0  # no more servers than load


@pytest.mark.parametrize(
    ("load", "wait_s", "miss"), [(2.0, 0.0, 0.5), (100.0, 3.0, 0.01), (5e3, 0.5, 0.01)]
)
def test_slots_for_is_the_fewest_slots_within_the_miss(load, wait_s, miss):
    n = headroom.slots_for(load, 1.0, wait_s, miss)
    assert headroom.late_share(n, load, 1.0, wait_s) <= miss
    assert headroom.late_share(n - 1, load, 1.0, wait_s) > miss
    assert headroom.slots_for(0.0, 1.0, wait_s, miss) == 0


def test_the_floor_is_capped_by_the_demand_quantile():
    # A ratio of 6 read from a quiet level, applied while the level is still 40 after
    # the burst: 6.17 x 40 = 247 in flight, but no more than the 60 the demand reached
    # is held.
    weights = headroom.record((), 6.0, 1.0)  # one window: the multiple is its bin's 6.17
    ten = per_replica_sizing(10.0)
    assert headroom.floor_replicas(weights, 0.99, 40.0, ten) == 25
    assert headroom.floor_replicas(weights, 0.99, 40.0, ten, cap=64.0) == 7
    # Staffed from a pod's slots: 64 in flight of 1 s, 4 slots a pod, a 3 s wait.
    staffed = headroom.floor_replicas(
        weights,
        0.99,
        40.0,
        partial(headroom.staffed_replicas, staffing=(4.0, 1.0, 3.0), share=0.99),
        cap=64.0,
    )
    assert staffed == math.ceil(headroom.slots_for(64.0, 1.0, 3.0, 0.01) / 4.0)


CFG = HybridConfig(per_replica=10.0, stabilization_window_s=0.0, scale_down_percent=100.0)


def decide_after_a_burst(
    cfg: HybridConfig, started_at: float = -86_400.0
) -> tuple[int, HybridState, HybridPolicy]:
    """A quiet 10 in flight for ten minutes, one 6x burst window, and later quiet again.

    The first decision sees 60 in flight after 600 s at 10 (its kept ``offered``
    demand) and three burst samples; the second, 20 minutes on, 10 after 600 s at 10.
    The policy's first decision was at ``started_at`` (by default a day before: history
    enough to read the floor's quantile).
    """
    policy = HybridPolicy(cfg)
    pods = tuple(PodStatus(f"p{i}", True, -1000.0, -1000.0) for i in range(6))
    now = STEP_S * 59
    before = tuple((t, 10.0 if i < 56 else 60.0) for i, (t, _) in enumerate(flat_then(0, 0)))
    burst = flat_then(60.0, 60.0)
    state = HybridState(started_at=started_at, offered=before[:-1])
    obs = Observation(now, TargetStatus(6, pods), {}, {IN_FLIGHT: burst, QUEUE: idle(burst)})
    state = policy.decide(obs, state).state
    later = now + 1200.0
    quiet = tuple((t + 1200.0, 10.0) for t, _ in flat_then(10.0, 10.0))
    state = dataclasses.replace(state, offered=quiet[:-1] if state.offered else ())
    obs = Observation(later, TargetStatus(6, pods), {}, {IN_FLIGHT: quiet, QUEUE: idle(quiet)})
    decision = policy.decide(obs, state)
    return decision.replicas, decision.state, policy


def test_told_its_target_hybrid_holds_the_headroom_its_history_calls_for():
    replicas, state, policy = decide_after_a_burst(
        HybridConfig(**{**_fields(CFG), "target_attainment": 0.99})
    )
    # The burst window's ratio (6) holds its 60 requests, the quiet one's (1) 10: 60 of
    # 70 requests, so at 0.99 the floor reads 6.17 x 10 in flight / 10 per replica -> 7
    # (under the cap: the demand quantile, the burst's 60 in its bin (58.7, 64]).
    assert replicas == 7
    # The burst's weight decayed over the 15 s to the next decision, at half a day.
    decay = 0.5 ** (STEP_S / 86_400.0)
    assert sum(state.bursts) == pytest.approx(60.0 * decay + 10.0)
    assert sum(w for _, w in state.levels) == pytest.approx(60.0 * decay + 10.0)
    assert through_json(policy, state) == state


def test_the_floor_is_read_only_from_a_hundred_burst_windows_at_099():
    # The next of n windows tops them all with chance about 1 / (n + 1).
    assert headroom.history_to_read_s(60.0, 0.99) == pytest.approx(6000.0)
    assert headroom.history_to_read_s(60.0, 0.95) == pytest.approx(1200.0)


def test_a_young_policy_records_its_bursts_but_holds_no_floor_until_it_can_read_it():
    cfg = HybridConfig(**{**_fields(CFG), "target_attainment": 0.99})
    last = STEP_S * 59 + 1200.0  # the second decision
    young, state, _ = decide_after_a_burst(cfg, started_at=0.0)
    # Recorded as the day-old policy records it, but 2085 s of history read no 0.99
    # quantile: the load alone (as untold, below) holds the fleet.
    assert sum(state.bursts) == pytest.approx(60.0 * 0.5 ** (STEP_S / 86_400.0) + 10.0)
    assert young <= 2
    read_from = headroom.history_to_read_s(cfg.burst_window_s, 0.99)
    assert decide_after_a_burst(cfg, started_at=last - read_from)[0] == 7
    assert decide_after_a_burst(cfg, started_at=last - read_from + STEP_S)[0] <= 2


def test_without_a_target_hybrid_learns_nothing_and_scales_to_the_load():
    replicas, state, _ = decide_after_a_burst(CFG)
    assert state.bursts == ()
    # 10 in flight at 10 per replica: 1, or 2 where the forecast's upper quantile of a
    # flat 10 lies above 10; nowhere near the 7 the burst's history called for above
    assert replicas <= 2


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("target_attainment", 1.0),
        ("target_attainment", 0.0),
        ("burst_window_s", 0.0),
        ("burst_memory_s", 0.0),
        ("pod_concurrency", 0),
    ],
)
def test_bad_floor_settings_are_config_errors(key, value):
    with pytest.raises(ConfigError, match=key):
        HybridConfig(**{key: value})


def test_the_kept_demand_spans_only_the_burst_and_baseline_windows():
    _, state, _ = decide_after_a_burst(HybridConfig(**{**_fields(CFG), "target_attainment": 0.99}))
    times = [t for t, _ in state.offered]
    now = STEP_S * 59 + 1200.0
    assert times[-1] == now
    assert min(times) > now - 660.0  # the 60 s burst window and the 600 s baseline
    assert len(times) == 44  # 15 s apart


def _fields(cfg: HybridConfig) -> dict:
    return {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}


def test_the_arrival_rate_is_the_counters_newest_rise_over_its_interval():
    assert hybrid.arrival_rate(((0.0, 100.0), (15.0, 400.0))) == pytest.approx(20.0)
    assert hybrid.arrival_rate(((0.0, 400.0), (15.0, 10.0))) is None  # a reset
    assert hybrid.arrival_rate(((15.0, 400.0),)) is None
    assert hybrid.arrival_rate(None) is None


def test_a_pods_slots_are_the_most_seen_in_service_per_ready_pod_while_requests_queue():
    busy, queued, quiet = ((0.0, 8.0),), ((0.0, 5.0),), ((0.0, 0.0),)
    assert hybrid.pod_slots(0.0, busy, queued, 2) == 4.0
    assert hybrid.pod_slots(0.0, busy, quiet, 2) == 0.0  # nothing queues: slots unknown
    assert hybrid.pod_slots(6.0, busy, queued, 2) == 6.0  # fewer seen: the most stands
    assert hybrid.pod_slots(3.0, busy, None, 2) == 3.0
    # fewer in service than Ready pods: a pod serves at least one request at a time
    assert hybrid.pod_slots(0.0, ((0.0, 1.0),), ((0.0, 1.0),), 3) == 1.0
    assert hybrid.pod_slots(0.0, ((0.0, 2.2e-311),), ((0.0, 2.2e-311),), 1) == 1.0


def test_a_configured_concurrency_is_a_pods_slots_and_a_lone_queued_request_cannot_lower_it():
    # 20 in service on 15 Ready four-slot pods while one request waits: the pods are not
    # full, yet the queue reads their slots as 20 / 15; the server's own setting is the answer.
    pods = tuple(PodStatus(f"p{i}", True, -1000.0, -1000.0) for i in range(15))
    busy, queued = flat_then(20.0, 20.0), flat_then(1.0, 1.0)
    obs = Observation(STEP_S * 59, TargetStatus(15, pods), {}, {IN_FLIGHT: busy, QUEUE: queued})
    told = HybridConfig(**{**_fields(CFG), "target_attainment": 0.99})
    read = HybridPolicy(told).decide(obs, HybridState()).state.slots
    assert read == pytest.approx(20.0 / 15.0)
    configured = HybridPolicy(dataclasses.replace(told, pod_concurrency=4))
    state = configured.decide(obs, HybridState()).state
    assert state.slots == 4.0
    assert through_json(configured, state) == state
    # fewer in service than Ready pods reads one slot a pod, never less
    few = Observation(
        STEP_S * 59, TargetStatus(15, pods), {}, {IN_FLIGHT: flat_then(6.0, 6.0), QUEUE: queued}
    )
    assert HybridPolicy(told).decide(few, HybridState()).state.slots == 1.0


def test_staffed_replicas_hold_the_fewest_slots_over_a_pods_slots():
    # 100 requests in service of 1 s on pods of 4 slots, a 3 s wait, 1 % allowed late:
    # the fewest slots within the miss, in whole pods; more slots a pod, fewer pods.
    slots = headroom.slots_for(100.0, 1.0, 3.0, 0.01)
    assert headroom.staffed_replicas(100.0, (4.0, 1.0, 3.0), 0.99) == math.ceil(slots / 4)
    assert headroom.staffed_replicas(100.0, (1.0, 1.0, 3.0), 0.99) == slots
    # The scatter of a large load needs a smaller share of it: square-root staffing.
    big = headroom.slots_for(10_000.0, 1.0, 0.0, 0.01)
    assert (big - 10_000) / 10_000 < (headroom.slots_for(100.0, 1.0, 0.0, 0.01) - 100) / 100


STAFFED = partial(headroom.staffed_replicas, staffing=(4.0, 1.0, 3.0), share=0.99)
"""Pods of 4 slots serving 1 s requests that may wait 3 s, 1 % allowed late."""


def test_with_a_sizing_the_reactive_need_staffs_the_load_and_reads_what_arrives():
    pods = tuple(PodStatus(f"p{i}", True, 0.0, 0.0) for i in range(4))
    obs = Observation(600.0, TargetStatus(4, pods), {}, {})
    points = ((585.0, 40.0), (600.0, 40.0))
    assert hybrid.reactive_need(obs, points, {}, CFG, None)[0] == 4  # 40 / 10 per replica
    assert hybrid.reactive_need(obs, points, {}, CFG, None, STAFFED)[0] == STAFFED(40.0)
    # Requests that time out in the queue leave the count in service short of what
    # arrives: the offered load, where higher, is what is staffed.
    need, note = hybrid.reactive_need(obs, points, {}, CFG, None, STAFFED, offered=100.0)
    assert need == STAFFED(100.0) > STAFFED(40.0)
    assert "demand 100.00" in note


def test_with_a_sizing_the_plan_and_the_scale_in_guard_staff_their_load():
    pods = tuple(PodStatus(f"p{i}", True, 0.0, 0.0) for i in range(12))
    points = tuple((STEP_S * i, 40.0) for i in range(60))
    now = points[-1][0]
    obs = Observation(now, TargetStatus(12, pods), {}, {})
    planned, _, _, _, bound = hybrid.plan(obs, points, HybridState(), CFG, size=STAFFED)
    assert planned == STAFFED(bound.upper)
    per_replica, *_ = hybrid.plan(obs, points, HybridState(), CFG)
    assert per_replica == math.ceil(bound.upper / CFG.per_replica - 1e-9)
    # Scaling in from 12 to 1 stops where the observed peak's staffing does.
    kept, _, note = hybrid.agree(1, 12, points, now, CFG, -1e6, size=STAFFED)
    assert kept == STAFFED(40.0)
    assert "observed peak needs" in note


def test_a_ceiling_bounds_the_demand_the_plan_is_sized_for():
    # A steep rise: the trend's bound one horizon ahead lies well above the 60 the
    # history calls for, so the plan holds 60's replicas, not the trend's.
    pods = tuple(PodStatus(f"p{i}", True, 0.0, 0.0) for i in range(6))
    points = tuple((STEP_S * i, 10.0 + 1.0 * i) for i in range(60))
    now = points[-1][0]
    obs = Observation(now, TargetStatus(6, pods), {}, {})
    free, _, _, _, bound = hybrid.plan(obs, points, HybridState(), CFG)
    assert bound.upper > 60.0
    assert free == math.ceil(bound.upper / CFG.per_replica - 1e-9)
    capped, why, *_ = hybrid.plan(obs, points, HybridState(), CFG, ceiling=60.0)
    assert capped == 6
    assert "capped at 60.00" in why
    # A ceiling above the bound changes nothing.
    assert hybrid.plan(obs, points, HybridState(), CFG, ceiling=1e6)[0] == free


def test_the_highest_ratio_recorded_is_its_bins_upper_edge():
    assert headroom.highest(()) is None
    weights = headroom.record(headroom.record((), 1.0, 5.0), 1.3, 0.001)
    assert headroom.highest(weights) == pytest.approx(2.0**0.5)  # 1.3 is in (1.297, 1.414]
    assert headroom.highest(headroom.forget(weights, 0.0)) is None


def beyond_history() -> HybridState:
    """A day of a steady 10 with rises of 1.3 x at most (2 % of the requests)."""
    bursts = headroom.record(headroom.record((), 1.0, 100_000.0), 1.3, 2_000.0)
    levels = headroom.record_level(headroom.record_level((), 10.0, 100_000.0), 40.0, 2_000.0)
    return HybridState(bursts=bursts, levels=levels)


def offered(now: float, level: float, since: float, before: float) -> tuple:
    """The kept load, 15 s apart up to ``now`` (excluded): ``before``, ``level`` from ``since``."""
    return tuple(
        (t, level if t >= since else before) for t in (now - STEP_S * i for i in range(60, 0, -1))
    )


FLOOR_CFG = HybridConfig(per_replica=1.0, target_attainment=0.99)


def test_a_rise_beyond_every_recorded_ratio_measures_the_usual_headroom_from_the_load_now():
    # The load returns at once from 10 to 30 (a 3 x rise; history shows 1.3 x at most,
    # read at 0.99 as 1.35 in its bin (1.30, 1.41]). The floor's level is still the
    # baseline's 10 (1.35 x 10 -> 14 replicas), which the load has left: the usual ratio
    # is applied to the load now, 1.35 x 30 = 40.6, capped by the demand history reaches
    # at 0.99 (39.7 in 40's bin (38.1, 41.5]) -> 40 replicas.
    now = 3600.0
    state = dataclasses.replace(beyond_history(), offered=offered(now, 30.0, now - 45.0, 10.0))
    got = hybrid.learned_floor(30.0, FLOOR_CFG, state, now, lead_s=240.0)
    assert got.beyond == now
    assert got.replicas == 40
    level = headroom.level(got.offered, now, 60.0, 600.0, 240.0)
    assert level == 10.0
    ordinary = headroom.floor_replicas(got.bursts, 0.99, level, per_replica_sizing(1.0), got.cap)
    assert ordinary == 14
    assert "rise beyond its recorded bursts since 3600 s" in got.note
    # Ten minutes on, the baseline has caught up (a ratio of 1, within the usual 1.35): the
    # rise is over, and the ordinary floor (1.35 x 30, capped) holds the same 40.
    later = now + 840.0
    settled = dataclasses.replace(got_state(got), offered=offered(later, 30.0, 0.0, 30.0))
    after = hybrid.learned_floor(30.0, FLOOR_CFG, settled, later, lead_s=240.0)
    assert after.beyond is None
    assert after.replicas == 40
    assert after.note == ""


def got_state(floor: hybrid.Floor) -> HybridState:
    """The state a decision keeps from ``learned_floor``'s answer."""
    return HybridState(
        bursts=floor.bursts,
        levels=floor.levels,
        offered=floor.offered,
        onsets=floor.onsets,
        beyond_since=floor.beyond,
    )


def test_a_rise_within_the_recorded_ratios_keeps_the_floor_on_its_baseline():
    now = 3600.0
    state = dataclasses.replace(beyond_history(), offered=offered(now, 13.0, now - 45.0, 10.0))
    got = hybrid.learned_floor(13.0, FLOOR_CFG, state, now, lead_s=240.0)
    assert got.beyond is None
    assert got.replicas == 14  # 1.35 x the baseline's 10
    # A state that was beyond keeps its time while the rise stands above every recorded ratio.
    was = dataclasses.replace(beyond_history(), offered=offered(now, 30.0, now - 45.0, 10.0))
    still = hybrid.learned_floor(
        30.0, FLOOR_CFG, dataclasses.replace(was, beyond_since=3000.0), now, lead_s=240.0
    )
    assert still.beyond == 3000.0


def test_the_time_a_rise_went_beyond_its_history_is_kept_in_the_state():
    state = dataclasses.replace(beyond_history(), beyond_since=3600.0)
    assert through_json(HybridPolicy(FLOOR_CFG), state) == state
    assert HybridPolicy(FLOOR_CFG).load_state({}).beyond_since is None  # an older state


def test_once_beyond_the_floor_stays_on_the_load_now_until_the_ratio_is_back_within_its_quantile():
    # History with a rare 1.9 x rise (0.1 % of the requests): the highest ratio 2.0, the
    # quantile at 0.99 still in 1.3's bin (1.36). A 1.7 x rise lies between them.
    bursts = headroom.record(beyond_history().bursts, 1.9, 100.0)
    history = dataclasses.replace(beyond_history(), bursts=bursts)
    now = 3600.0

    def floor(burst: float, since: float | None) -> hybrid.Floor:
        kept = offered(now, burst, now - 45.0, 10.0)
        state = dataclasses.replace(history, offered=kept, beyond_since=since)
        return hybrid.learned_floor(burst, FLOOR_CFG, state, now, lead_s=240.0)

    # Not beyond before: a rise within the recorded range starts nothing (1.36 x 10 -> 14).
    assert floor(17.0, None).beyond is None
    assert floor(17.0, None).replicas == 14
    # Beyond since 3000 s: above the quantile it stays, measured from the load now
    # (1.36 x 17 = 23.1 -> 24 replicas); back within the quantile (1.3 x) it clears.
    assert floor(17.0, 3000.0).beyond == 3000.0
    assert floor(17.0, 3000.0).replicas == 24
    assert floor(13.0, 3000.0).beyond is None
    assert floor(13.0, 3000.0).replicas == 14


def test_the_lead_share_keeps_the_longest_wait_of_the_lead_within_the_budget():
    # 240 s until new capacity serves, 80 s a request may wait: 3/4 of the burst stands.
    share = headroom.lead_share(240.0, 80.0)
    assert share == pytest.approx(0.75)
    # A burst of 40 served by 30 meanwhile: the queue grows at 10 for 240 s, and the
    # last request of the lead waits 2400 / 30 = 80 s, the budget.
    burst = 40.0
    standing = burst * share
    assert (burst - standing) * 240.0 / standing == pytest.approx(80.0)
    assert headroom.lead_share(240.0, 0.0) == 1.0  # no wait: the whole burst
    assert headroom.lead_share(0.0, 80.0) == 1.0  # no lead known: the whole burst


def test_the_floor_holds_the_share_of_a_burst_its_requests_cannot_wait_out():
    # The threefold return of the test above (40 replicas told no wait): its requests
    # may wait 80 s of the 240 s lead, so 3/4 of the floor's demand (39.7 x 0.75) stands.
    now = 3600.0
    state = dataclasses.replace(beyond_history(), offered=offered(now, 30.0, now - 45.0, 10.0))
    waiting = dataclasses.replace(FLOOR_CFG, wait_budget_s=80.0)
    told = hybrid.learned_floor(30.0, waiting, state, now, lead_s=240.0)
    assert told.cap is not None
    assert told.replicas == math.ceil(told.cap * 0.75 - 1e-9) == 30
    # The ordinary floor too: 1.35 x the baseline's 10 at 3/4 -> 11, not 14.
    within = dataclasses.replace(beyond_history(), offered=offered(now, 13.0, now - 45.0, 10.0))
    assert hybrid.learned_floor(13.0, waiting, within, now, lead_s=240.0).replicas == 11
    # Without a lead the burst window alone stands for the time capacity takes: all of it.
    assert hybrid.learned_floor(30.0, waiting, state, now).replicas == 40
