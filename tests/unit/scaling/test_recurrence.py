"""Bursts on a period (``scaling.recurrence``) and hybrid's floor standing down between them."""

import dataclasses

import pytest

from gpuscale.scaling import headroom, hybrid, recurrence
from gpuscale.scaling.hybrid import HybridConfig, HybridPolicy, HybridState
from gpuscale.scaling.policy import Decision, Observation, PodStatus, TargetStatus
from gpuscale.scaling.predictive import DEMAND_METRICS
from tests.support.series import idle

IN_FLIGHT, QUEUE = DEMAND_METRICS


def test_an_onset_is_half_the_demand_the_floor_holds_for():
    assert recurrence.onset_threshold(6.0, 120.0) == 60.0
    assert recurrence.onset_threshold(1.2, 120.0) is None  # the floor holds little
    assert recurrence.onset_threshold(None, 120.0) is None
    assert recurrence.onset_threshold(6.0, None) is None


def test_an_onset_is_recorded_where_the_demand_rises_through_the_threshold():
    assert recurrence.record_onset((), 100.0, 4.0, 2.0, 3.5, 600.0) == (100.0,)
    assert recurrence.record_onset((), 100.0, 4.0, None, 3.5, 600.0) == (100.0,)
    # Still above from the decision before: the same burst.
    assert recurrence.record_onset((), 100.0, 4.0, 3.6, 3.5, 600.0) == ()
    assert recurrence.record_onset((), 100.0, 3.0, 2.0, 3.5, 600.0) == ()  # below
    assert recurrence.record_onset((), 100.0, None, 2.0, 3.5, 600.0) == ()
    assert recurrence.record_onset((), 100.0, 4.0, 2.0, None, 600.0) == ()
    # Noise about the threshold within one burst is not a second one.
    assert recurrence.record_onset((0.0,), 300.0, 4.0, 2.0, 3.5, 600.0) == (0.0,)
    # A crossing on a falling load (a slow burst's tail, below the baseline it fell
    # from) is no onset; one above its baseline is, and unknown is not judged.
    assert recurrence.record_onset((), 100.0, 4.0, 2.0, 3.5, 600.0, ratio=0.7) == ()
    assert recurrence.record_onset((), 100.0, 4.0, 2.0, 3.5, 600.0, ratio=1.0) == ()
    assert recurrence.record_onset((), 100.0, 4.0, 2.0, 3.5, 600.0, ratio=1.4) == (100.0,)
    assert recurrence.record_onset((), 100.0, 4.0, 2.0, 3.5, 600.0, ratio=None) == (100.0,)
    # The reading that first gives the floor a burst to time (no threshold stood at
    # the decision before) is the first burst's rise, wherever the demand before stood.
    assert recurrence.record_onset((), 100.0, 4.0, 3.6, 3.5, 600.0, newly_timed=True) == (100.0,)
    assert recurrence.record_onset((), 100.0, 3.0, 2.0, 3.5, 600.0, newly_timed=True) == ()
    many = tuple(float(t) for t in range(0, 9000, 900))
    kept = recurrence.record_onset(many, 9000.0, 4.0, 2.0, 3.5, 600.0)
    assert len(kept) == recurrence.MAX_ONSETS
    assert kept[-1] == 9000.0


def test_the_period_is_the_mean_interval_when_the_last_ones_agree():
    onsets = (0.0, 1790.0, 3600.0, 5400.0)
    assert recurrence.period(onsets, 3, 60.0) == pytest.approx(1800.0)
    assert recurrence.period(onsets, 4, 60.0) is None  # too few intervals
    assert recurrence.period(onsets, 0, 60.0) is None  # off
    # Crowds a third and two thirds into each two hours: 2400 s, then 4800 s apart.
    irregular = (2400.0, 4800.0, 9600.0, 12000.0)
    assert recurrence.period(irregular, 3, 60.0) is None
    assert recurrence.period(irregular, 1, 60.0) == 2400.0


def test_the_floor_stands_a_lead_before_the_next_burst_until_it_has_come():
    onsets, every, lead, tol = (0.0, 1800.0, 3600.0, 5400.0), 1800.0, 240.0, 60.0
    stands = [t for t in range(5400, 9000, 60) if recurrence.stands(t, onsets, every, lead, tol)]
    # For one lead after the last onset, then from a lead and the tolerance before
    # the next (7200 - 300 = 6900) on, for as long as no burst is seen.
    assert min(stands) == 5400
    assert [t for t in stands if t <= 6900][-2:] == [5640, 6900]
    assert max(stands) == 8940
    assert not recurrence.stands(6000.0, onsets, every, lead, tol)
    # An onset is timed on the burst window's mean, up to a window after the load
    # rose: capacity that serves from the onset on would come that late, so with the
    # rise the floor stands one window earlier (6840), the ends unchanged.
    rising = [
        t for t in range(5400, 9000, 60) if recurrence.stands(t, onsets, every, lead, tol, 60.0)
    ]
    assert [t for t in rising if t <= 6840][-2:] == [5640, 6840]
    assert not recurrence.stands(6780.0, onsets, every, lead, tol, 60.0)
    assert (min(rising), max(rising)) == (5400, 8940)
    assert recurrence.stands(6000.0, onsets, None, lead, tol)  # no period: always
    assert recurrence.stands(6000.0, (), every, lead, tol)


def test_hybrids_floor_stands_down_between_bursts_that_recur_and_not_otherwise():
    # A history of 6x bursts from a level of 10 (the ratio histogram holds them at
    # 0.99), the last four 900 s apart; quiet now.
    bursts = headroom.record(headroom.record((), 1.0, 10.0), 6.0, 60.0)
    levels = headroom.record_level(headroom.record_level((), 10.0, 10.0), 60.0, 60.0)
    onsets = (0.0, 900.0, 1800.0, 2700.0)
    cfg = HybridConfig(per_replica=10.0, target_attainment=0.99)

    def floor(now: float, kept: tuple[float, ...], intervals: int = 3) -> hybrid.Floor:
        quiet = tuple((now - 15.0 * i, 10.0) for i in range(60, 0, -1))
        state = HybridState(bursts=bursts, levels=levels, offered=quiet, onsets=kept)
        c = dataclasses.replace(cfg, burst_period_intervals=intervals)
        return hybrid.learned_floor(10.0, c, state, now, lead_s=240.0)

    held = floor(3150.0, ()).replicas
    assert held == 7  # 6.17 x 10 / 10 per replica, rounded up
    mid = floor(3150.0, onsets)  # the next burst is due at 3600
    assert mid.replicas == 0
    assert "bursts every 900 s, next 3600" in mid.note
    assert floor(3350.0, onsets).replicas == held  # within a lead and the tolerance of it
    # and within the burst window's rise before that (3600 - 240 - 60 - 60 = 3240)
    assert floor(3270.0, onsets).replicas == held
    assert floor(3225.0, onsets).replicas == 0
    assert floor(2900.0, onsets).replicas == held  # within a lead of the last one
    assert floor(3150.0, onsets, intervals=0).replicas == held  # off
    assert floor(3150.0, (0.0, 900.0, 2700.0)).replicas == held  # irregular: no period


def test_the_first_burst_a_floor_sees_is_timed_from_its_rise():
    # Fifteen quiet minutes at 10 (ratio 1), then the first burst rises: 16 at the
    # decision before, 30 now. The burst window's mean is 16.5 (ratio 1.65, the first
    # reading the floor would time), and at the decision before 11.5 (ratio 1.15).
    now = 1800.0
    bursts = headroom.record((), 1.0, 600.0)
    levels = headroom.record_level((), 10.0, 600.0)
    quiet = [(now - 15.0 * i, 10.0) for i in range(60, 1, -1)]
    offered = (*quiet, (now - 15.0, 16.0))
    state = HybridState(bursts=bursts, levels=levels, offered=offered)
    cfg = HybridConfig(per_replica=10.0, target_attainment=0.99)
    floor = hybrid.learned_floor(30.0, cfg, state, now, lead_s=240.0)
    # The threshold this reading sets is half the demand quantile it lifts (17.4 / 2),
    # which the demand before (11.5) already stands above: judged against it, the
    # first burst's rise would time nothing, and its period would be read a burst late.
    threshold = recurrence.onset_threshold(
        headroom.quantile(floor.bursts, 0.99), headroom.level_quantile(floor.levels, 0.99)
    )
    assert threshold is not None
    assert threshold < 11.5
    assert floor.onsets == (now,)
    # Once a threshold stands, a reading whose demand was already above it at the
    # decision before is the same burst.
    seen = dataclasses.replace(
        state, bursts=floor.bursts, levels=floor.levels, offered=floor.offered
    )
    assert hybrid.learned_floor(40.0, cfg, seen, now + 15.0, lead_s=240.0).onsets == ()


def test_between_bursts_on_a_period_hybrid_gives_back_at_once_and_not_otherwise():
    # 40 replicas after a burst, the load back at a steady 10 in flight, a scale-in
    # pace of 5 %: standing down between bursts every 900 s, the policy scales in to
    # what the load asks in one decision (the plan holds for no more than the load
    # reached since the floor stood down, 10 in flight: 1 replica); where the bursts'
    # times are irregular the floor (7) stands and the pace holds (5 % of 40: 2
    # replicas).
    bursts = headroom.record(headroom.record((), 1.0, 10.0), 6.0, 60.0)
    levels = headroom.record_level(headroom.record_level((), 10.0, 10.0), 60.0, 60.0)
    cfg = HybridConfig(
        per_replica=10.0,
        target_attainment=0.99,
        stabilization_window_s=0.0,
        scale_down_percent=5.0,
        scale_in_cooldown_s=0.0,
    )
    now = 3150.0
    quiet = tuple((now - 15.0 * i, 10.0) for i in range(40, -1, -1))
    pods = tuple(PodStatus(f"p{i}", True, -1000.0, -1000.0) for i in range(40))
    obs = Observation(now, TargetStatus(40, pods), {}, {IN_FLIGHT: quiet, QUEUE: idle(quiet)})

    def decide(onsets: tuple[float, ...]) -> Decision[HybridState]:
        # A day of history: enough to read the floor (headroom.history_to_read_s).
        state = HybridState(
            started_at=-86_400.0, bursts=bursts, levels=levels, offered=quiet[:-1], onsets=onsets
        )
        return HybridPolicy(cfg).decide(obs, state)

    down = decide((0.0, 900.0, 1800.0, 2700.0))
    assert down.replicas == 1
    assert "capped at 10.00" in down.reason
    assert "learned floor 7 down: bursts every 900 s, next 3600" in down.reason
    irregular = decide((0.0, 900.0, 2700.0))
    assert irregular.replicas == 38


def test_between_bursts_on_a_period_what_stood_for_the_last_one_holds_nothing():
    # The policy's own windows (a 120 s stabilisation, a 300 s observed peak, a trend
    # window) all still hold the burst that came at 2700: the floor stood for it (40
    # replicas recommended at 2745) and the load was 60 in flight until 2745. The
    # floor stood down at 2760 (the onset and a lead of 60 s, the default cold start);
    # since then the load is a steady 10. Standing down between bursts every 900 s,
    # the scale-in reads only the points whose minute's mean lies wholly after that
    # (2835 and 2850): the plan's bound and the observed peak, 10, need 1 replica.
    # With the bursts at irregular times the floor stands and the stabilisation holds
    # the 40.
    bursts = headroom.record(headroom.record((), 1.0, 10.0), 6.0, 60.0)
    levels = headroom.record_level(headroom.record_level((), 10.0, 10.0), 60.0, 60.0)
    cfg = HybridConfig(
        per_replica=10.0, target_attainment=0.99, scale_down_percent=5.0, scale_in_cooldown_s=0.0
    )
    now = 2850.0
    history = tuple(
        (t, 60.0 if t <= 2745.0 else 10.0) for t in (now - 15.0 * i for i in range(40, -1, -1))
    )
    pods = tuple(PodStatus(f"p{i}", True, -1000.0, -1000.0) for i in range(40))
    obs = Observation(now, TargetStatus(40, pods), {}, {IN_FLIGHT: history, QUEUE: idle(history)})

    def decide(onsets: tuple[float, ...]) -> Decision[HybridState]:
        state = HybridState(
            started_at=-86_400.0,
            bursts=bursts,
            levels=levels,
            offered=history[:-1],
            onsets=onsets,
            recs=((2745.0, 40),),
        )
        return HybridPolicy(cfg).decide(obs, state)

    down = decide((0.0, 900.0, 1800.0, 2700.0))
    assert "down: bursts every 900 s, next 3600" in down.reason
    assert down.replicas == 1
    assert [t for t, _ in down.state.recs] == [now]  # the burst's 40 is forgotten
    irregular = decide((0.0, 900.0, 2700.0))
    assert irregular.replicas == 40
    assert "stabilised 40" in irregular.reason
