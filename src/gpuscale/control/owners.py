"""One owner per target: is an HPA or a KEDA ScaledObject already scaling this workload?

Two autoscalers writing one workload's ``/scale`` fight: each undoes the other's
count every sync. Before acting on a target the controller asks this module
whether a HorizontalPodAutoscaler (``autoscaling/v2``) or a KEDA ScaledObject
(``keda.sh/v1alpha1``, looked for only when discovery says the API is served)
in the target's namespace names the same workload in its ``scaleTargetRef``;
if one does, the controller leaves the target alone and says so. Each
namespace is listed once per sync, however many targets it holds.
"""

import threading

from gpuscale.control.kubecall import Json, KubeCall, KubeUnavailableError
from gpuscale.control.kubernetes import TargetRef

HPA_PATH = "/apis/autoscaling/v2"
KEDA_PATH = "/apis/keda.sh/v1alpha1"


class OtherAutoscalers:
    """Finds the other autoscalers of a target; listings are kept for one sync.

    Args:
        call: The request chokepoint (the actuator's).
    """

    def __init__(self, call: KubeCall) -> None:
        self.call = call
        self._lock = threading.Lock()
        self._keda: bool | None = None
        self._listed: dict[str, list[tuple[str, Json]]] = {}

    def begin_sync(self) -> None:
        """Forget the listings (and whether KEDA is served): the next lookups list again."""
        with self._lock:
            self._keda = None
            self._listed.clear()

    def owner_of(self, ref: TargetRef) -> str:
        """The first other autoscaler whose ``scaleTargetRef`` is ``ref``.

        Returns:
            ``HorizontalPodAutoscaler <namespace>/<name>`` or ``ScaledObject
            <namespace>/<name>``; "" when none.
        """
        for kind, obj in self._scalers(ref.namespace):
            if _targets(kind, obj.get("spec") or {}, ref):
                meta = obj.get("metadata") or {}
                return f"{kind} {meta.get('namespace', ref.namespace)}/{meta.get('name', '')}"
        return ""

    def _scalers(self, namespace: str) -> list[tuple[str, Json]]:
        with self._lock:
            if namespace in self._listed:
                return self._listed[namespace]
            found = [
                ("HorizontalPodAutoscaler", o)
                for o in self._list(f"{HPA_PATH}/namespaces/{namespace}/horizontalpodautoscalers")
            ]
            if self._keda_served():
                found += [
                    ("ScaledObject", o)
                    for o in self._list(f"{KEDA_PATH}/namespaces/{namespace}/scaledobjects")
                ]
            self._listed[namespace] = found
            return found

    def _list(self, path: str) -> list[Json]:
        return list(self.call("GET", path).get("items") or [])

    def _keda_served(self) -> bool:
        """Whether discovery lists ``scaledobjects`` in ``keda.sh/v1alpha1`` (asked once a sync)."""
        if self._keda is None:
            try:
                found = self.call("GET", KEDA_PATH).get("resources") or []
            except KubeUnavailableError as exc:
                if exc.status != 404:
                    raise
                found = []
            self._keda = any(r.get("name") == "scaledobjects" for r in found)
        return self._keda


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def _targets(kind: str, spec: Json, ref: TargetRef) -> bool:
    """Whether a ``scaleTargetRef`` names ``ref`` (KEDA defaults it to an apps/v1 Deployment)."""
    target = spec.get("scaleTargetRef") or {}
    if kind == "ScaledObject":
        target = {"apiVersion": "apps/v1", "kind": "Deployment", **target}
    return (
        target.get("name") == ref.name
        and target.get("kind") == ref.kind
        and _group(str(target.get("apiVersion") or "")) == _group(ref.api_version)
    )
