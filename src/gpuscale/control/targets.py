"""From validated GPUScalers to what the loop runs: a policy per target, its signals scoped.

A policy written for the simulator reads ``sum(gpuscale_serving_requests_in_flight)``
or ``DCGM_FI_DEV_GPU_UTIL`` by pod: in the simulator's store only the one workload
writes those series, in a cluster every workload does. ``ScopedPolicy`` keeps the
policy object unchanged and hands the controller its signals with the target's
matchers added: ``namespace`` (the target's, unless a signal or the target's
``metrics.matchers`` names one; ``namespace: ""`` reads series without the label)
and ``metrics.matchers``; ``metrics.servingStack`` reads the serving stack's own
series in place of gpuscale's (``metrics.serving_stacks``); ``metrics.signals``
replaces a signal by its key, and wins over the stack.
The policy reads its series by key, so it sees the scoped values under the names
it expects. A raw PromQL signal (``query``) is read as written, unscoped. A target
with its own ``metrics.server`` (a KEDA trigger's ``serverAddress``) is read from
that server.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from types import MappingProxyType
from typing import Any, Generic, cast

from gpuscale.control.config import (
    GPUScaler,
    MetricsServer,
    MetricsSpec,
    Target,
    policy_config,
)
from gpuscale.control.kubernetes import TargetRef
from gpuscale.control.params import build
from gpuscale.errors import config_error
from gpuscale.metrics.prometheus import PrometheusSource
from gpuscale.metrics.serving_stacks import STACKS, substitute
from gpuscale.metrics.signal import MetricsSource, Signal
from gpuscale.scaling.hybrid import HybridConfig
from gpuscale.scaling.policy import (
    Decision,
    FallsBack,
    Observation,
    S,
    ScalingPolicy,
    TargetStatus,
)


class ScopedPolicy(Generic[S]):
    """A policy whose signals carry the target's matchers; ``decide`` is the policy's own.

    Args:
        policy: The unchanged policy object.
        signals: Its workload signals, scoped.
        pod_signals: Its per-pod signals, scoped.
    """

    def __init__(
        self,
        policy: ScalingPolicy[S],
        signals: Mapping[str, Signal],
        pod_signals: Mapping[str, Signal],
    ) -> None:
        self.inner = policy
        self.name = policy.name
        self.interval_s = policy.interval_s
        self.history_s = policy.history_s
        self.min_replicas = policy.min_replicas
        self.max_replicas = policy.max_replicas
        self.signals: Mapping[str, Signal] = MappingProxyType(dict(signals))
        self.pod_signals: Mapping[str, Signal] = MappingProxyType(dict(pod_signals))
        self.signal_path = policy.signal_path
        # Policies that fill whole nodes read each node's room (``TargetStatus.node_slots``).
        self.reads_node_slots = policy.reads_node_slots

    def initial_state(self) -> S:
        """The wrapped policy's first state.

        Returns:
            What the wrapped policy returns.
        """
        return self.inner.initial_state()

    def load_state(self, data: Mapping[str, Any]) -> S:
        """The wrapped policy's state, read from its JSON form.

        Returns:
            What the wrapped policy returns.

        Raises:
            StateError: When ``data`` is not the wrapped policy's state.
        """
        return self.inner.load_state(data)

    def decide(self, observation: Observation, state: S) -> Decision[S]:
        """The policy's decision.

        Returns:
            What the wrapped policy returns.
        """
        return self.inner.decide(observation, state)


class ScopedFallback(ScopedPolicy[S]):
    """A scoped policy that has its own answer to missing data (``FallsBack``), passed on."""

    def __init__(
        self,
        policy: FallsBack[S],
        signals: Mapping[str, Signal],
        pod_signals: Mapping[str, Signal],
    ) -> None:
        super().__init__(cast("ScalingPolicy[S]", policy), signals, pod_signals)
        self._fallback = policy

    def fall_back(self, target: TargetStatus, now: float, state: S) -> Decision[S]:
        """The wrapped policy's fallback.

        Returns:
            What the wrapped policy returns.
        """
        return self._fallback.fall_back(target, now, state)


def scoped_policy(
    policy: ScalingPolicy[S], signals: Mapping[str, Signal], pod_signals: Mapping[str, Signal]
) -> ScopedPolicy[S]:
    """The policy with its signals scoped, its fallback kept where it has one.

    Returns:
        A ``ScopedFallback`` for a ``FallsBack`` policy, else a ``ScopedPolicy``.
    """
    if isinstance(policy, FallsBack):
        return ScopedFallback(policy, signals, pod_signals)
    return ScopedPolicy(policy, signals, pod_signals)


def server_source(server: MetricsServer | None) -> MetricsSource | None:
    """The target's own Prometheus (a KEDA trigger's ``serverAddress``); None: the controller's.

    No credentials of the controller's ``--prometheus`` are sent to it.

    Returns:
        A source for that server, or None.
    """
    if server is None:
        return None
    return PrometheusSource(
        server.address,
        timeout_s=server.timeout_seconds,
        insecure_skip_verify=server.insecure_skip_verify,
        headers=server.headers,
        params=server.query_parameters,
    )


def scope(
    signals: Mapping[str, Signal],
    namespace: str,
    matchers: Mapping[str, str],
    overrides: Mapping[str, Signal],
    preset: Callable[[Signal], Signal] | None = None,
) -> dict[str, Signal]:
    """The signals with the target's matchers added and the overrides applied.

    Args:
        signals: The policy's signals by key.
        namespace: The target's namespace.
        matchers: ``metrics.matchers``.
        overrides: ``metrics.signals``: used as given, before any preset.
        preset: Turns a scoped signal into its serving stack's reading (``servingStack``).

    Returns:
        Key to scoped Signal.
    """
    out: dict[str, Signal] = {}
    for key, sig in signals.items():
        if key in overrides:
            out[key] = overrides[key]
            continue
        if sig.query:  # a raw query is read as written (a KEDA trigger's query)
            out[key] = sig
            continue
        added = dict(matchers)
        if "namespace" not in sig.matchers and "namespace" not in matchers:
            added["namespace"] = namespace
        scoped = replace(sig, matchers={**sig.matchers, **added})
        out[key] = scoped if preset is None else preset(scoped)
    return out


RATE_WINDOW_SCRAPES = 4
"""A serving stack's histograms and counters are read over this many scrape intervals: a
``rate`` needs two samples, and four keep it defined through a missed scrape."""


def stack_preset(spec: MetricsSpec) -> Callable[[Signal], Signal] | None:
    """The target's ``servingStack`` as a function from a scoped signal to the stack's.

    Returns:
        None without a serving stack.
    """
    if spec.serving_stack is None:
        return None
    stack = STACKS[spec.serving_stack]
    window_s = RATE_WINDOW_SCRAPES * spec.scrape_interval_seconds
    return partial(substitute, stack, quantile=spec.latency_quantile, window_s=window_s)


def with_stack_ttft(config: object, spec: MetricsSpec) -> object:
    """``hybrid``'s config reading its stack's TTFT where the target names none itself.

    Returns:
        The config, ``ttft_metric`` set to the stack's TTFT histogram when the policy is
        ``hybrid``, its ``ttftMetric`` is unset and the stack exports one.
    """
    stack = STACKS[spec.serving_stack] if spec.serving_stack is not None else None
    if (
        isinstance(config, HybridConfig)
        and config.ttft_metric is None
        and stack is not None
        and stack.ttft is not None
    ):
        return replace(config, ttft_metric=stack.ttft.name)
    return config


@dataclass(frozen=True, slots=True)
class TargetRuntime:
    """One target as the loop runs it.

    Attributes:
        ref: The scaled object.
        spec: The validated target block.
        policy: The policy, signals scoped.
        delay_s: Signals are evaluated this far in the past (the policy's signal path).
        owner: ``namespace/name`` of the GPUScaler it comes from.
        all_signals: Every signal it reads, pod signals keyed ``KEY by pod``.
        source: The target's own server (``metrics.server``); None: the controller's.
    """

    ref: TargetRef
    spec: Target
    policy: ScopedPolicy[Any]
    delay_s: float = 0.0
    owner: str = ""
    all_signals: Mapping[str, Signal] = field(default_factory=dict)
    source: MetricsSource | None = None


def runtime(doc: GPUScaler, target: Target) -> TargetRuntime:
    """Build the policy of one target.

    Returns:
        The runtime target.
    """
    sref = target.scale_target_ref
    ns = sref.namespace or doc.metadata.namespace
    ref = TargetRef(sref.api_version, sref.kind, sref.name, ns)
    config = with_stack_ttft(policy_config(target), target.metrics)
    policy = target.kind.build(config, target.kind.name)
    overrides = {k: build(v) for k, v in target.metrics.signals.items()}
    matchers = target.metrics.matchers
    preset = stack_preset(target.metrics)
    signals = scope(policy.signals, ns, matchers, overrides, preset)
    pod_signals = scope(policy.pod_signals, ns, matchers, overrides, preset)
    wrapped = scoped_policy(policy, signals, pod_signals)
    path = wrapped.signal_path
    if path.source == "direct" and target.metrics.scrape_interval_seconds > path.interval_s:
        # The controller samples through Prometheus: it honours a direct path (Knative's
        # each-second concurrency) only when Prometheus scrapes the pods that often.
        where = f"{doc.metadata.namespace}/{doc.metadata.name} {ref.kind} {ns}/{sref.name}"
        raise config_error(
            f"{where}: metrics.scrapeIntervalSeconds",
            f"policy {policy.name} reads its signals every {path.interval_s:g} s but Prometheus "
            f"scrapes them every {target.metrics.scrape_interval_seconds:g} s",
            f"scrape the pods' serving metrics every {path.interval_s:g} s and set "
            f"metrics.scrapeIntervalSeconds: {path.interval_s:g}",
        )
    # Pod signals and workload signals may share keys; freshness checks them all.
    every = {**{f"{k} by pod": s for k, s in pod_signals.items()}, **signals}
    return TargetRuntime(
        ref,
        target,
        wrapped,
        delay_s=wrapped.signal_path.delay_s,
        owner=f"{doc.metadata.namespace}/{doc.metadata.name}",
        all_signals=every,
        source=server_source(target.metrics.server),
    )


def runtimes(docs: list[GPUScaler]) -> list[TargetRuntime]:
    """Every target of every GPUScaler, in file order.

    Returns:
        The runtime targets.
    """
    return [runtime(doc, t) for doc in docs for t in doc.spec.targets]


def close_sources(targets: Iterable[TargetRuntime]) -> None:
    """Close the targets' own servers' clients (``metrics.server``); call when they retire."""
    for rt in targets:
        if isinstance(rt.source, PrometheusSource):
            rt.source.close()
