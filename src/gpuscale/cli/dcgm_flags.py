"""dcgm-exporter 4.x's command line, as ``gpuscale exporter`` accepts it.

A drop-in must start from an unchanged DaemonSet: every flag and environment
variable of dcgm-exporter 4.5's ``--help`` exists here with the same long name,
short form, value syntax and precedence (command line over environment over
default). dcgm-exporter parses booleans the Go way, so ``--kubernetes``,
``--kubernetes=true`` and ``-k=false`` all work, and ``DCGM_EXPORTER_KUBERNETES``
takes ``true``/``false``/``1``/``0``. Click has no ``--flag=value`` for
booleans, so ``DcgmCommand`` rewrites those words before Click parses them.

Each option whose meaning exists here is implemented by the exporter; the rest
(a remote host engine, DCGM's own log, DRA, pprof ...) are accepted at their
neutral value and refused with one line saying why otherwise (``refusals``).
The project's own ``GPUSCALE_*`` variables stay as aliases, read after the
``DCGM_*`` name.
"""

import re
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperCommand

from gpuscale.errors import ConfigError, config_error

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # Go's strconv.ParseBool
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_ASSIGNED = re.compile(r"^(-{1,2}[A-Za-z][A-Za-z0-9-]*)=(.*)$")


def parse_go_bool(text: str, where: str) -> bool:
    """Parse a boolean as dcgm-exporter (Go's ``strconv.ParseBool``) does.

    Raises:
        ConfigError: Not one of 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False.
    """
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise config_error(where, f"{text!r} is not a boolean", "use true or false")


class DcgmCommand(TyperCommand):
    """A Typer command that also takes ``--flag=true|false`` for its boolean flags."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # noqa: ANN401 - Click's context
        """Rewrite ``--flag=VALUE`` of boolean flags to ``--flag`` or ``--no-flag``, then parse."""
        flags: dict[str, tuple[str, str]] = {}
        for param in self.params:
            if getattr(param, "is_bool_flag", False) and getattr(param, "secondary_opts", None):
                on = next(o for o in param.opts if o.startswith("--"))
                for name in param.opts:
                    flags[name] = (on, param.secondary_opts[0])
        rewritten: list[str] = []
        for i, arg in enumerate(args):
            if arg == "--":
                rewritten.extend(args[i:])
                break
            match = _ASSIGNED.match(arg)
            if match is None or match[1] not in flags:
                rewritten.append(arg)
                continue
            on, off = flags[match[1]]
            rewritten.append(on if parse_go_bool(match[2], arg) else off)
        return super().parse_args(ctx, rewritten)


def env(*names: str) -> list[str]:
    """The environment variables of one option: dcgm-exporter's first, then ours."""
    return list(names)


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the user set an option (command line or environment), not its default."""
    source = ctx.get_parameter_source(name)
    # Typer bundles its own click, so compare the enum by name, not by class.
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def where(ctx: typer.Context, name: str, flag: str, value: object) -> str:
    """``--flag VALUE`` or ``ENV=VALUE``: the input a message is about, as the user gave it."""
    import os

    source = ctx.get_parameter_source(name)
    if source is not None and source.name == "ENVIRONMENT":
        param = next(p for p in ctx.command.params if p.name == name)
        envvars = param.envvar if isinstance(param.envvar, list | tuple) else [param.envvar]
        var = next((str(v) for v in envvars if v and str(v) in os.environ), None)
        if var is not None:
            return f"{var}={os.environ[var]}"
    shown = str(value).lower() if isinstance(value, bool) else repr(value)
    return f"{flag} {shown}" if not isinstance(value, bool) else f"{flag}={shown}"


# option name -> (flag, the neutral value, why it cannot apply here, what to do instead)
REFUSED: dict[str, tuple[str, object, str, str]] = {
    "remote_hostengine_info": (
        "--remote-hostengine-info",
        None,
        "there is no DCGM host engine: gpuscale reads GPUs through NVML in this process",
        "remove it and run the exporter on the GPU node (a DaemonSet)",
    ),
    "configmap_data": (
        "--configmap-data",
        "none",
        "reading the counters file from a ConfigMap through the Kubernetes API is not supported",
        "mount the ConfigMap as a file and pass -f PATH",
    ),
    "kubernetes_enable_pod_labels": (
        "--kubernetes-enable-pod-labels",
        False,
        "pod labels need the Kubernetes API, and the exporter reads only the kubelet",
        "remove it; join kube_pod_labels from kube-state-metrics in PromQL instead",
    ),
    "kubernetes_enable_pod_uid": (
        "--kubernetes-enable-pod-uid",
        False,
        "the kubelet pod-resources API does not give pod UIDs",
        "remove it; join kube_pod_info from kube-state-metrics on pod and namespace",
    ),
    "kubernetes_virtual_gpus": (
        "--kubernetes-virtual-gpus",
        False,
        "per-replica vgpu series for shared GPUs are not implemented",
        "remove it; time-sliced replicas are attributed to their GPU's pod",
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
    "web_systemd_socket": (
        "--web-systemd-socket",
        False,
        "systemd socket activation is not implemented",
        "remove it and give the address with -a",
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
    for pattern in _split(values["kubernetes_pod_label_allowlist_regex"]):
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


def _split(value: object) -> list[str]:
    """A string-slice option's items: repeated flags, each comma-separated, as urfave/cli."""
    items = value if isinstance(value, list | tuple) else [] if value is None else [value]
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]


def split_list(value: Sequence[str] | None) -> list[str]:
    """Public form of ``_split`` for list options (resource names, regexes)."""
    return _split(list(value) if value is not None else None)


__all__ = [
    "REFUSED",
    "ConfigError",
    "DcgmCommand",
    "check_inert",
    "env",
    "given",
    "parse_go_bool",
    "refuse",
    "split_list",
    "where",
]
