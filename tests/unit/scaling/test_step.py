"""The one decision step: observe, judge, decide, bound, act; the same for both loops."""

from dataclasses import dataclass, field

import numpy as np
import pytest

from gpuscale.metrics.signal import LabelledValue, MetricsUnavailable, Signal
from gpuscale.metrics.store import MetricStore
from gpuscale.scaling.policy import PROMETHEUS_QUERY, Decision, PodStatus, TargetStatus
from gpuscale.scaling.step import REMEDIATE, REPLACE, DecisionStep, StepSettings

LOAD = "load"
UTIL = Signal("util", aggregation="avg", by=("pod",))


@dataclass(frozen=True)
class Count:
    calls: int = 0

    def to_json(self):
        return {"calls": self.calls}

    def essential(self):
        return self.to_json()


@dataclass
class Wish:
    """A policy asking for ``want`` replicas (and deleting ``delete``), counting its calls."""

    want: int = 3
    delete: tuple[str, ...] = ()
    name: str = "wish"
    interval_s: float = 15.0
    history_s: float = 0.0
    signals: dict = field(default_factory=lambda: {LOAD: Signal(LOAD, aggregation="sum")})
    pod_signals: dict = field(default_factory=lambda: {"util": UTIL})
    min_replicas: int = 0
    max_replicas: int = 10
    signal_path = PROMETHEUS_QUERY
    reads_node_slots = False

    def initial_state(self):
        return Count()

    def load_state(self, data):
        return Count(int(data["calls"]))

    def decide(self, observation, state):
        return Decision(self.want, f"want {self.want}", Count(state.calls + 1), self.delete)


class Recorded:
    """A workload that records every call, in order."""

    def __init__(self, desired: int, pods: list[str], ready: bool = True) -> None:
        self.desired = desired
        self.pods = [PodStatus(p, ready, 0.0, 0.0 if ready else None, node=f"n-{p}") for p in pods]
        self.calls: list[tuple[str, object]] = []

    def status(self, *, node_slots):
        return TargetStatus(self.desired, tuple(self.pods))

    def scale(self, replicas):
        self.calls.append(("scale", replicas))
        self.desired = replicas

    def delete_pod(self, name):
        self.calls.append(("delete", name))

    def set_deletion_costs(self, costs):
        self.calls.append(("costs", dict(costs)))

    def cordon(self, node):
        self.calls.append(("cordon", node))


def feed(store: MetricStore, t: float, pods: list[str], util: float = 50.0, stale=()):
    labels = [{"pod": p, "namespace": "default"} for p in pods]
    values = np.array([np.nan if p in stale else util for p in pods])
    store.ingest(t, "util", labels, values)
    store.ingest(t, LOAD, [{"namespace": "default"}], np.array([1.0]))


def settings(**kw) -> StepSettings:
    return StepSettings(**{"min_replicas": 1, "max_replicas": 10, **kw})


def test_policy_decides_within_bounds_and_state_moves_on():
    store, pods = MetricStore(), ["a", "b"]
    feed(store, 100.0, pods)
    wl = Recorded(2, pods)
    step = DecisionStep(Wish(want=40), store, settings(up_step=3), PROMETHEUS_QUERY)
    out = step.run(wl, lambda: 101.0, Count())
    assert (out.replicas, out.scaled, out.held) == (5, True, None)
    assert "step limited to +3" in out.reason
    assert out.state == Count(1)
    assert wl.calls == [("scale", 5)]


def test_unavailable_source_holds_keeps_state_and_writes_nothing():
    class Down:
        def instant(self, signal, at):
            raise MetricsUnavailable("prometheus: connection refused", "connect")

        range = newest = instant

    wl = Recorded(4, ["a", "b", "c", "d"])
    policy = Wish(want=1)
    out = DecisionStep(policy, Down(), settings(), PROMETHEUS_QUERY).run(wl, lambda: 5.0, Count(7))
    assert out.held is not None
    assert out.held.reason == "unavailable"
    assert (out.replicas, out.state, wl.calls) == (4, Count(7), [])
    assert out.reason == "hold: metrics unavailable: connect: prometheus: connection refused"


def test_missing_series_holds_naming_the_metric():
    store = MetricStore()
    wl = Recorded(3, ["a"])
    out = DecisionStep(Wish(want=1), store, settings(), PROMETHEUS_QUERY).run(
        wl, lambda: 5.0, Count()
    )
    assert out.held is not None
    assert out.held.reason == "missing"
    assert LOAD in out.reason
    assert wl.calls == []


def test_replaced_pods_are_deleted_before_the_scale_and_only_live_ones():
    store, pods = MetricStore(), ["a", "b"]
    feed(store, 10.0, pods)
    wl = Recorded(2, pods)
    policy = Wish(want=3, delete=("b", "gone"))
    out = DecisionStep(policy, store, settings(), PROMETHEUS_QUERY).run(wl, lambda: 11.0, Count())
    assert wl.calls == [("delete", "b"), ("scale", 3)]
    assert [(d.pod, d.cause, d.node) for d in out.deleted] == [("b", REPLACE, "n-b")]


def test_scale_in_holds_when_some_ready_pods_series_are_stale():
    store, pods = MetricStore(), ["a", "b", "c", "d"]
    feed(store, 0.0, pods)
    for t in (15.0, 30.0, 45.0, 60.0, 75.0):  # c and d stop reporting after 0 s
        labels = [{"pod": p, "namespace": "default"} for p in pods]
        store.ingest(t, "util", labels[:2], np.array([50.0, 50.0]))
        store.ingest(t, LOAD, [{"namespace": "default"}], np.array([1.0]))
    # The store writes an absent series as a staleness marker, so to model series that
    # are still visible but old, read an older sample through a source that keeps them.

    class Lagging:
        def newest_by(self, signal, at, label):
            got = store.newest_by(signal, at, label)
            return {**got, "c": 0.0, "d": 0.0} if signal.metric == "util" else got

        def instant(self, signal, at):
            return store.instant(signal, at)

        def newest(self, signal, at):
            return store.newest(signal, at)

        def range(self, signal, start, end, step):
            return store.range(signal, start, end, step)

    wl = Recorded(4, pods)
    step = DecisionStep(Wish(want=1), Lagging(), settings(stale_after_s=60), PROMETHEUS_QUERY)
    out = step.run(wl, lambda: 76.0, Count())
    assert out.held is not None
    assert out.held.reason == "stale"
    assert "c, d" in out.reason
    assert "not scaling in" in out.reason
    assert (out.replicas, wl.calls, out.state) == (4, [], Count())
    # Scaling out on the same view goes ahead: it never undercounts.
    out = DecisionStep(Wish(want=6), Lagging(), settings(stale_after_s=60), PROMETHEUS_QUERY).run(
        wl, lambda: 76.0, Count()
    )
    assert (out.held, wl.calls) == (None, [("scale", 6)])


def sick_store(pods, down="b"):
    store = MetricStore()
    feed(store, 10.0, pods)
    labels = [{"pod": p, "namespace": "default", "UUID": f"GPU-{p}", "Hostname": "h"} for p in pods]
    store.ingest(
        10.0, "gpuscale_gpu_up", labels, np.array([0.0 if p == down else 1.0 for p in pods])
    )
    return store


def test_remediation_deletes_one_pod_on_a_broken_gpu_and_cordons_when_asked():
    pods = ["a", "b", "c"]
    wl = Recorded(3, pods)
    cfg = settings(remediate=True, cordon=True, namespace="default")
    out = DecisionStep(Wish(want=3), sick_store(pods), cfg, PROMETHEUS_QUERY).run(
        wl, lambda: 11.0, Count()
    )
    assert wl.calls == [("delete", "b"), ("cordon", "n-b")]
    [d] = out.deleted
    assert (d.pod, d.cause, d.gpu, d.kind) == ("b", REMEDIATE, "GPU-b", "gpu_down")
    assert out.cordoned == ("n-b",)


def test_remediation_never_goes_below_min_and_says_why():
    pods = ["a", "b"]
    wl = Recorded(2, pods)
    cfg = settings(min_replicas=2, remediate=True, namespace="default")
    out = DecisionStep(Wish(want=2), sick_store(pods), cfg, PROMETHEUS_QUERY).run(
        wl, lambda: 11.0, Count()
    )
    assert wl.calls == []
    assert "minReplicas 2" in out.blocked


def test_remediation_skips_a_pod_the_policy_already_replaced():
    pods = ["a", "b", "c"]
    wl = Recorded(3, pods)
    cfg = settings(remediate=True, namespace="default")
    out = DecisionStep(Wish(want=3, delete=("b",)), sick_store(pods), cfg, PROMETHEUS_QUERY).run(
        wl, lambda: 11.0, Count()
    )
    assert wl.calls == [("delete", "b")]
    assert [d.cause for d in out.deleted] == [REPLACE]


@pytest.mark.parametrize("bad", [{"min_replicas": 3, "max_replicas": 2}, {"stale_after_s": 0}])
def test_settings_refuse_nonsense(bad):
    with pytest.raises(ValueError, match="StepSettings"):
        settings(**bad)


def test_observer_uses_the_stores_keyed_reads_with_the_same_values():
    store, pods = MetricStore(), ["a", "b"]
    feed(store, 10.0, pods, util=42.0)

    class Plain:  # the base protocol only: no instant_by
        def instant(self, signal, at):
            return store.instant(signal, at)

        def range(self, signal, start, end, step):
            return store.range(signal, start, end, step)

        def newest(self, signal, at):
            return store.newest(signal, at)

    wl = Recorded(2, pods)
    fast = DecisionStep(Wish(), store, settings(), PROMETHEUS_QUERY).run(wl, lambda: 11.0, Count())
    slow = DecisionStep(Wish(), Plain(), settings(), PROMETHEUS_QUERY).run(
        Recorded(2, pods), lambda: 11.0, Count()
    )
    assert (
        fast.observation.pod_metrics
        == slow.observation.pod_metrics
        == {"util": {"a": 42.0, "b": 42.0}}
    )
    assert isinstance(store.instant(UTIL, 11.0)[0], LabelledValue)


def test_remediation_deletes_a_pod_that_is_not_ready_even_at_the_floor():
    # The pod on the lost GPU crash-loops (not Ready): deleting it costs no capacity, and
    # its replacement is the only way back to minReplicas.
    pods = ["a", "b"]
    wl = Recorded(2, pods)
    wl.pods[1] = PodStatus("b", False, 0.0, None, node="n-b")
    cfg = settings(min_replicas=2, remediate=True, namespace="default")
    out = DecisionStep(Wish(want=2), sick_store(pods), cfg, PROMETHEUS_QUERY).run(
        wl, lambda: 11.0, Count()
    )
    assert wl.calls == [("delete", "b")]
    assert out.blocked == ""


# --- placement: the pods a scale-in takes are marked before /scale --------------------------


class Placed(Recorded):
    """A workload whose pods sit on given nodes, some still loading."""

    def __init__(self, desired: int, placed: dict[str, str], loading=()) -> None:
        super().__init__(desired, list(placed))
        self.pods = [
            PodStatus(p, p not in loading, 0.0, None if p in loading else 5.0, node=n)
            for p, n in placed.items()
        ]


PLACED = {"a1": "a", "a2": "a", "a3": "a", "b1": "b", "b2": "b", "c1": "c"}


def test_scale_in_marks_sick_then_loading_then_emptiest_node_before_scaling():
    pods = list(PLACED)
    store = sick_store(pods, down="a2")
    wl = Placed(6, PLACED, loading=("a3",))
    out = DecisionStep(
        Wish(want=2), store, settings(namespace="default", placement=True), PROMETHEUS_QUERY
    ).run(wl, lambda: 11.0, Count())
    # loading a3 (the controller takes not-Ready pods first), the pod on the broken GPU,
    # then node c's pod and node b's two: a node emptied whole each time
    assert out.marked == ("a3", "a2", "c1", "b1")
    assert wl.calls == [("costs", {"a3": -4, "a2": -3, "c1": -2, "b1": -1}), ("scale", 2)]


def test_placement_off_marks_nothing():
    pods = list(PLACED)
    wl = Placed(6, PLACED)
    cfg = settings(namespace="default", placement=False)
    out = DecisionStep(Wish(want=4), sick_store(pods), cfg, PROMETHEUS_QUERY).run(
        wl, lambda: 11.0, Count()
    )
    assert (out.marked, wl.calls) == ((), [("scale", 4)])


def test_scale_up_and_hold_mark_nothing():
    pods = list(PLACED)
    for want in (6, 8):
        wl = Placed(6, PLACED)
        out = DecisionStep(
            Wish(want=want), sick_store(pods), settings(placement=True), PROMETHEUS_QUERY
        ).run(wl, lambda: 11.0, Count())
        assert out.marked == ()
        assert all(c[0] != "costs" for c in wl.calls)


def test_pods_replaced_this_step_leave_the_cut_to_their_unscheduled_replacements():
    # The policy deletes b1 (its replacement is unscheduled, deleted first by the
    # ReplicaSet) and asks for one replica fewer: no other pod need be marked.
    pods = list(PLACED)
    wl = Placed(6, PLACED)
    policy = Wish(want=5, delete=("b1",))
    out = DecisionStep(policy, sick_store(pods, down=""), settings(), PROMETHEUS_QUERY).run(
        wl, lambda: 11.0, Count()
    )
    assert out.marked == ()
    assert wl.calls == [("delete", "b1"), ("scale", 5)]


def test_remediation_leaves_a_sick_pod_the_scale_in_already_takes():
    pods = list(PLACED)
    wl = Placed(6, PLACED)
    cfg = settings(remediate=True, namespace="default", placement=True)
    out = DecisionStep(Wish(want=5), sick_store(pods, down="a1"), cfg, PROMETHEUS_QUERY).run(
        wl, lambda: 11.0, Count()
    )
    assert out.marked == ("a1",)
    assert wl.calls == [("costs", {"a1": -1}), ("scale", 5)]
    assert out.deleted == ()
