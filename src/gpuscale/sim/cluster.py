"""The simulated Kubernetes cluster: GPU nodes, and the life of an inference pod.

A scaling policy only ever changes ``spec.replicas``; what that buys, and when,
is the cluster's business, and it is most of what separates a good policy from a
bad one. This module reproduces the delays a GPU deployment sees:

* A pod needs ``gpus_per_pod`` free GPUs on one node (2 for a tensor-parallel-2
  LLM replica); without them it stays Pending.
* Pending pods make the cluster autoscaler add nodes (up to ``max_nodes``), which
  join after ``node_provision_s``. Nodes go as cluster-autoscaler's defaults remove
  them, down to ``min_nodes``: one empty for ``node_idle_remove_s`` (its
  ``--scale-down-unneeded-time``, 10 min; the time restarts each time it empties);
  one whose pods hold under ``scale_down_gpu_utilization_threshold`` of its GPUs
  and fit elsewhere for as long, found at its 10 s scans, is drained (tainted, its
  pods deleted and recreated by the ReplicaSet on other nodes) and removed when its
  pods have left, one at a time; none within ``scale_down_delay_after_add_s`` of a
  node asked for. ``Cluster.ready_node_gpus`` counts the GPUs on joined nodes (a
  draining one too), idle or not: what the pool is billed for until a node is removed.
* A scheduled pod cold-starts (image pull, model load) for a time drawn from
  ``ColdStart`` before it is Ready and takes traffic.
* A deleted pod takes no new traffic at once and holds its GPU until the
  simulator reports it drained (``release``) or the termination grace ends. The
  ReplicaSet deletes pods in Kubernetes' order (``podorder``): unscheduled, then
  not Ready, then the lowest ``pod-deletion-cost`` (``set_deletion_costs``; the
  decision step marks victims so, ``scaling.placement``), then those on the
  fullest nodes, then the most recently Ready.
* The API view of each pod (``status``) names its node, as ``spec.nodeName`` does.

All randomness comes from the seed, so a seed fixes the pod timeline. The
``k``-th pod created takes the ``k``-th draw of a cold-start stream fixed by the
seed alone (``coldstart.ColdStartStream``; ``coldstart.pod_cold_starts`` reads
it in advance), so a hindsight planner knows each pod's cold start before asking for it.
A crashed pod's restart draws from a second stream and does not shift the first.
"""

import heapq
import logging
import math
from collections.abc import Mapping, Sequence

import numpy as np

from gpuscale.errors import ConfigError
from gpuscale.scaling.policy import PodStatus, TargetStatus
from gpuscale.sim.coldstart import ColdStart, ColdStartStream
from gpuscale.sim.nodepool import ClusterConfig
from gpuscale.sim.pod import GONE, PENDING, READY, STARTING, TERMINATING, Pod, pod_status
from gpuscale.sim.podorder import scale_in_victims
from gpuscale.sim.scaledown import SCAN_INTERVAL_S, NodeUse

logger = logging.getLogger(__name__)

__all__ = ["Cluster", "ClusterConfig", "ColdStart", "Pod"]
__all__ += ["GONE", "PENDING", "READY", "STARTING", "TERMINATING"]  # from sim.pod


_NODE_ABSENT, _NODE_PROVISIONING, _NODE_READY, _NODE_DRAINING = range(4)
NODE_READY = _NODE_READY
"""``Cluster.node_state`` of a node that has joined and takes pods."""
NODE_DRAINING = _NODE_DRAINING
"""``Cluster.node_state`` of a node being drained for removal: billed, takes no new pods."""


class Cluster:
    """Nodes, GPU slots and the deployment's pods, advanced by events.

    Slots are numbered ``node * gpus_per_node + gpu``. ``slot_phys`` maps each slot to
    a device index of the simulated fleet; a replaced GPU gets a fresh spare index.

    Args:
        config: The node pool.
        seed: Seeds cold-start draws (see ``coldstart.pod_cold_starts``).
        spare_gpus: Extra device indices reserved for replaced GPUs.
        gpus_per_pod: GPUs each pod takes, all on one node.

    Raises:
        ConfigError: A pod needs more GPUs than a node has.
    """

    def __init__(
        self, config: ClusterConfig, *, seed: int = 0, spare_gpus: int = 0, gpus_per_pod: int = 1
    ) -> None:
        if not 1 <= gpus_per_pod <= config.gpus_per_node:
            raise ConfigError(
                f"serving.gpus_per_replica={gpus_per_pod}: a replica must fit on one node of "
                f"{config.gpus_per_node} GPUs; raise cluster.gpus_per_node"
            )
        self.config, self.gpus_per_pod = config, gpus_per_pod
        self._cold = ColdStartStream(config.cold_start, seed)
        self._restart_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,)))
        g = config.gpus_per_node
        self.n_slots = config.max_gpus
        self.slot_pod = np.full(self.n_slots, -1, dtype=np.int64)
        self.slot_broken = np.zeros(self.n_slots, dtype=bool)
        self.slot_phys = np.arange(self.n_slots, dtype=np.int64)
        self.n_devices = self.n_slots + spare_gpus
        self._next_spare = self.n_slots
        self.node_state = np.full(config.max_nodes, _NODE_ABSENT, dtype=np.int8)
        self.node_state[: config.initial_nodes] = _NODE_READY
        self._on_ready_node: np.ndarray | None = None  # ``on_ready_node``, None when stale
        self._slots: tuple[int, ...] | None = None  # ``node_slots``, None when stale
        self._node_gpus = g
        # When each node last became empty (inf while it holds a pod): cluster-autoscaler
        # removes a node only after it has been unneeded for the whole idle time.
        self._empty_since = np.full(config.max_nodes, math.inf)
        self._last_add = -math.inf  # when a node was last asked for
        # cluster-autoscaler's next scan for under-used nodes (inf: none due). Not an event:
        # a scan that finds nothing due changes nothing, so it runs at the first
        # ``advance`` at or after this time and does not cut the simulation's blocks.
        self.scan_due = math.inf
        self._draining = -1  # the node being drained, -1 when none
        self.use = NodeUse(config.max_nodes, g, config.scale_down_gpu_utilization_threshold)
        self.ready_node_gpus = config.initial_nodes * g  # GPUs on Ready nodes: what the pool costs
        self.pods: dict[int, Pod] = {}
        self._pending: dict[int, Pod] = {}  # unscheduled pods, oldest first
        # Kept as pods change, so no query scans every pod: live pods (oldest first) and
        # their API views, those starting, GPUs held, uids that left Ready (``take_left_ready``).
        self._live: dict[int, Pod] = {}
        self._live_status: dict[int, PodStatus] = {}
        self._starting: dict[int, Pod] = {}
        self._held, self._left_ready, self._terminating = 0, list[int](), 0
        self.desired = 0
        # The ReplicaSet's deletion-cost and pods-per-node ranks (``Scenario.placement``).
        self.ranked_scale_in = True
        self.version = 0
        # Bumped where the Ready pods change (``version`` also counts pods starting,
        # terminating or freeing GPUs): what is built from the Ready pods alone holds.
        self.ready_changes = 0
        self._uid = 0
        self._events: list[tuple[float, int, int, int]] = []  # (time, seq, kind, id)
        self._seq = 0
        # Bumped where the status changes: ``desired``, a live pod added, removed, bound
        # to a node, turning Ready or not, or given a deletion cost (freeing a deleted
        # one's GPU does not).
        self._status_changes = 0
        self._status: tuple[int, TargetStatus] | None = None

    # ----------------------------------------------------------------- queries
    def node_name(self, node: int) -> str:
        """Name of node ``node``."""
        return f"gpu-node-{node:04d}"

    def _view(self, pod: Pod) -> PodStatus:
        """The API view of ``pod``, naming its node."""
        node = self.node_name(pod.slot // self._node_gpus) if pod.slot >= 0 else ""
        return pod_status(pod, node)

    def live_pods(self) -> list[Pod]:
        """Pods counted against ``spec.replicas`` (not terminating), oldest first."""
        return list(self._live.values())

    def ready_pods(self) -> list[Pod]:
        """Ready pods, oldest first."""
        return [p for p in self.pods.values() if p.state == READY]

    def held_pods(self) -> list[Pod]:
        """Pods holding a GPU (starting, Ready or terminating), oldest first."""
        return [p for p in self.pods.values() if p.slot >= 0]

    def held_count(self) -> int:
        """GPUs held by the deployment's pods (every GPU of each pod)."""
        return self._held

    def take_left_ready(self) -> list[int]:
        """The uids of the pods that left Ready since the last call, in the order they left."""
        left, self._left_ready = self._left_ready, []
        return left

    def terminating_count(self) -> int:
        """Pods terminating (deleted, still holding their GPUs)."""
        return self._terminating

    def devices(self, pods: list[Pod]) -> np.ndarray:
        """Device indices of every GPU the pods hold, pod by pod."""
        slots = [s for p in pods for s in p.gpus]
        return self.slot_phys[np.array(slots, dtype=np.intp)] if slots else np.zeros(0, np.int64)

    def status(self) -> TargetStatus:
        """The deployment's status as the API server reports it."""
        slots = self.node_slots()
        if (
            self._status is None
            or self._status[0] != self._status_changes
            or self._status[1].node_slots is not slots
        ):
            # A pod's view is replaced where it turns Ready or not Ready (nothing else in it
            # changes), in place, so the views keep the live pods' order.
            pods = tuple(self._live_status.values())
            self._status = (self._status_changes, TargetStatus(self.desired, pods, slots))
        return self._status[1]

    def node_slots(self) -> tuple[int, ...]:
        """Pods each Ready node holds, in node order: its working GPUs over a pod's GPUs.

        A GPU that fell off the bus is left out until replaced, as the device plugin
        leaves an unhealthy GPU out of the node's allocatable ``nvidia.com/gpu``.
        """
        if self._slots is None:
            ready = np.flatnonzero(self.node_state == _NODE_READY)
            working = (~self.slot_broken).reshape(-1, self._node_gpus)[ready].sum(axis=1)
            self._slots = tuple(int(w) // self.gpus_per_pod for w in working)
        return self._slots

    def nodes_up(self) -> int:
        """Nodes Ready or being provisioned."""
        return int(np.count_nonzero(self.node_state != _NODE_ABSENT))

    # ----------------------------------------------------------------- changes
    def _push(self, when: float, kind: int, ident: int) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, kind, ident))

    def start(self, replicas: int, now: float = 0.0) -> None:
        """Create ``replicas`` pods already Ready at ``now`` (a warmed-up deployment)."""
        self.desired = replicas
        self._status_changes += 1
        places = self._placements(replicas)
        if len(places) < replicas:
            raise ConfigError(
                f"initial replicas {replicas} of {self.gpus_per_pod} GPU(s) exceed the "
                f"{self.config.initial_nodes} initial nodes' GPUs: raise cluster.initial_nodes"
            )
        for gpus in places:
            pod = self._new_pod(now)
            self._bind(pod, gpus)
            self._now_ready(pod, now)
        self._request_scan(now)
        self.version += 1
        self.ready_changes += 1

    def scale(self, replicas: int, now: float) -> None:
        """Set ``spec.replicas``; the ReplicaSet creates or deletes pods at once."""
        self.desired = max(int(replicas), 0)
        self._status_changes += 1
        self._reconcile(now)

    def delete_named(self, names: Sequence[str], now: float) -> None:
        """Delete the named live pods (``kubectl delete pod``); the ReplicaSet replaces them.

        Names of pods that are gone or already terminating are ignored.
        """
        wanted = set(names)
        for pod in self.live_pods():
            if pod.name in wanted:
                self._delete(pod, now)
        self._reconcile(now)

    def set_deletion_costs(self, costs: Mapping[str, int | None]) -> None:
        """Annotate the named live pods' ``pod-deletion-cost`` (None removes it)."""
        for pod in self.live_pods():
            if pod.name in costs:
                cost = costs[pod.name]
                pod.deletion_cost = 0 if cost is None else int(cost)
                self._live_status[pod.uid] = self._view(pod)
                self._status_changes += 1

    def _new_pod(self, now: float) -> Pod:
        self._uid += 1
        pod = Pod(self._uid, f"{self.config.deployment}-{self._uid:05d}", now)
        self.pods[pod.uid] = self._live[pod.uid] = pod
        self._live_status[pod.uid] = self._view(pod)
        self._pending[pod.uid] = pod
        self._status_changes += 1
        return pod

    def _reconcile(self, now: float) -> None:
        n_live = len(self._live)
        if n_live < self.desired:
            for _ in range(self.desired - n_live):
                self._new_pod(now)
        elif n_live > self.desired:
            victims = scale_in_victims(
                self.live_pods(),
                n_live - self.desired,
                node_gpus=self._node_gpus,
                ranked=self.ranked_scale_in,
            )
            for pod in victims:
                self._delete(pod, now)
        self._schedule(now)
        self._request_scan(now)
        self.version += 1

    def _delete(self, pod: Pod, now: float) -> None:
        self._status_changes += 1
        del self._live[pod.uid], self._live_status[pod.uid]
        if pod.slot < 0:
            pod.state = GONE
            del self.pods[pod.uid]
            del self._pending[pod.uid]
            return
        self._terminating += 1
        self._left(pod)
        pod.state, pod.due = TERMINATING, now + self.config.termination_grace_s
        self._push(pod.due, 1, pod.uid)

    def on_ready_node(self) -> np.ndarray:
        """Which slots are on joined nodes, Ready or draining: what is billed and powered.

        Kept until a node changes state; do not modify.
        """
        if self._on_ready_node is None:
            joined = (self.node_state == _NODE_READY) | (self.node_state == _NODE_DRAINING)
            self._on_ready_node = np.repeat(joined, self._node_gpus)
        return self._on_ready_node

    def _free_slots(self) -> np.ndarray:
        """Free, working GPU slots on Ready nodes, lowest first (pods pack onto nodes)."""
        takes = self.on_ready_node()  # joined nodes: all of them Ready but a draining one
        if self._draining >= 0:
            takes = np.repeat(self.node_state == _NODE_READY, self._node_gpus)
        return np.flatnonzero((self.slot_pod < 0) & ~self.slot_broken & takes)

    def _placements(self, limit: int) -> list[tuple[int, ...]]:
        """Up to ``limit`` sets of ``gpus_per_pod`` free slots, each on one node, packed."""
        free, g = self._free_slots(), self.gpus_per_pod
        if g == 1:
            return [(s,) for s in free[:limit].tolist()]
        node = free // self._node_gpus
        out: list[tuple[int, ...]] = []
        for n in np.unique(node).tolist():
            on_node = free[node == n].tolist()
            out += [tuple(on_node[i : i + g]) for i in range(0, len(on_node) - g + 1, g)]
            if len(out) >= limit:
                return out[:limit]
        return out

    def _now_ready(self, pod: Pod, now: float) -> None:
        """``pod`` turns Ready at ``now``."""
        pod.state, pod.ready_at = READY, now
        self._live_status[pod.uid] = self._view(pod)

    def _left(self, pod: Pod) -> None:
        """``pod`` leaves its state (Ready or starting) for another."""
        if pod.state == READY:
            self.ready_changes += 1
            self._left_ready.append(pod.uid)
        elif pod.state == STARTING:
            del self._starting[pod.uid]

    def _bind(self, pod: Pod, gpus: tuple[int, ...]) -> None:
        pod.slot, pod.gpus = gpus[0], gpus
        node = gpus[0] // self._node_gpus
        self._empty_since[node] = math.inf
        self.use.note(node, len(gpus))
        self._held += len(gpus)
        self.slot_pod[list(gpus)] = pod.uid
        self._pending.pop(pod.uid, None)
        if pod.uid in self._live_status:  # its view now names the node
            self._live_status[pod.uid] = self._view(pod)
            self._status_changes += 1

    def _schedule(self, now: float) -> None:
        if not self._pending:
            return
        pending = list(self._pending.values())
        places = self._placements(len(pending))
        started = pending[: len(places)]
        for pod, gpus in zip(started, places, strict=False):
            self._bind(pod, gpus)
            pod.state = STARTING
            self._starting[pod.uid] = pod
        for pod in started:  # the k-th pod created takes the stream's k-th draw
            pod.due = now + self._cold.draw(pod.uid - 1)
            self._push(pod.due, 0, pod.uid)
        waiting = len(pending) - len(started)
        if waiting > 0:
            self._provision(waiting, now)

    def _provision(self, waiting: int, now: float) -> None:
        g, per_pod = self._node_gpus, self.gpus_per_pod
        coming = np.repeat(self.node_state == _NODE_PROVISIONING, g) & ~self.slot_broken
        incoming = int((coming.reshape(-1, g).sum(axis=1) // per_pod).sum())
        need = math.ceil(max(waiting - incoming, 0) / (g // per_pod))
        absent = np.flatnonzero(self.node_state == _NODE_ABSENT)[:need]
        if absent.size:
            self._last_add = now
        for node in absent:
            self.node_state[node] = _NODE_PROVISIONING
            self._on_ready_node = None
            self._push(now + self.config.node_provision_s, 2, int(node))
            logger.debug("t=%.0f: provisioning node %d", now, node)
        if need > absent.size:
            logger.debug("t=%.0f: node pool at max_nodes; %d pods stay Pending", now, waiting)

    def release(self, uid: int, now: float) -> bool:
        """A deleted pod has drained before its grace ended: it frees its GPU now.

        Returns:
            Whether a terminating pod was released.
        """
        pod = self.pods.get(uid)
        if pod is None or pod.state != TERMINATING:
            return False
        slot = pod.slot
        self._evict(slot)
        node = slot // self._node_gpus
        self._finish_drain(node, now)
        self._schedule(now)
        self._schedule_node_removal(node, now)
        self._request_scan(now)
        self.version += 1
        return True

    def fail_gpu(self, slot: int, now: float, replace_after: float | None = None) -> Pod | None:
        """The GPU in ``slot`` fell off the bus: its pod fails (``ClusterConfig.lost_gpu_pod``).

        With ``replaced`` the pod is gone and its ReplicaSet places a new one elsewhere;
        with ``stuck`` it stays on the GPU, never Ready, until deleted.

        Args:
            slot: GPU slot.
            now: Time of the failure, seconds.
            replace_after: Seconds until a technician swaps the GPU; None for never.

        Returns:
            The pod that held the GPU, if any.
        """
        node = slot // self._node_gpus
        if not self.slot_broken[slot]:
            self.use.note(node, working=-1)
        self.slot_broken[slot] = True
        self._slots = None
        if self.config.lost_gpu_pod == "stuck":
            pod = self._stick(slot)
            if replace_after is not None:
                self._push(now + replace_after, 3, slot)
            return pod
        pod = self._evict(slot)
        if replace_after is not None:
            self._push(now + replace_after, 3, slot)
        self._reconcile(now)
        self._finish_drain(node, now)
        self._schedule_node_removal(node, now)
        return pod

    def _stick(self, slot: int) -> Pod | None:
        """The pod on a GPU that fell off the bus crash-loops there: not Ready, never again."""
        uid = int(self.slot_pod[slot])
        pod = self.pods.get(uid) if uid >= 0 else None
        if pod is None or pod.state not in (STARTING, READY):
            return pod
        self._left(pod)
        self._status_changes += 1
        pod.state, pod.ready_at = STARTING, None
        self._live_status[pod.uid] = self._view(pod)
        self._starting[pod.uid] = pod  # a not-Ready pod, first to go on a scale-in
        pod.due = math.inf  # no start falls due: it waits to be deleted
        self.version += 1
        return pod

    def _evict(self, slot: int) -> Pod | None:
        uid = int(self.slot_pod[slot])
        if uid < 0:
            return None
        pod = self.pods.pop(uid)
        self._left(pod)
        if pod.state == TERMINATING:
            self._terminating -= 1
        else:  # a live pod gone
            self._status_changes += 1
            del self._live[uid], self._live_status[uid]
        self.slot_pod[list(pod.gpus) or slot] = -1
        self.use.note(slot // self._node_gpus, -len(pod.gpus))
        self._held -= len(pod.gpus)
        pod.state, pod.slot, pod.gpus = GONE, -1, ()
        return pod

    def restart_pod(self, pod: Pod, now: float) -> None:
        """The pod's container crashed (e.g. an ECC error): it cold-starts again in place."""
        if pod.state not in (STARTING, READY):
            return
        self._left(pod)
        self._status_changes += 1
        pod.state, pod.ready_at = STARTING, None
        self._live_status[pod.uid] = self._view(pod)
        self._starting[pod.uid] = pod
        pod.due = now + float(self.config.cold_start.sample(self._restart_rng, 1)[0])
        self._push(pod.due, 0, pod.uid)
        self.version += 1

    def _schedule_node_removal(self, node: int, now: float) -> None:
        g = self._node_gpus
        if (
            self.node_state[node] == _NODE_READY
            and self._empty_since[node] == math.inf
            and (self.slot_pod[node * g : (node + 1) * g] < 0).all()
        ):
            self._empty_since[node] = now
            self._push(now + self.config.node_idle_remove_s, 4, node)

    def _scale_down_held(self, when: float) -> float | None:
        """When scale-down may resume, if ``scale_down_delay_after_add_s`` holds it at ``when``."""
        resume = self._last_add + self.config.scale_down_delay_after_add_s
        return resume if when < resume else None

    def _remove_node(self, node: int, when: float, why: str) -> None:
        self.node_state[node] = _NODE_ABSENT
        self._empty_since[node] = math.inf
        self.use.forget(node)
        self._on_ready_node = self._slots = None
        self.ready_node_gpus -= self._node_gpus
        logger.debug("t=%.0f: removed %s node %d", when, why, node)

    def _request_scan(self, now: float) -> None:
        """Have cluster-autoscaler look for under-used nodes at its next scan (``scaledown``)."""
        if self.use.under and self.scan_due == math.inf:
            self.scan_due = now + SCAN_INTERVAL_S

    def _scan(self, when: float) -> bool:
        """One cluster-autoscaler scan: time the under-used nodes, drain one that is due.

        Returns:
            Whether a drain began.
        """
        self.scan_due = math.inf
        cfg = self.config
        ready = self.node_state == _NODE_READY
        due = self.use.due(when, ready, self.gpus_per_pod, cfg.node_idle_remove_s)
        if due == -2:
            return False
        began = False
        free_to_drain = self._draining < 0 and self.nodes_up() > cfg.floor_nodes
        if due >= 0 and free_to_drain and self._scale_down_held(when) is None:
            self._drain(due, when)
            began = True
        self._request_scan(when)  # keep timing the candidates
        return began

    def _drain(self, node: int, now: float) -> None:
        """Taint ``node`` and evict its pods; their ReplicaSet recreates them on other nodes."""
        self.node_state[node] = _NODE_DRAINING
        self._draining = node
        self._on_ready_node = self._slots = None
        g = self._node_gpus
        on_node = {int(u) for u in self.slot_pod[node * g : (node + 1) * g] if u >= 0}
        for pod in self.live_pods():
            if pod.uid in on_node:
                self._delete(pod, now)
        logger.debug("t=%.0f: draining under-used node %d (%d pods)", now, node, len(on_node))
        self._reconcile(now)
        self._finish_drain(node, now)

    def _finish_drain(self, node: int, now: float) -> None:
        """Remove ``node`` if it is the one draining and its last pod has left."""
        g = self._node_gpus
        if node == self._draining and (self.slot_pod[node * g : (node + 1) * g] < 0).all():
            self._draining = -1
            self._remove_node(node, now, "drained")

    def next_event(self) -> float:
        """Time of the next pending event, seconds (inf when none)."""
        return self._events[0][0] if self._events else math.inf

    def advance(self, now: float) -> bool:
        """Apply every event due at or before ``now``, then a scan due by then (``scan_due``).

        Returns:
            Whether anything changed.
        """
        changed = False
        while self._events and self._events[0][0] <= now:
            when, _, kind, ident = heapq.heappop(self._events)
            changed |= self._apply(when, kind, ident)
        if self.scan_due <= now:
            changed |= self._scan(now)
        if changed:
            self.version += 1
        return changed

    def _apply(self, when: float, kind: int, ident: int) -> bool:
        g = self._node_gpus
        if kind == 0:  # cold start done
            pod = self.pods.get(ident)
            if pod is None or pod.state != STARTING or pod.due != when:
                return False
            del self._starting[ident]
            pod.due = math.inf
            self._now_ready(pod, when)
            self.ready_changes += 1
            self._status_changes += 1
            return True
        if kind == 1:  # termination grace over
            return self.release(ident, when)
        if kind == 2:  # node joined
            self.node_state[ident] = _NODE_READY
            self._on_ready_node = self._slots = None
            self.ready_node_gpus += g
            self._schedule(when)
            self._schedule_node_removal(ident, when)
            self._request_scan(when)
            return True
        if kind == 3:  # GPU replaced
            if self.slot_broken[ident]:
                self.use.note(ident // g, working=1)
            self.slot_broken[ident] = False
            self._slots = None
            self.slot_phys[ident] = self._next_spare if self._next_spare < self.n_devices else ident
            self._next_spare += 1
            self._schedule(when)
            self._request_scan(when)
            return True
        # kind 4: remove an idle node, if it has stayed empty since then and is above the floor
        if (
            self.node_state[ident] == _NODE_READY
            and self._empty_since[ident] + self.config.node_idle_remove_s <= when
            and self.nodes_up() > self.config.floor_nodes
        ):
            resume = self._scale_down_held(when)
            if resume is not None:  # scale-down paused after a node was added: look again then
                self._push(resume, 4, ident)
                return False
            self._remove_node(ident, when, "idle")
            return True
        return False
