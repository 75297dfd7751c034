"""The policy seam: ``decide(observation, state) -> Decision``.

Policies are pure: no clock, no I/O, no hidden mutable state. Everything they
remember between calls lives in their state, a frozen dataclass of their own
(``scaling.state``) with a JSON form, which the controller stores in a
ConfigMap and the simulator keeps in memory. That is what lets a policy proven
in the simulator run unchanged in production.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

from gpuscale.metrics.signal import Signal
from gpuscale.scaling.state import PolicyState

S = TypeVar("S", bound=PolicyState)
"""A policy's state type."""


@dataclass(frozen=True, slots=True)
class PodStatus:
    """One pod of the scaled workload, as the API server reports it.

    Attributes:
        name: Pod name.
        ready: Whether the Ready condition is true.
        created_at: Creation time, seconds.
        ready_at: When it became Ready, seconds; None while starting.
        node: The node it runs on; empty while unscheduled or where unknown.
        phase: ``status.phase`` (``Pending`` until its containers run).
        deletion_cost: Its ``controller.kubernetes.io/pod-deletion-cost`` annotation,
            0 when unset (``scaling.placement``).
    """

    name: str
    ready: bool
    created_at: float
    ready_at: float | None = None
    node: str = ""
    phase: str = "Running"
    deletion_cost: int = 0


@dataclass(frozen=True, slots=True)
class TargetStatus:
    """The scale target's status (a Deployment's ``/scale`` and its pods).

    Attributes:
        desired: ``spec.replicas`` now.
        pods: Live pods, ready or starting; terminating pods are excluded.
        node_slots: Replicas each Ready node of the workload's pool holds: its
            allocatable GPUs over the GPUs one replica requests. The device plugin
            leaves an unhealthy GPU out of allocatable, so a node whose GPU fell off
            the bus holds one replica fewer. Empty where unknown. The simulator lists
            every Ready node of its pool; the Kubernetes target lists the nodes its
            pods run on, where the policy asks for them (``reads_node_slots``).
    """

    desired: int
    pods: tuple[PodStatus, ...] = ()
    node_slots: tuple[int, ...] = ()
    _ready: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Counted once: policies read ``ready`` many times per decision.
        object.__setattr__(self, "_ready", [p.ready for p in self.pods].count(True))

    @property
    def ready(self) -> int:
        """Number of Ready pods."""
        return self._ready

    @property
    def starting(self) -> int:
        """Number of pods that exist but are not Ready yet."""
        return len(self.pods) - self.ready


Series = tuple[tuple[float, float], ...]
"""(time seconds, value) points, oldest first."""


@dataclass(frozen=True, slots=True)
class SeriesSum:
    """Several series added point by point, ahead, by a source that keeps them so.

    Valid only for the very series it names: an observation whose series were replaced
    (cut, filtered) holds other objects, and readers then add the series themselves.

    Attributes:
        of: The series added, in the order added (``Observation.series`` values).
        times: Their common times, seconds, oldest first.
        values: The sum at each time, added from 0 in ``of`` order.
    """

    of: tuple[Series, ...]
    times: Sequence[float]
    values: Sequence[float]


NO_SUMS: Mapping[tuple[str, ...], SeriesSum] = MappingProxyType({})
"""``Observation.sums`` where the source adds nothing ahead."""


@dataclass(frozen=True, slots=True)
class SignalPath:
    """How a controller's signals reach it, and so how old they are when it decides.

    Every policy declares its path as its ``signal_path`` attribute; the simulator
    models it and the live controller honours it or refuses the target.

    Attributes:
        source: ``prometheus``: the series Prometheus scraped (dcgm-exporter's
            fields, collected every ``collect_interval_s`` and scraped every
            ``scrape_interval_s``; the pods' serving metrics, scraped). ``direct``:
            the controller samples the pods' serving totals (requests in flight and
            queued) itself every ``interval_s``, as Knative's autoscaler scrapes
            queue-proxy, with no Prometheus in between.
        interval_s: ``direct`` only: the sampling period, seconds.
        delay_s: The policy evaluates its signals this far in the past, seconds: a
            recording rule's evaluation delay; 0 for a query at decision time.
    """

    source: Literal["prometheus", "direct"] = "prometheus"
    interval_s: float = 1.0
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.source not in ("prometheus", "direct"):
            raise ValueError(f"SignalPath.source must be prometheus or direct, got {self.source!r}")
        if not (self.interval_s > 0 and self.delay_s >= 0):
            raise ValueError("SignalPath: interval_s must be > 0 and delay_s >= 0")


PROMETHEUS_QUERY = SignalPath("prometheus", delay_s=0.0)
"""An instant PromQL query at decision time: prometheus-adapter at each HPA sync, KEDA's poll."""

QUEUE_PROXY = SignalPath("direct", interval_s=1.0, delay_s=0.0)
"""Knative's autoscaler scraping every queue-proxy each second (``scrapeTickInterval``)."""


RECORDING_RULE = SignalPath("prometheus", delay_s=15.0)
"""Series read through a recording rule evaluated every 15 s (prometheus-adapter's usual
setup for an HPA on DCGM series): up to one evaluation interval old."""


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything a policy may look at for one decision.

    Attributes:
        now: Decision time, seconds.
        target: The workload's status.
        pod_metrics: Metric name to latest value per pod; a pod with no sample is absent.
        series: Signal name to its recent history (aggregated over the workload).
        healthy: False when the data is missing or stale; policies must then hold.
        sums: Optional, where the source keeps them: for a tuple of ``series`` keys, those
            series added point by point (in key order, from 0), exactly what
            ``scaling.baseline.summed_columns`` makes of them when their times agree. A
            shortcut for reading, never other data: a policy may ignore it.
    """

    now: float
    target: TargetStatus
    pod_metrics: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    series: Mapping[str, Series] = field(default_factory=dict)
    healthy: bool = True
    sums: Mapping[tuple[str, ...], SeriesSum] = field(default_factory=lambda: NO_SUMS)

    def latest(self, signal: str) -> float | None:
        """Most recent value of a signal, or None when there is none.

        Returns:
            The value in the signal's own unit.
        """
        points = self.series.get(signal)
        if not points:
            return None
        return points[-1][1]


Model = Literal["seasonal", "seasonal-naive", "quantile-regression", "trend", "none"]
"""Which model made a forecast: seasonal (Holt-Winters), seasonal-naive, quantile
regression, the fallback line (trend), or none (no data)."""


@dataclass(frozen=True, slots=True)
class Forecast:
    """Demand expected at ``now + horizon_s`` (``scaling.forecast`` makes it).

    Attributes:
        mean: Point forecast, in the demand's unit.
        upper: The upper bound at the configured quantile, same unit.
        model: ``seasonal`` (Holt-Winters), ``seasonal-naive``,
            ``quantile-regression``, ``trend`` (the fallback) or ``none`` (no data).
        horizon_s: How far ahead, seconds.
    """

    mean: float
    upper: float
    model: Model
    horizon_s: float


@dataclass(frozen=True, slots=True)
class Decision(Generic[S]):
    """What a policy wants.

    Attributes:
        replicas: Desired replica count, already within the policy's bounds.
        reason: Short human-readable explanation, logged with every decision.
        state: The policy's memory for its next call.
        delete: Names of pods to delete now, as ``kubectl delete pod`` would: the
            workload keeps ``replicas``, so each is replaced by a new pod (a sick
            replica swapped for a healthy one). Empty for most decisions; a caller
            that cannot delete pods may ignore it.
        forecast: The demand forecast the decision planned for (forecasting policies),
            None for the others; the controller reports it in the GPUScaler's status.
    """

    replicas: int
    reason: str
    state: S
    delete: tuple[str, ...] = ()
    forecast: Forecast | None = None


class ScalingPolicy(Protocol[S]):
    """A pure replica-count decision rule.

    Attributes:
        name: Policy name as reported in results and logs.
        interval_s: How often the controller calls ``decide`` (HPA's sync period, KEDA's polling).
        history_s: How much history each entry of ``Observation.series`` must cover, seconds.
        signals: Workload-level signals the policy reads, by the key it expects in ``series``.
        pod_signals: Per-pod signals (grouped by ``pod``), by the key it expects in ``pod_metrics``.
        min_replicas: Lower bound of every decision.
        max_replicas: Upper bound of every decision.
        signal_path: Where its samples come from, how often and how late
            (``SignalPath``): the simulator models it and the controller honours it.
        reads_node_slots: Whether it reads ``TargetStatus.node_slots`` (the room on
            each node of the pool), which costs the live controller a node read.
    """

    name: str
    interval_s: float
    history_s: float
    signals: Mapping[str, Signal]
    pod_signals: Mapping[str, Signal]
    min_replicas: int
    max_replicas: int
    signal_path: SignalPath
    reads_node_slots: bool

    def initial_state(self) -> S:
        """The state of a policy that has decided nothing yet.

        Returns:
            The state to pass to the first ``decide``.
        """
        ...

    def load_state(self, data: Mapping[str, Any]) -> S:
        """Read a state saved as ``state.to_json()`` (after a JSON round trip).

        Returns:
            The state, equal to the one saved.

        Raises:
            StateError: When ``data`` is not this policy's state.
        """
        ...

    def decide(self, observation: Observation, state: S) -> Decision[S]:
        """Decide the desired replicas.

        Args:
            observation: What the policy can see now.
            state: What the policy returned last time (``initial_state()`` at first).

        Returns:
            The decision and the state to pass next time.
        """
        ...


@runtime_checkable
class FallsBack(Protocol[S]):
    """A policy with its own answer to missing data (KEDA's ``fallback``).

    The decision step calls ``fall_back`` where it would otherwise hold: a signal
    missing, stale or unreadable. A policy without it is simply held.
    """

    def fall_back(self, target: TargetStatus, now: float, state: S) -> Decision[S]:
        """Decide without a usable reading.

        Args:
            target: The target's status.
            now: Decision time, seconds.
            state: The policy's state.

        Returns:
            The decision (holding, or heading for the fallback) and the new state.
        """
        ...
