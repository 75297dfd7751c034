"""Helpers shared by the controller's tests: feeding the store, reading the API double."""

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from gpuscale.control.kubecall import RetryPolicy
from gpuscale.control.statestore import StateConfigMap, state_key
from gpuscale.metrics.store import MetricStore
from tests.support.kubeapi import KubeApiDouble

FAST = RetryPolicy(attempts=2, base_s=0.01, max_s=0.02, total_s=2.0, timeout_s=5.0)
STATE = StateConfigMap("gpuscale")
"""The tests' state ConfigMap: in the controller's namespace, not the targets' (default)."""


def feed(store: MetricStore, t: float, metric: str, per_pod: Mapping[str, float], **extra) -> None:
    """One scrape of a per-GPU metric, one GPU per pod, as the exporter labels it."""
    labels = [
        {"pod": pod, "namespace": "default", "UUID": f"GPU-{i:04d}", "Hostname": "node-a", **extra}
        for i, pod in enumerate(per_pod)
    ]
    store.ingest(t, metric, labels, np.array(list(per_pod.values()), dtype=float))


def pod_names(api: KubeApiDouble, name: str = "web") -> list[str]:
    return sorted(
        p["metadata"]["name"] for p in api.pods() if p["metadata"]["name"].startswith(name)
    )


def replicas(api: KubeApiDouble, name: str = "web") -> int:
    return int(api.get("apps/v1", "deployments", name, "default")["spec"]["replicas"])


def events(api: KubeApiDouble, reason: str | None = None) -> list[dict]:
    found = api.store.list(api.store.resource("v1", "events"), "default")
    return [e for e in found if reason is None or e.get("reason") == reason]


def state_path(where: StateConfigMap = STATE) -> str:
    """The state ConfigMap's path."""
    return f"/api/v1/namespaces/{where.namespace}/configmaps/{where.name}"


def state_writes(api: KubeApiDouble, where: StateConfigMap = STATE) -> int:
    """Writes the double applied to the state ConfigMap (its creation included)."""
    path = state_path(where)
    return sum(
        1
        for _t, _agent, what, _holder in api.writes
        if what.split(" ")[1] in (path, path.rsplit("/", 1)[0])
    )


def saved_state(
    api: KubeApiDouble,
    name: str = "web",
    *,
    kind: str = "Deployment",
    namespace: str = "default",
    where: StateConfigMap = STATE,
) -> dict[str, Any] | None:
    """A Deployment's (or StatefulSet's) stored policy state; None when none is stored."""
    found = api.get("v1", "configmaps", where.name, where.namespace)
    text = ((found or {}).get("data") or {}).get(state_key("apps/v1", kind, namespace, name))
    return None if text is None else json.loads(text)
