"""``gpuscale keda-scaler``: KEDA's external scaler API over gRPC, any gpuscale policy behind it.

Everything a user can get wrong (the TLS files, the address, the Prometheus URL,
the kubeconfig) is checked before the server starts, with one line naming the
input and exit status 2. TLS is on unless ``--insecure`` says otherwise, and the
server binds 127.0.0.1 unless told another address.
"""

import logging
import os
import signal
import ssl
import threading
from pathlib import Path
from typing import Annotated

import typer

from gpuscale.cli.source_options import (
    Kubeconfig,
    KubeContext,
    PrometheusBasicAuthFile,
    PrometheusBearerTokenFile,
    PrometheusCaFile,
    PrometheusCertFile,
    PrometheusInsecureSkipVerify,
    PrometheusKeyFile,
    PrometheusTimeout,
    PrometheusUrl,
    StateConfigMapName,
    check_state_configmap,
    own_namespace,
    prometheus_source,
)
from gpuscale.durations import positive_seconds_option
from gpuscale.errors import config_error, require
from gpuscale.inputs import read_text_file
from gpuscale.redact import redact_url

logger = logging.getLogger(__name__)

HEALTH_BEAT_S = 5.0
"""How often the main thread marks the process alive for ``/healthz``, seconds."""


def _pem(path: Path, flag: str) -> bytes:
    """A PEM file's bytes; one line when it is unreadable or holds no PEM block."""
    text = read_text_file(path, flag)
    require("-----BEGIN " in text, f"{flag} {path}", "holds no PEM block", "give a PEM file")
    return text.encode()


def _check_tls(cert: Path, key: Path, client_ca: Path | None) -> None:
    """Load the files as a TLS server would, so a bad pair fails here, in one line."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, ValueError) as exc:
        raise config_error(
            f"--tls-cert-file {cert}/--tls-key-file {key}",
            f"not a certificate and its private key ({exc.__class__.__name__})",
            "give the PEM certificate and the unencrypted PEM key that belongs to it",
        ) from None
    if client_ca is not None:
        try:
            context.load_verify_locations(client_ca)
        except (ssl.SSLError, ValueError) as exc:
            raise config_error(
                f"--tls-client-ca-file {client_ca}",
                f"not a PEM CA bundle ({exc.__class__.__name__})",
                "give the CA certificate(s) that sign KEDA's client certificate",
            ) from None


def keda_scaler(
    tls_cert_file: Annotated[
        Path | None,
        typer.Option(
            help="PEM server certificate (KEDA's caCert must verify it).",
            envvar="GPUSCALE_KEDA_TLS_CERT_FILE",
        ),
    ] = None,
    tls_key_file: Annotated[
        Path | None,
        typer.Option(
            help="PEM private key of --tls-cert-file.", envvar="GPUSCALE_KEDA_TLS_KEY_FILE"
        ),
    ] = None,
    tls_client_ca_file: Annotated[
        Path | None,
        typer.Option(
            help="PEM CA bundle of clients' certificates: mutual TLS, a client must present "
            "one it signed (KEDA's tlsClientCert and tlsClientKey).",
            envvar="GPUSCALE_KEDA_TLS_CLIENT_CA_FILE",
        ),
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="Serve plaintext gRPC, without TLS (a trigger without enableTLS).",
            envvar="GPUSCALE_KEDA_INSECURE",
        ),
    ] = False,
    address: Annotated[
        str,
        typer.Option(
            "--address",
            "-a",
            help="Listen address of the gRPC server as <HOST>:<PORT>; ':9443' listens on "
            "every interface.",
            envvar="GPUSCALE_KEDA_ADDRESS",
        ),
    ] = "127.0.0.1:9443",
    metrics_address: Annotated[
        str,
        typer.Option(
            help="Listen address of /metrics (the controller's series, per ScaledObject) and "
            "/healthz as <HOST>:<PORT>.",
            envvar="GPUSCALE_KEDA_METRICS_ADDRESS",
        ),
    ] = "127.0.0.1:8081",
    web_config_file: Annotated[
        Path | None,
        typer.Option(
            help="TLS and basic-auth settings of /metrics and /healthz, in the Prometheus "
            "exporter-toolkit format (as the exporter's).",
            envvar="GPUSCALE_WEB_CONFIG_FILE",
        ),
    ] = None,
    kubeconfig: Kubeconfig = None,
    context: KubeContext = None,
    prometheus: PrometheusUrl = "http://localhost:9090",
    prometheus_timeout: PrometheusTimeout = 5.0,
    prometheus_bearer_token_file: PrometheusBearerTokenFile = None,
    prometheus_ca_file: PrometheusCaFile = None,
    prometheus_basic_auth_file: PrometheusBasicAuthFile = None,
    prometheus_cert_file: PrometheusCertFile = None,
    prometheus_key_file: PrometheusKeyFile = None,
    prometheus_insecure_skip_verify: PrometheusInsecureSkipVerify = False,
    sync_period: Annotated[
        float,
        typer.Option(
            parser=positive_seconds_option,
            metavar="<duration>",
            help="Seconds a ScaledObject's decision is reused: KEDA asks in pairs, and a "
            "policy's state moves on once per decision (as the controller's sync period).",
            envvar="GPUSCALE_SYNC_PERIOD",
        ),
    ] = 15.0,
    workers: Annotated[
        int,
        typer.Option(
            min=2,
            max=1024,
            help="gRPC calls served at once; each open StreamIsActive (an external-push "
            "trigger) holds one, so give more than the external-push ScaledObjects.",
            envvar="GPUSCALE_KEDA_WORKERS",
        ),
    ] = 64,
    state_configmap: StateConfigMapName = "gpuscale-autoscaler-state",
    stream_period: Annotated[
        float,
        typer.Option(
            parser=positive_seconds_option,
            metavar="<duration>",
            help="Seconds between decisions of an open StreamIsActive (external-push).",
            envvar="GPUSCALE_KEDA_STREAM_PERIOD",
        ),
    ] = 15.0,
) -> None:
    """Serve KEDA's external scaler API, so ScaledObjects scale by gpuscale policies."""
    if insecure and (tls_cert_file or tls_key_file or tls_client_ca_file):
        raise config_error(
            "--insecure", "is given with TLS files", "drop --insecure, or drop the TLS files"
        )
    if not insecure and (tls_cert_file is None or tls_key_file is None):
        raise config_error(
            "--tls-cert-file/--tls-key-file",
            "both are required unless --insecure",
            "give the server's PEM certificate and key (KEDA's enableTLS and caCert), "
            "or serve plaintext with --insecure",
        )
    from gpuscale.control.kubernetes import (
        KubeActuator,
        cluster_config_found,
        default_kubeconfigs,
    )
    from gpuscale.control.server import ControllerMetrics, HealthState, TelemetryServer
    from gpuscale.control.statestore import StateConfigMap
    from gpuscale.exporter.server import parse_address
    from gpuscale.keda.scaler import KedaScaler
    from gpuscale.keda.service import ExternalScalerService, ScalerServer, ServerTls

    check_state_configmap(state_configmap)
    host, port = parse_address(address)
    metrics_host, metrics_port = parse_address(metrics_address)
    gate = None
    if web_config_file is not None:
        from gpuscale.exporter.webconfig import load_web_config

        gate = load_web_config(web_config_file)
    tls = None
    if tls_cert_file is not None and tls_key_file is not None:
        cert = _pem(tls_cert_file, "--tls-cert-file")
        key = _pem(tls_key_file, "--tls-key-file")
        client_ca = _pem(tls_client_ca_file, "--tls-client-ca-file") if tls_client_ca_file else None
        _check_tls(tls_cert_file, tls_key_file, tls_client_ca_file)
        tls = ServerTls(cert, key, client_ca)
    source = prometheus_source(
        prometheus,
        timeout_s=prometheus_timeout,
        bearer_token_file=prometheus_bearer_token_file,
        basic_auth_file=prometheus_basic_auth_file,
        ca_file=prometheus_ca_file,
        cert_file=prometheus_cert_file,
        key_file=prometheus_key_file,
        insecure_skip_verify=prometheus_insecure_skip_verify,
    )
    state = StateConfigMap(own_namespace(), state_configmap)
    if kubeconfig is None and not cluster_config_found(None):
        # the scaler reads workloads and keeps state in the cluster: it has no dry run
        raise config_error(
            f"kubeconfig {os.pathsep.join(default_kubeconfigs())}",
            "no such file, and not in a pod (KUBERNETES_SERVICE_HOST is not set)",
            "pass --kubeconfig PATH or run the scaler in a pod with a service account",
        )
    actuator = KubeActuator.connect(kubeconfig, context, state=state)
    metrics = ControllerMetrics()
    health = HealthState(3 * HEALTH_BEAT_S)
    scaler = KedaScaler(source, actuator, sync_period_s=sync_period, metrics=metrics)
    stop = threading.Event()
    service = ExternalScalerService(scaler, stream_period_s=stream_period, stop=stop)
    try:
        telemetry = TelemetryServer(metrics, health, metrics_host, metrics_port, gate)
    except OSError as exc:
        raise config_error(
            f"--metrics-address {metrics_address!r}",
            f"cannot listen ({exc.strerror})",
            "give a free [HOST]:PORT",
        ) from None
    try:
        server = ScalerServer(service, host, port, tls, workers=workers)
    except (OSError, RuntimeError) as exc:
        telemetry.stop()
        raise config_error(
            f"--address {address!r}", f"cannot listen ({exc})", "give a free [HOST]:PORT"
        ) from None
    server.start()
    telemetry.start()
    logger.info(
        "serving KEDA's external scaler API on %s:%d (%s); signals from %s; "
        "/metrics and /healthz on %s:%d",
        host,
        server.port,
        "plaintext" if tls is None else ("mutual TLS" if tls.client_ca else "TLS"),
        redact_url(prometheus),
        metrics_host,
        telemetry.port,
    )
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        while not done.wait(HEALTH_BEAT_S):
            health.beat()  # the process serves; each call decides on its own thread
    finally:
        server.stop()
        telemetry.stop()
        source.close()
        actuator.close()
        logger.info("stopped")


def register(app: typer.Typer) -> None:
    """Add the ``keda-scaler`` command to ``app``."""
    app.command("keda-scaler")(keda_scaler)
