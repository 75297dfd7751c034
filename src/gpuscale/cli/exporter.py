"""``gpuscale exporter``: serve GPU telemetry under dcgm-exporter's names.

Flags keep dcgm-exporter's names and units where they mean the same thing
(``--address``, ``--collectors``, ``--collect-interval`` in milliseconds,
``--kubernetes``, ``--web-config-file``, ``--xid-count-window-size``), so a
user can switch without relearning.
"""

import logging
import signal
import threading
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from gpuscale.errors import ConfigError
from gpuscale.exporter.collector import PodLookup, SnapshotFamilies
from gpuscale.exporter.sampler import Sampler
from gpuscale.exporter.server import ExporterServer, parse_address
from gpuscale.fields.counters import default_counters, read_counters
from gpuscale.telemetry.base import GpuSource

logger = logging.getLogger(__name__)


class SourceName(StrEnum):
    """Telemetry backends."""

    sim = "sim"
    nvml = "nvml"
    amd = "amd"


def _open_source(
    source: SourceName, gpus: int, models: str, load: str, seed: int, faults: list[str]
) -> GpuSource:
    if source is SourceName.sim:
        from gpuscale.telemetry.faults import parse_fault
        from gpuscale.telemetry.loads import parse_load_spec
        from gpuscale.telemetry.physics import gpu_model
        from gpuscale.telemetry.sim import SimSource

        names = tuple(m.strip() for m in models.split(",") if m.strip())
        for name in names:
            gpu_model(name)  # validates before anything starts
        fault_specs = [parse_fault(f, "exporter") for f in faults]
        return SimSource(
            gpus, names, load=parse_load_spec(load, seed), seed=seed, faults=fault_specs
        )
    if source is SourceName.nvml:
        from gpuscale.telemetry.nvml import NvmlSource

        return NvmlSource()
    from gpuscale.telemetry.amd import AmdSource

    return AmdSource()


_SIM_ONLY = {"gpus": "--gpus", "gpu_models": "--gpu-models", "load": "--load", "fault": "--fault"}


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the user set an option (command line or environment), not its default."""
    source = ctx.get_parameter_source(name)
    # Typer bundles its own click, so compare the enum by name, not by class.
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _reject_sim_only_options(ctx: typer.Context, source: SourceName) -> None:
    """Options of the simulated fleet are a mistake with a real source, even at their defaults."""
    if source is SourceName.sim:
        return
    given = [flag for name, flag in _SIM_ONLY.items() if _given(ctx, name)]
    if given:
        raise ConfigError(f"{', '.join(given)} only apply to --source sim: remove them")


def exporter(
    ctx: typer.Context,
    source: Annotated[
        SourceName, typer.Option(help="Telemetry backend.", envvar="GPUSCALE_SOURCE")
    ] = SourceName.sim,
    address: Annotated[
        str,
        typer.Option("--address", "-a", help="Address to serve on.", envvar="GPUSCALE_ADDRESS"),
    ] = ":9400",
    collectors: Annotated[
        Path | None,
        typer.Option(
            "--collectors",
            "-f",
            help="Counters file in dcgm-exporter's format (default: dcgm-exporter's default set).",
            envvar="GPUSCALE_COLLECTORS",
        ),
    ] = None,
    collect_interval: Annotated[
        int,
        typer.Option(
            "--collect-interval",
            "-c",
            min=10,
            help="Milliseconds between collects.",
            envvar="GPUSCALE_COLLECT_INTERVAL",
        ),
    ] = 1000,
    collect_timeout: Annotated[
        int | None,
        typer.Option(
            min=10,
            help="Milliseconds before a collect is abandoned and counted (default: the interval).",
            envvar="GPUSCALE_COLLECT_TIMEOUT",
        ),
    ] = None,
    kubernetes: Annotated[
        bool,
        typer.Option(
            "--kubernetes",
            "-k",
            help="Label series with the pod holding each GPU (kubelet pod-resources API).",
            envvar="GPUSCALE_KUBERNETES",
        ),
    ] = False,
    pod_resources_socket: Annotated[
        str,
        typer.Option(
            "--pod-resources-kubelet-socket",
            help="Kubelet pod-resources socket.",
            envvar="GPUSCALE_POD_RESOURCES_SOCKET",
        ),
    ] = "/var/lib/kubelet/pod-resources/kubelet.sock",
    resource_names: Annotated[
        list[str] | None,
        typer.Option(
            "--kubernetes-resource-name",
            help="Extra device-plugin resource names to attribute (repeatable).",
            envvar="GPUSCALE_KUBERNETES_RESOURCE_NAMES",
        ),
    ] = None,
    web_config_file: Annotated[
        Path | None,
        typer.Option(
            help="TLS and basic-auth settings in the Prometheus exporter-toolkit format.",
            envvar="GPUSCALE_WEB_CONFIG_FILE",
        ),
    ] = None,
    xid_count_window_size: Annotated[
        int,
        typer.Option(
            min=1000,
            help="Milliseconds of XID history counted in DCGM_EXP_XID_ERRORS_COUNT.",
            envvar="GPUSCALE_XID_COUNT_WINDOW_SIZE",
        ),
    ] = 300_000,
    gpus: Annotated[
        int,
        typer.Option(min=1, max=100_000, help="Simulated GPUs (sim only).", envvar="GPUSCALE_GPUS"),
    ] = 8,
    gpu_models: Annotated[
        str,
        typer.Option(
            help="Comma-separated simulated models, cycled over the GPUs (sim only).",
            envvar="GPUSCALE_GPU_MODELS",
        ),
    ] = "H100",
    load: Annotated[
        str,
        typer.Option(
            help="Simulated load: constant:0.7, sine[:mean:amp:period_s], trace:FILE (sim only).",
            envvar="GPUSCALE_LOAD",
        ),
    ] = "sine",
    seed: Annotated[
        int, typer.Option(help="Seed of the simulated fleet.", envvar="GPUSCALE_SEED")
    ] = 0,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            help="Inject a fault into a simulated GPU (sim only): KIND@SECONDS:gpu=N[:key=value],"
            " e.g. gpu-lost@60:gpu=3, xid@30:code=13:gpu=0, ecc-dbe@10:gpu=1,"
            " thermal@0:gpu=1:rise_c=35:duration=300, row-remap@5:gpu=2. Repeatable;"
            " the environment variable takes several, separated by spaces.",
            envvar="GPUSCALE_FAULTS",
        ),
    ] = None,
) -> None:
    """Serve GPU telemetry on /metrics with dcgm-exporter's metric names and labels."""
    # Everything a user can get wrong is checked before anything is served.
    _reject_sim_only_options(ctx, source)
    host, port = parse_address(address)
    counters = read_counters(collectors) if collectors else default_counters()
    web = None
    if web_config_file is not None:
        from gpuscale.exporter.webconfig import load_web_config

        web = load_web_config(web_config_file)
    gpu_source = _open_source(source, gpus, gpu_models, load, seed, fault or [])

    pods: PodLookup | None = None
    mapper = None
    if kubernetes:
        from gpuscale.exporter.pods import PodMapper

        names = ("nvidia.com/gpu", "amd.com/gpu", *(resource_names or []))
        mapper = PodMapper(pod_resources_socket, resource_names=names, devices=gpu_source.devices())
        mapper.start()
        pods = mapper

    families = SnapshotFamilies(counters, pods=pods, xid_window_ms=xid_count_window_size)
    sampler = Sampler(
        gpu_source,
        families,
        interval_s=collect_interval / 1000.0,
        timeout_s=None if collect_timeout is None else collect_timeout / 1000.0,
        xid_window_ms=xid_count_window_size,
    )
    sampler.collect_once()
    try:
        server = ExporterServer((host, port), sampler, web)
    except OSError as exc:
        raise ConfigError(f"--address {address!r}: cannot listen ({exc.strerror})") from exc
    sampler.start()
    scheme = "https" if web is not None and web.ssl_context else "http"
    logger.info(
        "serving %d GPUs from %s on %s://%s:%d/metrics",
        len(gpu_source.devices()),
        source.value,
        scheme,
        host,
        server.port,
    )
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    server.serve_in_background()
    done.wait()
    logger.info("shutting down")
    server.shutdown()
    sampler.stop()
    if mapper is not None:
        mapper.stop()


def register(app: typer.Typer) -> None:
    """Add the ``exporter`` command to ``app``."""
    app.command("exporter")(exporter)
