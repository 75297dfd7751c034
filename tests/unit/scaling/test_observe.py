"""One Observation builder for the simulator and the controller."""

from dataclasses import dataclass, field

from gpuscale.metrics.ring import SecondTotals
from gpuscale.metrics.signal import LabelledValue, Signal
from gpuscale.scaling.observe import merge, observe
from gpuscale.scaling.policy import PodStatus, TargetStatus

UTIL = Signal("util", aggregation="avg", by=("pod",))
LOAD = Signal("load", aggregation="sum")


class FakeSource:
    """Answers with fixed series and records each query's times."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def instant(self, signal, at):
        self.calls.append(("instant", signal.metric, at))
        if signal.metric == "util":
            return [
                LabelledValue({"pod": "a"}, ((at, 50.0),)),
                LabelledValue({"pod": "gone"}, ((at, 99.0),)),
            ]
        return [LabelledValue({}, ((at, 1.0),)), LabelledValue({}, ((at, 2.0),))]

    def range(self, signal, start, end, step):
        self.calls.append(("range", signal.metric, start, end, step))
        pts = tuple((start + k * step, 1.0) for k in range(int((end - start) / step) + 1))
        return [LabelledValue({"x": "1"}, pts), LabelledValue({"x": "2"}, pts)]


@dataclass
class Policy:
    history_s: float = 0.0
    signals: dict = field(default_factory=lambda: {"load": LOAD})
    pod_signals: dict = field(default_factory=lambda: {"util": UTIL})
    name: str = "p"
    interval_s: float = 15.0
    min_replicas: int = 1
    max_replicas: int = 4


TARGET = TargetStatus(1, (PodStatus("a", True, 0.0, 1.0),))


def test_reads_at_the_delay_keeps_the_target_s_pods_and_sums_series():
    src = FakeSource()
    obs = observe(src, Policy(), TARGET, 100.0, delay_s=15.0)
    assert obs.now == 100.0
    assert obs.healthy
    assert obs.pod_metrics == {"util": {"a": 50.0}}  # a pod not in the target is left out
    assert obs.series["load"] == ((85.0, 3.0),)
    assert ("instant", "util", 85.0) in src.calls


def test_history_is_a_range_at_the_step_and_early_reads_are_unhealthy():
    src = FakeSource()
    obs = observe(src, Policy(history_s=4.0), TARGET, 10.0, delay_s=0.0, step_s=2.0)
    assert obs.series["load"] == ((6.0, 2.0), (8.0, 2.0), (10.0, 2.0))
    assert ("range", "load", 6.0, 10.0, 2.0) in src.calls
    assert not observe(src, Policy(), TARGET, 10.0, delay_s=15.0).healthy


def test_merge_of_nothing_is_empty():
    assert merge([]) == ()


class KeyedSource(FakeSource):
    """Also answers per-pod instant queries keyed by pod, as the simulator's store does."""

    def __init__(self, keyed: dict[str, float]) -> None:
        super().__init__()
        self.keyed = keyed

    def instant_by(self, signal, at, label):
        self.calls.append(("instant_by", signal.metric, at, label))
        return dict(self.keyed)


def test_keyed_per_pod_values_keep_only_the_target_s_pods_in_the_source_s_order():
    target = TargetStatus(2, (PodStatus("b", True, 0.0, 1.0), PodStatus("a", True, 0.0, 1.0)))
    inside = observe(KeyedSource({"a": 1.0, "b": 2.0}), Policy(), target, 100.0)
    assert list(inside.pod_metrics["util"].items()) == [("a", 1.0), ("b", 2.0)]
    mixed = observe(KeyedSource({"gone": 9.0, "b": 2.0, "a": 1.0}), Policy(), target, 100.0)
    assert list(mixed.pod_metrics["util"].items()) == [("b", 2.0), ("a", 1.0)]


class RangesOnly:
    """The ring's ``instant`` and ``range`` alone: a source with no shortcut."""

    def __init__(self, ring: SecondTotals) -> None:
        self.instant, self.range = ring.instant, ring.range


def test_a_ring_s_window_gives_the_series_its_ranges_give_and_their_sums():
    # observe reads a ring in one call (summed_window); the series must be those of a
    # query per signal, and the sums must name those very series objects.
    ring = SecondTotals(("in_flight", "queue"), 30)
    for t in range(45):
        ring.record(t, (t * 0.5, float(t % 4)))
    signals = {"c": Signal("in_flight", aggregation="sum"), "q": Signal("queue", aggregation="sum")}
    policy = Policy(history_s=20.0, signals=signals, pod_signals={})
    fast = observe(ring, policy, TARGET, 44.0, step_s=1.0)
    slow = observe(RangesOnly(ring), policy, TARGET, 44.0, step_s=1.0)
    assert fast.series == slow.series
    assert len(fast.series["c"]) == 21
    (added,) = fast.sums.values()
    assert added.of[0] is fast.series["c"]
    assert added.of[1] is fast.series["q"]
    pairs = zip(slow.series["c"], slow.series["q"], strict=True)
    assert list(added.values) == [a + b for (_, a), (_, b) in pairs]
    assert slow.sums == {}
