"""The counters file from a ConfigMap: dcgm-exporter's ``-m/--configmap-data NAMESPACE:NAME``.

dcgm-exporter reads the ConfigMap's ``metrics`` key through the Kubernetes API with
the pod's service account (the Helm chart's Role grants ``get`` on it). This does
the same with one HTTPS GET, as in-cluster clients do: the API server from
``KUBERNETES_SERVICE_HOST``/``_PORT``, the token and CA from the service-account
mount. Only ``control/kubernetes.py`` may import the kubernetes client, and one
GET needs none of it. Every failure is a one-line ``ConfigError`` naming the
ConfigMap, as upstream stops on them too.
"""

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from gpuscale.errors import ConfigError

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SERVICE_ACCOUNT_ENV = "GPUSCALE_SERVICE_ACCOUNT_DIR"
"""Overrides ``SERVICE_ACCOUNT`` (a token and CA elsewhere: out of cluster, tests)."""


def parse_configmap_ref(spec: str) -> tuple[str, str]:
    """``NAMESPACE:NAME`` as (namespace, name).

    Raises:
        ConfigError: Not two non-empty parts.
    """
    namespace, sep, name = spec.partition(":")
    if not sep or not namespace or not name or ":" in name:
        raise ConfigError(
            f"--configmap-data {spec!r}: use NAMESPACE:NAME, e.g. gpu-monitoring:exporter-metrics"
        )
    return namespace, name


@dataclass(frozen=True, slots=True)
class ApiAccess:
    """How a pod reaches its API server: address, service-account token and CA.

    Attributes:
        base: ``https://HOST:PORT``.
        token: The service-account bearer token.
        ca: The cluster CA certificate file.
    """

    base: str
    token: str
    ca: Path

    def get(self, path: str) -> httpx.Response:
        """GET ``path`` with the token, trusting only the cluster CA.

        Raises:
            httpx.HTTPError, OSError, ssl.SSLError: The API server did not answer.
        """
        trust = ssl.create_default_context(cafile=str(self.ca))
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.get(self.base + path, headers=headers, verify=trust, timeout=10.0)


def in_cluster(where: str, env: Mapping[str, str] = os.environ) -> ApiAccess:
    """The API access of this pod, as in-cluster clients find it.

    Args:
        where: The option that needs it, for the message.
        env: Where ``KUBERNETES_SERVICE_HOST``/``_PORT`` are read.

    Raises:
        ConfigError: Not in a pod (no service host or no token).
    """
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    account = Path(env.get(SERVICE_ACCOUNT_ENV) or SERVICE_ACCOUNT)
    try:
        token = (account / "token").read_text(encoding="utf-8").strip()
    except OSError:
        token = ""
    if not host or not token:
        raise ConfigError(
            f"{where}: not in a Kubernetes pod (no KUBERNETES_SERVICE_HOST or no service-account"
            f" token in {account})"
        )
    return ApiAccess(f"https://{host}:{port}", token, account / "ca.crt")


def read_configmap_counters(spec: str, env: Mapping[str, str] = os.environ) -> str:
    """The ``metrics`` key of the ConfigMap ``spec`` names, read from the API server.

    Args:
        spec: ``NAMESPACE:NAME``.
        env: Where ``KUBERNETES_SERVICE_HOST``/``_PORT`` are read.

    Returns:
        The counters-file text.

    Raises:
        ConfigError: Not in a pod, the API refused or the ConfigMap lacks ``metrics``.
    """
    namespace, name = parse_configmap_ref(spec)
    where = f"--configmap-data {spec}"
    try:
        api = in_cluster(where, env)
    except ConfigError as exc:
        raise ConfigError(f"{exc}: mount the ConfigMap as a file and pass -f instead") from None
    try:
        response = api.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    except (httpx.HTTPError, OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"{where}: the Kubernetes API at {api.base} did not answer ({exc})"
        ) from exc
    if response.status_code == httpx.codes.NOT_FOUND:
        raise ConfigError(
            f"{where}: no ConfigMap {name} in namespace {namespace}: create it or fix the name"
        )
    if response.status_code == httpx.codes.FORBIDDEN:
        raise ConfigError(
            f"{where}: the service account may not get ConfigMaps in {namespace}: grant it a Role"
            " with get on configmaps (the dcgm-exporter Helm chart has one)"
        )
    if response.status_code != httpx.codes.OK:
        raise ConfigError(f"{where}: the Kubernetes API answered HTTP {response.status_code}")
    metrics = (response.json().get("data") or {}).get("metrics")
    if not isinstance(metrics, str):
        raise ConfigError(f"{where}: the ConfigMap has no 'metrics' key: put the counters there")
    return metrics
