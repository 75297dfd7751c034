"""The API double's minimal controllers: ReplicaSet-style pods for Deployments, ordinal pods
for StatefulSets, a spreading scheduler, readiness after a delay and graceful termination.

They run synchronously inside the double (``Workloads.sync`` before every request and after
every write), driven by the double's clock, so a test with a manual clock sees a pod turn
Ready exactly when it advances the clock past the pod's delay.
"""

import copy
import hashlib
import heapq
import json
import random
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

from tests.support import kubeapi_model as m
from tests.support.kubeapi_model import Obj, Resource
from tests.support.kubeapi_store import Store

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
"""The annotation the ReplicaSet controller ranks pods by on a scale-in."""

_SAFE = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's rand.SafeEncodeString alphabet
PODS = next(r for r in m.BUILTIN if r.plural == "pods")
NODES = next(r for r in m.BUILTIN if r.plural == "nodes")


def _safe_hash(text: str, n: int) -> str:
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(_SAFE[b % len(_SAFE)] for b in digest[:n])


def _condition(kind: str, ok: bool, at: float, reason: str = "") -> Obj:
    cond: Obj = {
        "type": kind,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": m.fmt_time(at),
    }
    if reason:
        cond["reason"] = reason
    return cond


GPU = "nvidia.com/gpu"
"""The device plugin's extended resource."""


def pod_gpus(pod: Obj) -> int:
    """GPUs a pod's containers set as limits."""
    containers = pod.get("spec", {}).get("containers") or []
    return sum(
        int(((c.get("resources") or {}).get("limits") or {}).get(GPU, "0")) for c in containers
    )


class Workloads:
    """Pods for every Deployment and StatefulSet in the store, kept at spec.replicas.

    Work is event driven so that a double holding hundreds of workloads stays fast: a
    write to a workload marks it dirty, pod timers (Ready due, termination due) sit in a
    heap, and ``sync`` handles only what changed or fell due.
    """

    def __init__(self, store: Store, *, ready_after_s: float, terminate_after_s: float) -> None:
        self.store = store
        self.ready_after_s = ready_after_s
        self.terminate_after_s = terminate_after_s
        self._rng = random.Random(0)
        self.delays: dict[str, float] = {}  # workload uid -> its pods' readiness delay
        self._owner: dict[str, tuple[Resource, str, str]] = {}  # pod uid -> workload
        self._pods: dict[str, dict[str, Obj]] = {}  # workload uid -> pod name -> pod
        self._due: list[tuple[float, int, str, Obj]] = []  # (time, seq, "ready"|"gone", pod)
        self._seq = 0
        self._held_unready: set[str] = set()
        self._dirty: set[tuple[str, str, str]] = set()  # (plural, namespace, name)
        self._pending: list[Obj] = []  # pods no node could take yet
        store.on_write = self._on_write

    def _on_write(self, res: Resource, obj: Obj) -> None:
        if res.plural == "pods":  # a PATCH or PUT replaces the object: follow the new one
            meta = obj["metadata"]
            for pods in self._pods.values():
                old = pods.get(meta.get("name", ""))
                if old is not None and old["metadata"]["uid"] == meta.get("uid"):
                    pods[meta["name"]] = obj
        if res.builtin and res.scale:
            self._dirty.add((res.plural, obj["metadata"]["namespace"], obj["metadata"]["name"]))
        elif res.plural == "nodes" and self._pending:
            self._bind_pending(self.store.clock())

    # --- entry point -----------------------------------------------------------------------

    def sync(self) -> None:
        """Fire the pod timers that fell due, then converge each changed workload."""
        now = self.store.clock()
        while self._due and self._due[0][0] <= now:
            at, _, what, pod = heapq.heappop(self._due)
            if self._alive(pod):
                self._fire(what, pod, at)
        self._bind_pending(now)
        while self._dirty:
            plural, ns, name = self._dirty.pop()
            res = self.store.resources[("apps/v1", plural)]
            obj = self.store.objects.get(("apps/v1", plural, ns, name))
            if obj is not None:
                self._converge(res, obj, now)

    def _current(self, pod: Obj) -> Obj | None:
        """The stored object of ``pod`` now (a write replaces it), None once it is gone."""
        meta = pod["metadata"]
        now = self.store.objects.get(("v1", "pods", meta["namespace"], meta["name"]))
        return now if now is not None and now["metadata"]["uid"] == meta["uid"] else None

    def _alive(self, pod: Obj) -> bool:
        return self._current(pod) is not None

    def _fire(self, what: str, pod: Obj, at: float) -> None:
        pod = self._current(pod) or pod
        uid = pod["metadata"]["uid"]
        if what == "gone":
            self._forget(pod)
        elif uid not in self._held_unready and not pod["metadata"].get("deletionTimestamp"):
            self.set_ready(pod, True, at)

    def _timer(self, at: float, what: str, pod: Obj) -> None:
        self._seq += 1
        heapq.heappush(self._due, (at, self._seq, what, pod))

    def _mark_owner(self, pod: Obj) -> None:
        owner = self._owner.get(pod["metadata"]["uid"])
        if owner is not None:
            self._dirty.add((owner[0].plural, owner[1], owner[2]))

    def _forget(self, pod: Obj) -> None:
        meta = pod["metadata"]
        self.store.delete(PODS, meta["namespace"], meta["name"])
        self._mark_owner(pod)
        owner = self._owner.pop(meta["uid"], None)
        if owner is not None:
            wl = self.store.objects.get(("apps/v1", owner[0].plural, owner[1], owner[2]))
            if wl is not None:
                self._pods.get(wl["metadata"]["uid"], {}).pop(meta["name"], None)
        self._held_unready.discard(meta["uid"])

    # --- pods ------------------------------------------------------------------------------

    def set_ready(self, pod: Obj, ready: bool, at: float) -> None:
        """Flip the Ready and ContainersReady conditions (and container statuses) at ``at``."""
        for cond in pod["status"].get("conditions", []):
            if cond["type"] in ("Ready", "ContainersReady") and (cond["status"] == "True") != ready:
                cond["status"] = "True" if ready else "False"
                cond["lastTransitionTime"] = m.fmt_time(at)
                if ready:
                    cond.pop("reason", None)
                else:
                    cond["reason"] = "ContainersNotReady"
        for cs in pod["status"].get("containerStatuses", []):
            cs["ready"] = ready
        uid = pod["metadata"]["uid"]
        if ready:
            self._held_unready.discard(uid)
        else:
            self._held_unready.add(uid)
        pod["metadata"]["resourceVersion"] = self.store.next_rv()
        self._mark_owner(pod)

    def hold_unready(self, pod: Obj, ready: bool) -> None:
        """Test hook: force a pod's readiness (a failing readiness probe, or its recovery)."""
        self.set_ready(pod, ready, self.store.clock())
        if not ready:
            self._held_unready.add(pod["metadata"]["uid"])

    def _pick_node(self, pod: Obj) -> str | None:
        """The schedulable node with the fewest live pods and room for the pod's GPUs.

        As the scheduler's resource fit: a node advertising ``nvidia.com/gpu`` in
        allocatable takes a pod only while its pods' GPU limits leave room for this one.
        """
        nodes = {
            n["metadata"]["name"]: n
            for n in self.store.list(NODES, "")
            if not n.get("spec", {}).get("unschedulable")
        }
        load, used = dict.fromkeys(nodes, 0), dict.fromkeys(nodes, 0)
        for pods in self._pods.values():
            for other in pods.values():
                node = other["spec"].get("nodeName")
                if node in load and not other["metadata"].get("deletionTimestamp"):
                    load[node] += 1
                    used[node] += pod_gpus(other)
        need = pod_gpus(pod)
        names = [
            name
            for name, node in nodes.items()
            if not need
            or used[name] + need
            <= int((node.get("status", {}).get("allocatable") or {}).get(GPU, "0"))
        ]
        if not names:
            return None
        return min(names, key=lambda n: (load[n], list(nodes).index(n)))

    def _bind_pending(self, now: float) -> None:
        pending, self._pending = self._pending, []
        for pod in pending:
            if self._alive(pod) and not pod["metadata"].get("deletionTimestamp"):
                self._schedule(pod, now)

    def _schedule(self, pod: Obj, now: float) -> None:
        node = self._pick_node(pod)
        if node is None:
            self._pending.append(pod)
            return
        pod["spec"]["nodeName"] = node
        status = pod["status"]
        status.update(
            phase="Running",
            startTime=m.fmt_time(now),
            hostIP=f"10.0.{sum(node.encode()) % 250}.1",
            podIP=f"10.244.{self._rng.randrange(250)}.{self._rng.randrange(1, 250)}",
            conditions=[
                _condition("Initialized", True, now),
                _condition("Ready", False, now, "ContainersNotReady"),
                _condition("ContainersReady", False, now, "ContainersNotReady"),
                _condition("PodScheduled", True, now),
            ],
            containerStatuses=[
                {
                    "name": c.get("name", "main"),
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": m.fmt_time(now)}},
                }
                for c in pod["spec"].get("containers", [])
            ],
        )
        owner = self._owner.get(pod["metadata"]["uid"])
        wl = owner and self.store.objects.get(("apps/v1", owner[0].plural, owner[1], owner[2]))
        delay = (
            self.delays.get(wl["metadata"]["uid"], self.ready_after_s) if wl else self.ready_after_s
        )
        self._timer(now + delay, "ready", pod)
        pod["metadata"]["resourceVersion"] = self.store.next_rv()

    def terminate(self, pod: Obj) -> Obj:
        """Graceful deletion: deletionTimestamp = now + grace; gone once the clock passes it.

        A pod that never ran (no node) or a double with no grace period goes at once,
        as the kubelet-less API server deletes an unscheduled pod immediately.
        """
        meta, now = pod["metadata"], self.store.clock()
        if self.terminate_after_s <= 0 or not pod["spec"].get("nodeName"):
            self._forget(pod)
            return pod
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = m.fmt_time(now + self.terminate_after_s)
            meta["deletionGracePeriodSeconds"] = int(self.terminate_after_s)
            self.set_ready(pod, False, now)
            self._timer(now + self.terminate_after_s, "gone", pod)
        return pod

    # --- controllers -----------------------------------------------------------------------

    def _converge(self, res: Resource, obj: Obj, now: float) -> None:
        pods = self._pods.setdefault(obj["metadata"]["uid"], {})
        owned = list(pods.values())
        active = [p for p in owned if not p["metadata"].get("deletionTimestamp")]
        want = int(obj.get("spec", {}).get("replicas", 1))
        if res.kind == "StatefulSet":
            self._converge_ordinals(res, obj, owned, active, want, now)
        elif len(active) < want:
            for _ in range(want - len(active)):
                self._create_pod(res, obj, self._rs_name(obj) + "-" + self._suffix(), now)
        elif len(active) > want:
            on_node = Counter(p["spec"].get("nodeName") or "" for p in active)
            ranked = sorted(active, key=lambda p: self._deletion_rank(p, on_node))
            for pod in ranked[: len(active) - want]:
                self.terminate(pod)
        self._write_status(res, obj)

    def _converge_ordinals(
        self,
        res: Resource,
        obj: Obj,
        owned: Sequence[Obj],
        active: Sequence[Obj],
        want: int,
        now: float,
    ) -> None:
        name = obj["metadata"]["name"]
        parallel = obj["spec"].get("podManagementPolicy") == "Parallel"
        by_ord = {_ordinal(p): p for p in owned}
        for i in range(want):
            if i in by_ord:
                if not parallel and not is_ready(by_ord[i]):
                    return  # OrderedReady: each pod Ready before the next is created
                continue
            self._create_pod(res, obj, f"{name}-{i}", now, ordinal=i)
            if not parallel:
                return
        extra = sorted((p for p in active if _ordinal(p) >= want), key=lambda p: -_ordinal(p))
        if not parallel:  # OrderedReady: highest ordinal first, one at a time
            extra = extra[:1] if len(owned) == len(active) else []
        for pod in extra:
            self.terminate(pod)

    @staticmethod
    def _deletion_rank(pod: Obj, on_node: Counter[str]) -> tuple[Any, ...]:
        # The ReplicaSet controller's order (controller_utils.go, ActivePodsWithRanks.Less):
        # unscheduled, Pending before Unknown before Running, not Ready, the lower
        # pod-deletion-cost (0 when unset or not an int32), the more of the workload's pods
        # on the same node, the more recently Ready, the newest.
        node = pod["spec"].get("nodeName") or ""
        phase = {"Pending": 0, "Unknown": 1, "Running": 2}.get(pod["status"].get("phase"), 0)
        cost_text = (pod["metadata"].get("annotations") or {}).get(DELETION_COST, "0")
        try:
            cost = int(cost_text)
        except ValueError:
            cost = 0
        ready = is_ready(pod)
        ready_at = next(
            (
                m.parse_time(c["lastTransitionTime"])
                for c in pod["status"].get("conditions") or []
                if c.get("type") == "Ready"
            ),
            0.0,
        )
        return (
            bool(node),
            phase,
            ready,
            cost if -(2**31) <= cost < 2**31 else 0,
            -on_node[node],
            -ready_at if ready else 0.0,
            -m.parse_time(pod["metadata"]["creationTimestamp"]),
            pod["metadata"]["name"],
        )

    @staticmethod
    def _rs_name(obj: Obj) -> str:
        template = json.dumps(obj.get("spec", {}).get("template", {}), sort_keys=True)
        return f"{obj['metadata']['name']}-{_safe_hash(template, 10)}"

    def _suffix(self) -> str:
        return "".join(self._rng.choice(_SAFE) for _ in range(5))

    def _create_pod(
        self, res: Resource, obj: Obj, name: str, now: float, ordinal: int | None = None
    ) -> None:
        meta = obj["metadata"]
        template = copy.deepcopy(obj.get("spec", {}).get("template", {}))
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        pod_meta: Obj = {"name": name, "labels": labels}
        if ordinal is None:
            rs = self._rs_name(obj)
            labels["pod-template-hash"] = rs.rsplit("-", 1)[1]
            pod_meta["generateName"] = rs + "-"
            owner = {
                "kind": "ReplicaSet",
                "name": rs,
                "uid": str(uuid.uuid5(uuid.UUID(meta["uid"]), rs)),
            }
        else:
            labels["statefulset.kubernetes.io/pod-name"] = name
            labels["apps.kubernetes.io/pod-index"] = str(ordinal)
            owner = {"kind": res.kind, "name": meta["name"], "uid": meta["uid"]}
        pod_meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", **owner, "controller": True, "blockOwnerDeletion": True}
        ]
        pod = {
            "metadata": pod_meta,
            "spec": {
                "containers": (template.get("spec") or {}).get("containers")
                or [{"name": "main", "image": "registry.example/serve:1"}],
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 30,
                "schedulerName": "default-scheduler",
            },
            "status": {
                "phase": "Pending",
                "qosClass": "BestEffort",
                "conditions": [_condition("PodScheduled", False, now, "Unschedulable")],
            },
        }
        created = self.store.create(PODS, meta["namespace"], pod)
        self._owner[created["metadata"]["uid"]] = (res, meta["namespace"], meta["name"])
        self._pods.setdefault(meta["uid"], {})[name] = created
        self._schedule(created, now)

    def _write_status(self, res: Resource, obj: Obj) -> None:
        pods = self._pods.get(obj["metadata"]["uid"], {}).values()
        active = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        ready = sum(1 for p in active if is_ready(p))
        status: Obj = {
            "observedGeneration": obj["metadata"].get("generation", 1),
            "replicas": len(active),
        }
        extra = {"updatedReplicas": len(active), "readyReplicas": ready, "availableReplicas": ready}
        if res.kind == "StatefulSet":
            extra["currentReplicas"] = len(active)
        else:
            extra["unavailableReplicas"] = max(0, int(obj["spec"].get("replicas", 1)) - ready)
        status |= {k: v for k, v in extra.items() if v}  # omitempty, as the real server writes
        if obj.get("status") != status:
            obj["status"] = status
            obj["metadata"]["resourceVersion"] = self.store.next_rv()


def is_ready(pod: Obj) -> bool:
    """Whether the pod's Ready condition is True."""
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])
    )


def _ordinal(pod: Obj) -> int:
    return int(pod["metadata"]["name"].rsplit("-", 1)[1])
