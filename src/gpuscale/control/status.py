"""A GPUScaler's ``.status``: what the controller did to each target and why, as the HPA says it.

``kubectl get gpuscalers`` and ``kubectl describe`` read this, so it carries the
HPA's fields (``currentReplicas``, ``desiredReplicas``, ``lastScaleTime``,
``observedGeneration``) and its condition types (``AbleToScale``,
``ScalingActive``, ``ScalingLimited``) plus ``MetricsHealthy`` for the fail-safe
and a ``Ready`` summary for the printer column. A GPUScaler may scale several
targets: the top-level replica counts are their sums, each condition is the worst
of the targets' (a False names the target), and ``targets`` keeps each one's own.

The models here are the status' schema: the CRD's ``status`` schema is generated
from them (``control.crd``), and the controller writes what they dump. A
condition's ``lastTransitionTime`` moves only when its status does
(``carry_transitions``), as Kubernetes' API conventions require.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ABLE_TO_SCALE = "AbleToScale"
SCALING_ACTIVE = "ScalingActive"
SCALING_LIMITED = "ScalingLimited"
METRICS_HEALTHY = "MetricsHealthy"
READY = "Ready"
CONDITION_TYPES = (ABLE_TO_SCALE, SCALING_ACTIVE, SCALING_LIMITED, METRICS_HEALTHY, READY)

OWNED_ELSEWHERE = "OwnedByOtherAutoscaler"
"""``AbleToScale`` False: an HPA or ScaledObject already scales the target."""
INVALID_SPEC = "InvalidSpec"
"""``ScalingActive`` False: the object does not validate; nothing of it runs."""


class _Status(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Condition(_Status):
    """One condition, as ``metav1.Condition`` spells it."""

    type: str = Field(
        description="AbleToScale, ScalingActive, ScalingLimited, MetricsHealthy or Ready."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="One CamelCase word saying why.")
    message: str = Field(default="", description="What happened, for people.")
    last_transition_time: str = Field(
        serialization_alias="lastTransitionTime", description="When status last changed (RFC 3339)."
    )


class Decision(_Status):
    """The last decision on a target."""

    replicas: int | None = Field(
        default=None, description="Replicas set or held; none when it failed."
    )
    reason: str = Field(default="", description="The policy's reason, or why it held or failed.")
    held: str | None = Field(default=None, description="The fail-safe's hold reason, when it held.")


class ForecastReport(_Status):
    """The demand forecast a forecasting policy (predictive, hybrid) planned for."""

    mean: float = Field(description="Point forecast, in the signal's unit.")
    upper: float = Field(description="Upper bound at the policy's quantile, same unit.")
    model: str = Field(
        description="seasonal (Holt-Winters), seasonal-naive, quantile-regression, trend "
        "(the fallback line) or none (no data)."
    )
    horizon_seconds: float = Field(
        serialization_alias="horizonSeconds", description="How far ahead, seconds."
    )


class TargetReport(_Status):
    """What the controller last did to one target."""

    scale_target_ref: dict[str, str] = Field(
        serialization_alias="scaleTargetRef",
        description="apiVersion, kind, name and namespace of the target.",
    )
    policy: str = Field(description="The policy's name.")
    current_replicas: int | None = Field(
        default=None,
        serialization_alias="currentReplicas",
        description="spec.replicas read from /scale.",
    )
    desired_replicas: int | None = Field(
        default=None,
        serialization_alias="desiredReplicas",
        description="What the controller set or held.",
    )
    last_scale_time: str | None = Field(
        default=None,
        serialization_alias="lastScaleTime",
        description="When the controller last changed replicas.",
    )
    last_decision: Decision | None = Field(default=None, serialization_alias="lastDecision")
    forecast: ForecastReport | None = Field(
        default=None, description="The policy's forecast, where it makes one."
    )
    conditions: list[Condition] = Field(default_factory=list)


class GPUScalerStatus(_Status):
    """The ``.status`` of a GPUScaler."""

    observed_generation: int | None = Field(
        default=None,
        serialization_alias="observedGeneration",
        description="The metadata.generation this status describes.",
    )
    current_replicas: int | None = Field(
        default=None,
        serialization_alias="currentReplicas",
        description="Sum of the targets' current replicas.",
    )
    desired_replicas: int | None = Field(
        default=None,
        serialization_alias="desiredReplicas",
        description="Sum of the targets' desired replicas.",
    )
    last_scale_time: str | None = Field(
        default=None,
        serialization_alias="lastScaleTime",
        description="The latest scale of any target.",
    )
    conditions: list[Condition] = Field(default_factory=list)
    targets: list[TargetReport] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Verdict:
    """One condition's value before its transition time is known."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""


def timestamp(at: float) -> str:
    """An RFC 3339 time as Kubernetes writes it (seconds, UTC).

    Returns:
        ``2026-01-01T00:00:00Z``.
    """
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def carry_transitions(
    verdicts: Iterable[Verdict], previous: Sequence[Mapping[str, Any]], now: float
) -> list[Condition]:
    """Conditions from verdicts, keeping each one's ``lastTransitionTime`` while its status holds.

    Args:
        verdicts: The conditions now.
        previous: The conditions last written (``metav1.Condition`` JSON).
        now: Time of a change, seconds since the epoch.

    Returns:
        The conditions, in the verdicts' order.
    """
    before = {str(c.get("type")): c for c in previous}
    out = []
    for v in verdicts:
        old = before.get(v.type)
        same = old is not None and old.get("status") == v.status
        since = str(old["lastTransitionTime"]) if same and old else timestamp(now)
        out.append(
            Condition(
                type=v.type,
                status=v.status,
                reason=v.reason,
                message=v.message[:1024],
                last_transition_time=since,
            )
        )
    return out


def summarise(per_target: Sequence[tuple[str, Sequence[Verdict]]]) -> list[Verdict]:
    """The object's conditions: per type, the first target's False (True for ScalingLimited).

    ``Ready`` is True when every target can scale, is active and has healthy metrics.

    Args:
        per_target: Each target's label and its verdicts.

    Returns:
        One verdict per condition type, ``Ready`` last.
    """
    out: list[Verdict] = []
    for kind in CONDITION_TYPES[:-1]:
        bad = "True" if kind == SCALING_LIMITED else "False"
        found = [(name, v) for name, vs in per_target for v in vs if v.type == kind]
        worst = next(((n, v) for n, v in found if v.status == bad), None)
        if worst is None:
            worst = next(((n, v) for n, v in found if v.status == "Unknown"), None)
        if worst is not None and len(per_target) > 1:
            name, v = worst
            out.append(Verdict(kind, v.status, v.reason, f"{name}: {v.message}"))
        elif worst is not None:
            out.append(worst[1])
        elif found:
            out.append(found[0][1])
    blocking = [v for v in out if v.type != SCALING_LIMITED and v.status != "True"]
    if not out:
        out.append(Verdict(READY, "Unknown", "NotReconciled", "no target reconciled yet"))
    elif blocking:
        first = blocking[0]
        out.append(Verdict(READY, "False", first.reason, first.message))
    else:
        out.append(Verdict(READY, "True", "Reconciled", "every target is scaled by its policy"))
    return out


_ERROR_REASONS = {
    "forbidden": "FailedRBAC",
    "kube_unavailable": "FailedGetScale",
    "not_leader": "NotLeader",
    "internal": "InternalError",
}
_LIMITS = (
    ("capped at maxReplicas", "TooManyReplicas"),
    ("raised to minReplicas", "TooFewReplicas"),
    ("step limited to +", "ScaleUpLimit"),
    ("step limited to -", "ScaleDownLimit"),
)


def target_verdicts(
    *,
    error: str | None,
    reason: str,
    held: str | None,
    scaled: bool,
    replicas: int | None = None,
    bounds: tuple[int, int] = (0, 2**31 - 1),
    owned_by: str = "",
) -> list[Verdict]:
    """One target's conditions from what its reconcile did.

    Args:
        error: The reconcile's error label (``Outcome.error``), None when it ran.
        reason: The decision's reason, or the error.
        held: The fail-safe's hold reason, None when the policy decided.
        scaled: Whether replicas were changed.
        replicas: The count set or held.
        bounds: The target's (minReplicas, maxReplicas): a count at one is limited by it,
            as the HPA reports a count its bounds cut (the policies bound themselves, so
            the count they wanted beyond a bound is not known here).
        owned_by: The other autoscaler scaling the target ("" when none).

    Returns:
        AbleToScale, ScalingActive, ScalingLimited and MetricsHealthy.
    """
    if owned_by:
        why = f"{owned_by} scales this target; gpuscale leaves it alone"
        return [
            Verdict(ABLE_TO_SCALE, "False", OWNED_ELSEWHERE, why),
            Verdict(SCALING_ACTIVE, "False", OWNED_ELSEWHERE, why),
            Verdict(SCALING_LIMITED, "False", "DesiredWithinRange", ""),
            Verdict(METRICS_HEALTHY, "Unknown", OWNED_ELSEWHERE, "not read"),
        ]
    if error is not None:
        code = _ERROR_REASONS.get(error, "FailedReconcile")
        return [
            Verdict(ABLE_TO_SCALE, "False", code, reason),
            Verdict(SCALING_ACTIVE, "Unknown", code, "not reconciled"),
            Verdict(SCALING_LIMITED, "False", "DesiredWithinRange", ""),
            Verdict(METRICS_HEALTHY, "Unknown", code, "not read"),
        ]
    able = Verdict(
        ABLE_TO_SCALE,
        "True",
        "SucceededRescale" if scaled else "ReadyForNewScale",
        reason if scaled else "the target's /scale can be read and written",
    )
    limit = next((code for text, code in _LIMITS if text in reason), None)
    why = reason
    if limit is None and replicas is not None and replicas >= bounds[1]:
        limit, why = "TooManyReplicas", f"the count is at maxReplicas {bounds[1]}: {reason}"
    elif limit is None and replicas is not None and replicas <= bounds[0]:
        limit, why = "TooFewReplicas", f"the count is at minReplicas {bounds[0]}: {reason}"
    limited = (
        Verdict(SCALING_LIMITED, "True", limit, why)
        if limit is not None
        else Verdict(SCALING_LIMITED, "False", "DesiredWithinRange", "the count is within bounds")
    )
    if held is not None:
        return [
            able,
            Verdict(SCALING_ACTIVE, "False", "FailedGetMetrics", reason),
            limited,
            Verdict(METRICS_HEALTHY, "False", _camel(held), reason),
        ]
    return [
        able,
        Verdict(SCALING_ACTIVE, "True", "ValidMetricFound", "the policy decides the replicas"),
        limited,
        Verdict(METRICS_HEALTHY, "True", "MetricsFresh", "every signal is fresh"),
    ]


def invalid_verdicts(problem: str) -> list[Verdict]:
    """The conditions of an object that does not validate (nothing of it runs).

    Returns:
        AbleToScale Unknown, ScalingActive False (``InvalidSpec``) and MetricsHealthy Unknown.
    """
    return [
        Verdict(ABLE_TO_SCALE, "Unknown", INVALID_SPEC, "not reconciled"),
        Verdict(SCALING_ACTIVE, "False", INVALID_SPEC, problem),
        Verdict(METRICS_HEALTHY, "Unknown", INVALID_SPEC, "not read"),
    ]


def _camel(label: str) -> str:
    """``no_data`` -> ``NoData`` (a condition reason is one CamelCase word)."""
    return "".join(part[:1].upper() + part[1:] for part in label.replace("-", "_").split("_"))
