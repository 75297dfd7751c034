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

from gpuscale.errors import require
from gpuscale.fields.xid import WORK_LOST_XIDS
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.poisson import poisson_cdf
from gpuscale.scaling.policy import Observation
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


_NEW = object.__new__
_SET_FIELDS = tuple(
    PodHealth.__dict__[name].__set__ for name in ("until", "why", "xid", "dbe", "thermal", "done")
)


def _pod_health(
    until: float | None,
    why: str | None,
    xid: float | None,
    dbe: float | None,
    thermal: float | None,
    done: float | None,
) -> PodHealth:
    """``PodHealth(until, why, xid, dbe, thermal, done)``, built without its ``__init__``.

    A frozen dataclass sets each field through ``object.__setattr__``; ``assess``
    builds one per Ready pod at every decision, and setting the slots directly
    costs about a third as much. ``PodHealth`` has no ``__post_init__`` to skip.
    """
    pod = _NEW(PodHealth)
    s_until, s_why, s_xid, s_dbe, s_thermal, s_done = _SET_FIELDS
    s_until(pod, until)
    s_why(pod, why)
    s_xid(pod, xid)
    s_dbe(pod, dbe)
    s_thermal(pod, thermal)
    s_done(pod, done)
    return pod


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
    ready = [p for p in observation.target.pods if p.ready]
    sm, xids, dbes = _column(observation, SM), _column(observation, XID), _column(observation, DBE)
    thermals, dones = _column(observation, THERMAL), _column(observation, DONE)
    alerts = [(a, col) for a in HEALTH_ALERTS if (col := _column(observation, ALERT + a))]
    any_sm = any(p.name in sm for p in ready)
    sick: dict[str, str] = {}
    pods: dict[str, PodHealth] = {}
    # What each Ready pod completed since the last decision (``completed``), counted in
    # the same pass: the rise of its counter, where it has one now and then.
    counts: dict[str, float] = {}
    grace, quarantine_s, share_max = cfg.missing_grace_s, cfg.quarantine_s, cfg.throttle_share
    for pod in ready:
        name = pod.name
        prev = old.get(name, NEVER_SEEN)
        until, quarantined_for = prev.until, prev.why
        xid, dbe, thermal, done = (
            xids.get(name),
            dbes.get(name),
            thermals.get(name),
            dones.get(name),
        )
        if elapsed > 0 and done is not None and prev.done is not None and done >= prev.done:
            counts[name] = done - prev.done
        why = None
        if (
            any_sm
            and name not in sm
            and now - (pod.ready_at if pod.ready_at is not None else pod.created_at) > grace
        ):
            why = "lost"
        elif xid is not None and int(xid) in WORK_LOST_XIDS and xid != prev.xid:
            why = f"xid {int(xid)}"
        elif dbe is not None and dbe > (prev.dbe or 0.0):
            why = "dbe"
        elif alerts:  # no alert fires in most runs: no list per pod then
            firing = [a for a, col in alerts if col.get(name)]
            why = f"alert {firing[0]}" if firing else None
        if why is not None:
            until, quarantined_for = now + quarantine_s, why
        if until is not None and now < until:
            sick[name] = str(quarantined_for)
        elif elapsed > 0 and thermal is not None and prev.thermal is not None:
            share = (thermal - prev.thermal) / 1e9 / elapsed
            if share > share_max:
                sick[name] = "throttled"
        pods[name] = _pod_health(until, quarantined_for, xid, dbe, thermal, done)
    rates = {name: n / elapsed for name, n in counts.items()}
    for name in stragglers(rates, sick, elapsed, cfg):
        sick[name] = "straggler"
    for pod in observation.target.pods:  # a restarting pod keeps what was seen of its GPU
        if not pod.ready and pod.name in old:
            pods[pod.name] = old[pod.name]
    return sick, HealthState(now, pods), counts


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
