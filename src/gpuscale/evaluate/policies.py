"""The one list of policies the harness compares, and how each is configured fairly.

Each entry runs a kind of the one policy catalogue (``scaling.catalogue``) with the
harness's fair settings and sweep knob; adding a variant is one
``register(PolicySpec(...))`` call here (the mechanics are in
``evaluate.registry``, re-exported by this module). The CLI's ``--policy``
choices, the runner's defaults and run order, and the report's parameter table
all read this registry.

This module imports only the policy modules (no numpy, no simulator), so the
CLI can list the choices without loading the simulator.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

from gpuscale.evaluate.knobs import Knob
from gpuscale.evaluate.registry import FairInputs as FairInputs
from gpuscale.evaluate.registry import PolicySpec as PolicySpec
from gpuscale.evaluate.registry import choose as choose
from gpuscale.evaluate.registry import default_names as default_names
from gpuscale.evaluate.registry import get as get
from gpuscale.evaluate.registry import names as names
from gpuscale.evaluate.registry import register as register
from gpuscale.evaluate.registry import unregister as unregister
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.catalogue import KINDS, PolicyKind
from gpuscale.scaling.hpa import DEFAULT_BEHAVIOR, HpaConfig
from gpuscale.scaling.hybrid import HybridConfig
from gpuscale.scaling.keda import KedaConfig
from gpuscale.scaling.kpa import KpaConfig
from gpuscale.scaling.oracle import OracleConfig, OraclePolicy
from gpuscale.scaling.policy import PROMETHEUS_QUERY, ScalingPolicy
from gpuscale.scaling.predictive import PredictiveConfig
from gpuscale.scaling.static import StaticConfig
from gpuscale.sim.series import RECEIVED

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


def _build_oracle(c: OracleConfig, required: Sequence[int], name: str) -> ScalingPolicy[Any]:
    return OraclePolicy.from_config(required, c, name)


ORACLE = PolicyKind(
    "oracle",
    OracleConfig,
    None,
    PROMETHEUS_QUERY,
    "a hindsight plan that knows the demand ahead (the simulator's yardstick)",
    hindsight=True,
    make_hindsight=_build_oracle,
)
"""The harness's own kind: the oracle plans from the future demand, so no live loop runs it."""

_BOUNDS = ("min_replicas", "max_replicas")

register(
    PolicySpec(
        "static",
        KINDS["static"],
        _static,
        ("replicas",),
        knob=Knob("replicas", "replicas", 0.5, 1.5, integer=True, cheap_up=False, minimum=1),
    )
)
_HPA_KNOB = Knob(
    "target_average_value",
    HPA_UNITS["target_average_value"],
    30.0,
    95.0,
    relative=False,
    maximum=100.0,
)
"""HPA's target on GPU_UTIL (%), swept as absolute values up to 100, for both HPA paths."""
register(
    PolicySpec(
        "hpa",
        KINDS["hpa"],
        _hpa,
        ("target_average_value", *_BOUNDS),
        units=HPA_UNITS,
        knob=_HPA_KNOB,
    )
)
register(
    PolicySpec(
        "keda",
        KINDS["keda"],
        _keda,
        ("threshold", *_BOUNDS),
        knob=Knob("threshold", "requests per replica", 0.4, 1.4),
    )
)
register(
    PolicySpec(
        "kpa",
        KINDS["kpa"],
        _kpa,
        ("target", *_BOUNDS),
        units=KPA_UNITS,
        knob=Knob("target", "concurrent requests per replica", 0.4, 1.4),
    )
)
register(
    PolicySpec(
        "hpa-behavior",
        KINDS["hpa"],
        _hpa_behavior,
        ("target_average_value", *_BOUNDS),
        units=HPA_UNITS,
        default=False,
        knob=_HPA_KNOB,
    )
)
register(
    PolicySpec(
        "hpa-sm",
        KINDS["hpa"],
        _hpa_sm,
        ("metric", "target_average_value", *_BOUNDS),
        units={**HPA_SM_UNITS, "metric": "DCGM field"},
        knob=Knob(
            "target_average_value",
            HPA_SM_UNITS["target_average_value"],
            0.1,
            0.9,
            relative=False,
            maximum=1.0,
        ),
    )
)
register(
    PolicySpec(
        "keda-util",
        KINDS["keda"],
        _keda_util,
        ("threshold", *_BOUNDS),
        units=KEDA_UTIL_UNITS,
        default=False,
        knob=Knob("threshold", KEDA_UTIL_UNITS["threshold"], 0.4, 1.4),
    )
)
register(
    PolicySpec(
        "keda-sm",
        KINDS["keda"],
        _keda_sm,
        ("threshold", *_BOUNDS),
        units=KEDA_SM_UNITS,
        default=False,
        knob=Knob("threshold", KEDA_SM_UNITS["threshold"], 0.4, 1.4),
    )
)
register(
    PolicySpec(
        "oracle",
        ORACLE,
        _oracle,
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


QUEUE_WAIT_SHARE = 0.25
"""hybrid's ``queue_wait_s`` as a share of the wait the SLO allows a mean request: with
exponential waits, a mean of a quarter of that budget leaves e^-4 (2 %) of the
requests that wait past it."""


# Predictive and hybrid: not in the default set until their matched-SLO
# targets are shown. Demand per replica is KEDA's and KPA's (in flight plus queued at
# the 70 % target); node provisioning counts beyond the always-up nodes, as the
# oracle's; the cold start is measured from the run's own pods (60 s until then).
def _predictive(f: FairInputs) -> PredictiveConfig:
    return PredictiveConfig(
        per_replica=f.per_replica,
        node_provision_s=f.node_lead_s,
        fast_capacity=f.fast_capacity,
        node_size=f.node_size,
        min_replicas=f.min_replicas,
        max_replicas=f.max_replicas,
    )


def _hybrid(f: FairInputs) -> HybridConfig:
    p = _predictive(f)
    fields = {k.name: getattr(p, k.name) for k in dataclasses.fields(PredictiveConfig)}
    return HybridConfig(
        **fields,
        queue_wait_s=round(QUEUE_WAIT_SHARE * f.wait_budget_s, 3),
        wait_budget_s=round(f.wait_budget_s, 3),
    )


DEPLOY_TARGET = 0.99
"""The attainment ``hybrid-deploy`` is told to meet: the harness's default target."""


def _hybrid_deploy(f: FairInputs) -> HybridConfig:
    return dataclasses.replace(
        _hybrid(f),
        target_attainment=DEPLOY_TARGET,
        arrivals_metric=RECEIVED,
        pod_concurrency=f.pod_concurrency,
    )


_PLAN_FIELDS = ("per_replica", "node_provision_s", "fast_capacity", "node_size", *_BOUNDS)
_PLAN_KNOB = Knob("per_replica", "requests per replica", 0.6, 1.4)
# Told its target, hybrid sizes its floor, plan and reactive need by it (per_replica
# stands in only until a pod's slots are known and its history can show its bursts
# at that target), so the target is the knob an operator turns: a lower one holds
# less headroom.
_TARGET_KNOB = Knob(
    "target_attainment",
    "share of requests within the SLO asked for",
    0.95,
    0.998,
    relative=False,
    cheap_up=False,
    minimum=0.5,
    maximum=0.999,
)
register(
    PolicySpec(
        "predictive",
        KINDS["predictive"],
        _predictive,
        _PLAN_FIELDS,
        units={"per_replica": "requests (in flight + queued) per replica"},
        knob=_PLAN_KNOB,
        default=False,
    )
)
register(
    PolicySpec(
        "hybrid",
        KINDS["hybrid"],
        _hybrid,
        (*_PLAN_FIELDS, "sm_target", "queue_wait_s", "wait_budget_s"),
        units={"per_replica": "requests (in flight + queued) per replica"},
        knob=_PLAN_KNOB,
        default=False,
    )
)
register(
    PolicySpec(
        "hybrid-deploy",
        KINDS["hybrid"],
        _hybrid_deploy,
        (
            *_PLAN_FIELDS,
            "sm_target",
            "queue_wait_s",
            "wait_budget_s",
            "target_attainment",
            "pod_concurrency",
        ),
        units={"per_replica": "requests (in flight + queued) per replica"},
        knob=_TARGET_KNOB,
        default=False,
    )
)
