"""dcgm-exporter 4.x options that mean nothing here, or cannot: accepted, checked or refused.

A drop-in has to start from an unchanged DaemonSet, so each of these exists with
upstream's name, short form, environment variable and default. At that neutral
value it changes nothing. Options that only tune something absent here (DCGM's log
level, debug dumps) are checked as dcgm-exporter checks them, then ignored; options
that ask for something this exporter cannot do (a remote host engine, DRA claims,
Go's pprof) stop start-up with one line saying why and what to use instead.
"""

import re
from typing import Annotated

import typer

from gpuscale.cli.dcgm_flags import env, given, split_items, where
from gpuscale.errors import config_error

_INERT = "Accepted, no effect here"
DUMP_DIRECTORY = "/tmp/dcgm-exporter-debug"  # noqa: S108 - dcgm-exporter's default, never written

CpuDevicesOpt = Annotated[
    str,
    typer.Option(
        "--cpu-devices",
        "-p",
        help="CPUs to monitor (f, g[:RANGE], i[:RANGE]). There are no DCGM CPU entities"
        " here: only f is accepted.",
        envvar=env("DCGM_EXPORTER_CPU_DEVICES_STR"),
    ),
]
RemoteHostengineInfoOpt = Annotated[
    str | None,
    typer.Option(
        "--remote-hostengine-info",
        "-r",
        metavar="HOST:PORT",
        help="Remote DCGM host engine. Refused: there is no host engine, GPUs are read"
        " through NVML in this process.",
        envvar=env("DCGM_REMOTE_HOSTENGINE_INFO"),
    ),
]
SwitchDevicesOpt = Annotated[
    str,
    typer.Option(
        "--switch-devices",
        "-s",
        help="NvSwitches to monitor (same grammar as -d). There are no NvSwitch entities"
        " here: only f is accepted.",
        envvar=env("DCGM_EXPORTER_OTHER_DEVICES_STR"),
    ),
]
FakeGpusOpt = Annotated[
    bool,
    typer.Option(
        "--fake-gpus/--no-fake-gpus",
        help="DCGM's fake GPUs. Refused when true: use --source sim.",
        envvar=env("DCGM_EXPORTER_USE_FAKE_GPUS"),
    ),
]
EnableDcgmLogOpt = Annotated[
    bool,
    typer.Option(
        "--enable-dcgm-log/--no-enable-dcgm-log",
        help="DCGM's own log on stdout. Refused when true: there is no DCGM library.",
        envvar=env("DCGM_EXPORTER_ENABLE_DCGM_LOG"),
    ),
]
DcgmLogLevelOpt = Annotated[
    str,
    typer.Option(
        "--dcgm-log-level",
        help="DCGM log level (NONE, FATAL, ERROR, WARN, INFO, DEBUG, VERB); checked,"
        " only used with --enable-dcgm-log.",
        envvar=env("DCGM_EXPORTER_DCGM_LOG_LEVEL"),
    ),
]
DumpEnabledOpt = Annotated[
    bool,
    typer.Option(
        "--dump-enabled/--no-dump-enabled",
        help="File-based debug dumps. Refused when true.",
        envvar=env("DCGM_EXPORTER_DUMP_ENABLED"),
    ),
]
DumpDirectoryOpt = Annotated[
    str,
    typer.Option(help=f"Dump directory. {_INERT}.", envvar=env("DCGM_EXPORTER_DUMP_DIRECTORY")),
]
DumpRetentionOpt = Annotated[
    int,
    typer.Option(
        min=0,
        help=f"Dump retention, hours. {_INERT}.",
        envvar=env("DCGM_EXPORTER_DUMP_RETENTION"),
    ),
]
DumpCompressionOpt = Annotated[
    bool,
    typer.Option(
        "--dump-compression/--no-dump-compression",
        help=f"Gzip the dumps. {_INERT}.",
        envvar=env("DCGM_EXPORTER_DUMP_COMPRESSION"),
    ),
]
KubernetesEnableDraOpt = Annotated[
    bool,
    typer.Option(
        "--kubernetes-enable-dra/--no-kubernetes-enable-dra",
        help="DRA-claim labels. Refused when true: needs the Kubernetes API.",
        envvar=env("KUBERNETES_ENABLE_DRA"),
    ),
]
DisableStartupValidateOpt = Annotated[
    bool,
    typer.Option(
        "--disable-startup-validate/--no-disable-startup-validate",
        help=f"Skip DCGM's start-up checks. {_INERT}: there are none.",
        envvar=env("DISABLE_STARTUP_VALIDATE"),
    ),
]
EnableGpuBindUnbindWatchOpt = Annotated[
    bool,
    typer.Option(
        "--enable-gpu-bind-unbind-watch/--no-enable-gpu-bind-unbind-watch",
        help="Reload on GPU bind/unbind. Refused when true: needs DCGM 4.5.",
        envvar=env("DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH"),
    ),
]
GpuBindUnbindPollIntervalOpt = Annotated[
    str,
    typer.Option(
        "--gpu-bind-unbind-poll-interval",
        help=f"Go duration. {_INERT}.",
        envvar=env("DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL"),
    ),
]
EnablePprofOpt = Annotated[
    bool,
    typer.Option(
        "--enable-pprof/--no-enable-pprof",
        help="Go profiling endpoints. Refused when true.",
        envvar=env("DCGM_EXPORTER_ENABLE_PPROF"),
    ),
]


# option name -> (flag, the neutral value, why it cannot apply here, what to do instead)
REFUSED: dict[str, tuple[str, object, str, str]] = {
    "remote_hostengine_info": (
        "--remote-hostengine-info",
        None,
        "there is no DCGM host engine: gpuscale reads GPUs through NVML in this process",
        "remove it and run the exporter on the GPU node (a DaemonSet)",
    ),
    "kubernetes_enable_dra": (
        "--kubernetes-enable-dra",
        False,
        "DRA attribution needs the Kubernetes resource API, which the exporter does not read",
        "remove it; device-plugin pods are attributed with --kubernetes",
    ),
    "fake_gpus": (
        "--fake-gpus",
        False,
        "DCGM's injected fake GPUs do not exist without DCGM",
        "use --source sim for simulated GPUs",
    ),
    "enable_dcgm_log": (
        "--enable-dcgm-log",
        False,
        "there is no DCGM library whose log could be shown",
        "remove it; NVML errors are logged by the exporter (--debug for more)",
    ),
    "dump_enabled": (
        "--dump-enabled",
        False,
        "file-based debug dumps are not implemented",
        "remove it; --debug logs every collect",
    ),
    "enable_gpu_bind_unbind_watch": (
        "--enable-gpu-bind-unbind-watch",
        False,
        "it watches DCGM 4.5 bind events, and there is no DCGM here",
        "remove it; restart the exporter after adding GPUs",
    ),
    "enable_pprof": (
        "--enable-pprof",
        False,
        "pprof profiles Go programs, and this exporter is Python",
        "remove it; use py-spy against the process to profile it",
    ),
}


def refuse(ctx: typer.Context, values: dict[str, object]) -> None:
    """Refuse, in one line, the first option set to a value that cannot apply here.

    Raises:
        ConfigError: Naming the flag or environment variable, why, and what to do.
    """
    for name, (flag, neutral, why, fix) in REFUSED.items():
        value = values[name]
        if given(ctx, name) and value != neutral and value is not None:
            raise config_error(where(ctx, name, flag, value), why, fix)


_DCGM_LOG_LEVELS = ("NONE", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "VERB")
_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")


def check_inert(ctx: typer.Context, values: dict[str, object]) -> None:
    """Validate options that are accepted but change nothing here, as dcgm-exporter would.

    Raises:
        ConfigError: A value dcgm-exporter itself would refuse.
    """
    level = str(values["dcgm_log_level"])
    if level not in _DCGM_LOG_LEVELS:
        raise config_error(
            where(ctx, "dcgm_log_level", "--dcgm-log-level", level),
            "not a DCGM log level",
            f"use one of {', '.join(_DCGM_LOG_LEVELS)}",
        )
    interval = str(values["gpu_bind_unbind_poll_interval"])
    if not _DURATION.match(interval):
        raise config_error(
            where(
                ctx, "gpu_bind_unbind_poll_interval", "--gpu-bind-unbind-poll-interval", interval
            ),
            "not a duration",
            "use Go's duration syntax, e.g. 1s or 500ms",
        )
    for pattern in split_items(values["kubernetes_pod_label_allowlist_regex"]):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise config_error(
                where(
                    ctx,
                    "kubernetes_pod_label_allowlist_regex",
                    "--kubernetes-pod-label-allowlist-regex",
                    pattern,
                ),
                f"not a regular expression ({exc})",
                "fix the pattern",
            ) from None
