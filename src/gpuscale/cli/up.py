"""``gpuscale up``: exporter, rules and alerts on one machine, with nothing else installed.

Embedded by default: the exporter serves ``/metrics`` as ``gpuscale exporter``
does, its exposition is scraped in process into the metric store, the alert
catalogue is evaluated there at an interval, and Prometheus's ``/api/v1/alerts``
and ``/api/v1/rules`` are served. Flags switch each part to the real thing:
``--source nvml|amd`` reads real GPUs, ``--prometheus URL`` makes the rules read
a Prometheus that scrapes the exporter, ``--alertmanager URL`` sends the alerts
to an Alertmanager as Prometheus would.
"""

import logging
import re
import signal
import socket
import threading
from pathlib import Path
from typing import Annotated

import typer

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.config import load_config
from gpuscale.alerts.evaluate import RuleEvaluator, window_s
from gpuscale.alerts.evaluate_api import RulesApiServer
from gpuscale.alerts.evaluate_loop import RuleLoop
from gpuscale.alerts.evaluate_notify import RESEND_DELAY_S, Notifier
from gpuscale.alerts.evaluate_remote import PrometheusSelectors
from gpuscale.alerts.model import RuleGroup
from gpuscale.cli import exporter_options as o
from gpuscale.durations import positive_seconds_option, seconds_option
from gpuscale.errors import ConfigError, config_error
from gpuscale.exporter.collector import SnapshotFamilies
from gpuscale.exporter.sampler import Sampler
from gpuscale.exporter.server import ExporterServer, parse_address
from gpuscale.fields import DCGM_FIELDS
from gpuscale.fields.counters import Counter, default_counters
from gpuscale.metrics.store import LOOKBACK_S, MetricStore
from gpuscale.redact import redact_url

logger = logging.getLogger(__name__)

JOB = "gpuscale-exporter"
"""The scrape job the embedded scrape labels the exporter's series with (the catalogue's)."""


def _counters(groups: tuple[RuleGroup, ...]) -> tuple[Counter, ...]:
    """dcgm-exporter's default counters plus every DCGM field the catalogue reads."""
    rows = list(default_counters())
    have = {c.field.name for c in rows}
    text = " ".join(r.expr for g in groups for r in g.rules)
    for name in sorted(set(re.findall(r"\bDCGM_FI_[A-Z0-9_]+", text)) - have):
        field = DCGM_FIELDS.get(name)
        if field is not None and field.type != "label":
            rows.append(Counter(field, field.type, field.help))
    return tuple(rows)


def _url(flag: str, value: str | None) -> str | None:
    if value is not None and not re.match(r"^https?://[^/\s]+", value):
        raise config_error(
            f"{flag} {redact_url(value)!r}", "is not an http(s) URL", "e.g. http://127.0.0.1:9093"
        )
    return value


def up(
    source: o.SourceOpt = o.SourceName.sim,
    gpus: o.GpusOpt = 8,
    gpu_models: o.GpuModelsOpt = "H100",
    load: o.LoadOpt = "sine",
    seed: o.SeedOpt = 0,
    fault: o.FaultOpt = None,
    address: o.AddressOpt = "127.0.0.1:9400",
    api_address: Annotated[
        str,
        typer.Option(
            help="Listen address of /api/v1/alerts and /api/v1/rules, as <HOST>:<PORT>; "
            "':9090' listens on every interface.",
            envvar="GPUSCALE_API_ADDRESS",
        ),
    ] = "127.0.0.1:9090",
    web_config_file: o.WebConfigFileOpt = None,
    scrape_interval: Annotated[
        float,
        typer.Option(
            parser=positive_seconds_option,
            metavar="<duration>",
            help="Seconds between two in-process scrapes.",
            envvar="GPUSCALE_SCRAPE_INTERVAL",
        ),
    ] = 15.0,
    evaluation_interval: Annotated[
        float,
        typer.Option(
            parser=positive_seconds_option,
            metavar="<duration>",
            help="Seconds between two evaluations of the rules.",
            envvar="GPUSCALE_EVALUATION_INTERVAL",
        ),
    ] = 15.0,
    alertmanager: Annotated[
        str | None,
        typer.Option(
            help="Send alerts to this Alertmanager (POST /api/v2/alerts), e.g. "
            "http://127.0.0.1:9093 \\[default: none].",
            envvar="GPUSCALE_ALERTMANAGER",
            show_default=False,
        ),
    ] = None,
    resend_delay: Annotated[
        float,
        typer.Option(
            parser=seconds_option,
            metavar="<duration>",
            help="Seconds before a firing alert is sent again (Prometheus's "
            "--rules.alert.resend-delay).",
            envvar="GPUSCALE_RESEND_DELAY",
        ),
    ] = RESEND_DELAY_S,
    prometheus: Annotated[
        str | None,
        typer.Option(
            help="Read the rules' series from this Prometheus (which scrapes the exporter) "
            "instead of the in-process scrape \\[default: embedded].",
            envvar="GPUSCALE_PROMETHEUS",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="YAML alert settings: thresholds, for: durations, SLOs (docs/alerts.md).",
            envvar="GPUSCALE_RULES_CONFIG",
        ),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(
            parser=seconds_option,
            metavar="<duration>",
            help="Stop after this many seconds \\[default: run until interrupted].",
            envvar="GPUSCALE_UP_DURATION",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the exporter, evaluate the alert rules in process and serve their alerts."""
    from gpuscale.cli.sources import SimFleet, open_source

    if source is not o.SourceName.sim and fault:
        raise ConfigError("--fault only applies to --source sim: remove it")
    alertmanager = _url("--alertmanager", alertmanager)
    prometheus = _url("--prometheus", prometheus)
    host, port = parse_address(address)
    try:
        api_host, api_port = parse_address(api_address)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("--address", "--api-address", 1)) from None
    gate = None
    if web_config_file is not None:
        from gpuscale.exporter.webconfig import load_web_config

        gate = load_web_config(web_config_file)
    groups = build_catalogue(load_config(config))
    hostname = socket.gethostname()
    fleet = SimFleet(gpus, gpu_models, load, seed, tuple(fault or []))
    gpu_source, source_name = open_source(source, fleet, hostname)
    sampler = Sampler(
        gpu_source,
        SnapshotFamilies(_counters(groups)),
        source_name=source_name.value,
        interval_s=1.0,
    )
    sampler.collect_once()
    try:
        server = ExporterServer((host, port), sampler, gate)
    except OSError as exc:
        raise ConfigError(f"--address {address!r}: cannot listen ({exc.strerror})") from exc
    store = MetricStore(retention_s=window_s(groups) + LOOKBACK_S + 4 * scrape_interval)
    remote = PrometheusSelectors(prometheus) if prometheus else None
    evaluator = RuleEvaluator(groups, store, remote=remote)
    notifier = Notifier(alertmanager, evaluation_interval, resend_delay) if alertmanager else None
    target = {"job": JOB, "instance": f"{hostname}:{server.port}"}
    loop = RuleLoop(
        evaluator,
        store,
        evaluation_interval,
        scrape=None if remote else (lambda: sampler.exposition().decode()),
        scrape_interval_s=scrape_interval,
        target=target,
        notifier=notifier,
    )
    try:
        api = RulesApiServer(
            (api_host, api_port), evaluator, loop.lock, evaluation_interval, gate=gate
        )
    except OSError as exc:
        server.server_close()
        raise ConfigError(f"--api-address {api_address!r}: cannot listen ({exc.strerror})") from exc
    sampler.start()
    server.serve_in_background()
    api.serve_in_background()
    logger.info(
        "exporter on %s:%d/metrics, rules API on %s:%d/api/v1/alerts; %d rules every %g s%s%s",
        host,
        server.port,
        api_host,
        api.port,
        sum(len(g.rules) for g in groups),
        evaluation_interval,
        f", reading {redact_url(prometheus)}" if prometheus else ", scraping in process",
        f", alerting {redact_url(alertmanager)}" if alertmanager else "",
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if duration is not None:
        threading.Timer(duration, stop.set).start()
    try:
        loop.run(stop)
    finally:
        api.shutdown()
        server.shutdown()
        sampler.stop()
        if notifier is not None:
            notifier.close()
        if remote is not None:
            remote.close()
        logger.info("stopped after %d evaluations", loop.evaluations)


def register(app: typer.Typer) -> None:
    """Add ``up`` to ``app``."""
    app.command("up")(up)
