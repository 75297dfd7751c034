"""KEDA's ``ExternalScaler`` gRPC service over ``keda.scaler``, served with TLS.

KEDA's call sequence for a trigger of type ``external``: ``GetMetricSpec`` when it
builds the ScaledObject's HPA, then every polling interval ``IsActive`` (scale to
and from zero) and, whenever the HPA asks KEDA's metrics adapter,
``GetMetrics`` followed by ``IsActive``. With ``external-push`` KEDA also holds a
``StreamIsActive`` call open and scales from zero as soon as it reads ``true``.
``StreamMetricSpec`` is optional in KEDA and answered Unimplemented (the
generated base class does), so KEDA keeps polling ``GetMetricSpec``: the spec never
changes.

A bad trigger metadata answers INVALID_ARGUMENT with the one-line ConfigError
(KEDA logs it on the ScaledObject); a failed reconcile answers UNAVAILABLE,
PERMISSION_DENIED or INTERNAL, and KEDA's HPA keeps the replicas meanwhile (or
applies the ScaledObject's ``fallback``).

TLS is what KEDA's ``enableTLS``, ``caCert``, ``tlsClientCert`` and
``tlsClientKey`` expect: a server certificate and key, and, for mutual TLS, the
CA that signed KEDA's client certificate (a client without one is refused).
"""

import logging
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import NoReturn

import grpc

from gpuscale.errors import ConfigError
from gpuscale.keda import externalscaler_pb2 as pb
from gpuscale.keda import externalscaler_pb2_grpc as pb_grpc
from gpuscale.keda.scaler import (
    METRIC_NAME,
    TARGET_SIZE,
    DecisionFailedError,
    Desired,
    KedaScaler,
)

logger = logging.getLogger(__name__)

_CODES = {
    "forbidden": grpc.StatusCode.PERMISSION_DENIED,
    "kube_unavailable": grpc.StatusCode.UNAVAILABLE,
}
"""The controller's error label to the status KEDA sees (others: INTERNAL)."""


@dataclass(frozen=True, slots=True)
class ServerTls:
    """The server's TLS material, PEM bytes.

    Attributes:
        cert_chain: Server certificate (and intermediates).
        private_key: Its key.
        client_ca: CA bundle that signs clients' certificates; when given, every client
            must present one it signed (mutual TLS).
    """

    cert_chain: bytes
    private_key: bytes
    client_ca: bytes | None = None

    def credentials(self) -> grpc.ServerCredentials:
        """The server credentials gRPC takes for this material.

        Returns:
            The credentials (client certificates required with ``client_ca``).
        """
        return grpc.ssl_server_credentials(
            [(self.private_key, self.cert_chain)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )


class ExternalScalerService(pb_grpc.ExternalScalerServicer):
    """The four calls KEDA makes, answered from one ``KedaScaler``.

    Args:
        scaler: Decides per ScaledObject.
        stream_period_s: How often an open ``StreamIsActive`` re-decides, seconds.
        stop: Set when the server stops; ends every open stream.
    """

    def __init__(
        self, scaler: KedaScaler, *, stream_period_s: float, stop: threading.Event
    ) -> None:
        self.scaler = scaler
        self.stream_period_s = stream_period_s
        self.stop = stop

    def _desired(self, ref: pb.ScaledObjectRef, context: grpc.ServicerContext) -> Desired:
        """Decide for ``ref``; abort the call with the status KEDA should see on failure."""
        try:
            return self.scaler.decide(ref.name, ref.namespace, ref.scalerMetadata)
        except ConfigError as exc:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except DecisionFailedError as exc:
            _abort(context, _CODES.get(exc.reason, grpc.StatusCode.INTERNAL), str(exc))

    def GetMetricSpec(  # noqa: N802 - the gRPC method name
        self, request: pb.ScaledObjectRef, context: grpc.ServicerContext
    ) -> pb.GetMetricSpecResponse:
        """The one metric, ``gpuscale-desired-replicas``, with the target 1 per replica.

        Returns:
            The spec, once the metadata is checked valid.
        """
        try:
            self.scaler.check(request.name, request.namespace, request.scalerMetadata)
        except ConfigError as exc:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        spec = pb.MetricSpec(
            metricName=METRIC_NAME, targetSize=TARGET_SIZE, targetSizeFloat=float(TARGET_SIZE)
        )
        return pb.GetMetricSpecResponse(metricSpecs=[spec])

    def GetMetrics(  # noqa: N802 - the gRPC method name
        self, request: pb.GetMetricsRequest, context: grpc.ServicerContext
    ) -> pb.GetMetricsResponse:
        """The metric whose HPA reading is the policy's decision (``scaler.metric_value``).

        Returns:
            One value; ``metricValue`` (KEDA's deprecated integer) is the decision itself.
        """
        if request.metricName != METRIC_NAME:
            _abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"metric {request.metricName!r}: gpuscale serves only {METRIC_NAME!r}",
            )
        desired = self._desired(request.scaledObjectRef, context)
        value = pb.MetricValue(
            metricName=METRIC_NAME, metricValue=desired.replicas, metricValueFloat=desired.value
        )
        return pb.GetMetricsResponse(metricValues=[value])

    def IsActive(  # noqa: N802 - the gRPC method name
        self, request: pb.ScaledObjectRef, context: grpc.ServicerContext
    ) -> pb.IsActiveResponse:
        """Whether the policy wants any replica.

        Returns:
            ``result`` true when the decision is above zero.
        """
        return pb.IsActiveResponse(result=self._desired(request, context).active)

    def StreamIsActive(  # noqa: N802 - the gRPC method name
        self, request: pb.ScaledObjectRef, context: grpc.ServicerContext
    ) -> Iterator[pb.IsActiveResponse]:
        """Push the activity now, then each time it changes, until KEDA or the server ends it.

        A failed decision is logged and retried next period (the stream stays open:
        KEDA reopens a broken one only after a backoff); bad metadata ends it.

        Yields:
            ``IsActiveResponse`` on the first decision and on every change.
        """
        last: bool | None = None
        while context.is_active() and not self.stop.is_set():
            try:
                active = self.scaler.decide(
                    request.name, request.namespace, request.scalerMetadata
                ).active
            except ConfigError as exc:
                _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            except DecisionFailedError as exc:
                logger.warning("%s/%s: stream: %s", request.namespace, request.name, exc)
            else:
                if active != last:
                    last = active
                    yield pb.IsActiveResponse(result=active)
            self.stop.wait(self.stream_period_s)


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """End the call with ``code`` and the one-line ``message``."""
    context.abort(code, message)
    raise AssertionError("grpc.ServicerContext.abort returned")  # it raises; for the checker


class ScalerServer:
    """The gRPC server: the service on one address, TLS unless explicitly insecure.

    Args:
        service: What it serves.
        host: Address to bind (an IPv6 address without brackets).
        port: Port; 0 picks a free one (read ``port`` after ``start``).
        tls: TLS material; None serves plaintext (the caller checks it was asked for).
        workers: Calls served at once (each open stream holds one).
    """

    def __init__(
        self,
        service: ExternalScalerService,
        host: str,
        port: int,
        tls: ServerTls | None,
        *,
        workers: int = 16,
    ) -> None:
        self.service = service
        self._server = grpc.server(
            futures.ThreadPoolExecutor(workers, thread_name_prefix="keda-grpc")
        )
        pb_grpc.add_ExternalScalerServicer_to_server(service, self._server)  # type: ignore[no-untyped-call]
        bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if tls is None:
            self.port = self._server.add_insecure_port(bind)
        else:
            self.port = self._server.add_secure_port(bind, tls.credentials())
        if self.port == 0:
            raise OSError(f"cannot listen on {bind}")

    def start(self) -> None:
        """Serve on background threads."""
        self._server.start()

    def stop(self, grace_s: float = 5.0) -> None:
        """End open streams, let running calls finish for ``grace_s``, then stop."""
        self.service.stop.set()
        self._server.stop(grace_s).wait()
