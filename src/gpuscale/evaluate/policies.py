"""The one list of policies the harness compares, and how each is configured fairly.

Adding a policy is one ``register`` call. Each ``PolicySpec`` says everything the
harness needs: the policy's typed config (a frozen dataclass, so it pickles to
worker processes), how its fair parameters follow from the scenario
(``FairInputs``), how to build the policy from its config, and the unit of every
parameter the report prints. The CLI's ``--policy`` choices, the runner's
defaults and run order, and the report's parameter table all read this registry.

This module imports only the policy modules (no numpy, no simulator), so the
CLI can list the choices without loading the simulator.
"""

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gpuscale.errors import config_error
from gpuscale.evaluate.knobs import Knob
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.hpa import DEFAULT_BEHAVIOR, HpaConfig, HpaPolicy
from gpuscale.scaling.hybrid import HybridConfig, HybridPolicy
from gpuscale.scaling.keda import KedaConfig, KedaPolicy
from gpuscale.scaling.kpa import KpaConfig, KpaPolicy
from gpuscale.scaling.oracle import OracleConfig, OraclePolicy
from gpuscale.scaling.policy import ScalingPolicy
from gpuscale.scaling.predictive import PredictiveConfig, PredictivePolicy
from gpuscale.scaling.static import StaticConfig, StaticPolicy

C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class FairInputs:
    """What the fair rules read from a scenario (the rules are in ``runner``'s docstring).

    Attributes:
        min_replicas: Lower bound every policy shares, replicas.
        max_replicas: Upper bound every policy shares, replicas.
        static_replicas: The static quantile of the per-second requirement, replicas.
        target_utilization: The one utilisation target of the reactive baselines, 0 to 1.
        per_replica: Requests (in flight plus queued) one replica holds at that target.
        lead_s: The cold start the oracle plans for, seconds.
        hold_s: Termination grace plus that cold start, seconds.
        node_lead_s: Node provisioning time when the run must grow its nodes, else 0 s.
        fast_capacity: Replicas that fit on the nodes that are always up.
        node_size: Replicas (GPUs) per node.
        node_keep_s: An idle node is removed after this long, seconds.
    """

    min_replicas: int
    max_replicas: int
    static_replicas: int
    target_utilization: float
    per_replica: float
    lead_s: float
    hold_s: float
    node_lead_s: float
    fast_capacity: int
    node_size: int
    node_keep_s: float


@dataclass(frozen=True, slots=True)
class PolicySpec(Generic[C]):
    """One policy as the harness knows it.

    Attributes:
        name: The ``--policy`` name, also the policy's name in results.
        config_type: The policy's config dataclass.
        fair: Derives the config from the scenario by the policy's fair rule.
        build: Builds the policy from (config, per-second requirement, name); only the
            oracle reads the requirement.
        fair_fields: The config fields the fair rule sets: recorded in ``results.json``
            and printed, with units, in the report.
        units: Units by field name, for fields whose meaning the harness fixes (the
            signal a target is on); they override the field's ``metadata["unit"]``.
        knob: The main knob a sweep varies for the cost-against-attainment curve
            (``evaluate.knobs``); None runs the fair config alone.
        default: Whether ``gpuscale evaluate`` runs it when no ``--policy`` is given
            (every policy can be chosen by name).
    """

    name: str
    config_type: type[C]
    fair: Callable[[FairInputs], C]
    build: Callable[[C, Sequence[int], str], ScalingPolicy]
    fair_fields: tuple[str, ...]
    units: Mapping[str, str] = field(default_factory=dict)
    knob: Knob | None = None
    default: bool = True

    def unit(self, key: str) -> str | None:
        """The unit of a config field: ``units``, else its ``metadata["unit"]``.

        Returns:
            The unit, or None when neither gives one.
        """
        if key in self.units:
            return self.units[key]
        for f in dataclasses.fields(self.config_type):  # type: ignore[arg-type]
            if f.name == key and "unit" in f.metadata:
                return str(f.metadata["unit"])
        return None

    def record(self, config: C) -> dict[str, Any]:
        """The fair fields of a config, as recorded in ``results.json``.

        Returns:
            Field name to value, in ``fair_fields`` order.
        """
        return {key: getattr(config, key) for key in self.fair_fields}

    def fair_units(self) -> dict[str, str]:
        """The unit of each fair field.

        Returns:
            Field name to unit (``register`` checks every fair field has one).
        """
        return {key: self.unit(key) or "" for key in self.fair_fields}


_REGISTRY: dict[str, PolicySpec[Any]] = {}


def register(spec: PolicySpec[Any]) -> None:
    """Add a policy; it runs after those registered before it.

    Raises:
        ValueError: The name is taken, the config is not a dataclass, or a fair field
            is not a field of the config or has no unit.
    """
    if spec.name in _REGISTRY:
        raise ValueError(f"policy {spec.name!r} is registered twice")
    if not dataclasses.is_dataclass(spec.config_type):
        raise ValueError(f"policy {spec.name!r}: config {spec.config_type!r} is not a dataclass")
    known = {f.name for f in dataclasses.fields(spec.config_type)}
    for key in spec.fair_fields:
        if key not in known or spec.unit(key) is None:
            raise ValueError(f"policy {spec.name!r}: fair field {key!r} is unknown or has no unit")
    _REGISTRY[spec.name] = spec


def unregister(name: str) -> None:
    """Remove a policy (for tests and plug-ins that registered one); unknown names are ignored."""
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    """Every registered policy, in run and report order.

    Returns:
        The names.
    """
    return tuple(_REGISTRY)


def get(name: str) -> PolicySpec[Any]:
    """The spec of a registered policy.

    Returns:
        The spec.

    Raises:
        ConfigError: No policy has that name.
    """
    spec = _REGISTRY.get(name)
    if spec is None:
        raise config_error(f"--policy {name}", "unknown policy", f"use one of {', '.join(names())}")
    return spec


def default_names() -> tuple[str, ...]:
    """The policies run when none is chosen, in run and report order.

    Returns:
        The names of the specs with ``default`` set.
    """
    return tuple(name for name, spec in _REGISTRY.items() if spec.default)


def choose(requested: Sequence[str]) -> tuple[str, ...]:
    """Check a selection of policies; none selected means the defaults (``default_names``).

    Returns:
        The names, in the order given.

    Raises:
        ConfigError: A name is unknown or repeated.
    """
    if not requested:
        return default_names()
    for name in requested:
        get(name)
    if len(set(requested)) != len(requested):
        raise config_error(
            f"--policy {' '.join(requested)}", "a policy is named twice", "name each once"
        )
    return tuple(requested)


# Units the harness knows better than the config's own metadata: what the target
# measures depends on the signal the harness gives the policy.
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
"""Share of time a kernel runs (percent): what the paper and most guides scale on."""

SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
"""Share of SM cycles with a warp resident (ratio): what a knowledgeable user scales on."""

HPA_UNITS = {"target_average_value": "% GPU utilisation per pod"}
"""The harness's ``hpa`` and ``hpa-behavior`` read ``DCGM_FI_DEV_GPU_UTIL`` (percent)."""

HPA_SM_UNITS = {"target_average_value": "SM active ratio per pod"}
"""``hpa-sm`` reads ``DCGM_FI_PROF_SM_ACTIVE`` (a ratio, 0 to 1)."""

KEDA_UTIL_UNITS = {"threshold": "% GPU utilisation per replica"}
"""``keda-util`` sums ``DCGM_FI_DEV_GPU_UTIL`` over the pods' GPUs."""

KEDA_SM_UNITS = {"threshold": "SM active ratio per replica"}
"""``keda-sm`` sums ``DCGM_FI_PROF_SM_ACTIVE`` over the pods' GPUs."""

KPA_UNITS = {"target": "concurrent requests per replica"}
"""The harness's KPA reads in-flight plus queued requests."""


def _static(f: FairInputs) -> StaticConfig:
    return StaticConfig(replicas=f.static_replicas)


def _hpa(f: FairInputs) -> HpaConfig:
    return HpaConfig(
        target_average_value=f.target_utilization * 100.0,
        min_replicas=f.min_replicas,
        max_replicas=f.max_replicas,
    )


def _hpa_behavior(f: FairInputs) -> HpaConfig:
    return dataclasses.replace(_hpa(f), behavior=DEFAULT_BEHAVIOR)


def _hpa_sm(f: FairInputs) -> HpaConfig:
    return dataclasses.replace(_hpa(f), metric=SM_ACTIVE, target_average_value=f.target_utilization)


def _keda(f: FairInputs) -> KedaConfig:
    return KedaConfig(
        threshold=f.per_replica, min_replicas=f.min_replicas, max_replicas=f.max_replicas
    )


def _keda_util(f: FairInputs) -> KedaConfig:
    return dataclasses.replace(
        _keda(f),
        query_signal=Signal(GPU_UTIL, aggregation="sum"),
        threshold=f.target_utilization * 100.0,
    )


def _keda_sm(f: FairInputs) -> KedaConfig:
    return dataclasses.replace(
        _keda(f), query_signal=Signal(SM_ACTIVE, aggregation="sum"), threshold=f.target_utilization
    )


def _kpa(f: FairInputs) -> KpaConfig:
    return KpaConfig(target=f.per_replica, min_replicas=f.min_replicas, max_replicas=f.max_replicas)


def _oracle(f: FairInputs) -> OracleConfig:
    return OracleConfig(
        lead_s=f.lead_s,
        node_lead_s=f.node_lead_s,
        fast_capacity=f.fast_capacity,
        node_size=f.node_size,
        node_keep_s=f.node_keep_s,
        hold_s=f.hold_s,
        min_replicas=f.min_replicas,
        max_replicas=f.max_replicas,
    )


def _build_static(c: StaticConfig, _required: Sequence[int], name: str) -> ScalingPolicy:
    return StaticPolicy.from_config(c, name)


def _build_hpa(c: HpaConfig, _required: Sequence[int], name: str) -> ScalingPolicy:
    return HpaPolicy(c, name)


def _build_keda(c: KedaConfig, _required: Sequence[int], name: str) -> ScalingPolicy:
    return KedaPolicy(c, name)


def _build_kpa(c: KpaConfig, _required: Sequence[int], name: str) -> ScalingPolicy:
    return KpaPolicy(c, name)


def _build_oracle(c: OracleConfig, required: Sequence[int], name: str) -> ScalingPolicy:
    return OraclePolicy.from_config(required, c, name)


_BOUNDS = ("min_replicas", "max_replicas")

register(
    PolicySpec(
        "static",
        StaticConfig,
        _static,
        _build_static,
        ("replicas",),
        knob=Knob("replicas", "replicas", 0.5, 1.5, integer=True),
    )
)
register(
    PolicySpec(
        "hpa",
        HpaConfig,
        _hpa,
        _build_hpa,
        ("target_average_value", *_BOUNDS),
        units=HPA_UNITS,
        knob=Knob(
            "target_average_value", HPA_UNITS["target_average_value"], 30.0, 95.0, relative=False
        ),
    )
)
register(
    PolicySpec(
        "keda",
        KedaConfig,
        _keda,
        _build_keda,
        ("threshold", *_BOUNDS),
        knob=Knob("threshold", "requests per replica", 0.4, 1.4),
    )
)
register(
    PolicySpec(
        "kpa",
        KpaConfig,
        _kpa,
        _build_kpa,
        ("target", *_BOUNDS),
        units=KPA_UNITS,
        knob=Knob("target", "concurrent requests per replica", 0.4, 1.4),
    )
)
register(
    PolicySpec(
        "hpa-behavior",
        HpaConfig,
        _hpa_behavior,
        _build_hpa,
        ("target_average_value", *_BOUNDS),
        units=HPA_UNITS,
        default=False,
    )
)
register(
    PolicySpec(
        "hpa-sm",
        HpaConfig,
        _hpa_sm,
        _build_hpa,
        ("metric", "target_average_value", *_BOUNDS),
        units={**HPA_SM_UNITS, "metric": "DCGM field"},
    )
)
register(
    PolicySpec(
        "keda-util",
        KedaConfig,
        _keda_util,
        _build_keda,
        ("threshold", *_BOUNDS),
        units=KEDA_UTIL_UNITS,
        default=False,
    )
)
register(
    PolicySpec(
        "keda-sm",
        KedaConfig,
        _keda_sm,
        _build_keda,
        ("threshold", *_BOUNDS),
        units=KEDA_SM_UNITS,
        default=False,
    )
)
register(
    PolicySpec(
        "oracle",
        OracleConfig,
        _oracle,
        _build_oracle,
        (
            "lead_s",
            "node_lead_s",
            "fast_capacity",
            "node_size",
            "node_keep_s",
            "hold_s",
            *_BOUNDS,
        ),
    )
)


# Predictive and hybrid (issue 9): not in the default set until their matched-SLO
# targets are shown. Demand per replica is KEDA's and KPA's (in flight plus queued at
# the 70 % target); node provisioning counts beyond the always-up nodes, as the
# oracle's; the cold start is measured from the run's own pods (60 s until then).
def _predictive(f: FairInputs) -> PredictiveConfig:
    return PredictiveConfig(
        per_replica=f.per_replica,
        node_provision_s=f.node_lead_s,
        fast_capacity=f.fast_capacity,
        min_replicas=f.min_replicas,
        max_replicas=f.max_replicas,
    )


def _hybrid(f: FairInputs) -> HybridConfig:
    p = _predictive(f)
    fields = {k.name: getattr(p, k.name) for k in dataclasses.fields(PredictiveConfig)}
    return HybridConfig(**fields, sm_target=f.target_utilization)


def _build_predictive(c: PredictiveConfig, _required: Sequence[int], name: str) -> ScalingPolicy:
    return PredictivePolicy(c, name)


def _build_hybrid(c: HybridConfig, _required: Sequence[int], name: str) -> ScalingPolicy:
    return HybridPolicy(c, name)


_PLAN_FIELDS = ("per_replica", "node_provision_s", "fast_capacity", *_BOUNDS)
_PLAN_KNOB = Knob("per_replica", "requests per replica", 0.4, 1.4)
register(
    PolicySpec(
        "predictive",
        PredictiveConfig,
        _predictive,
        _build_predictive,
        _PLAN_FIELDS,
        units={"per_replica": "requests (in flight + queued) per replica"},
        knob=_PLAN_KNOB,
        default=False,
    )
)
register(
    PolicySpec(
        "hybrid",
        HybridConfig,
        _hybrid,
        _build_hybrid,
        (*_PLAN_FIELDS, "sm_target"),
        units={"per_replica": "requests (in flight + queued) per replica"},
        knob=_PLAN_KNOB,
        default=False,
    )
)
