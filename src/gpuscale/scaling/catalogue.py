"""The one catalogue of scaling policies: names, typed configs, builders and signal paths.

Every reader of policies reads this list: the live controller's GPUScaler schema
(``control.params`` derives each ``policy:`` block from a kind's config
dataclass, units and defaults included), the CRD generated from it, the
evaluation harness (``evaluate.policies`` adds only its fair settings and sweep
knobs to a kind) and the CLI's choices. A kind declares its signal path, so the
table of paths in docs/baselines.md is generated from here (``path_table``).

A kind may be a hindsight one (``hindsight``: built from the future demand too),
which only the simulator can run; the evaluation harness defines its oracle so
(``evaluate.policies``), and the live controller reads ``LIVE_KINDS``. The
catalogue itself imports no numpy, so the controller loads none.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any

from gpuscale.scaling.hpa import HpaConfig, HpaPolicy
from gpuscale.scaling.hybrid import HybridConfig, HybridPolicy
from gpuscale.scaling.keda import KedaConfig, KedaPolicy
from gpuscale.scaling.kpa import KpaConfig, KpaPolicy
from gpuscale.scaling.policy import PROMETHEUS_QUERY, QUEUE_PROXY, ScalingPolicy, SignalPath
from gpuscale.scaling.predictive import PredictiveConfig, PredictivePolicy
from gpuscale.scaling.static import StaticConfig, StaticPolicy

BOUNDS = ("min_replicas", "max_replicas")
"""Config fields a target's ``minReplicas``/``maxReplicas`` set."""


@dataclass(frozen=True, slots=True)
class PolicyKind:
    """One policy as every reader knows it.

    Attributes:
        name: The policy's name (``policy.name`` in a GPUScaler, ``--policy`` in evaluate).
        config_type: Its config dataclass: typed fields, units in ``metadata["unit"]``,
            defaults, and checks in ``__post_init__``.
        make: Builds the policy from (config, name); None for a hindsight kind.
        path: The signal path its policies declare (``ScalingPolicy.signal_path``).
        summary: One line on what it is.
        hindsight: Builds from the future demand too (``make_hindsight``): simulator only.
        make_hindsight: Builds from (config, per-second requirement, name).
    """

    name: str
    config_type: type[Any]
    make: Callable[[Any, str], ScalingPolicy[Any]] | None
    path: SignalPath
    summary: str
    hindsight: bool = False
    make_hindsight: Callable[[Any, Sequence[int], str], ScalingPolicy[Any]] | None = None

    @property
    def live(self) -> bool:
        """Whether the live controller can run it (it needs no future)."""
        return not self.hindsight

    def bounded(self) -> bool:
        """Whether the config has ``min_replicas``/``max_replicas`` fields.

        Returns:
            True when a target's bounds are passed to the config.
        """
        names = {f.name for f in fields(self.config_type)}
        return all(b in names for b in BOUNDS)

    def build(
        self,
        config: Any,  # noqa: ANN401 - the kind's own config dataclass
        name: str,
        required: Sequence[int] | None = None,
    ) -> ScalingPolicy[Any]:
        """A policy of this kind.

        Args:
            config: An instance of ``config_type``.
            name: The policy's name in results and logs.
            required: The per-second requirement; read only by a hindsight kind.

        Returns:
            The policy.

        Raises:
            ValueError: A hindsight kind without ``required``.
        """
        if self.make_hindsight is not None:
            if required is None:
                raise ValueError(f"policy {self.name} plans in hindsight: give the requirement")
            return self.make_hindsight(config, required, name)
        if self.make is None:
            raise ValueError(f"policy {self.name} has no builder")
        return self.make(config, name)


def _static(config: StaticConfig, name: str) -> ScalingPolicy[Any]:
    return StaticPolicy.from_config(config, name)


KINDS: Mapping[str, PolicyKind] = MappingProxyType(
    {
        k.name: k
        for k in (
            PolicyKind("static", StaticConfig, _static, PROMETHEUS_QUERY, "a fixed replica count"),
            PolicyKind(
                "hpa",
                HpaConfig,
                HpaPolicy,
                PROMETHEUS_QUERY,
                "Kubernetes' HorizontalPodAutoscaler on a per-pod metric",
            ),
            PolicyKind(
                "keda",
                KedaConfig,
                KedaPolicy,
                PROMETHEUS_QUERY,
                "KEDA's Prometheus trigger and the HPA it drives",
            ),
            PolicyKind(
                "kpa",
                KpaConfig,
                KpaPolicy,
                QUEUE_PROXY,
                "Knative's autoscaler on concurrency sampled each second",
            ),
            PolicyKind(
                "predictive",
                PredictiveConfig,
                PredictivePolicy,
                PROMETHEUS_QUERY,
                "a seasonal forecast planned a cold start ahead",
            ),
            PolicyKind(
                "hybrid",
                HybridConfig,
                HybridPolicy,
                PROMETHEUS_QUERY,
                "the forecast's plan or the load's need now, whichever is larger, health-aware",
            ),
        )
    }
)
"""Every policy a user can run, in the order they are listed and run."""

LIVE_KINDS: Mapping[str, PolicyKind] = MappingProxyType(
    {name: k for name, k in KINDS.items() if k.live}
)
"""The kinds a GPUScaler may name (every catalogue kind is live)."""


def get(name: str) -> PolicyKind:
    """The kind of a policy name.

    Returns:
        The kind.

    Raises:
        KeyError: No kind has that name.
    """
    return KINDS[name]


def path_table() -> str:
    """The signal path each kind declares, as a Markdown table (docs/baselines.md holds it).

    Returns:
        The table, one row per kind, ending with a newline.
    """
    rows = [
        "| policy | where its samples come from | sampled every | evaluated at |",
        "|---|---|---|---|",
    ]
    for kind in KINDS.values():
        path = kind.path
        if path.source == "direct":
            source = "the pods' serving totals, sampled by the autoscaler itself"
            every = f"{path.interval_s:g} s"
        else:
            source = "Prometheus (the series as scraped)"
            every = "as scraped"
        delay = "decision time" if path.delay_s == 0 else f"{path.delay_s:g} s before it"
        rows.append(f"| {kind.name} | {source} | {every} | {delay} |")
    return "\n".join(rows) + "\n"
