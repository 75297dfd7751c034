"""``gpuscale exporter``: serve GPU telemetry under dcgm-exporter's names.

The command line is dcgm-exporter 4.x's (``gpuscale.cli.dcgm_flags``): every flag
and environment variable of its ``--help``, with the same short forms, value
syntax and precedence, so its DaemonSet, Helm chart and arguments start this
exporter unchanged. The options below the dcgm-exporter ones are the project's
own (the telemetry source and the simulated fleet). ``NODE_NAME``, which the
upstream manifests set from the pod's node, names the host as upstream does.
"""

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuscale.cli import amd_options as amd
from gpuscale.cli import dcgm_unsupported as u
from gpuscale.cli import exporter_options as o
from gpuscale.cli.dcgm_flags import DcgmCommand, given, split_list
from gpuscale.cli.logs import configure_logging
from gpuscale.cli.sources import SimFleet, open_source
from gpuscale.errors import ConfigError
from gpuscale.exporter.collector import PodLookup, SnapshotFamilies
from gpuscale.exporter.dcgm import LabelStyle
from gpuscale.exporter.devices import parse_devices, select_entities
from gpuscale.exporter.sampler import Sampler
from gpuscale.exporter.server import ExporterServer, parse_address, systemd_listen_fd
from gpuscale.fields.counters import Counter, default_counters, parse_counters, read_counters
from gpuscale.fields.resources import GPU_RESOURCES

if TYPE_CHECKING:
    from gpuscale.exporter.podmeta import PodMetadata

logger = logging.getLogger(__name__)


_WATCH_S = 2.0  # how often the counters file is checked for changes

_SIM_ONLY = {"gpus": "--gpus", "gpu_models": "--gpu-models", "load": "--load", "fault": "--fault"}


def _reject_sim_only_options(ctx: typer.Context, source: o.SourceName) -> None:
    """Options of the simulated fleet are a mistake with a real source, even at their defaults."""
    if source is o.SourceName.sim:
        return
    flags = [flag for name, flag in _SIM_ONLY.items() if given(ctx, name)]
    if len(flags) == 1:
        raise ConfigError(f"{flags[0]} only applies to --source sim: remove it")
    if flags:
        raise ConfigError(f"{', '.join(flags)} only apply to --source sim: remove them")


def exporter(
    ctx: typer.Context,
    collectors: o.CollectorsOpt = None,
    address: o.AddressOpt = ":9400",
    collect_interval: o.CollectIntervalOpt = 1000,
    kubernetes: o.KubernetesOpt = False,
    use_old_namespace: o.UseOldNamespaceOpt = False,
    cpu_devices: u.CpuDevicesOpt = "f",
    configmap_data: o.ConfigmapDataOpt = "none",
    remote_hostengine_info: u.RemoteHostengineInfoOpt = None,
    kubernetes_enable_pod_labels: o.KubernetesEnablePodLabelsOpt = False,
    kubernetes_enable_pod_uid: o.KubernetesEnablePodUidOpt = False,
    kubernetes_gpu_id_type: o.KubernetesGpuIdTypeOpt = o.GpuIdType.uid,
    kubernetes_pod_label_allowlist_regex: o.KubernetesPodLabelAllowlistRegexOpt = None,
    devices: o.DevicesOpt = "f",
    no_hostname: o.NoHostnameOpt = False,
    switch_devices: u.SwitchDevicesOpt = "f",
    fake_gpus: u.FakeGpusOpt = False,
    web_config_file: o.WebConfigFileOpt = None,
    xid_count_window_size: o.XidCountWindowSizeOpt = 300_000,
    replace_blanks_in_model_name: o.ReplaceBlanksInModelNameOpt = False,
    debug: o.DebugOpt = False,
    clock_events_count_window_size: o.ClockEventsCountWindowSizeOpt = 300_000,
    enable_dcgm_log: u.EnableDcgmLogOpt = False,
    dcgm_log_level: u.DcgmLogLevelOpt = "NONE",
    log_format: o.LogFormatOpt = None,
    pod_resources_socket: o.PodResourcesSocketOpt = "/var/lib/kubelet/pod-resources/kubelet.sock",
    hpc_job_mapping_dir: o.HpcJobMappingDirOpt = None,
    nvidia_resource_names: o.NvidiaResourceNamesOpt = None,
    kubernetes_virtual_gpus: o.KubernetesVirtualGpusOpt = False,
    dump_enabled: u.DumpEnabledOpt = False,
    dump_directory: u.DumpDirectoryOpt = u.DUMP_DIRECTORY,
    dump_retention: u.DumpRetentionOpt = 24,
    dump_compression: u.DumpCompressionOpt = True,
    kubernetes_enable_dra: u.KubernetesEnableDraOpt = False,
    disable_startup_validate: u.DisableStartupValidateOpt = False,
    enable_gpu_bind_unbind_watch: u.EnableGpuBindUnbindWatchOpt = False,
    gpu_bind_unbind_poll_interval: u.GpuBindUnbindPollIntervalOpt = "1s",
    enable_pprof: u.EnablePprofOpt = False,
    web_systemd_socket: o.WebSystemdSocketOpt = False,
    show_version: o.ShowVersionOpt = False,
    # gpuscale's own options.
    source: o.SourceOpt = o.SourceName.auto,
    hostname_label: o.HostnameLabelOpt = o.HostnameLabel.Hostname,
    collect_timeout: o.CollectTimeoutOpt = None,
    resource_names: o.ResourceNamesOpt = None,
    gpus: o.GpusOpt = 8,
    gpu_models: o.GpuModelsOpt = "H100",
    load: o.LoadOpt = "sine",
    seed: o.SeedOpt = 0,
    fault: o.FaultOpt = None,
    amd_metrics_config: amd.AmdMetricsConfigOpt = None,
    enable_slurm_scl: amd.EnableSlurmSclOpt = True,
) -> None:
    """Serve GPU telemetry on /metrics with dcgm-exporter's metric names and labels.

    Takes dcgm-exporter 4.x's flags and environment variables unchanged.
    """
    # Everything a user can get wrong is checked before anything is served.
    values = dict(ctx.params)
    u.refuse(ctx, values)
    u.check_inert(ctx, values)
    _reject_sim_only_options(ctx, source)
    for name, flag in (("cpu_devices", "--cpu-devices"), ("switch_devices", "--switch-devices")):
        spec = parse_devices(str(values[name]), flag)
        kind = "CPU" if name == "cpu_devices" else "NvSwitch"
        if spec.kind != "f":
            raise ConfigError(
                f"{flag} {spec.text!r}: there are no DCGM {kind} entities here,"
                " gpuscale exports GPUs: use f or remove it"
            )
    device_spec = parse_devices(devices)
    if debug or log_format is not None:
        level = "debug" if debug else logging.getLevelName(logging.getLogger().level).lower()
        fmt = log_format.value if log_format is not None else "text"
        configure_logging(level, "json" if fmt == "json" else "text")
    host, port = parse_address(address)
    listen_fd = systemd_listen_fd() if web_systemd_socket else None
    counters = _load_counters(collectors, configmap_data)
    meta = (
        _pod_metadata(
            kubernetes_enable_pod_labels,
            kubernetes_enable_pod_uid,
            split_list(kubernetes_pod_label_allowlist_regex),
        )
        if kubernetes
        else None
    )
    web = None
    if web_config_file is not None:
        from gpuscale.exporter.webconfig import load_web_config

        web = load_web_config(web_config_file)
    hostname = os.environ.get("NODE_NAME") or socket.gethostname()
    gpu_source, source_name = open_source(
        source,
        SimFleet(gpus, gpu_models, load, seed, tuple(fault or [])),
        hostname,
        amd_metrics_config,
        enable_slurm_scl,
    )
    # -d is dcgm-exporter's, so it selects NVIDIA entities; an AMD host exports every GPU.
    nvidia = gpu_source.vendor == "nvidia"
    keep = select_entities(device_spec, gpu_source.devices()) if nvidia else None

    pods: PodLookup | None = None
    mapper = None
    if kubernetes:
        from gpuscale.exporter.pods import PodMapper

        if resource_names:
            logger.warning(
                "--kubernetes-resource-name (GPUSCALE_KUBERNETES_RESOURCE_NAMES) is deprecated "
                "and stops working in the next release; use --nvidia-resource-names "
                "(NVIDIA_RESOURCE_NAMES)"
            )
        names = (
            *GPU_RESOURCES,
            *split_list(nvidia_resource_names),
            *(resource_names or []),
        )
        mapper = PodMapper(
            pod_resources_socket,
            resource_names=names,
            devices=gpu_source.devices(),
            on_refresh=None if meta is None else meta.update,
        )
        mapper.start()
        pods = mapper

    jobs = None
    if hpc_job_mapping_dir is not None:
        from gpuscale.exporter.hpc import JobMap

        jobs = JobMap(hpc_job_mapping_dir)
    style = LabelStyle(
        hostname_label=hostname_label.value,
        no_hostname=no_hostname,
        old_namespace=use_old_namespace,
        replace_blanks=replace_blanks_in_model_name,
    )

    def build(rows: tuple[Counter, ...]) -> SnapshotFamilies:
        return SnapshotFamilies(
            rows,
            pods=pods,
            xid_window_ms=xid_count_window_size,
            clock_window_ms=clock_events_count_window_size,
            style=style,
            keep=keep,
            jobs=jobs,
            shared=mapper if kubernetes_virtual_gpus else None,
            pod_meta=meta,
        )

    families = build(counters)
    sampler = Sampler(
        gpu_source,
        families,
        source_name=source_name.value,
        interval_s=collect_interval / 1000.0,
        timeout_s=None if collect_timeout is None else collect_timeout / 1000.0,
        xid_window_ms=xid_count_window_size,
    )
    sampler.collect_once()
    try:
        server = ExporterServer((host, port), sampler, web, listen_fd=listen_fd)
    except OSError as exc:
        raise ConfigError(f"--address {address!r}: cannot listen ({exc.strerror})") from exc
    host, port = str(server.server_address[0]), server.port
    sampler.start()
    scheme = "https" if web is not None and web.ssl_context else "http"
    logger.info(
        "serving %d GPUs from %s on %s://%s:%d/metrics",
        len(gpu_source.devices()),
        source_name.value,
        scheme,
        host,
        port,
    )
    server.serve_in_background()
    _serve_until_stopped(
        lambda: sampler.replace_families(build(_load_counters(collectors, configmap_data))),
        collectors if configmap_data == "none" else None,
    )
    logger.info("shutting down")
    server.shutdown()
    sampler.stop()
    if mapper is not None:
        mapper.stop()


def _pod_metadata(labels: bool, uid: bool, allow: list[str]) -> "PodMetadata | None":
    """Pod labels and UIDs from the API server, when asked for (checked before serving)."""
    if not labels and not uid:
        return None
    from gpuscale.exporter.configmap import in_cluster
    from gpuscale.exporter.podmeta import PodMetadata

    flag = "--kubernetes-enable-pod-labels" if labels else "--kubernetes-enable-pod-uid"
    try:
        api = in_cluster(flag)
    except ConfigError as exc:
        raise ConfigError(f"{exc}: the pod's labels and UID come from the Kubernetes API") from None
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request
    return PodMetadata(api, labels=labels, uid=uid, allow=allow)


def _load_counters(collectors: Path | None, configmap: str) -> tuple[Counter, ...]:
    """The counters: the ConfigMap when one is named (as upstream), else -f, else built in."""
    if configmap != "none":
        from gpuscale.exporter.configmap import parse_configmap_ref, read_configmap_counters

        logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request
        namespace, name = parse_configmap_ref(configmap)
        return parse_counters(read_configmap_counters(configmap), f"configmap {namespace}/{name}")
    return read_counters(collectors) if collectors else default_counters()


def _file_state(path: Path | None) -> tuple[int, int, int] | None:
    """What changes when the file is rewritten or a ConfigMap swaps its symlink."""
    try:
        st = path.stat() if path is not None else None
    except OSError:
        return None
    return None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size)


def _serve_until_stopped(reload: Callable[[], None], watched: Path | None) -> None:
    """Wait for SIGINT or SIGTERM; reload the counters on SIGHUP or when the file changes.

    dcgm-exporter 4.x reloads on both. A file that no longer parses is logged and the
    previous counters kept: a typo in a ConfigMap must not take the node's telemetry down.
    The file is checked every ``_WATCH_S`` seconds.
    """
    wake = threading.Event()
    stopping: list[bool] = []

    def stop(*_: object) -> None:
        stopping.append(True)
        wake.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    signal.signal(signal.SIGHUP, lambda *_: wake.set())
    seen = _file_state(watched)
    while True:
        hup = wake.wait(_WATCH_S if watched is not None else None)
        wake.clear()
        if stopping:
            return
        state = _file_state(watched)
        if not hup and (state is None or state == seen):
            continue
        seen = state
        why = "SIGHUP" if hup else f"{watched} changed"
        try:
            reload()
        except ConfigError as err:
            # A user's mistake: one line, no traceback.
            logger.error("%s: counters not reloaded, the previous ones stay in use: %s", why, err)  # noqa: TRY400
        else:
            logger.info("%s: counters file reloaded", why)


def register(app: typer.Typer) -> None:
    """Add the ``exporter`` command to ``app``."""
    app.command(
        "exporter",
        cls=DcgmCommand,
        context_settings={"help_option_names": ["-h", "--help"]},
    )(exporter)
