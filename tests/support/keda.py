"""KEDA's side of the external scaler, for tests: its gRPC client, its HPA's arithmetic, TLS files.

``hpa_replicas`` is Kubernetes' ``GetExternalPerPodMetricReplicas`` (the HPA's
replica calculator for an external metric with an ``AverageValue`` target, the
type KEDA gives an external scaler's metric by default), written from the
upstream source: the sum of the metric's values in milli-units, the count kept
while ``usage / (target x statusReplicas)`` is within the tolerance of 1, else
``ceil(usage / target)``. KEDA turns a ``metricValueFloat`` into a quantity with
three decimals (``GenerateMetricInMili``), so values are rounded to milli-units
first, as the HPA reads them.
"""

import contextlib
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from gpuscale.keda import externalscaler_pb2 as pb
from gpuscale.keda import externalscaler_pb2_grpc as pb_grpc
from gpuscale.keda.scaler import KedaScaler
from gpuscale.keda.service import ExternalScalerService, ScalerServer, ServerTls
from tests.support.certs import self_signed

DEFAULT_TOLERANCE = 0.1
"""The HPA's default tolerance (``--horizontal-pod-autoscaler-tolerance``)."""


def hpa_replicas(value: float, target: float, current: int, tolerance: float) -> int:
    """The replicas an HPA computes from one external metric value against an average target."""
    usage, per_pod = round(value * 1000), round(target * 1000)
    ratio = usage / (per_pod * current)
    if abs(1.0 - ratio) <= tolerance:
        return current
    return math.ceil(usage / per_pod)


@dataclass(frozen=True)
class TlsFiles:
    """A server's certificate and key, a client's, and an unrelated CA, as PEM files."""

    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path

    def server(self, *, mutual: bool) -> ServerTls:
        client_ca = self.client_cert.read_bytes() if mutual else None
        return ServerTls(self.server_cert.read_bytes(), self.server_key.read_bytes(), client_ca)


def make_tls_files(folder: Path) -> TlsFiles:
    """Self-signed certificates for 127.0.0.1: the server's, a client's (KEDA's) and another CA."""
    server = self_signed(folder / "server.crt", folder / "server.key", ca=True)
    client = self_signed(folder / "client.crt", folder / "client.key", ca=True)
    other, _ = self_signed(folder / "other.crt", folder / "other.key", ca=True)
    return TlsFiles(*server, *client, other)


@contextlib.contextmanager
def scaler_server(
    scaler: KedaScaler, tls: ServerTls | None, *, stream_period_s: float = 0.05
) -> Iterator[ScalerServer]:
    """The gRPC server on 127.0.0.1 and a free port, stopped on exit."""
    service = ExternalScalerService(scaler, stream_period_s=stream_period_s, stop=threading.Event())
    server = ScalerServer(service, "127.0.0.1", 0, tls, workers=4)
    server.start()
    try:
        yield server
    finally:
        server.stop(grace_s=1.0)


@contextlib.contextmanager
def keda_client(
    port: int,
    *,
    ca: Path | None,
    cert: Path | None = None,
    key: Path | None = None,
) -> Iterator[pb_grpc.ExternalScalerStub]:
    """A client as KEDA builds one: TLS verifying ``ca`` (with a client certificate), or plain."""
    target = f"127.0.0.1:{port}"
    if ca is None:
        channel = grpc.insecure_channel(target)
    else:
        creds = grpc.ssl_channel_credentials(
            root_certificates=ca.read_bytes(),
            private_key=key.read_bytes() if key else None,
            certificate_chain=cert.read_bytes() if cert else None,
        )
        channel = grpc.secure_channel(target, creds)
    with channel:
        yield pb_grpc.ExternalScalerStub(channel)


def gpuscaler(metadata: dict[str, str], namespace: str) -> str:
    """The GPUScaler ``gpuscale autoscale`` reads for the target a trigger's metadata names."""
    target = {"policy", "scaleTargetName", "minReplicas", "maxReplicas"}
    params = "".join(f", {k}: {v}" for k, v in metadata.items() if k not in target)
    return (
        "apiVersion: gpuscale.io/v1alpha1\nkind: GPUScaler\n"
        f"metadata: {{name: web, namespace: {namespace}}}\nspec:\n  targets:\n"
        f"  - scaleTargetRef: {{name: {metadata['scaleTargetName']}}}\n"
        f"    minReplicas: {metadata['minReplicas']}\n"
        f"    maxReplicas: {metadata['maxReplicas']}\n"
        f"    policy: {{name: {metadata['policy']}{params}}}\n"
    )


def scaled_object(name: str, namespace: str, **metadata: str) -> pb.ScaledObjectRef:
    """The ``ScaledObjectRef`` KEDA sends for a trigger with this metadata."""
    return pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=metadata)
