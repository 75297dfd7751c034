"""A KEDA ScaledObject's ``spec`` as a GPUScaler target: what a KEDA user has, read as written.

A team moving from KEDA has ScaledObjects with a Prometheus trigger. Rather
than make them translate each field, a GPUScaler target may be the ScaledObject's
``spec`` as KEDA spells it (``minReplicaCount``, ``pollingInterval``, ``fallback``,
``advanced.horizontalPodAutoscalerConfig.behavior``, ``triggers[].metadata``), and
this module reads it into the ``keda`` policy's own target: the same config,
the same decisions. What gpuscale cannot do as KEDA does is refused at load
with a line that names the key and what is supported instead:

* one trigger, of type ``prometheus`` (KEDA's other scalers, several triggers and
  ``scalingModifiers`` are not read);
* no ``authenticationRef`` or ``authModes``: gpuscale reads no
  TriggerAuthentication; the ``gpuscale autoscale --prometheus-*`` credentials
  apply to its own ``--prometheus`` server only;
* no ``restoreToOriginalReplicaCount: true``: a removed target keeps its replicas.

A file may also hold whole ScaledObject documents (``apiVersion: keda.sh/v1alpha1``,
``kind: ScaledObject``): each is read as a GPUScaler of its name with its spec as
the one target, and errors name the ScaledObject's own keys. One paused by KEDA's
annotations is refused.

The trigger's ``serverAddress``, ``customHeaders``, ``queryParameters``,
``namespace``, ``unsafeSsl`` and ``timeout`` become the target's
``metrics.server``: the controller queries that server for this target. The
trigger metadata's values are strings in KEDA; numbers and booleans written
without quotes are read too.
"""

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpuscale.control.params import build, model_for
from gpuscale.errors import ConfigError
from gpuscale.metrics.rawquery import parse
from gpuscale.scaling.baseline import HpaBehavior

if TYPE_CHECKING:
    BehaviorModel = Any
else:
    BehaviorModel = model_for(HpaBehavior)

_AUTH_FIX = (
    "gpuscale reads no TriggerAuthentication: remove it, and point serverAddress at the "
    "Prometheus given to gpuscale autoscale --prometheus, whose --prometheus-* credentials apply"
)


class _Keda(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def pairs(text: str | None, key: str) -> dict[str, str]:
    """KEDA's ``k1=v1,k2=v2`` metadata form as a mapping.

    Returns:
        {key: value}, empty for None.

    Raises:
        ValueError: An item without ``=`` or with an empty key.
    """
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{key} must be key=value pairs separated by commas")
        out[name.strip()] = value.strip()
    return out


class KedaScaleTargetRef(_Keda):
    """``spec.scaleTargetRef`` as KEDA writes it (in the ScaledObject's namespace)."""

    api_version: str = Field("apps/v1", alias="apiVersion", description="API group/version.")
    kind: str = Field("Deployment", description="Kind with a /scale subresource.")
    name: str = Field(min_length=1, max_length=253, description="Object name.")


class PrometheusMetadata(_Keda):
    """A Prometheus trigger's ``metadata`` (KEDA's ``prometheus_scaler.go`` fields)."""

    server_address: str = Field(alias="serverAddress", min_length=1)
    query: str = Field(min_length=1, description="PromQL, read as written.")
    threshold: float = Field(gt=0, description="Target value per replica (AverageValue).")
    activation_threshold: float = Field(0.0, alias="activationThreshold", ge=0)
    namespace: str | None = Field(None, description="Sent as the namespace query parameter.")
    custom_headers: str | None = Field(None, alias="customHeaders")
    query_parameters: str | None = Field(None, alias="queryParameters")
    ignore_null_values: bool = Field(
        True, alias="ignoreNullValues", description="An empty result reads as 0."
    )
    unsafe_ssl: bool = Field(False, alias="unsafeSsl", description="Skip certificate checks.")
    timeout: float | None = Field(None, gt=0, description="Request timeout, milliseconds.")
    auth_modes: str | None = Field(None, alias="authModes")

    @field_validator("query")
    @classmethod
    def _promql(cls, value: str) -> str:
        parse(value)  # a ValueError naming the parser's reason
        return value

    @field_validator("custom_headers", "query_parameters")
    @classmethod
    def _pairs(cls, value: str | None) -> str | None:
        pairs(value, "the value")
        return value

    @field_validator("auth_modes")
    @classmethod
    def _no_auth(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError(f"is not supported; {_AUTH_FIX}")
        return value


class KedaTrigger(_Keda):
    """One entry of ``spec.triggers``."""

    type: Literal["prometheus"] = Field(description="Only prometheus is read.")
    name: str | None = Field(None, description="Names the signal in hold reasons.")
    metadata: PrometheusMetadata
    metric_type: Literal["AverageValue", "Value"] = Field("AverageValue", alias="metricType")
    use_cached_metrics: bool = Field(
        False, alias="useCachedMetrics", description="Read once per poll either way."
    )
    authentication_ref: dict[str, Any] | None = Field(None, alias="authenticationRef")

    @field_validator("authentication_ref")
    @classmethod
    def _no_auth(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            raise ValueError(f"is not supported; {_AUTH_FIX}")
        return value


class KedaFallbackSpec(_Keda):
    """``spec.fallback``."""

    failure_threshold: int = Field(alias="failureThreshold", ge=0)
    replicas: int = Field(ge=0)
    behavior: Literal[
        "static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower"
    ] = "static"


class HpaSettings(_Keda):
    """``spec.advanced.horizontalPodAutoscalerConfig``."""

    name: str | None = Field(None, description="The HPA KEDA would create; none is created.")
    behavior: BehaviorModel | None = None

    @field_validator("behavior")
    @classmethod
    def _api_limits(cls, value: Any) -> Any:  # noqa: ANN401 - the derived behavior model
        if value is not None:
            try:
                build(value).validate("behavior")
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value


class KedaAdvanced(_Keda):
    """``spec.advanced``."""

    restore_to_original_replica_count: bool = Field(False, alias="restoreToOriginalReplicaCount")
    horizontal_pod_autoscaler_config: HpaSettings | None = Field(
        None, alias="horizontalPodAutoscalerConfig"
    )

    @field_validator("restore_to_original_replica_count")
    @classmethod
    def _kept(cls, value: bool) -> bool:
        if value:
            raise ValueError("is not supported; a removed target keeps its replicas: use false")
        return value


class ScaledObjectTarget(_Keda):
    """A ScaledObject's ``spec`` with one Prometheus trigger, as a GPUScaler target."""

    scale_target_ref: KedaScaleTargetRef = Field(alias="scaleTargetRef")
    polling_interval: int = Field(30, alias="pollingInterval", ge=1)
    cooldown_period: int = Field(300, alias="cooldownPeriod", ge=0)
    initial_cooldown_period: int = Field(0, alias="initialCooldownPeriod", ge=0)
    idle_replica_count: int | None = Field(None, alias="idleReplicaCount", ge=0)
    min_replica_count: int = Field(0, alias="minReplicaCount", ge=0)
    max_replica_count: int = Field(100, alias="maxReplicaCount", ge=1)
    fallback: KedaFallbackSpec | None = None
    advanced: KedaAdvanced | None = None
    triggers: list[KedaTrigger] = Field(min_length=1, max_length=1)
    metrics: dict[str, Any] | None = Field(
        None, description="gpuscale's own freshness settings (a target's metrics block)."
    )

    @model_validator(mode="after")
    def _counts(self) -> "ScaledObjectTarget":
        if self.min_replica_count > self.max_replica_count:
            raise ValueError(
                f"minReplicaCount {self.min_replica_count} is above "
                f"maxReplicaCount {self.max_replica_count}"
            )
        idle = self.idle_replica_count
        if idle is not None and idle >= self.min_replica_count:
            raise ValueError(f"idleReplicaCount {idle} must be below minReplicaCount")
        return self

    def target(self) -> dict[str, Any]:
        """The same target in gpuscale's spelling (the ``keda`` policy), ready to validate.

        Returns:
            A target mapping: ``scaleTargetRef``, bounds, ``policy`` and ``metrics``.
        """
        trigger = self.triggers[0]
        meta = trigger.metadata
        ref = self.scale_target_ref
        policy: dict[str, Any] = {
            "name": "keda",
            "threshold": meta.threshold,
            "activationThreshold": meta.activation_threshold,
            "metricType": trigger.metric_type,
            "querySignal": {
                "metric": trigger.name or "prometheus",
                "query": meta.query,
                "optional": meta.ignore_null_values,
            },
            "pollingIntervalSeconds": self.polling_interval,
            "cooldownPeriodSeconds": self.cooldown_period,
            "initialCooldownPeriodSeconds": self.initial_cooldown_period,
        }
        hpa = self.advanced.horizontal_pod_autoscaler_config if self.advanced else None
        if hpa is not None and hpa.behavior is not None:
            policy["behavior"] = hpa.behavior.model_dump(by_alias=True, exclude_unset=True)
        if self.fallback is not None:
            policy["fallback"] = self.fallback.model_dump(by_alias=True)
        floor = self.min_replica_count
        if self.idle_replica_count is not None:
            policy["activeMinReplicas"] = floor
            floor = self.idle_replica_count
        params = pairs(meta.query_parameters, "queryParameters")
        if meta.namespace:
            params["namespace"] = meta.namespace
        server: dict[str, Any] = {
            "address": meta.server_address,
            "headers": pairs(meta.custom_headers, "customHeaders"),
            "queryParameters": params,
            "insecureSkipVerify": meta.unsafe_ssl,
        }
        if meta.timeout is not None:
            server["timeoutSeconds"] = meta.timeout / 1000
        return {
            "scaleTargetRef": {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name},
            "minReplicas": floor,
            "maxReplicas": self.max_replica_count,
            "policy": policy,
            "metrics": {**(self.metrics or {}), "server": server},
        }


SCALED_OBJECT_API = "keda.sh/v1alpha1"
PAUSE_ANNOTATIONS = ("autoscaling.keda.sh/paused", "autoscaling.keda.sh/paused-replicas")
"""KEDA's pause annotations: gpuscale would scale a paused object, so it refuses them."""


def is_scaled_object_document(data: object) -> bool:
    """Whether a document of the file is a whole ScaledObject (``kind: ScaledObject``).

    Returns:
        True for a KEDA document, read as a GPUScaler with its spec as the one target.
    """
    return isinstance(data, dict) and data.get("kind") == "ScaledObject"


def scaled_object_problem(data: dict[str, Any]) -> tuple[tuple[str, ...], str, str] | None:
    """Why a whole ScaledObject document cannot be read, if it cannot.

    Returns:
        (key path, problem, fix), or None when it can be read.
    """
    if data.get("apiVersion") != SCALED_OBJECT_API:
        return ("apiVersion",), f"must be {SCALED_OBJECT_API} for a ScaledObject", "fix it"
    metadata = data.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    paused = [a for a in PAUSE_ANNOTATIONS if isinstance(annotations, dict) and a in annotations]
    if paused:
        return (
            ("metadata", "annotations", paused[0]),
            "pauses KEDA's scaling, which gpuscale does not read",
            "remove the annotation, or leave this ScaledObject out of the file",
        )
    return None


def as_gpuscaler(data: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """A whole ScaledObject document as the GPUScaler holding its spec as the one target.

    Returns:
        The GPUScaler document (its name and namespace the ScaledObject's).
    """
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": data.get("metadata"),
        "spec": {"targets": [data.get("spec")]},
    }


def document_loc(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """A key path of that GPUScaler as the ScaledObject document spells it.

    Returns:
        ``spec.targets[0].X`` as ``spec.X``; other paths unchanged.
    """
    return ("spec", *loc[3:]) if loc[:3] == ("spec", "targets", 0) else loc


def is_scaled_object(data: object) -> bool:
    """Whether a target mapping is written as a ScaledObject spec (it has ``triggers``).

    Returns:
        True for KEDA's spelling.
    """
    return isinstance(data, dict) and "triggers" in data
