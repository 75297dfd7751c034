"""Burst onsets come from the demand alone; recovery is read off the SLO counts."""

import numpy as np

from gpuscale.evaluate.bursts import BASE_S, HOLD_S, mean_recovery_s, onsets, recovery_s
from gpuscale.sim.outcome import Timeline


def timeline(rate, share):
    """10 s rows: ``rate`` arrivals per second and ``share`` of them within the SLO."""
    rate = np.asarray(rate, dtype=float)
    n = rate.size
    zeros = np.zeros(n)
    return Timeline(
        time_s=np.arange(n) * 10.0,
        demand_rps=rate,
        capacity_rps=zeros,
        desired_replicas=zeros,
        ready_replicas=zeros,
        allocated_gpus=zeros,
        gpu_utilization=zeros,
        p50_latency_s=zeros,
        p99_latency_s=zeros,
        completed=rate * 10.0,
        within_slo=rate * 10.0 * np.asarray(share, dtype=float),
    )


def test_a_step_to_four_times_the_base_is_one_onset():
    rate = [10.0] * 60 + [40.0] * 30 + [10.0] * 60
    assert onsets(timeline(rate, [1.0] * 150), 0.0, 1500.0) == [60]


def test_recovery_is_the_time_until_the_target_holds_again():
    rate = [10.0] * 60 + [40.0] * 60
    share = [1.0] * 60 + [0.5] * 9 + [1.0] * 51  # 90 s below the target after the onset
    tl = timeline(rate, share)
    assert recovery_s(tl, 60, 0.99, 1200.0) == 90.0
    assert mean_recovery_s(tl, 0.0, 1200.0, 0.99) == 90.0


def test_never_recovering_runs_to_the_end_and_no_burst_gives_none():
    rate = [10.0] * 60 + [40.0] * 60
    tl = timeline(rate, [1.0] * 60 + [0.5] * 60)
    assert recovery_s(tl, 60, 0.99, 1200.0) == 1200.0 - 600.0
    flat = timeline([10.0] * 120, [1.0] * 120)
    assert mean_recovery_s(flat, 0.0, 1200.0, 0.99) is None


def test_onsets_of_one_burst_are_merged():
    # Two edges within BASE_S of each other are the same burst.
    gap = int(BASE_S / 10) // 2
    rate = [10.0] * 60 + [40.0] * 3 + [10.0] * gap + [40.0] * 3 + [10.0] * 60
    assert len(onsets(timeline(rate, [1.0] * len(rate)), 0.0, 1e9)) == 1
    assert HOLD_S >= 10.0  # a hold of at least one row


def test_recovery_is_judged_against_the_share_before_the_burst_when_lower():
    # 97 % within the SLO before the burst (a ceiling below the 0.99 target): back to
    # 97 % counts as recovered.
    rate = [10.0] * 60 + [40.0] * 60
    share = [0.97] * 60 + [0.5] * 3 + [0.97] * 57
    assert recovery_s(timeline(rate, share), 60, 0.99, 1200.0) == 30.0
