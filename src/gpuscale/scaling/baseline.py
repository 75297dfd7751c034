"""What the baseline policies share: fail-safe holds, bounds, summed signals and HPA behaviour.

Kubernetes HPA and KEDA (which drives an HPA) apply the same ``behavior`` after
their replica calculators: stabilisation windows first, then rate policies.
Keeping that here, once, is what lets ``keda.py`` reuse the HPA core instead of
a copy of it. The fail-safe rule (missing data: hold, never scale in) is also
written once for every baseline.

Behaviour follows ``pkg/controller/podautoscaler/horizontal.go`` (Kubernetes
1.23+): ``recordInitialRecommendation``, ``stabilizeRecommendationWithBehaviors``,
``convertDesiredReplicasWithBehaviorRate`` and ``storeScaleEvent``. The
controller keeps recommendations and scale events in memory; here they live in
the policy's state (``recommendations.HpaState``).
"""

import itertools
import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from gpuscale import errors
from gpuscale.scaling.policy import Decision, Observation, S, Series
from gpuscale.scaling.recommendations import HpaState, prune, remembered

RateKind = Literal["Pods", "Percent"]
SelectPolicy = Literal["Max", "Min", "Disabled"]


def check_bounds(owner: str, min_replicas: int, max_replicas: int) -> None:
    """Validate a policy's replica bounds.

    Args:
        owner: Config class name, used in the message.
        min_replicas: Lower bound.
        max_replicas: Upper bound.

    Raises:
        ConfigError: When the bounds are negative or inverted.
    """
    errors.require(
        min_replicas >= 0, f"{owner}.min_replicas={min_replicas!r}", "out of range", "use 0 or more"
    )
    errors.require(
        max_replicas >= max(min_replicas, 1),
        f"{owner}.max_replicas={max_replicas!r}",
        "out of range",
        f"use at least 1 and at least min_replicas ({min_replicas})",
    )


def clamp(replicas: int, min_replicas: int, max_replicas: int) -> int:
    """Bring a replica count within ``[min_replicas, max_replicas]``.

    Returns:
        The clamped count, replicas.
    """
    return max(min_replicas, min(max_replicas, replicas))


def hold(
    observation: Observation,
    min_replicas: int,
    max_replicas: int,
    why: str,
    state: S,
) -> Decision[S]:
    """Fail safe: keep the current desired count (within bounds) and the old state.

    Returns:
        A decision that never scales in because of missing or bad data.
    """
    current = observation.target.desired
    replicas = clamp(current, min_replicas, max_replicas)
    return Decision(replicas, f"hold at {current}: {why}", state)


def _present(observation: Observation, keys: Sequence[str]) -> list[Series] | None:
    """The series of ``keys`` that exist, or None when the data counts as missing."""
    present = [observation.series[k] for k in keys if observation.series.get(k)]
    if not present:
        return None
    if len(present) < len(keys) and observation.target.ready > 0:
        return None
    return present


def summed_latest(observation: Observation, keys: Sequence[str]) -> float | None:
    """Add the latest value of several signals, like an instant PromQL ``a + b``.

    Absence follows ``summed_series``: a signal with no series counts as 0 only
    while the workload has no Ready pod.

    Args:
        observation: The observation holding ``series``.
        keys: Signal keys to add.

    Returns:
        The sum in the signals' unit; None when data is missing or NaN.
    """
    present = _present(observation, keys)
    if present is None:
        return None
    total = sum(points[-1][1] for points in present)
    return None if math.isnan(total) else total


def _has_nan(values: Sequence[float]) -> bool:
    """Whether ``math.fsum(values)`` is NaN: a NaN among them, or both infinities.

    A finite plain sum has neither (either would carry into it), and costs a
    fraction of ``fsum``'s exact one; only a sum that is not finite is read exactly.
    """
    total = sum(values)
    return not math.isfinite(total) and math.isnan(math.fsum(values))


def summed_columns(
    observation: Observation, keys: Sequence[str]
) -> tuple[Sequence[float], Sequence[float]] | None:
    """``summed_series`` as its times and its values, without building the points.

    Returns:
        (times in seconds, summed values), oldest first and of equal length; None
        when data is missing or any value is NaN.
    """
    added = observation.sums.get(tuple(keys)) if observation.sums else None
    if (
        added is not None
        and len(added.of) == len(keys)
        and all(added.of)  # every series has points: all are present
        and all(map(operator.is_, added.of, map(observation.series.get, keys)))
    ):
        # The source added these very series already, the same way as below.
        return None if _has_nan(added.values) else (added.times, added.values)
    present = _present(observation, keys)
    if present is None:
        return None
    columns = [tuple(zip(*points, strict=False)) for points in present]  # points are pairs
    times = columns[0][0]
    if all(c[0] == times for c in columns[1:]):
        # The common case (samples at the same times): add column by column, as sum()
        # does per point (0 + a + b + ...), without a call per point.
        sums: Iterable[float] = map(operator.add, itertools.repeat(0), columns[0][1])
        for c in columns[1:]:
            sums = map(operator.add, sums, c[1])
        values = list(sums)
        if _has_nan(values):
            return None
        return times, values
    totals: dict[float, float] = {}
    for points in present:
        for t, v in points:
            if math.isnan(v):
                return None
            totals[t] = totals.get(t, 0.0) + v
    ordered = sorted(totals.items())
    return [t for t, _ in ordered], [v for _, v in ordered]


def summed_series(observation: Observation, keys: Sequence[str]) -> Series | None:
    """Add several signals point by point, like PromQL ``a + b`` over a range.

    A timestamp present in one series but not another counts the absent one as 0
    (a gap, as Knative's windowed averages treat it). A signal with no series at
    all is missing data, except when the workload has no Ready pod: a per-pod
    gauge such as requests in flight is genuinely empty then, and counts as 0, as
    long as at least one of the signals is present.

    Args:
        observation: The observation holding ``series``.
        keys: Signal keys to add.

    Returns:
        (time seconds, summed value) points, oldest first; None when data is missing.
    """
    summed = summed_columns(observation, keys)
    if summed is None:
        return None
    return tuple(zip(*summed, strict=True))


@dataclass(frozen=True, slots=True)
class RatePolicy:
    """One ``HPAScalingPolicy``: at most ``value`` pods or percent per ``period_s``.

    Attributes:
        kind: ``Pods`` (absolute) or ``Percent`` (of the replicas at the period's start);
            the HPA's ``type``.
        value: Pods or percent allowed per period.
        period_s: Length of the sliding period, seconds.
    """

    kind: RateKind = field(metadata={"key": "type"})
    value: int
    period_s: float


@dataclass(frozen=True, slots=True)
class ScalingRules:
    """``HPAScalingRules`` for one direction; a field left None takes the API server's default.

    Attributes:
        policies: Rate policies; ``select_policy`` picks among them. None: the
            direction's defaults (up: 4 pods or 100 % per 15 s; down: 100 % per 15 s).
        select_policy: ``Max`` (largest change), ``Min`` (smallest) or ``Disabled``.
        stabilization_window_s: Seconds of past recommendations to consider. None: the
            direction's default (up: 0; down: 300).
        tolerance: No change while the usage ratio is within this fraction of 1 in this
            direction. None: the controller's tolerance (``HpaConfig.tolerance``).
    """

    policies: tuple[RatePolicy, ...] | None = None
    select_policy: SelectPolicy = "Max"
    stabilization_window_s: float | None = None
    tolerance: float | None = None

    def window_s(self) -> float:
        """The stabilisation window once defaulted, seconds (0 if never defaulted)."""
        return self.stabilization_window_s or 0.0

    def rates(self) -> tuple[RatePolicy, ...]:
        """The rate policies once defaulted (none if never defaulted)."""
        return self.policies or ()


DEFAULT_SCALE_UP = ScalingRules(
    (RatePolicy("Pods", 4, 15.0), RatePolicy("Percent", 100, 15.0)), "Max", 0.0
)
"""autoscaling/v2 default: +4 pods or +100% per 15 s, whichever is more; no stabilisation."""

DEFAULT_SCALE_DOWN = ScalingRules((RatePolicy("Percent", 100, 15.0),), "Max", 300.0)
"""autoscaling/v2 default: up to -100% per 15 s after a 300 s stabilisation window."""

MAX_PERIOD_S = 1800.0
"""The API server's limit on a policy's ``periodSeconds`` (``validateScalingPolicy``)."""

MAX_WINDOW_S = 3600.0
"""The API server's limit on ``stabilizationWindowSeconds``."""


def _defaulted(given: ScalingRules, default: ScalingRules) -> ScalingRules:
    """The API server's defaulting of one direction: each unset field from ``default``."""
    return replace(
        given,
        policies=default.policies if given.policies is None else given.policies,
        stabilization_window_s=(
            default.stabilization_window_s
            if given.stabilization_window_s is None
            else given.stabilization_window_s
        ),
    )


@dataclass(frozen=True, slots=True)
class HpaBehavior:
    """``spec.behavior`` of an HPA, as the API server stores it after defaulting.

    A direction's unset fields take that direction's defaults at construction
    (``GenerateHPAScaleUpRules``/``GenerateHPAScaleDownRules``), so
    ``HpaBehavior(scale_down=ScalingRules(stabilization_window_s=60))`` keeps the
    default scale-down policy, as the HPA does.

    Attributes:
        scale_up: Rules applied when the recommendation is above the current count.
        scale_down: Rules applied when it is below.
    """

    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale_up", _defaulted(self.scale_up, DEFAULT_SCALE_UP))
        object.__setattr__(self, "scale_down", _defaulted(self.scale_down, DEFAULT_SCALE_DOWN))

    def validate(self, owner: str) -> None:
        """Check the rules as the API server's validation would.

        Raises:
            ConfigError: On an empty policy list, a value that is not positive, a
                period outside 1..1800 s, a stabilisation window outside 0..3600 s or a
                tolerance below 0.
        """
        for name, rules in (("scale_up", self.scale_up), ("scale_down", self.scale_down)):
            key = f"{owner}.{name}"
            errors.require(
                bool(rules.policies),
                f"{key}.policies={rules.policies!r}",
                "empty",
                "give at least one policy, or leave policies out for the defaults",
            )
            for i, p in enumerate(rules.rates()):
                errors.require(
                    p.value > 0,
                    f"{key}.policies[{i}].value={p.value!r}",
                    "out of range",
                    "use a positive value",
                )
                errors.require(
                    0 < p.period_s <= MAX_PERIOD_S,
                    f"{key}.policies[{i}].period_s={p.period_s!r}",
                    "out of range",
                    "use 1..1800 seconds",
                )
            errors.require(
                0 <= rules.window_s() <= MAX_WINDOW_S,
                f"{key}.stabilization_window_s={rules.stabilization_window_s!r}",
                "out of range",
                "use 0..3600 seconds",
            )
            errors.require(
                rules.tolerance is None or rules.tolerance >= 0,
                f"{key}.tolerance={rules.tolerance!r}",
                "out of range",
                "use 0 or more",
            )

    def tolerances(self, default: float) -> tuple[float, float]:
        """(scale-down, scale-up) tolerance: each direction's own, else ``default``."""
        down, up = self.scale_down.tolerance, self.scale_up.tolerance
        return (default if down is None else down, default if up is None else up)

    def longest_period_s(self) -> float:
        """Longest policy period in either direction, seconds."""
        periods = [p.period_s for p in (*self.scale_up.rates(), *self.scale_down.rates())]
        return max(periods, default=0.0)


def _change_in_period(events: Sequence[tuple[float, int]], now: float, period_s: float) -> int:
    cutoff = now - period_s
    return int(sum(n for t, n in events if t > cutoff))


def _limit(
    current: int,
    now: float,
    rules: ScalingRules,
    ups: Sequence[tuple[float, int]],
    downs: Sequence[tuple[float, int]],
    direction: Literal["up", "down"],
) -> int:
    """``calculateScaleUpLimitWithScalingRules`` / ``calculateScaleDownLimitWithBehaviors``."""
    if rules.select_policy == "Disabled":
        return current
    proposals = []
    for p in rules.rates():
        start = current - _change_in_period(ups, now, p.period_s)
        start += _change_in_period(downs, now, p.period_s)
        if direction == "up":
            if p.kind == "Pods":
                proposals.append(start + p.value)
            else:
                proposals.append(math.ceil(start * (1 + p.value / 100)))
        elif p.kind == "Pods":
            proposals.append(start - p.value)
        else:
            proposals.append(int(start * (1 - p.value / 100)))
    most_change = max if direction == "up" else min
    least_change = min if direction == "up" else max
    pick = least_change if rules.select_policy == "Min" else most_change
    if not proposals:
        return current
    return pick(proposals)


def reconcile(
    now: float,
    current: int,
    proposal: int | None,
    *,
    min_replicas: int,
    max_replicas: int,
    behavior: HpaBehavior,
    state: HpaState,
) -> tuple[int, str, HpaState]:
    """One HPA sync after the replica calculator: bounds, stabilisation, rate limits.

    Args:
        now: Sync time, seconds.
        current: ``spec.replicas`` of the target.
        proposal: The calculator's replica count; None when the metric failed.
        min_replicas: HPA ``minReplicas``.
        max_replicas: HPA ``maxReplicas``.
        behavior: HPA ``behavior``.
        state: The HPA's recommendations and scale events.

    Returns:
        Desired replicas, a reason, and the new HPA state.
    """
    now = float(now)
    recs = remembered(state, now, current)
    ups, downs = list(state.scale_up_events), list(state.scale_down_events)
    up_window_s = behavior.scale_up.window_s()
    down_window_s = behavior.scale_down.window_s()
    if current > max_replicas:
        desired, why = max_replicas, f"current {current} above max {max_replicas}"
    elif current < min_replicas:
        desired, why = min_replicas, f"current {current} below min {min_replicas}"
    elif proposal is None:
        desired, why = current, "metric unavailable, holding"
    else:
        up_cut = now - up_window_s
        down_cut = now - down_window_s
        up_rec = down_rec = proposal
        for t, r in recs:
            if t > up_cut:
                up_rec = min(up_rec, r)
            if t > down_cut:
                down_rec = max(down_rec, r)
        stabilized = min(max(current, up_rec), down_rec)
        recs.append((now, proposal))
        desired, why = stabilized, f"recommendation {proposal}, stabilised {stabilized}"
        if stabilized > current:
            up_limit = max(_limit(current, now, behavior.scale_up, ups, downs, "up"), current)
            allowed = min(max_replicas, up_limit)
            if stabilized > allowed:
                limited_by = "rate limit" if up_limit < max_replicas else "max"
                desired, why = allowed, f"{why}, {limited_by} {allowed}"
        elif stabilized < current:
            down_limit = min(_limit(current, now, behavior.scale_down, ups, downs, "down"), current)
            allowed = max(min_replicas, down_limit)
            if stabilized < allowed:
                limited_by = "rate limit" if down_limit > min_replicas else "min"
                desired, why = allowed, f"{why}, {limited_by} {allowed}"
    if desired > current:
        ups.append((now, desired - current))
    elif desired < current:
        downs.append((now, current - desired))
    keep_events = now - behavior.longest_period_s()
    new_state = HpaState(
        prune(recs, now, highest_s=down_window_s, lowest_s=up_window_s),
        tuple((t, n) for t, n in ups if t > keep_events),
        tuple((t, n) for t, n in downs if t > keep_events),
    )
    return desired, why, new_state
