"""The two ends of the decision step in a simulated run: the deployment, and the source.

The engine runs ``scaling.step.DecisionStep`` exactly as the live controller
does; only the ends differ. ``ClusterWorkload`` is the simulated deployment
behind the step's ``Workload`` protocol (``/scale``, pod deletion and deletion
costs on the model cluster), and ``OutageSource`` makes the metric source fail as Prometheus does
when it is down (``metrics-down`` faults), so the fail-safe's holds are
exercised in simulation as they are live.
"""

from collections.abc import Mapping, Sequence

from gpuscale.errors import ConfigError
from gpuscale.metrics.signal import LabelledValue, MetricsSource, MetricsUnavailable, Signal
from gpuscale.scaling.policy import TargetStatus
from gpuscale.sim.cluster import Cluster
from gpuscale.telemetry.faults import Fault


class ClusterWorkload:
    """The simulated deployment as the decision step reads and changes it.

    Args:
        cluster: The model cluster.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.now = 0.0
        """The step's time: the engine sets it before each step."""
        self.scale_events = 0

    def status(self, *, node_slots: bool) -> TargetStatus:
        """The deployment's status (the simulator lists every node's room always).

        Returns:
            ``spec.replicas`` and the live pods.
        """
        return self.cluster.status()

    def scale(self, replicas: int) -> None:
        """Set ``spec.replicas``; the ReplicaSet creates or deletes pods at once."""
        self.scale_events += 1
        self.cluster.scale(replicas, self.now)

    def delete_pod(self, name: str) -> None:
        """Delete one pod; the ReplicaSet creates its replacement at once."""
        self.cluster.delete_named((name,), self.now)

    def set_deletion_costs(self, costs: Mapping[str, int | None]) -> None:
        """Annotate pods' ``pod-deletion-cost``; the ReplicaSet's order reads it."""
        self.cluster.set_deletion_costs(costs)

    def cordon(self, node: str) -> None:
        """Cordoning is not modelled.

        Raises:
            ConfigError: Always; a scenario may not ask for it (checked before a run).
        """
        raise ConfigError(f"cordon {node}: the simulator does not model cordoned nodes")


class OutageSource:
    """A metric source that does not answer during given windows, as a Prometheus that is down.

    Args:
        inner: The source that answers outside the windows.
        windows: (start, end) seconds of each outage; end may be inf.
    """

    def __init__(self, inner: MetricsSource, windows: Sequence[tuple[float, float]]) -> None:
        self.inner = inner
        self.windows = tuple(windows)
        self.now = 0.0
        """The time the engine reads at: the outage is judged on it, not on the query's time."""

    def _check(self) -> None:
        for start, end in self.windows:
            if start <= self.now < end:
                raise MetricsUnavailable(
                    f"simulated metrics source: down from {start:g} s (metrics-down fault)",
                    "connect",
                )

    def instant(self, signal: Signal, at: float) -> list[LabelledValue]:
        """The inner source's answer, or ``MetricsUnavailable`` during an outage.

        Returns:
            The results.
        """
        self._check()
        return self.inner.instant(signal, at)

    def range(self, signal: Signal, start: float, end: float, step: float) -> list[LabelledValue]:
        """The inner source's answer, or ``MetricsUnavailable`` during an outage.

        Returns:
            The results.
        """
        self._check()
        return self.inner.range(signal, start, end, step)

    def newest(self, signal: Signal, at: float) -> float | None:
        """The inner source's answer, or ``MetricsUnavailable`` during an outage.

        Returns:
            Seconds, or None.
        """
        self._check()
        return self.inner.newest(signal, at)


def outage_windows(faults: Sequence[Fault]) -> list[tuple[float, float]]:
    """The metric source's outages among a run's faults.

    Returns:
        (start, end) seconds of each ``metrics-down`` fault, end inf for the rest of the run.
    """
    return [
        (f.at_s, f.at_s + f.duration_s if f.duration_s is not None else float("inf"))
        for f in faults
        if f.kind == "metrics-down"
    ]
