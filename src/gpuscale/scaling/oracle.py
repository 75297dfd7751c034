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
from gpuscale.scaling.policy import Decision, Observation, State

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


class OraclePolicy:
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
        self.margin = margin
        self.slack_s = slack_s
        self.cold_starts_s = colds
        self._cold_array = np.asarray(colds, dtype=float)
        self.lead_s = lead_s
        self.hold_s = hold_s
        self.node_lead_s = node_lead_s
        self.fast_capacity = fast_capacity
        self.node_size = max(1, node_size)
        self.node_keep_s = node_keep_s
        self.name = name
        self.interval_s = interval_s
        self.history_s = 0.0
        self.signals: Mapping[str, Signal] = MappingProxyType({})
        self.pod_signals: Mapping[str, Signal] = MappingProxyType({})
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self._slots = np.arange(1, max_replicas + 1)  # replica counts 1..max, one per slot
        self._slot_wait = np.where(  # a slot's node wait with no recent request (read-only)
            self._slots > (fast_capacity if fast_capacity is not None else max_replicas),
            node_lead_s,
            0.0,
        )

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

    def _window_max(self, now: float, horizons: np.ndarray) -> np.ndarray:
        """Most replicas planned over ``[now - slack_s, now + h + slack_s)`` for each ``h``.

        Past the end of the requirement the last value holds.
        """
        plan = self._planned
        start = max(0, math.floor(now - self.slack_s))
        ends = np.maximum(start + 1, np.ceil(now + horizons + self.slack_s)).astype(np.int64)
        if start >= plan.size:
            return np.full(horizons.shape, int(plan[-1]), dtype=np.int64)
        stop = int(ends.max())
        running = np.maximum.accumulate(plan[start:stop])  # int64, as the plan
        at: np.ndarray = running[np.minimum(ends - start, running.size) - 1]
        return at

    def needed(self, now: float, extra_s: float = 0.0) -> int:
        """Most replicas planned in ``[now, now + lead_s + interval_s + extra_s)``.

        The window is widened by ``slack_s`` on both sides; past the end of
        ``required_per_s`` the last value holds.

        Returns:
            Replicas.
        """
        plan = self._planned  # _window_max for one horizon, in scalars
        start = max(0, math.floor(now - self.slack_s))
        if start >= plan.size:
            return int(plan[-1])
        end = max(
            start + 1, math.ceil(now + (self.lead_s + self.interval_s + extra_s) + self.slack_s)
        )
        return int(plan[start : min(end, plan.size)].max())

    def cold_start(self, k: int) -> float:
        """The cold start the ``k``-th pod created (0-based) will take, seconds."""
        known = self.cold_starts_s
        return known[k] if 0 <= k < len(known) else float(self.lead_s)

    def _colds(self, index: np.ndarray) -> np.ndarray:
        known = self._cold_array
        if known.size == 0:
            return np.full(index.shape, self.lead_s)
        inside = (index >= 0) & (index < known.size)
        return np.where(inside, known[np.clip(index, 0, known.size - 1)], self.lead_s)

    def _node_waits(self, live: list[tuple[int, float]]) -> np.ndarray:
        """Seconds a pod filling each slot (1-based replica count) would wait for a node.

        Slots on the standing nodes wait nothing; slots on nodes that recent requests
        brought up wait until those nodes join (``live``, from ``_walk``); the rest wait a
        node's provisioning.
        """
        if self.node_lead_s <= 0 or self.fast_capacity is None:
            return np.zeros(self._slots.shape)
        wait = self._slot_wait.copy()
        if not live:
            return wait
        live.sort()  # by capacity; the order among equal capacities does not change the minima
        least = [w for _, w in live]
        for k in range(len(least) - 2, -1, -1):  # the least wait over the entries from k on
            least[k] = min(least[k], least[k + 1])
        # The slots (prev, cap] are covered first by the entry of capacity ``cap``; a slot
        # past the largest capacity keeps its own wait.
        prev = 0
        for (cap, _), best in zip(live, least, strict=True):
            if cap > prev:
                segment = wait[prev:cap]  # slots prev + 1 .. cap
                np.minimum(segment, best, out=segment)
                prev = cap
        return wait

    def _created(self, observation: Observation, state: State) -> int:
        """Pods the cluster has created so far: the index of the next pod's cold start.

        The oracle counts the pods it asked for; pods it did not ask for (the
        ReplicaSet replacing a failed one) show as pods created since its last look.
        """
        pods = observation.target.pods
        last = state.get("at")
        if last is None:
            return len(pods)
        after, now = float(last), observation.now
        since = sum(1 for p in pods if after < p.created_at <= now)
        return int(state.get("created", 0)) + since

    def _walk(
        self, now: float, desired: int, state: State
    ) -> tuple[list[list[float]], list[tuple[int, float]]]:
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
        old = state.get("recent")
        fresh = old is None or now - now <= keep  # a level still held counts as held now
        recent: list[list[float]] = []
        live: list[tuple[int, float]] = []
        up = -math.inf  # most replicas of a live entry whose nodes are up
        # Entries whose nodes are up differ only in a past ``ready_at``, which no later
        # decision reads (time only goes on): one of each (last held, replicas) is kept.
        joined: set[tuple[float, float]] = set()
        for t, held, ready_at in old if old is not None else [[now, float(desired), now]]:
            if held <= desired:
                if not fresh:
                    continue
                last = now
            elif now - t <= keep:
                last = t
            else:
                continue
            if ready_at <= now:
                if (last, held) in joined:
                    continue
                joined.add((last, held))
            recent.append([last, held, ready_at])
            if base - last > keep:
                continue  # gone within a provisioning: a pod deferred past it asks for one
            if ready_at > now:
                live.append((math.ceil(held / size) * size, ready_at - now))
            elif held > up:
                up = held
        if up > -math.inf:
            live.append((math.ceil(up / size) * size, 0.0))
        return recent, live

    def decide(self, observation: Observation, state: State) -> Decision:
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
        desired = observation.target.desired
        created = self._created(observation, state)
        recent, live = self._walk(now, desired, state)
        slots = self._slots
        if self._cold_array.size:
            colds: np.ndarray | float = self._colds(created + np.maximum(slots - desired - 1, 0))
        else:
            colds = self.lead_s  # every pod is planned with lead_s (as _colds would give)
        leads = colds + self._node_waits(live) + self.interval_s
        wanted = np.flatnonzero(self._window_max(now, leads) >= slots)
        need = int(wanted[-1]) + 1 if wanted.size else 0  # the largest slot wanted
        # Never grow on the longer horizon, only decline to shrink across short dips.
        keep = min(desired, self.needed(now, self.hold_s))
        if now + self.interval_s + self.hold_s >= self._planned.size:
            keep = desired  # a release this close to the end of the plan never pays back
        replicas = clamp(max(need, keep), self.min_replicas, self.max_replicas)
        reason = f"{need} replicas are due within their own lead (next cold start "
        reason += f"{self.cold_start(created):.0f} s)"
        if keep > need:
            reason += f"; keeping {keep}: needed again within {self.hold_s:g} s"
        logger.info("%s: %d -> %d: %s", self.name, desired, replicas, reason)
        if recent and replicas > desired:
            recent.append([now, float(replicas), now + self.node_lead_s])
        pods = len(observation.target.pods)
        out: dict[str, object] = {"created": created + max(0, replicas - pods), "at": now}
        if recent:
            out["recent"] = recent
        return Decision(replicas, reason, out)
