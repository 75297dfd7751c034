"""Which Ready replicas are capacity: a sick GPU's pod is Ready but serves little or nothing.

Kubernetes counts a pod Ready while its GPU is throttled, has lost its
series, has just had a double-bit ECC error or serves at half speed. A policy
that counts such a pod as capacity under-provisions exactly when the fleet is
degraded. This module reads the per-pod DCGM series and serving counters the
policy already receives (``Observation.pod_metrics``) and says which Ready pods
not to count, and why:

* ``lost``: Ready for more than ``missing_grace_s`` with no SM-activity sample
  while other Ready pods have one (the GPU fell off the bus: its series vanish).
* ``xid``: the GPU's last XID is one after which its work is lost
  (``gpuscale.fields.xid.WORK_LOST_XIDS``) that changed since the pod was last
  seen, or was present when first seen.
* ``dbe``: the volatile double-bit ECC count rose.
* ``alert``: a health alert of the catalogue fires on the pod's GPU
  (``ALERTS{alertstate="firing"}`` for ``HEALTH_ALERTS``, as the controller's
  remediation reads Prometheus; the simulator writes the same series when it
  evaluates the catalogue).
* ``throttled``: the GPU spent more than ``throttle_share`` of the time since the
  last decision in thermal violation (``DCGM_FI_DEV_THERMAL_VIOLATION``, ns).
* ``straggler``: its completion rate since the last decision is below
  ``straggler_ratio`` of the median of at least ``min_peers`` other Ready pods,
  and so few completions are improbable at the median's rate (Poisson lower
  tail below ``straggler_p``): a pod that serves one 30 s request at a time
  completes 0 or 1 in a 15 s window by chance, and a ratio alone would call half
  such a fleet stragglers. Where completions are that sparse a straggler is left
  to the ``GpuStraggler`` alert, which compares clocks.

A pod flagged ``lost``, ``xid``, ``dbe`` or ``alert`` stays out of the count for
``quarantine_s``; ``throttled`` and ``straggler`` are re-judged each decision.
State per live pod (``HealthState``): the counters last seen and the quarantine end.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from typing import Any

from gpuscale.errors import require
from gpuscale.fields.xid import WORK_LOST_XIDS
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.poisson import poisson_cdf
from gpuscale.scaling.policy import Observation, PodStatus
from gpuscale.scaling.state import JsonState

SM = "sm"
XID = "xid"
DBE = "dbe"
THERMAL = "thermal"
DONE = "done"


HEALTH_ALERTS = ("GpuFellOffBus", "GpuEccDoubleBitError", "GpuRowRemapFailure")
"""Alerts after which a GPU's pod is not capacity (as ``control.remediate`` reads them)."""
ALERT = "alert:"
"""Key prefix of the alert signals: ``alert:<alertname>``."""

POD_SIGNALS: Mapping[str, Signal] = {
    SM: Signal("DCGM_FI_PROF_SM_ACTIVE", aggregation="avg", by=("pod",), optional=True),
    XID: Signal("DCGM_FI_DEV_XID_ERRORS", aggregation="max", by=("pod",), optional=True),
    DBE: Signal("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", aggregation="max", by=("pod",), optional=True),
    THERMAL: Signal("DCGM_FI_DEV_THERMAL_VIOLATION", aggregation="max", by=("pod",), optional=True),
    DONE: Signal("gpuscale_serving_requests_total", aggregation="sum", by=("pod",), optional=True),
    **{
        f"{ALERT}{name}": Signal(
            "ALERTS", {"alertname": name, "alertstate": "firing"}, "max", ("pod",), optional=True
        )
        for name in HEALTH_ALERTS
    },
}
"""The per-pod series health is judged on, by the key they have in ``pod_metrics``. Each is
optional: health is judged on the evidence there is (an alert that does not fire is absent,
and ``--source nvml`` serves no SM activity), so none of them holds the target."""


@dataclass(frozen=True, slots=True)
class HealthConfig:
    """Thresholds for not counting a Ready pod.

    Attributes:
        missing_grace_s: A Ready pod may lack its GPU series this long, seconds.
        quarantine_s: A lost, XID or DBE pod stays uncounted this long, seconds.
        throttle_share: Thermal-violation time over elapsed time above which a GPU is throttled.
        straggler_ratio: Completion rate over the peers' median below which a pod straggles.
        min_peers: Ready pods with a rate needed before anyone is called a straggler.
        straggler_p: A pod is a straggler only when a count as low as its own has less
            than this probability at the median's rate (Poisson).
    """

    missing_grace_s: float = field(default=90.0, metadata={"unit": "s"})
    quarantine_s: float = field(default=600.0, metadata={"unit": "s"})
    throttle_share: float = field(default=0.1, metadata={"unit": "ratio"})
    straggler_ratio: float = field(default=0.5, metadata={"unit": "ratio"})
    min_peers: int = field(default=3, metadata={"unit": "pods"})
    straggler_p: float = field(default=0.001, metadata={"unit": "probability"})

    def __post_init__(self) -> None:
        def check(ok: bool, key: str, fix: str) -> None:
            require(ok, f"HealthConfig.{key}={getattr(self, key)!r}", "out of range", fix)

        check(self.missing_grace_s >= 0, "missing_grace_s", "use 0 or more seconds")
        check(self.quarantine_s >= 0, "quarantine_s", "use 0 or more seconds")
        check(0 < self.throttle_share <= 1, "throttle_share", "use a ratio in (0, 1]")
        check(0 <= self.straggler_ratio < 1, "straggler_ratio", "use a ratio in [0, 1)")
        check(self.min_peers >= 2, "min_peers", "use 2 or more")
        check(0 < self.straggler_p < 1, "straggler_p", "use a probability in (0, 1)")


@dataclass(frozen=True, slots=True)
class PodHealth(JsonState):
    """What was last seen of one pod's GPU, and its quarantine.

    Attributes:
        until: End of its quarantine, seconds; None when never quarantined.
        why: Why it was last quarantined.
        xid: Its last XID, if any.
        dbe: Its double-bit ECC error count, if any.
        thermal: Its thermal-violation counter, nanoseconds, if any.
        done: Its completed-requests counter, if any.
    """

    until: float | None = None
    why: str | None = None
    xid: float | None = None
    dbe: float | None = None
    thermal: float | None = None
    done: float | None = None


@dataclass(frozen=True, slots=True)
class HealthState(JsonState):
    """The health judge's memory: the last decision's time and each live pod's counters.

    Attributes:
        at: The last decision's time, seconds; None before the first.
        pods: Pod name to what was seen of it.

    ``essential()`` is ``to_json()``: the counters move with the load served, and
    ``at`` turns them into rates.
    """

    at: float | None = None
    pods: Mapping[str, PodHealth] = field(default_factory=dict)


NEVER_SEEN = PodHealth()
"""What is known of a pod not seen before."""


def _column(observation: Observation, key: str) -> dict[str, float]:
    """One per-pod signal's values, NaN left out: read once per decision, by pod name."""
    values = observation.pod_metrics.get(key)
    if not values:
        return {}
    total = sum(values.values())
    if total == total:  # a NaN makes the sum NaN, so none is left out: copied whole
        return dict(zip(values, map(float, values.values()), strict=True))
    return {pod: float(v) for pod, v in values.items() if v == v}


# ``PodHealth`` records built without its ``__init__``: a frozen dataclass sets each
# field through ``object.__setattr__``; ``assess`` builds one per Ready pod at every
# decision, and setting the slots through their descriptors (a C loop per field over
# all pods) costs a fraction of that. ``PodHealth`` has no ``__post_init__`` to skip.
_NEW = object.__new__
_FIELDS = ("until", "why", "xid", "dbe", "thermal", "done")
_SET_FIELDS = tuple(PodHealth.__dict__[name].__set__ for name in _FIELDS)
_NAME = attrgetter("name")
_GET_PREVIOUS = tuple(attrgetter(name) for name in ("until", "why", "dbe", "thermal", "done"))


def completed(observation: Observation, old_pods: Mapping[str, PodHealth]) -> dict[str, float]:
    """Requests each Ready pod completed since the last decision: its counter's rise.

    A pod with no counter now or then, or whose counter went down (a new
    container), gives no count.

    Returns:
        Pod name to completions, in the order of ``observation.target.pods``.
    """
    return _completed(observation, old_pods, _column(observation, DONE))


def _completed(
    observation: Observation, old_pods: Mapping[str, PodHealth], done_now: Mapping[str, float]
) -> dict[str, float]:
    """``completed``, with the counters now already read (``_column(observation, DONE)``)."""
    counts: dict[str, float] = {}
    for pod in observation.target.pods:
        done = done_now.get(pod.name)
        old = old_pods.get(pod.name)
        last_done = None if old is None else old.done
        if pod.ready and done is not None and last_done is not None and done >= last_done:
            counts[pod.name] = done - last_done
    return counts


def assess(
    observation: Observation, state: HealthState, cfg: HealthConfig
) -> tuple[dict[str, str], HealthState]:
    """Judge every Ready pod.

    Args:
        observation: The decision's observation (``pod_metrics`` keyed as ``POD_SIGNALS``).
        state: The health state returned last time (``HealthState()`` at first).
        cfg: Thresholds.

    Returns:
        (Ready pod name to the reason it is not counted, the new health state).

    Each signal is read into a map by pod once, so the cost is linear in the pods.
    """
    sick, new_state, _ = assess_counted(observation, state, cfg)
    return sick, new_state


def assess_counted(
    observation: Observation, state: HealthState, cfg: HealthConfig
) -> tuple[dict[str, str], HealthState, dict[str, float]]:
    """``assess``, and the completions it judged the stragglers on.

    A caller that also needs what the Ready pods completed since the last decision
    (``hybrid``'s service time) reads it here instead of counting it again.

    Returns:
        (as ``assess``; ``completed(observation, state.pods)``, or empty when no time
        has passed since ``state.at``).
    """
    now = float(observation.now)
    last_at = state.at
    elapsed = now - last_at if last_at is not None else 0.0
    old = state.pods
    pods_now = observation.target.pods
    ready = [p for p in pods_now if p.ready]
    names = list(map(_NAME, ready))
    # SM activity is read only for whether a pod has a sample: without a NaN among them,
    # the pods holding one are the keys as they are.
    sm_now = observation.pod_metrics.get(SM) or {}
    sm_total = sum(sm_now.values())
    sm = sm_now if sm_total == sm_total else _column(observation, SM)
    xids, dbes = _column(observation, XID), _column(observation, DBE)
    thermals, dones = _column(observation, THERMAL), _column(observation, DONE)
    alerts = [(a, col) for a in HEALTH_ALERTS if (col := _column(observation, ALERT + a))]
    any_sm = any(map(sm.__contains__, names))
    # Each pod's values now and as last seen, read column by column (a C loop each).
    prev = list(map(old.get, names, repeat(NEVER_SEEN)))
    p_until, p_why, p_dbe, p_thermal, p_done = (list(map(g, prev)) for g in _GET_PREVIOUS)
    xid, dbe, thermal, done = (list(map(c.get, names)) for c in (xids, dbes, thermals, dones))
    # What each Ready pod completed since the last decision (``completed``): the rise of
    # its counter, where it has one now and then.
    counts: dict[str, float] = {}
    if elapsed > 0:
        counts = {
            name: d - pd
            for name, d, pd in zip(names, done, p_done, strict=True)
            if d is not None and pd is not None and d >= pd
        }
    sick: dict[str, str] = {}
    if alerts or not _none_new(names, sm, any_sm, xids, dbes, dbe, p_dbe):
        # Some pod may be newly quarantined: judge each in turn.
        until, why = _judge(observation, ready, prev, sm, xid, dbe, alerts, any_sm, cfg)
    else:  # none is (the usual case): each keeps its quarantine as it was
        until, why = p_until, p_why
    share_max = cfg.throttle_share
    if until.count(None) < len(until) or (elapsed > 0 and thermal != p_thermal):
        for name, u, w, th, p_th in zip(names, until, why, thermal, p_thermal, strict=True):
            if u is not None and now < u:
                sick[name] = str(w)
            elif elapsed > 0 and th is not None and p_th is not None:
                share = (th - p_th) / 1e9 / elapsed
                if share > share_max:
                    sick[name] = "throttled"
    # The new records, field by field over all pods (see ``_SET_FIELDS``).
    records = list(map(_NEW, repeat(PodHealth, len(names))))
    columns: tuple[list[Any], ...] = (until, why, xid, dbe, thermal, done)
    for set_field, column in zip(_SET_FIELDS, columns, strict=True):
        list(map(set_field, records, column))
    pods: dict[str, PodHealth] = dict(zip(names, records, strict=True))
    rates = {name: n / elapsed for name, n in counts.items()}
    for name in stragglers(rates, sick, elapsed, cfg):
        sick[name] = "straggler"
    if len(ready) < len(pods_now):  # a restarting pod keeps what was seen of its GPU
        for pod in pods_now:
            if not pod.ready and pod.name in old:
                pods[pod.name] = old[pod.name]
    return sick, HealthState(now, pods), counts


_XID_LOW, _XID_HIGH = -1.0, float(min(WORK_LOST_XIDS))
"""An XID strictly between these truncates below every work-lost XID: no quarantine."""


def _none_new(
    names: list[str],
    sm: Mapping[str, float],
    any_sm: bool,
    xids: Mapping[str, float],
    dbes: Mapping[str, float],
    dbe: list[float | None],
    p_dbe: list[float | None],
) -> bool:
    """Whether no Ready pod is newly lost, XID-struck or DBE-struck, judged by whole columns.

    Each test reads every value of a column (the Ready pods' among them), so True is
    exact, and False only sends the decision to ``_judge``, pod by pod:

    * lost: every Ready pod has an SM-activity sample, or none has;
    * xid: every XID truncates below every work-lost XID;
    * dbe: no count rose: each as last seen, or none above 0 and none seen below 0.
    """
    if any_sm and not all(map(sm.__contains__, names)):
        return False
    if xids and not (min(xids.values()) > _XID_LOW and max(xids.values()) < _XID_HIGH):
        return False
    if dbe == p_dbe:
        return True
    return max(dbes.values(), default=0.0) <= 0.0 <= min(filter(None, p_dbe), default=0.0)


def _judge(
    observation: Observation,
    ready: list[PodStatus],
    prev: list[PodHealth],
    sm: Mapping[str, float],
    xid: list[float | None],
    dbe: list[float | None],
    alerts: list[tuple[str, dict[str, float]]],
    any_sm: bool,
    cfg: HealthConfig,
) -> tuple[list[float | None], list[str | None]]:
    """Each Ready pod's quarantine end and reason, judging whether it is newly quarantined.

    Returns:
        (quarantine ends, seconds or None; reasons), in the order of ``ready``.
    """
    now = float(observation.now)
    grace, quarantine_s = cfg.missing_grace_s, cfg.quarantine_s
    ends: list[float | None] = []
    reasons: list[str | None] = []
    for pod, last, x, d in zip(ready, prev, xid, dbe, strict=True):
        name = pod.name
        until, quarantined_for = last.until, last.why
        why = None
        if (
            any_sm
            and name not in sm
            and now - (pod.ready_at if pod.ready_at is not None else pod.created_at) > grace
        ):
            why = "lost"
        elif x is not None and int(x) in WORK_LOST_XIDS and x != last.xid:
            why = f"xid {int(x)}"
        elif d is not None and d > (last.dbe or 0.0):
            why = "dbe"
        elif alerts:  # no alert fires in most runs: no list per pod then
            firing = [a for a, col in alerts if col.get(name)]
            why = f"alert {firing[0]}" if firing else None
        if why is not None:
            until, quarantined_for = now + quarantine_s, why
        ends.append(until)
        reasons.append(quarantined_for)
    return ends, reasons


def stragglers(
    rates: Mapping[str, float], sick: Mapping[str, str], elapsed: float, cfg: HealthConfig
) -> list[str]:
    """The healthy pods whose completions are both slow and improbably few.

    Args:
        rates: Pod name to completions per second since the last decision.
        sick: Pods already not counted (not peers, not judged).
        elapsed: Seconds since the last decision.
        cfg: Ratio, peers and significance.

    Returns:
        Pod names.
    """
    healthy = sorted(r for name, r in rates.items() if name not in sick)
    if len(healthy) < cfg.min_peers:
        return []
    median = healthy[len(healthy) // 2]
    expected = median * elapsed  # completions at the median's rate
    return [
        name
        for name, r in rates.items()
        if name not in sick
        and r < cfg.straggler_ratio * median
        and poisson_cdf(math.floor(r * elapsed + 1e-9), expected) < cfg.straggler_p
    ]
