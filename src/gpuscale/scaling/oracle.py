"""A hindsight oracle: knows the demand and each pod's cold start in advance.

It is the reference every policy's GPU-hours are divided by. A replica requested
at ``t`` serves from ``t`` plus its own cold start (the ``k``-th pod created takes
the ``k``-th draw of the cluster's cold-start stream, ``cold_starts_s``), plus node
provisioning when the standing nodes are full; the next decision comes at
``t + interval_s``. So the oracle asks for the ``j``-th extra replica exactly when
the requirement over ``[t, t + interval_s + its lead)`` reaches the current count
plus ``j``: each replica is Ready when it is needed and not before. A replica
released now and wanted again later costs its termination grace plus a new cold
start in GPU time that serves nothing, so the oracle keeps a replica through any
dip shorter than that break-even (``hold_s``) and releases it otherwise; within
``hold_s`` of the requirement's end it releases nothing, as no release there pays
back.

The requirement is ``required_per_s`` (``sim.serving.required_replicas``, a
queueing estimate), raised by ``margin`` and widened by ``slack_s`` on both sides;
``evaluate.oracle_search`` searches those two until the simulated attainment
meets the target. The result is the best plan found in hindsight, not a proven
lower bound. The oracle reads no telemetry, so unhealthy data does not affect it.
"""

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from gpuscale.errors import require
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.baseline import check_bounds, clamp
from gpuscale.scaling.nodes import known_slots, on_nodes, short_by
from gpuscale.scaling.policy import PROMETHEUS_QUERY, Decision, Observation
from gpuscale.scaling.rangemax import RangeMax
from gpuscale.scaling.state import JsonState, KeepsState

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class OracleConfig:
    """The oracle's parameters besides the requirement itself (see ``OraclePolicy``).

    Each field's unit is in its ``metadata["unit"]``.
    """

    lead_s: float = field(metadata={"unit": "s"})
    min_replicas: int = field(default=0, metadata={"unit": "replicas"})
    max_replicas: int | None = field(default=None, metadata={"unit": "replicas"})
    interval_s: float = field(default=5.0, metadata={"unit": "s"})
    hold_s: float = field(default=0.0, metadata={"unit": "s"})
    node_lead_s: float = field(default=0.0, metadata={"unit": "s"})
    fast_capacity: int | None = field(default=None, metadata={"unit": "replicas"})
    node_size: int = field(default=1, metadata={"unit": "replicas per node"})
    node_keep_s: float = field(default=0.0, metadata={"unit": "s"})
    margin: float = field(default=0.0, metadata={"unit": "fraction of the requirement"})
    slack_s: float = field(default=0.0, metadata={"unit": "s"})
    cold_starts_s: tuple[float, ...] = field(default=(), metadata={"unit": "s per pod"})
    fill_nodes: bool = field(default=False, metadata={"unit": "flag"})


NodeMemory = tuple[tuple[float, float, float], ...]
"""``(last held s, replicas, nodes ready at s)`` of recent requests (``OraclePolicy._walk``)."""


@dataclass(frozen=True, slots=True)
class OracleState(JsonState):
    """The oracle's memory.

    Attributes:
        created: Pods the cluster has created so far (the next cold start's index).
        at: The last decision's time, seconds; None before the first.
        recent: The node memory; None when empty (the next decision starts it afresh).

    ``essential()`` is ``to_json()``: ``at`` bounds the pods counted as created since
    the last decision. The oracle runs only in the simulator, which keeps its state
    in memory.
    """

    created: int = 0
    at: float | None = None
    recent: NodeMemory | None = None


class OraclePolicy(KeepsState[OracleState]):
    """Replicas from a known per-second requirement, requested ``lead_s`` ahead.

    Args:
        required_per_s: Fewest Ready replicas needed in each second of the run.
        lead_s: Seconds from a request to a Ready replica.
        min_replicas: Lower bound.
        max_replicas: Upper bound (default: the trace's peak requirement, at least 1).
        interval_s: Seconds between decisions.
        hold_s: Break-even of releasing a replica and starting another (termination
            grace + cold start): replicas needed again within it are kept.
        node_lead_s: Extra seconds when the replicas do not fit on the nodes that are
            always there (node provisioning).
        fast_capacity: Replicas that fit on the nodes that are always up; None means all.
        node_size: Replicas per node.
        node_keep_s: An idle node is removed after this long; until then the replicas it
            held fit again without provisioning.
        margin: Plans for ``ceil(required x (1 + margin))`` replicas (a negative margin
            plans for fewer than the requirement).
        slack_s: Widens the planning window by this much on both sides: replicas come
            ``slack_s`` earlier and stay ``slack_s`` longer.
        cold_starts_s: Cold start of each pod in creation order (pod uid - 1), as the
            cluster will draw them (``sim.coldstart.pod_cold_starts``); a pod past the
            end, or every pod when empty, is planned with ``lead_s``.
        fill_nodes: Round each second's planned replicas up to whole nodes
            (``node_size``): where a node's GPUs are paid for while it is up, the
            replicas that fill it cost nothing more and serve.
        name: Policy name in results.
    """

    state_type = OracleState

    def __init__(
        self,
        required_per_s: Sequence[int],
        lead_s: float,
        min_replicas: int = 0,
        max_replicas: int | None = None,
        interval_s: float = 5.0,
        hold_s: float = 0.0,
        node_lead_s: float = 0.0,
        fast_capacity: int | None = None,
        node_size: int = 1,
        node_keep_s: float = 0.0,
        margin: float = 0.0,
        slack_s: float = 0.0,
        cold_starts_s: Sequence[float] = (),
        fill_nodes: bool = False,
        name: str = "oracle",
    ) -> None:
        required = tuple(int(r) for r in required_per_s)
        where = "OraclePolicy."
        require(bool(required), f"{where}required_per_s=[]", "empty", "give one value a second")
        require(
            min(required) >= 0,
            f"{where}required_per_s={min(required)!r}",
            "out of range",
            "replica counts must be 0 or more",
        )
        for key, value, ok in (
            ("lead_s", lead_s, lead_s >= 0),
            ("hold_s", hold_s, hold_s >= 0),
            ("node_lead_s", node_lead_s, node_lead_s >= 0),
            ("slack_s", slack_s, slack_s >= 0),
        ):
            require(ok, f"{where}{key}={value!r}", "out of range", "use 0 or more seconds")
        require(margin > -1.0, f"{where}margin={margin!r}", "out of range", "use more than -1")
        require(
            interval_s > 0,
            f"{where}interval_s={interval_s!r}",
            "out of range",
            "use a period > 0 s",
        )
        colds = tuple(float(c) for c in cold_starts_s)
        require(
            all(c >= 0 for c in colds),
            f"{where}cold_starts_s",
            "has a negative time",
            "give each pod's cold start in seconds >= 0",
        )
        planned = np.ceil(np.asarray(required, dtype=float) * (1.0 + margin) - 1e-9)
        if fill_nodes and node_size > 1:
            planned = np.ceil(planned / node_size) * node_size
        if max_replicas is None:
            max_replicas = max(1, min_replicas, int(planned.max()))
        check_bounds("OraclePolicy", min_replicas, max_replicas)
        self.required = required
        self._planned = planned.astype(np.int64)
        self._plan_max = RangeMax(self._planned)  # the plan's most over any window
        self._plan_last = int(self._planned[-1])
        self.margin = margin
        self.slack_s = slack_s
        self.cold_starts_s = colds
        self.lead_s = lead_s
        self.hold_s = hold_s
        self.node_lead_s = node_lead_s
        self.fast_capacity = fast_capacity
        self.node_size = max(1, node_size)
        # Plans in whole nodes read how many replicas each node holds (``scaling.nodes``).
        self.reads_node_slots = fill_nodes and self.node_size > 1
        self.node_keep_s = node_keep_s
        self.name = name
        self.interval_s = interval_s
        self.history_s = 0.0
        self.signals: Mapping[str, Signal] = MappingProxyType({})
        self.pod_signals: Mapping[str, Signal] = MappingProxyType({})
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.signal_path = PROMETHEUS_QUERY  # reads nothing but the status

    @classmethod
    def from_config(
        cls, required_per_s: Sequence[int], config: OracleConfig, name: str = "oracle"
    ) -> "OraclePolicy":
        """Build the oracle for a requirement from its config.

        Returns:
            The policy.
        """
        return cls(
            required_per_s,
            config.lead_s,
            min_replicas=config.min_replicas,
            max_replicas=config.max_replicas,
            interval_s=config.interval_s,
            hold_s=config.hold_s,
            node_lead_s=config.node_lead_s,
            fast_capacity=config.fast_capacity,
            node_size=config.node_size,
            node_keep_s=config.node_keep_s,
            margin=config.margin,
            slack_s=config.slack_s,
            cold_starts_s=config.cold_starts_s,
            fill_nodes=config.fill_nodes,
            name=name,
        )

    @property
    def planned(self) -> np.ndarray:
        """Replicas planned for each second: the requirement with margin and node filling."""
        return self._planned.copy()

    def needed(self, now: float, extra_s: float = 0.0) -> int:
        """Most replicas planned in ``[now, now + lead_s + interval_s + extra_s)``.

        The window is widened by ``slack_s`` on both sides; past the end of
        ``required_per_s`` the last value holds.

        Returns:
            Replicas.
        """
        start = max(0, math.floor(now - self.slack_s))
        if start >= self._plan_max.size:
            return self._plan_last
        return self._plan_within(start, now, self.lead_s + self.interval_s + extra_s)

    def _plan_within(self, start: int, now: float, lead: float) -> int:
        """The plan's most over ``[start, now + lead + slack_s)`` (``start`` < its size)."""
        size = self._plan_max.size
        return self._plan_max.max(
            start, min(max(start + 1, math.ceil(now + lead + self.slack_s)), size)
        )

    def cold_start(self, k: int) -> float:
        """The cold start the ``k``-th pod created (0-based) will take, seconds."""
        known = self.cold_starts_s
        return known[k] if 0 <= k < len(known) else float(self.lead_s)

    def _wait_runs(self, live: list[tuple[int, float]]) -> list[tuple[int, int, float]]:
        """Runs of slots (1-based replica counts) with one node wait, lowest first.

        Slots on the standing nodes wait nothing; slots on nodes that recent requests
        brought up wait until those nodes join (``live``, from ``_walk``); the rest wait a
        node's provisioning.

        Returns:
            ``(lo, hi, wait)``: slots ``lo + 1 .. hi`` wait ``wait`` seconds; the runs
            cover slots 1 to ``max_replicas``.
        """
        top = self.max_replicas
        if self.node_lead_s <= 0 or self.fast_capacity is None:
            return [(0, top, 0.0)]
        fast = min(max(self.fast_capacity, 0), top)
        # An entry covers the slots above the last capacity covered up to its own, with the
        # least wait over it and every entry of more capacity (``live`` sorted by capacity;
        # the order among equal capacities does not change the minima).
        covers: list[tuple[int, float]] = []
        if live:
            live.sort()
            least = [w for _, w in live]
            for k in range(len(least) - 2, -1, -1):
                least[k] = min(least[k], least[k + 1])
            prev = 0
            for (cap, _), best in zip(live, least, strict=True):
                if cap > prev:
                    covers.append((cap, best))
                    prev = cap
        cuts = sorted({c for c in (fast, top, *(min(c, top) for c, _ in covers)) if c > 0})
        runs: list[tuple[int, int, float]] = []
        lo, i = 0, 0
        for hi in cuts:
            wait = 0.0 if hi <= fast else self.node_lead_s
            while i < len(covers) and covers[i][0] < hi:
                i += 1
            if i < len(covers):  # the run lies within this entry's slots
                wait = min(wait, covers[i][1])
            runs.append((lo, hi, wait))
            lo = hi
        return runs

    def _largest_due(
        self, now: float, desired: int, created: int, live: list[tuple[int, float]]
    ) -> int:
        """The largest slot ``j`` the plan over ``[now, now + lead_j)`` reaches, or 0.

        ``lead_j`` is the decision interval plus the node wait of slot ``j``
        (``_wait_runs``) plus the cold start of the pod that would fill it: slots up to
        ``desired + 1`` take the next pod's, each one above the pod after. The window is
        widened by ``slack_s`` on both sides; past the end of the plan its last value
        holds. Slots of one run and one cold start share a window, so each such group
        costs one look-up of the plan's maximum (``RangeMax``).
        """
        size, top = self._plan_max.size, self.max_replicas
        start = max(0, math.floor(now - self.slack_s))
        if start >= size:
            return min(top, self._plan_last)
        within, rest = self._plan_within, self.interval_s
        runs = self._wait_runs(live)
        colds = self.cold_starts_s
        bound = top  # no slot above the plan's most over the longest lead is due
        if colds:
            last = created + max(top - desired - 1, 0)  # the last pod any slot would take
            longest = max(colds[max(created, 0) : last + 1], default=-math.inf)
            if created < 0 or last >= len(colds):
                longest = max(longest, float(self.lead_s))
            longest = (longest + max(w for _, _, w in runs)) + rest
            bound = within(start, now, longest)
        for lo, hi, wait in reversed(runs):
            j = min(hi, bound)
            if colds:  # slots above desired + 1: a cold start each
                while j > lo and j > desired + 1:
                    lead = (self.cold_start(created + j - desired - 1) + wait) + rest
                    if within(start, now, lead) >= j:
                        return j
                    j -= 1
            if j > lo:  # slots sharing the next pod's cold start
                cold = self.cold_start(created) if colds else self.lead_s
                lead = (cold + wait) + rest
                at = within(start, now, lead)
                if at > lo:
                    return min(j, at)
        return 0

    def _created(self, observation: Observation, state: OracleState) -> int:
        """Pods the cluster has created so far: the index of the next pod's cold start.

        The oracle counts the pods it asked for; pods it did not ask for (the
        ReplicaSet replacing a failed one) show as pods created since its last look.
        """
        pods = observation.target.pods
        after = state.at
        if after is None:
            return len(pods)
        now = observation.now
        since = sum(1 for p in pods if after < p.created_at <= now)
        return state.created + since

    def _walk(
        self, now: float, desired: int, state: OracleState
    ) -> tuple[list[tuple[float, float, float]], list[tuple[int, float]]]:
        """Node memory, and what it says about node waits, in one pass over it.

        The memory is ``[last held, replicas, nodes ready at]`` of recent requests. A
        level still held is refreshed; one idle for ``node_keep_s`` is forgotten (its
        nodes are gone). At the first decision the current pods' nodes are up.

        Each entry still up a further ``node_lead_s`` past the next decision (idle nodes
        go ``node_keep_s`` after their pods, so a pod deferred past that asks for a new
        node in time) covers the slots up to its nodes' capacity with its wait until
        they join. Entries whose nodes are up wait 0, so of those only the largest
        matters.

        Returns:
            (the new memory; ``(capacity in replicas, wait in seconds)`` of the entries
            that cover slots, in no order).
        """
        if self.node_lead_s <= 0 or self.fast_capacity is None:
            return [], []
        keep, size = self.node_keep_s, self.node_size
        base = now + self.interval_s + self.node_lead_s
        old = state.recent
        recent: list[tuple[float, float, float]] = []
        live: list[tuple[int, float]] = []
        up = -math.inf  # most replicas of a live entry whose nodes are up
        # Entries whose nodes are up differ only in a past ``ready_at``, which no later
        # decision reads (time only goes on): one of each is kept. A level still held is
        # refreshed to ``now``, so keyed by its replicas alone; a level kept from before
        # holds more than ``desired``, so by (last held, replicas); the keys never meet.
        held_now: set[float] = set()
        joined: set[tuple[float, float]] = set()
        remember = recent.append
        near_now = base - now <= keep  # a refreshed level's nodes outlast a provisioning
        for t, held, ready_at in old if old is not None else [(now, float(desired), now)]:
            if held <= desired:  # still held: refreshed to now
                last = now
                if ready_at <= now:
                    if held in held_now:
                        continue
                    held_now.add(held)
                    remember((last, held, ready_at))
                    if held > up and near_now:
                        up = held
                    continue
            elif now - t <= keep:
                last = t
                if ready_at <= now:
                    if (last, held) in joined:
                        continue
                    joined.add((last, held))
                    remember((last, held, ready_at))
                    if held > up and base - last <= keep:
                        up = held
                    continue
            else:
                continue
            # Nodes still joining. Past ``base - last > keep`` they are gone within a
            # provisioning: a pod deferred past it asks for one.
            remember((last, held, ready_at))
            if base - last <= keep:
                live.append((math.ceil(held / size) * size, ready_at - now))
        if up > -math.inf:
            live.append((math.ceil(up / size) * size, 0.0))
        return recent, live

    def decide(self, observation: Observation, state: OracleState) -> Decision[OracleState]:
        """Ask now for every replica whose own lead would make it late at the next decision.

        Slot ``j`` (the ``j``-th replica) is wanted when the plan over ``[now, now +
        interval_s + lead_j)`` reaches ``j``; ``lead_j`` is the cold start of the pod
        that would fill it (the next ones created, in order) plus its node wait. A
        replica needed again within ``hold_s`` is kept.

        Returns:
            The clamped replicas, and the state: pods created so far, the decision time
            and the node memory.
        """
        now = observation.now
        # The plan counts every node as ``node_size``; a node that lost a GPU holds fewer,
        # so the count is read and asked for as if it were whole (``scaling.nodes``).
        size = self.node_size
        known = known_slots(observation.target.node_slots, size) if self.reads_node_slots else []
        whole = bool(known)
        seen = observation.target.desired
        desired = seen + short_by(seen, known, size) if whole else seen
        created = self._created(observation, state)
        recent, live = self._walk(now, desired, state)
        need = self._largest_due(now, desired, created, live)
        # Never grow on the longer horizon, only decline to shrink across short dips.
        keep = min(desired, self.needed(now, self.hold_s))
        if now + self.interval_s + self.hold_s >= self._plan_max.size:
            keep = desired  # a release this close to the end of the plan never pays back
        nominal = clamp(max(need, keep), self.min_replicas, self.max_replicas)
        replicas = nominal
        if whole:
            replicas = clamp(on_nodes(nominal, known, size), self.min_replicas, self.max_replicas)
        reason = f"{need} replicas are due within their own lead (next cold start "
        reason += f"{self.cold_start(created):.0f} s)"
        if keep > need:
            reason += f"; keeping {keep}: needed again within {self.hold_s:g} s"
        if replicas != nominal:
            reason += f"; {replicas} on nodes that hold {nominal - replicas} fewer"
        logger.debug("%s: %d -> %d: %s", self.name, seen, replicas, reason)
        if recent and nominal > desired:
            recent.append((now, float(nominal), now + self.node_lead_s))
        pods = len(observation.target.pods)
        out = OracleState(created + max(0, replicas - pods), now, tuple(recent) if recent else None)
        return Decision(replicas, reason, out)
