"""The Kubernetes actuator: the only place (with lease.py) that talks to the API server.

It reads and writes replicas only through the ``/scale`` subresource, so it works for
Deployments, StatefulSets and any custom kind that serves ``/scale``, exactly as the
HorizontalPodAutoscaler does. Every request goes through one chokepoint
(``control.kubecall.KubeCall``: retries, backoff, one-line errors) on the real
``kubernetes`` client's ``ApiClient`` (kubeconfig or in-cluster auth, TLS,
connection pool), which this module builds.
"""

import itertools
import json
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from gpuscale.control.config import DNS1123_LABEL, DNS1123_SUBDOMAIN, GROUP_VERSION
from gpuscale.control.kubecall import (
    MERGE_PATCH,
    Json,
    KubeCall,
    KubeUnavailableError,
    RetryPolicy,
    WriteGuard,
)
from gpuscale.control.statestore import StateConfigMap, StateStore, state_key
from gpuscale.errors import config_error
from gpuscale.fields.resources import GPU_RESOURCES
from gpuscale.scaling.placement import DELETION_COST
from gpuscale.scaling.policy import PodStatus, TargetStatus

logger = logging.getLogger(__name__)

ApiClient = k8s.ApiClient
"""The client's connection; other modules name it through here, never importing ``kubernetes``."""

LEGACY_STATE_ANNOTATION = "gpuscale.io/state"
"""Where earlier versions kept a target's policy state: read once if the ConfigMap lacks it."""
_WELL_KNOWN = {
    ("apps/v1", "Deployment"): "deployments",
    ("apps/v1", "StatefulSet"): "statefulsets",
    ("apps/v1", "ReplicaSet"): "replicasets",
}


@dataclass(frozen=True, slots=True)
class TargetRef:
    """A scale target, as an HPA's ``scaleTargetRef`` names it (plus its namespace)."""

    api_version: str
    kind: str
    name: str
    namespace: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name} ({self.api_version}) in namespace {self.namespace}"


def _time(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _pod_status(pod: Json) -> PodStatus:
    ready = next(
        (c for c in pod.get("status", {}).get("conditions") or [] if c.get("type") == "Ready"),
        None,
    )
    is_ready = ready is not None and ready.get("status") == "True"
    return PodStatus(
        name=pod["metadata"]["name"],
        ready=is_ready,
        created_at=_time(pod["metadata"].get("creationTimestamp")) or 0.0,
        ready_at=_time(ready.get("lastTransitionTime")) if is_ready and ready else None,
        node=pod.get("spec", {}).get("nodeName") or "",
        phase=pod.get("status", {}).get("phase") or "",
        deletion_cost=_deletion_cost(pod["metadata"].get("annotations") or {}),
    )


def _deletion_cost(annotations: Mapping[str, str]) -> int:
    """The pod's ``pod-deletion-cost``: 0 when unset or not an int32, as the ReplicaSet reads it."""
    text = str(annotations.get(DELETION_COST, "0"))
    try:
        cost = int(text)
    except ValueError:
        return 0
    return cost if -(2**31) <= cost < 2**31 else 0


def _gpus(resources: Json | None) -> int:
    """GPUs in a resource map (a container's limits, a node's allocatable); 0 where none."""
    total = 0
    for name in GPU_RESOURCES:
        value = str((resources or {}).get(name, "0"))
        total += int(value) if value.isdigit() else 0  # extended resources are whole numbers
    return total


def _pod_gpus(pod: Json) -> int:
    """GPUs a pod requests: its containers' GPU limits (extended resources are set as limits)."""
    containers = pod.get("spec", {}).get("containers") or []
    return sum(_gpus((c.get("resources") or {}).get("limits")) for c in containers)


def _holds(node: Json, per_pod: int, ours: int) -> int | None:
    """Pods of ``per_pod`` GPUs the node holds; None when it is not Ready.

    Allocatable leaves out a GPU the device plugin marked unhealthy. A cordoned node
    takes no new pod, so it holds only the ``ours`` pods already on it.
    """
    conditions = node.get("status", {}).get("conditions") or []
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return None
    if node.get("spec", {}).get("unschedulable"):
        return ours
    return _gpus(node.get("status", {}).get("allocatable")) // per_pod


def default_kubeconfigs() -> list[str]:
    """The files the client reads when no kubeconfig is named: ``$KUBECONFIG``'s, else one.

    Returns:
        Each path of ``$KUBECONFIG`` (separated as the OS separates paths), else
        ``~/.kube/config``; ``~`` expanded.
    """
    paths = os.environ.get("KUBECONFIG", "") or "~/.kube/config"
    return [os.path.expanduser(p) for p in paths.split(os.pathsep) if p]


def in_cluster() -> bool:
    """Whether this process runs in a pod (the kubelet sets ``KUBERNETES_SERVICE_HOST``).

    Returns:
        True in a pod.
    """
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def cluster_config_found(kubeconfig: str | None) -> bool:
    """Whether ``KubeActuator.connect(kubeconfig)`` has anything to connect with.

    Returns:
        True for a named kubeconfig (``connect`` judges it), in a pod, or when a
        default kubeconfig file exists.
    """
    if kubeconfig is not None or in_cluster():
        return True
    return any(os.path.isfile(p) for p in default_kubeconfigs())


class KubeActuator:
    """Reads and writes scale targets, pods, nodes and Events through the API server.

    Args:
        api_client: A configured ``kubernetes.client.ApiClient`` (see ``connect``).
        retry: Retry bounds for 409, 429, 5xx and connection errors.
        sleep: Sleeps between retries (a seam for tests).
        clock: Wall clock for Event timestamps, seconds since the epoch.
        component: Event source component (``reportingComponent``).
        state: The ConfigMap that holds the policy states.
    """

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        component: str = "gpuscale-autoscaler",
        state: StateConfigMap | None = None,
    ) -> None:
        self.api_client = api_client
        self.call = KubeCall(api_client, retry, sleep=sleep)
        self.states = StateStore(self.call, state or StateConfigMap())
        self._clock = clock
        self._component = component
        self._instance = socket.gethostname()
        self._plurals: dict[tuple[str, str], str] = dict(_WELL_KNOWN)
        self._uids: dict[TargetRef, str] = {}
        self._event_seq = itertools.count(1)  # next() is atomic: safe across worker threads

    @classmethod
    def connect(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        pool_size: int = 32,
        state: StateConfigMap | None = None,
    ) -> "KubeActuator":
        """Connect in-cluster (no kubeconfig and KUBERNETES_SERVICE_HOST set) or by kubeconfig.

        Args:
            kubeconfig: Path of a kubeconfig; None for in-cluster or ``~/.kube/config``.
            context: Context to use; None for the kubeconfig's current context.
            retry: Retry bounds (see ``KubeActuator``).
            sleep: Sleeps between retries.
            clock: Wall clock for Event timestamps.
            pool_size: Connections kept open to the API server (at least the worker threads).
            state: The ConfigMap that holds the policy states (``default``'s when None).

        Returns:
            The actuator.

        Raises:
            ConfigError: When the kubeconfig is missing (the one named, or every default
                one outside a pod), unreadable or lacks the context.
        """
        cfg = k8s.Configuration()
        pod = kubeconfig is None and in_cluster()
        if kubeconfig is not None and not os.path.isfile(kubeconfig):
            raise config_error(
                f"--kubeconfig {kubeconfig}", "no such file", "pass an existing kubeconfig"
            )
        if not cluster_config_found(kubeconfig):
            raise config_error(
                f"kubeconfig {os.pathsep.join(default_kubeconfigs())}",
                "no such file, and not in a pod (KUBERNETES_SERVICE_HOST is not set)",
                "pass --kubeconfig PATH, run in a pod with a service account, or add "
                "--dry-run to decide without a cluster",
            )
        try:
            if pod:
                k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            else:
                k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig, context=context, client_configuration=cfg
                )
        except k8s_config.ConfigException as exc:
            if pod:
                where, fix = (
                    "in-cluster config",
                    "mount the service account token or pass --kubeconfig",
                )
            else:
                where = f"--kubeconfig {kubeconfig}" if kubeconfig else "kubeconfig ~/.kube/config"
                where += f" --context {context}" if context else ""
                fix = "pass a valid kubeconfig and context"
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise config_error(where, f"cannot load: {reason}", fix) from None
        cfg.retries = False  # our own bounded retries, not urllib3's silent ones
        cfg.connection_pool_maxsize = pool_size
        return cls(k8s.ApiClient(cfg), retry=retry, sleep=sleep, clock=clock, state=state)

    def guard_writes(self, guard: WriteGuard | None) -> None:
        """Check ``guard`` before every write from now on (each retry included)."""
        self.call.guard = guard

    def close(self) -> None:
        """Release the connection pool."""
        self.api_client.close()  # type: ignore[no-untyped-call]

    # --- targets ---------------------------------------------------------------------------

    def _path(self, ref: TargetRef) -> str:
        """The target's object path, resolving its kind's plural once via discovery.

        Each part is checked against Kubernetes' name rules first, so no text
        (``..``, ``/``, ``?``) can turn the request into another one.
        """
        for key_name, value, pattern in (
            ("apiVersion", ref.api_version, GROUP_VERSION),
            ("namespace", ref.namespace, DNS1123_LABEL),
            ("name", ref.name, DNS1123_SUBDOMAIN),
        ):
            if pattern.fullmatch(value) is None:
                raise config_error(
                    f"scaleTargetRef.{key_name} of {ref.kind}",
                    "is not a valid Kubernetes name",
                    "use lower-case letters, digits, '-' and '.' (see the GPUScaler schema)",
                )
        key = (ref.api_version, ref.kind)
        if key not in self._plurals:
            prefix = "/api/v1" if ref.api_version == "v1" else f"/apis/{ref.api_version}"
            found = self.call("GET", prefix).get("resources", [])
            names = {r["name"] for r in found}
            for r in found:
                if r.get("kind") == ref.kind and "/" not in r["name"]:
                    if f"{r['name']}/scale" not in names:
                        raise config_error(
                            f"scaleTargetRef {ref}",
                            "this kind has no /scale subresource",
                            "target a kind that serves /scale",
                        )
                    self._plurals[key] = r["name"]
            if key not in self._plurals:
                raise config_error(
                    f"scaleTargetRef {ref}",
                    f"the API server serves no kind {ref.kind} in {ref.api_version}",
                    "check apiVersion and kind",
                )
        base = "/api/v1" if ref.api_version == "v1" else f"/apis/{ref.api_version}"
        return f"{base}/namespaces/{ref.namespace}/{self._plurals[key]}/{ref.name}"

    def _scale(self, ref: TargetRef) -> Json:
        scale = self.call("GET", self._path(ref) + "/scale")
        self._uids[ref] = scale.get("metadata", {}).get("uid", "")
        return scale

    def status(self, ref: TargetRef, *, node_slots: bool = False) -> TargetStatus:
        """The target's desired replicas and its live (not terminating) pods.

        Args:
            ref: The scale target.
            node_slots: Also read the nodes its pods run on (one GET each): how many
                of its pods each Ready one holds (``TargetStatus.node_slots``).

        Returns:
            ``spec.replicas`` from ``/scale`` and the pods its ``status.selector`` selects.
        """
        scale = self._scale(ref)
        desired = int(scale.get("spec", {}).get("replicas") or 0)
        selector = scale.get("status", {}).get("selector")
        if not selector:
            return TargetStatus(desired=desired)
        pods = self.call(
            "GET", f"/api/v1/namespaces/{ref.namespace}/pods", query={"labelSelector": selector}
        ).get("items", [])
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        views = tuple(_pod_status(p) for p in live)
        slots = self._node_slots(live, views) if node_slots else ()
        return TargetStatus(desired=desired, pods=views, node_slots=slots)

    def _node_slots(self, live: list[Json], views: tuple[PodStatus, ...]) -> tuple[int, ...]:
        """Pods each Ready node under the live pods holds, in node-name order; () when unknown."""
        per_pod = max((_pod_gpus(p) for p in live), default=0)
        if per_pod <= 0:
            return ()  # pods that request no GPU: nodes are not counted in GPUs
        ours = Counter(v.node for v in views if v.node)
        slots = []
        for name in sorted(ours):
            try:
                node = self.call("GET", f"/api/v1/nodes/{name}")
            except KubeUnavailableError as exc:
                if exc.status != 404:
                    raise
                continue  # deleted since the pod list was read
            held = _holds(node, per_pod, ours[name])
            if held is not None:
                slots.append(held)
        return tuple(slots)

    def scale(self, ref: TargetRef, replicas: int) -> None:
        """Set ``spec.replicas`` through ``/scale``, as the HPA does (read, then PUT with rv).

        A concurrent writer makes the PUT answer 409; the retry reads the Scale again.
        """
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        path = self._path(ref) + "/scale"

        def attempt() -> None:
            scale = self.call.once("GET", path)
            if scale.get("spec", {}).get("replicas") == replicas:
                return
            body = {
                "apiVersion": scale.get("apiVersion", "autoscaling/v1"),
                "kind": "Scale",
                "metadata": scale["metadata"],
                "spec": {"replicas": replicas},
            }
            self.call.once("PUT", path, body=body)

        self.call.retrying(f"scale {ref} to {replicas}", attempt)

    # --- policy state, in the controller's ConfigMap ----------------------------------------

    def load_state(self, ref: TargetRef) -> dict[str, Any]:
        """The target's saved state: its key of the state ConfigMap, else the old annotation.

        Earlier versions kept the state in annotation ``gpuscale.io/state`` on the
        target; while the ConfigMap has no key for the target, that annotation is read
        (never written) so an upgrade carries the state on.

        Returns:
            The saved state; {} when there is none, or it is unreadable.
        """
        saved = self.states.load(self._state_key(ref))
        return saved if saved is not None else self._legacy_state(ref)

    def save_state(self, ref: TargetRef, state: Mapping[str, Any]) -> None:
        """Write the target's state into its key of the state ConfigMap."""
        self.states.save(self._state_key(ref), state)

    def _state_key(self, ref: TargetRef) -> str:
        self._path(ref)  # the parts checked against the name rules first
        return state_key(ref.api_version, ref.kind, ref.namespace, ref.name)

    def _legacy_state(self, ref: TargetRef) -> dict[str, Any]:
        """The JSON object in the target's old state annotation; {} when absent or unreadable."""
        try:
            obj = self.call("GET", self._path(ref))
        except KubeUnavailableError as exc:
            if exc.status != 404:
                raise
            return {}  # the status read reports a missing target
        annotations = obj.get("metadata", {}).get("annotations") or {}
        text = annotations.get(LEGACY_STATE_ANNOTATION)
        if not text:
            return {}
        try:
            state = json.loads(text)
        except ValueError:
            state = None
        if not isinstance(state, dict):
            logger.warning(
                "kubernetes: %s: annotation %s is not a JSON object; ignored",
                ref,
                LEGACY_STATE_ANNOTATION,
            )
            return {}
        logger.info(
            "kubernetes: %s: state read from the old annotation %s", ref, LEGACY_STATE_ANNOTATION
        )
        return state

    # --- events, pods, nodes ---------------------------------------------------------------

    def record_event(
        self, ref: TargetRef, reason: str, message: str, *, warning: bool = False
    ) -> None:
        """Record a core/v1 Event on the target (shown by ``kubectl describe``)."""
        if ref not in self._uids:
            self._scale(ref)
        involved = {
            "apiVersion": ref.api_version,
            "kind": ref.kind,
            "name": ref.name,
            "namespace": ref.namespace,
            "uid": self._uids.get(ref, ""),
        }
        self.record_object_event(involved, reason, message, warning=warning)

    def record_object_event(
        self, involved: Mapping[str, str], reason: str, message: str, *, warning: bool = False
    ) -> None:
        """Record a core/v1 Event on any object, e.g. a GPUScaler whose spec does not validate.

        Args:
            involved: The object's apiVersion, kind, name, namespace and uid.
            reason: The Event's reason (one CamelCase word).
            message: What happened.
            warning: A Warning rather than a Normal Event.
        """
        now = self._clock()
        seq = next(self._event_seq)  # keeps names unique when the clock has not moved
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            # client-go's recorder names events <object>.<unix nanoseconds in hex>
            "metadata": {
                "name": f"{involved['name']}.{int(now * 1e9) + seq:x}",
                "namespace": involved["namespace"],
            },
            "involvedObject": dict(involved),
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self._component, "host": self._instance},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": self._component,
            "reportingInstance": self._instance,
        }
        path = f"/api/v1/namespaces/{involved['namespace']}/events"
        self.call("POST", path, body=event, retry_conflicts=False)

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete a pod (gracefully); a pod already gone counts as deleted."""
        try:
            self.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except KubeUnavailableError as exc:
            if exc.status != 404:
                raise

    def set_deletion_cost(self, namespace: str, name: str, cost: int | None) -> None:
        """Annotate a pod's ``pod-deletion-cost`` by a merge patch (None removes it).

        A pod already gone is skipped: its ReplicaSet has one pod fewer to choose from.
        """
        value = None if cost is None else str(int(cost))
        patch = {"metadata": {"annotations": {DELETION_COST: value}}}
        try:
            path = f"/api/v1/namespaces/{namespace}/pods/{name}"
            self.call("PATCH", path, body=patch, content_type=MERGE_PATCH)
        except KubeUnavailableError as exc:
            if exc.status != 404:
                raise

    def cordon(self, node: str) -> None:
        """Mark a node unschedulable (``kubectl cordon``)."""
        patch = {"spec": {"unschedulable": True}}
        self.call("PATCH", f"/api/v1/nodes/{node}", body=patch, content_type=MERGE_PATCH)
