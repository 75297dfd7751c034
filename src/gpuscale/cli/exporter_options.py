"""The options of ``gpuscale exporter``: dcgm-exporter 4.x's, then the project's own.

Each option is an ``Annotated`` alias so the command's signature stays one line per
flag. Names, short forms, environment variables and defaults are dcgm-exporter
4.5.3-4.8.2's (``pkg/cmd/app.go``); ``GPUSCALE_*`` names follow as aliases. What
each does here, or why it is refused, is in ``gpuscale.cli.dcgm_flags``.
"""

from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated

import typer

from gpuscale.cli.dcgm_flags import env


class SourceName(StrEnum):
    """Telemetry backends: ``auto`` finds the real GPUs, ``sim`` simulates them."""

    auto = "auto"
    nvml = "nvml"
    amd = "amd"
    sim = "sim"


class GpuIdType(StrEnum):
    """How the device plugin names GPUs (``--kubernetes-gpu-id-type``)."""

    uid = "uid"
    device_name = "device-name"


class HostnameLabel(StrEnum):
    """Spelling of the host label."""

    Hostname = "Hostname"
    hostname = "hostname"


class LogFormat(StrEnum):
    """dcgm-exporter's ``--log-format`` values."""

    text = "text"
    json = "json"


DCGM_EXPORTER_COMPAT = "4.5.3-4.8.2"
"""The dcgm-exporter release whose command line, files and output this exporter follows."""


def show_version(value: bool) -> None:
    """``--version``: print ours and the dcgm-exporter release followed, then exit."""
    if value:
        try:
            ours = version("gpuscale")
        except PackageNotFoundError:
            ours = "unknown"
        typer.echo(
            f"gpuscale exporter version {ours} (dcgm-exporter {DCGM_EXPORTER_COMPAT} compatible)"
        )
        raise typer.Exit


CollectorsOpt = Annotated[
    Path | None,
    typer.Option(
        "--collectors",
        "-f",
        help="Counters file in dcgm-exporter's format (default: dcgm-exporter's own"
        " default-counters.csv, built in).",
        envvar=env("DCGM_EXPORTER_COLLECTORS", "GPUSCALE_COLLECTORS"),
    ),
]
AddressOpt = Annotated[
    str,
    typer.Option(
        "--address",
        "-a",
        help='Listen address as <HOST>:<PORT>; IPv6 as "[<ADDR>]:<PORT>".',
        envvar=env("DCGM_EXPORTER_LISTEN", "GPUSCALE_ADDRESS"),
    ),
]
CollectIntervalOpt = Annotated[
    int,
    typer.Option(
        "--collect-interval",
        "-c",
        min=10,
        help="Milliseconds between collects (dcgm-exporter's default is 30000; 1000 here,"
        " for scaling loops).",
        envvar=env("DCGM_EXPORTER_INTERVAL", "GPUSCALE_COLLECT_INTERVAL"),
    ),
]
KubernetesOpt = Annotated[
    bool,
    typer.Option(
        "--kubernetes/--no-kubernetes",
        "-k",
        help="Label series with the pod holding each GPU (kubelet pod-resources API);"
        " --kubernetes=true|false also works.",
        envvar=env("DCGM_EXPORTER_KUBERNETES", "GPUSCALE_KUBERNETES"),
    ),
]
UseOldNamespaceOpt = Annotated[
    bool,
    typer.Option(
        "--use-old-namespace/--no-use-old-namespace",
        "-o",
        help="dcgm-exporter 1.x label names: uuid, pod_name, pod_namespace, container_name.",
        envvar=env("DCGM_EXPORTER_USE_OLD_NAMESPACE"),
    ),
]
KubernetesGpuIdTypeOpt = Annotated[
    GpuIdType,
    typer.Option(
        "--kubernetes-gpu-id-type",
        help="How the device plugin names GPUs. Both are matched whichever is given.",
        envvar=env("DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE"),
    ),
]
DevicesOpt = Annotated[
    str,
    typer.Option(
        "--devices",
        "-d",
        help="NVIDIA entities to export: f (each GPU, or its MIG instances when it has"
        " some), g[:RANGE] (GPUs), i[:RANGE] (MIG instances), e.g. g:0,2-3.",
        envvar=env("DCGM_EXPORTER_DEVICES_STR", "GPUSCALE_DEVICES"),
    ),
]
NoHostnameOpt = Annotated[
    bool,
    typer.Option(
        "--no-hostname/--keep-hostname",
        "-n",
        help="Omit the host label, as older dcgm-exporter versions did.",
        envvar=env("DCGM_EXPORTER_NO_HOSTNAME", "GPUSCALE_NO_HOSTNAME"),
    ),
]
WebConfigFileOpt = Annotated[
    Path | None,
    typer.Option(
        help="TLS and basic-auth settings in the Prometheus exporter-toolkit format.",
        envvar=env("DCGM_EXPORTER_WEB_CONFIG_FILE", "GPUSCALE_WEB_CONFIG_FILE"),
    ),
]
XidCountWindowSizeOpt = Annotated[
    int,
    typer.Option(
        "--xid-count-window-size",
        "-x",
        min=1,
        help="Milliseconds of XID history counted in DCGM_EXP_XID_ERRORS_COUNT.",
        envvar=env("DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE", "GPUSCALE_XID_COUNT_WINDOW_SIZE"),
    ),
]
ReplaceBlanksInModelNameOpt = Annotated[
    bool,
    typer.Option(
        "--replace-blanks-in-model-name/--no-replace-blanks-in-model-name",
        "-rbmn",
        help="Write modelName with dashes for blanks (NVIDIA-H100-80GB-HBM3).",
        envvar=env("DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME"),
    ),
]
DebugOpt = Annotated[
    bool,
    typer.Option(
        "--debug/--no-debug",
        help="Log at debug level.",
        envvar=env("DCGM_EXPORTER_DEBUG"),
    ),
]
ClockEventsCountWindowSizeOpt = Annotated[
    int,
    typer.Option(
        "--clock-events-count-window-size",
        min=1,
        help="Milliseconds of clock-event history counted in DCGM_EXP_CLOCK_EVENTS_COUNT.",
        envvar=env("DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE"),
    ),
]
LogFormatOpt = Annotated[
    LogFormat | None,
    typer.Option(
        "--log-format",
        help="Log line format, text or json (default: gpuscale's --log-format).",
        envvar=env("DCGM_EXPORTER_LOG_FORMAT"),
    ),
]
PodResourcesSocketOpt = Annotated[
    str,
    typer.Option(
        "--pod-resources-kubelet-socket",
        help="Kubelet pod-resources socket.",
        envvar=env("DCGM_POD_RESOURCES_KUBELET_SOCKET", "GPUSCALE_POD_RESOURCES_SOCKET"),
    ),
]
HpcJobMappingDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--hpc-job-mapping-dir",
        help="Directory of per-GPU job files (named 0, 1 or 0.3 for a MIG instance, one"
        " job id a line): each series is written once per job with an hpc_job label.",
        envvar=env("DCGM_HPC_JOB_MAPPING_DIR"),
    ),
]
NvidiaResourceNamesOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--nvidia-resource-names",
        help="More device-plugin resource names to attribute, e.g. nvidia.com/a100"
        " (repeatable or comma-separated).",
        envvar=env("NVIDIA_RESOURCE_NAMES"),
    ),
]
WebSystemdSocketOpt = Annotated[
    bool,
    typer.Option(
        "--web-systemd-socket/--no-web-systemd-socket",
        help="Serve on the socket systemd passes (socket activation) instead of --address.",
        envvar=env("DCGM_EXPORTER_SYSTEMD_SOCKET"),
    ),
]
KubernetesVirtualGpusOpt = Annotated[
    bool,
    typer.Option(
        "--kubernetes-virtual-gpus/--no-kubernetes-virtual-gpus",
        help="With -k: a GPU shared by pods (time-slicing, MPS) is written once per pod, with a"
        " vgpu label for its replica.",
        envvar=env("KUBERNETES_VIRTUAL_GPUS"),
    ),
]
ConfigmapDataOpt = Annotated[
    str,
    typer.Option(
        "--configmap-data",
        "-m",
        help="ConfigMap <NAMESPACE>:<NAME> whose 'metrics' key is the counters file, read"
        " through the Kubernetes API with the pod's service account; wins over -f.",
        envvar=env("DCGM_EXPORTER_CONFIGMAP_DATA"),
    ),
]
KubernetesEnablePodLabelsOpt = Annotated[
    bool,
    typer.Option(
        "--kubernetes-enable-pod-labels/--no-kubernetes-enable-pod-labels",
        help="With -k: the holding pod's labels (names made Prometheus-safe) on its GPU's"
        " series, read from the Kubernetes API with the pod's service account.",
        envvar=env("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"),
    ),
]
KubernetesEnablePodUidOpt = Annotated[
    bool,
    typer.Option(
        "--kubernetes-enable-pod-uid/--no-kubernetes-enable-pod-uid",
        help="With -k: a pod_uid label, read from the Kubernetes API.",
        envvar=env("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID"),
    ),
]
KubernetesPodLabelAllowlistRegexOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--kubernetes-pod-label-allowlist-regex",
        help="With pod labels: keep only label keys one of these regexes matches"
        " (comma-separated; none: all). Environment: dcgm-exporter's name, too long to"
        " show here (docs/exporter.md).",
        envvar=env("DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"),
        show_envvar=False,
    ),
]
ShowVersionOpt = Annotated[
    bool,
    typer.Option(
        "--version",
        "-v",
        is_eager=True,
        callback=show_version,
        help="Print the version and the dcgm-exporter release it follows, then exit.",
    ),
]
SourceOpt = Annotated[
    SourceName,
    typer.Option(
        help="Telemetry backend: auto finds the real GPUs (NVML, then amdsmi) and refuses to"
        " start without them; nvml or amd names one; sim serves simulated GPUs.",
        envvar="GPUSCALE_SOURCE",
    ),
]
HostnameLabelOpt = Annotated[
    HostnameLabel,
    typer.Option(
        help="Spelling of the host label: Hostname (dcgm-exporter 4.x releases) or"
        " hostname (upstream's main branch after 4.5.3-4.8.2).",
        envvar="GPUSCALE_HOSTNAME_LABEL",
    ),
]
CollectTimeoutOpt = Annotated[
    int | None,
    typer.Option(
        min=10,
        help="Milliseconds before a collect is abandoned and counted (default: the interval).",
        envvar="GPUSCALE_COLLECT_TIMEOUT",
    ),
]
ResourceNamesOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--kubernetes-resource-name",
        help="Deprecated: use --nvidia-resource-names, which names the same thing.",
        envvar="GPUSCALE_KUBERNETES_RESOURCE_NAMES",
        hidden=True,
    ),
]
GpusOpt = Annotated[
    int,
    typer.Option(min=1, max=100_000, help="Simulated GPUs (sim only).", envvar="GPUSCALE_GPUS"),
]
GpuModelsOpt = Annotated[
    str,
    typer.Option(
        help="Comma-separated simulated models, cycled over the GPUs (sim only).",
        envvar="GPUSCALE_GPU_MODELS",
    ),
]
LoadOpt = Annotated[
    str,
    typer.Option(
        help="Simulated load: constant:0.7, sine[:mean:amp:period_s], trace:FILE (sim only).",
        envvar="GPUSCALE_LOAD",
    ),
]
SeedOpt = Annotated[int, typer.Option(help="Seed of the simulated fleet.", envvar="GPUSCALE_SEED")]
FaultOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="Inject a fault into a simulated GPU (sim only): KIND@SECONDS:gpu=N[:key=value],"
        " e.g. gpu-lost@60:gpu=3, xid@30:code=13:gpu=0, ecc-dbe@10:gpu=1,"
        " thermal@0:gpu=1:rise_c=35:duration=300, row-remap@5:gpu=2. Repeatable;"
        " the environment variable takes several, separated by spaces.",
        envvar="GPUSCALE_FAULTS",
    ),
]
