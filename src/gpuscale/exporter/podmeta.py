"""Pod labels and UIDs for GPU series: ``--kubernetes-enable-pod-labels`` and ``-pod-uid``.

The kubelet's pod-resources API names the pod holding a GPU but not its labels or
UID; dcgm-exporter reads those from the API server. So does this, with one GET per
pod that newly holds a GPU, from the pod mapper's refresh thread: a scrape only
reads a dict. Label names are made Prometheus-safe as upstream does (every
character outside ``[a-zA-Z0-9_]`` becomes ``_``), and the allowlist regexes keep
only the label keys one of them matches (none given: all).
"""

import logging
import re
import ssl
from collections.abc import Iterable, Sequence

import httpx

from gpuscale.exporter.configmap import ApiAccess

logger = logging.getLogger(__name__)

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def sanitize_label_name(key: str) -> str:
    """A pod label key as a label name: ``app.kubernetes.io/name`` -> ``app_kubernetes_io_name``."""
    return _INVALID.sub("_", key)


class PodMetadata:
    """UID and labels of the pods that hold GPUs.

    Args:
        api: This pod's access to the API server.
        labels: Fetch labels (``--kubernetes-enable-pod-labels``).
        uid: Report the UID (``--kubernetes-enable-pod-uid``).
        allow: Regexes on label keys; a key is kept when one matches (empty: all).
    """

    def __init__(
        self, api: ApiAccess, *, labels: bool, uid: bool, allow: Sequence[str] = ()
    ) -> None:
        self._api = api
        self._labels = labels
        self._uid = uid
        self._allow = [re.compile(p) for p in allow]
        self._cache: dict[tuple[str, str], tuple[str | None, dict[str, str]]] = {}
        self._failing = False

    def update(self, pods: Iterable[tuple[str, str]]) -> None:
        """Keep the (namespace, name) pods given; fetch the ones not seen before."""
        wanted = set(pods)
        fresh = {k: v for k, v in self._cache.items() if k in wanted}
        for namespace, name in sorted(wanted - fresh.keys()):
            found = self._fetch(namespace, name)
            if found is not None:
                fresh[(namespace, name)] = found
        self._cache = fresh  # one assignment: readers see the old or the new dict

    def _fetch(self, namespace: str, name: str) -> tuple[str | None, dict[str, str]] | None:
        try:
            response = self._api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        except (httpx.HTTPError, OSError, ssl.SSLError) as exc:
            if not self._failing:
                logger.warning("pod metadata: the Kubernetes API did not answer (%s)", exc)
            self._failing = True
            return None
        self._failing = False
        if response.status_code != httpx.codes.OK:
            logger.warning(
                "pod metadata: GET pod %s/%s answered HTTP %d (the service account needs get"
                " on pods)",
                namespace,
                name,
                response.status_code,
            )
            return None
        meta = response.json().get("metadata") or {}
        labels = {}
        for key, value in (meta.get("labels") or {}).items() if self._labels else ():
            if not self._allow or any(p.search(key) for p in self._allow):
                labels[sanitize_label_name(key)] = str(value)
        return (str(meta.get("uid", "")) or None) if self._uid else None, labels

    def get(self, namespace: str, name: str) -> tuple[str | None, dict[str, str]] | None:
        """(UID when asked for, labels) of a pod; None until it has been fetched."""
        return self._cache.get((namespace, name))
