"""``health.assess`` judges the pods column by column; pod by pod must give the same verdicts.

The reference below is the rule of ``health``'s module docstring applied to one pod at a
time; the column-wise judge skips the per-pod tests when whole columns show that no pod
can be newly quarantined, and this checks that the shortcut never changes a verdict.
"""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.fields.xid import WORK_LOST_XIDS
from gpuscale.scaling import health
from gpuscale.scaling.health import HealthConfig, HealthState, PodHealth
from gpuscale.scaling.policy import Observation, PodStatus, TargetStatus


def reference(
    obs: Observation, state: HealthState, cfg: HealthConfig
) -> tuple[dict[str, str], dict[str, PodHealth], dict[str, float]]:
    """The verdicts, pod by pod."""
    now = float(obs.now)
    elapsed = now - state.at if state.at is not None else 0.0

    def column(key: str) -> dict[str, float]:
        return {p: float(v) for p, v in obs.pod_metrics.get(key, {}).items() if v == v}

    sm, xids, dbes = column(health.SM), column(health.XID), column(health.DBE)
    thermals, dones = column(health.THERMAL), column(health.DONE)
    alerts = [(a, c) for a in health.HEALTH_ALERTS if (c := column(health.ALERT + a))]
    ready = [p for p in obs.target.pods if p.ready]
    any_sm = any(p.name in sm for p in ready)
    sick: dict[str, str] = {}
    pods: dict[str, PodHealth] = {}
    counts: dict[str, float] = {}
    for pod in ready:
        prev = state.pods.get(pod.name, health.NEVER_SEEN)
        until, because = prev.until, prev.why
        xid, dbe = xids.get(pod.name), dbes.get(pod.name)
        thermal, done = thermals.get(pod.name), dones.get(pod.name)
        if elapsed > 0 and done is not None and prev.done is not None and done >= prev.done:
            counts[pod.name] = done - prev.done
        why = None
        since = pod.ready_at if pod.ready_at is not None else pod.created_at
        if any_sm and pod.name not in sm and now - since > cfg.missing_grace_s:
            why = "lost"
        elif xid is not None and int(xid) in WORK_LOST_XIDS and xid != prev.xid:
            why = f"xid {int(xid)}"
        elif dbe is not None and dbe > (prev.dbe or 0.0):
            why = "dbe"
        elif alerts:
            firing = [a for a, c in alerts if c.get(pod.name)]
            why = f"alert {firing[0]}" if firing else None
        if why is not None:
            until, because = now + cfg.quarantine_s, why
        if until is not None and now < until:
            sick[pod.name] = str(because)
        elif (
            elapsed > 0
            and thermal is not None
            and prev.thermal is not None
            and (thermal - prev.thermal) / 1e9 / elapsed > cfg.throttle_share
        ):
            sick[pod.name] = "throttled"
        pods[pod.name] = PodHealth(until, because, xid, dbe, thermal, done)
    rates = {name: n / elapsed for name, n in counts.items()}
    for name in health.stragglers(rates, sick, elapsed, cfg):
        sick[name] = "straggler"
    for pod in obs.target.pods:
        if not pod.ready and pod.name in state.pods:
            pods[pod.name] = state.pods[pod.name]
    return sick, pods, counts


NAMES = [f"p{i}" for i in range(4)]
maybe = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False))
xid_values = st.sampled_from([0.0, 13.0, 47.9, -0.5, -1.0, 48.0, 79.0, 79.5, 100.0, math.nan])
dbe_values = st.sampled_from([0.0, 1.0, 2.0, -1.0, math.nan])
count_values = st.sampled_from([0.0, 1e9, 5e9, 100.0, 130.0, math.nan])


@st.composite
def cases(draw: st.DrawFn) -> tuple[Observation, HealthState]:
    n = draw(st.integers(0, len(NAMES)))
    names = NAMES[:n]
    pods = tuple(
        PodStatus(
            name,
            draw(st.booleans()),
            draw(st.sampled_from([0.0, 500.0])),
            draw(st.sampled_from([None, 0.0, 900.0])),
        )
        for name in names
    )

    def values(strategy: st.SearchStrategy[float]) -> dict[str, float]:
        return {name: draw(strategy) for name in names if draw(st.booleans())}

    pod_metrics = {
        health.SM: values(st.sampled_from([0.5, math.nan])),
        health.XID: values(xid_values),
        health.DBE: values(dbe_values),
        health.THERMAL: values(count_values),
        health.DONE: values(count_values),
    }
    if draw(st.booleans()):
        pod_metrics[health.ALERT + health.HEALTH_ALERTS[0]] = values(st.sampled_from([0.0, 1.0]))
    old = {
        name: PodHealth(
            draw(st.sampled_from([None, 500.0, 2000.0])),
            draw(st.sampled_from([None, "lost", "dbe"])),
            draw(st.sampled_from([None, 0.0, 79.0])),
            draw(st.sampled_from([None, 0.0, 1.0, -1.0])),
            draw(st.sampled_from([None, 0.0, 1e9])),
            draw(st.sampled_from([None, 0.0, 100.0])),
        )
        for name in names
        if draw(st.booleans())
    }
    at = draw(st.sampled_from([None, 985.0, 1000.0]))
    obs = Observation(1000.0, TargetStatus(n, pods), pod_metrics, {})
    return obs, HealthState(at, old)


@settings(max_examples=400, deadline=None)
@given(cases())
def test_column_wise_verdicts_are_the_pod_by_pod_ones(
    case: tuple[Observation, HealthState],
) -> None:
    obs, state = case
    cfg = HealthConfig(min_peers=2)
    sick, new_state, counts = health.assess_counted(obs, state, cfg)
    want_sick, want_pods, want_counts = reference(obs, state, cfg)
    assert sick == want_sick
    assert list(sick) == list(want_sick)  # in the same order, as the reason lists them
    assert dict(new_state.pods) == want_pods
    assert list(new_state.pods) == list(want_pods)
    assert counts == want_counts
    assert new_state.at == 1000.0


def test_a_dbe_count_above_a_negative_one_seen_before_quarantines() -> None:
    # Every count now is 0, which alone says no count rose; the one before was below it.
    pods = (PodStatus("a", True, 0.0, 0.0), PodStatus("b", True, 0.0, 0.0))
    metrics = {health.DBE: {"a": 0.0, "b": 0.0}}
    obs = Observation(1000.0, TargetStatus(2, pods), metrics, {})
    state = HealthState(985.0, {"a": PodHealth(dbe=-1.0), "b": PodHealth(dbe=0.0)})
    sick, _ = health.assess(obs, state, HealthConfig())
    assert sick == {"a": "dbe"}
