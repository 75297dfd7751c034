"""What the dialect tests share: a workload whose pods follow its replicas, a scripted query."""

from collections.abc import Callable

from gpuscale.metrics.signal import LabelledValue, MetricsUnavailable, Signal
from gpuscale.scaling.policy import PodStatus, TargetStatus


class FollowingPods:
    """A Deployment whose pods follow its replicas at once, all Ready."""

    def __init__(self, desired: int) -> None:
        self.desired = desired

    def status(self, *, node_slots: bool) -> TargetStatus:
        del node_slots
        pods = tuple(PodStatus(f"p{i}", True, 0.0, 0.0) for i in range(self.desired))
        return TargetStatus(self.desired, pods)

    def scale(self, replicas: int) -> None:
        self.desired = replicas

    def delete_pod(self, name: str) -> None:
        raise AssertionError(f"no pod is deleted here ({name})")

    def cordon(self, node: str) -> None:
        raise AssertionError(f"no node is cordoned here ({node})")


class ScriptedQuery:
    """A ``MetricsSource`` answering every query with ``value(t)``: None is a failed read.

    The decisions under test read one raw query's value; what Prometheus computes
    for it is tested against a real Prometheus elsewhere.
    """

    def __init__(self, value: Callable[[float], float | None]) -> None:
        self.value = value
        self.queries: set[str] = set()

    def _at(self, signal: Signal, t: float) -> float:
        self.queries.add(signal.query)
        v = self.value(t)
        if v is None:
            raise MetricsUnavailable("scripted: no answer", "connect")
        return v

    def instant(self, signal: Signal, at: float) -> list[LabelledValue]:
        return [LabelledValue({}, ((at, self._at(signal, at)),))]

    def range(self, signal: Signal, start: float, end: float, step: float) -> list[LabelledValue]:
        times = [start + i * step for i in range(int((end - start) // step) + 1)]
        return [LabelledValue({}, tuple((t, self._at(signal, t)) for t in times))]

    def newest(self, signal: Signal, at: float) -> float | None:
        self._at(signal, at)
        return at
