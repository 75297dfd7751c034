"""``gpuscale autoscale``: the live controller, Prometheus in and Kubernetes out.

Everything a user can get wrong (the GPUScaler file, the Prometheus URL and
its TLS files, the kubeconfig, the listen address) is checked before the loop
starts, with one line naming the input and exit status 2. Prometheus itself is
asked once at start: one that does not answer (down, a wrong port, DNS, TLS,
401/403) is a WARNING naming ``--prometheus`` and the cause, and the controller
runs on, every target holding with that cause until it answers, since it may be
starting too.

A dry run needs no cluster: with ``--assume-replicas``, or with no kubeconfig
outside a pod, it decides from assumed replica counts (``control.offline``).
"""

import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

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
from gpuscale.durations import positive_seconds_option, whole_seconds_option
from gpuscale.errors import config_error
from gpuscale.redact import redact_url

if TYPE_CHECKING:
    from gpuscale.metrics.prometheus import PrometheusSource

logger = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 3.0
"""With leader election: one API request's timeout, and the lease time a write needs left
(a third of the renew deadline where that is shorter)."""


def _show_version(value: bool) -> None:
    """``--version``: print gpuscale's version, then exit (a container's entrypoint check)."""
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            ours = version("gpuscale")
        except PackageNotFoundError:
            ours = "unknown (not installed)"
        typer.echo(f"gpuscale autoscale version {ours}")
        raise typer.Exit


def _probe(source: "PrometheusSource", url: str) -> None:
    """Ask Prometheus once at start; say so at WARNING if it does not answer, and go on.

    A Prometheus that is down, unnamed in DNS, refuses our certificate or our
    credentials may come right without a restart (it is starting too, a Secret is
    being rotated): the controller runs and every target holds, with the same cause
    in its hold reason and its ``MetricsUnhealthy`` Event.
    """
    from gpuscale.metrics.signal import MetricsUnavailable

    try:
        source.check(time.time())
    except MetricsUnavailable as exc:
        logger.warning(
            "--prometheus %s does not answer (%s: %s); every target holds its replicas until "
            "it does: check the address, its TLS and credential flags",
            redact_url(url),
            exc.reason,
            exc,
        )


def autoscale(
    config: Annotated[
        Path,
        typer.Option(
            "--config",
            help="GPUScaler YAML file: targets, policies, bounds (docs/autoscaler.md).",
            envvar="GPUSCALE_AUTOSCALE_CONFIG",
        ),
    ],
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
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Decide and log, but change nothing in the cluster; with no kubeconfig "
            "outside a pod, decide without a cluster (see --assume-replicas).",
            envvar="GPUSCALE_DRY_RUN",
        ),
    ] = False,
    assume_replicas: Annotated[
        list[str] | None,
        typer.Option(
            "--assume-replicas",
            metavar="[NAMESPACE/]NAME=N",
            help="With --dry-run: decide without a cluster, from [NAMESPACE/]NAME=N replicas "
            "of the target of that scaleTargetRef name (repeatable; other targets: their "
            "minReplicas). A dry run with no kubeconfig and outside a pod does so anyway.",
            envvar="GPUSCALE_ASSUME_REPLICAS",
            show_default=False,
        ),
    ] = None,
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Run one sync over every target, print each decision, and exit.",
            envvar="GPUSCALE_ONCE",
        ),
    ] = False,
    sync_period: Annotated[
        float,
        typer.Option(
            parser=positive_seconds_option,
            metavar="<duration>",
            help="Seconds between syncs.",
            envvar="GPUSCALE_SYNC_PERIOD",
        ),
    ] = 15.0,
    workers: Annotated[
        int,
        typer.Option(
            min=1, max=64, help="Targets reconciled concurrently.", envvar="GPUSCALE_WORKERS"
        ),
    ] = 8,
    address: Annotated[
        str,
        typer.Option(
            "--address",
            "-a",
            "--metrics-address",
            help="Listen address of /metrics and /healthz as <HOST>:<PORT>; ':8080' listens "
            "on every interface.",
            envvar="GPUSCALE_METRICS_ADDRESS",
        ),
    ] = "127.0.0.1:8080",
    web_config_file: Annotated[
        Path | None,
        typer.Option(
            help="TLS and basic-auth settings of /metrics and /healthz, in the Prometheus "
            "exporter-toolkit format (as the exporter's).",
            envvar="GPUSCALE_WEB_CONFIG_FILE",
        ),
    ] = None,
    leader_elect: Annotated[
        bool,
        typer.Option(
            help="Act only while holding a coordination.k8s.io Lease.",
            envvar="GPUSCALE_LEADER_ELECT",
        ),
    ] = True,
    lease_name: Annotated[
        str, typer.Option(help="Name of the Lease.", envvar="GPUSCALE_LEASE_NAME")
    ] = "gpuscale-autoscaler",
    lease_namespace: Annotated[
        str | None,
        typer.Option(
            help="Namespace of the Lease (default: the pod's own, else default).",
            envvar="GPUSCALE_LEASE_NAMESPACE",
        ),
    ] = None,
    state_configmap: StateConfigMapName = "gpuscale-autoscaler-state",
    lease_duration: Annotated[
        int,
        typer.Option(
            parser=whole_seconds_option,
            metavar="<duration>",
            help="Seconds a Lease is valid without renewal.",
            envvar="GPUSCALE_LEASE_DURATION",
        ),
    ] = 15,
    renew_deadline: Annotated[
        float,
        typer.Option(
            parser=positive_seconds_option,
            metavar="<duration>",
            help="Seconds the leader keeps trying to renew before it stops acting.",
            envvar="GPUSCALE_RENEW_DEADLINE",
        ),
    ] = 10.0,
    retry_period: Annotated[
        float,
        typer.Option(
            parser=positive_seconds_option,
            metavar="<duration>",
            help="Seconds between tries to take or renew the Lease.",
            envvar="GPUSCALE_RETRY_PERIOD",
        ),
    ] = 2.0,
    identity: Annotated[
        str | None,
        typer.Option(
            help="Holder identity in the Lease (default: hostname_pid).", envvar="GPUSCALE_IDENTITY"
        ),
    ] = None,
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_show_version,
            help="Print the version, then exit.",
        ),
    ] = False,
) -> None:
    """Scale GPU workloads from Prometheus with the gpuscale policies, through /scale."""
    del show_version  # its callback has run (and exited) when given
    from gpuscale.control.config import load
    from gpuscale.control.controller import Controller
    from gpuscale.control.kubecall import RetryPolicy
    from gpuscale.control.kubernetes import KubeActuator, cluster_config_found
    from gpuscale.control.offline import AssumedCluster, assumed_replicas
    from gpuscale.control.seams import Settings, label
    from gpuscale.control.server import ControllerMetrics, HealthState, TelemetryServer
    from gpuscale.control.statestore import StateConfigMap
    from gpuscale.control.targets import runtimes
    from gpuscale.exporter.server import parse_address
    from gpuscale.metrics.prometheus import check_url

    if leader_elect and not renew_deadline < lease_duration:
        raise config_error(
            f"--renew-deadline {renew_deadline:g}",
            f"must be shorter than --lease-duration {lease_duration:g}",
            "lower it (client-go's defaults are 10 s and 15 s)",
        )
    check_url(prometheus, "--prometheus")
    check_state_configmap(state_configmap)
    if assume_replicas and not dry_run:
        raise config_error(
            "--assume-replicas",
            "only a dry run can assume replicas (a real run scales what is there)",
            "add --dry-run, or leave --assume-replicas out",
        )
    if assume_replicas and kubeconfig is not None:
        raise config_error(
            "--assume-replicas/--kubeconfig",
            "both are given: replicas would come from the file and the cluster",
            "choose one",
        )
    targets = runtimes(load(config))
    host, port = parse_address(address)
    gate = None
    if web_config_file is not None:
        from gpuscale.exporter.webconfig import load_web_config

        gate = load_web_config(web_config_file)
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
    offline = dry_run and (bool(assume_replicas) or not cluster_config_found(kubeconfig))
    elect = leader_elect and not once and not offline
    # With leader election, one request (and one call's retries) must end well inside
    # the renew deadline: a write is sent only while the lease outlasts its timeout.
    write_s = min(WRITE_TIMEOUT_S, renew_deadline / 3)
    retry = RetryPolicy(timeout_s=write_s, total_s=renew_deadline / 2) if elect else None
    actuator: KubeActuator | AssumedCluster
    if offline:
        assumed = assumed_replicas(targets, assume_replicas or [])
        actuator = AssumedCluster(assumed)
        logger.info(
            "dry run without a cluster: no pods, no saved policy state, replicas assumed: %s",
            ", ".join(f"{label(ref)}={n}" for ref, n in assumed.items()),
        )
    else:
        state = StateConfigMap(own_namespace(lease_namespace), state_configmap)
        actuator = KubeActuator.connect(kubeconfig, context, retry=retry, state=state)
    elector = None
    if elect and isinstance(actuator, KubeActuator):
        from gpuscale.control.lease import LeaseElector

        elector = LeaseElector(
            actuator.api_client,
            own_namespace(lease_namespace),
            lease_name,
            identity or f"{socket.gethostname()}_{os.getpid()}",
            lease_duration_s=lease_duration,
            renew_deadline_s=renew_deadline,
            retry_period_s=retry_period,
        )
    _probe(source, prometheus)
    settings = Settings(sync_period, retry_period, dry_run, workers, write_margin_s=write_s)
    metrics = ControllerMetrics()
    health = HealthState(3 * max(sync_period, retry_period, 10.0))
    controller = Controller(
        targets,
        source,
        actuator,
        settings=settings,
        metrics=metrics,
        elector=elector,
        health=health,
    )
    if once:
        outcomes = controller.sync()
        for o in outcomes:  # the result, on stdout; the log (stderr) has the inputs too
            typer.echo(f"{o.target}: {o.current} -> {o.replicas} ({o.reason})")
        failed = [o for o in outcomes if o.error is not None]
        if failed:
            raise typer.Exit(1)
        return
    try:
        server = TelemetryServer(metrics, health, host, port, gate)
    except OSError as exc:
        raise config_error(
            f"--address {address!r}",
            f"cannot listen ({exc.strerror})",
            "give a free [HOST]:PORT",
        ) from None
    server.start()
    logger.info(
        "autoscaling %d targets from %s every %g s%s; /metrics and /healthz on %s:%d",
        len(targets),
        redact_url(prometheus),
        sync_period,
        " (dry run)" if dry_run else "",
        host,
        server.port,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        controller.run(stop)
    finally:
        server.stop()
        source.close()
        actuator.close()
        logger.info("stopped")


def register(app: typer.Typer) -> None:
    """Add the ``autoscale`` command to ``app``."""
    app.command("autoscale")(autoscale)
