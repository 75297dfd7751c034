"""Helpers shared by the controller's tests: feeding the store, reading the API double."""

from collections.abc import Mapping

import numpy as np

from gpuscale.control.kubecall import RetryPolicy
from gpuscale.metrics.store import MetricStore
from tests.support.kubeapi import KubeApiDouble

FAST = RetryPolicy(attempts=2, base_s=0.01, max_s=0.02, total_s=2.0, timeout_s=5.0)


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
