"""device-metrics-exporter's ``config.json`` (``--amd-metrics-config``): keys that shape AMD series.

A node that runs AMD's exporter has its configuration in one JSON file
(``/etc/metrics/config.json`` by default, a ConfigMap under the GPU operator),
read with ``--amd-metrics-config``. To be a drop-in, ``gpuscale exporter
--source amd`` reads the same file with the same keys and values:

- ``GPUConfig.CustomLabels``: up to 10 labels, names lower-cased, on every series
  (``CLUSTER_NAME`` becomes ``cluster_name``, the dashboards' first variable); a
  name that is one of the exporter's own labels is refused.
- ``GPUConfig.Fields``: the series to export (upper-case names, ``GPU_PACKAGE_POWER``);
  empty means all.
- ``GPUConfig.Labels``: the exporter's labels. The mandatory ones are always set,
  and gpuscale always adds the five static optional ones (``GPU_UUID``,
  ``CARD_SERIES``, ``CARD_VENDOR``, ``DRIVER_VERSION``, ``VBIOS_VERSION``);
  ``KFD_PROCESS_ID`` (a pid: unbounded) and ``POD_UUID`` (needs the API server)
  are refused with the reason.
- ``GPUConfig.ProfilerMetrics`` (``{"all": true}`` or per host name, the host name
  first) turns the ``gpu_prof_*`` profiler on; ``GPUConfig.ProfilerConfig``
  (``SamplingInterval`` in us, at least 1000; ``PtlDelay`` in ms) sets how rocpctl runs.
- ``ServerPort``, ``CommonConfig`` logging/health/debug and ``NICConfig`` /
  ``IFOEConfig`` are other parts of AMD's agent (``--address`` sets the port here);
  they are accepted and have no effect. A non-empty ``CommonConfig.MetricsFieldPrefix``,
  ``GPUConfig.ExtraPodLabels``, ``Selector`` or a non-zero ``HealthThresholds`` value
  is refused, each with its reason, rather than silently ignored.
"""

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscale.errors import config_error, require
from gpuscale.fields.amd import AMD_FIELDS, AMD_LABELS, NODE_GPUS
from gpuscale.telemetry.amd_prof import MIN_SAMPLING_US, ProfilerSettings

DEFAULT_PATH = Path("/etc/metrics/config.json")
"""Where device-metrics-exporter looks when ``--amd-metrics-config`` is not given."""
MAX_CUSTOM_LABELS = 10
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_REFUSED_LABELS = {
    "KFD_PROCESS_ID": "its value is a process id, an unbounded label gpuscale never sets",
    "POD_UUID": "pod UIDs come from the Kubernetes API, which --source amd does not read",
}
_INERT_TOP = ("ServerPort", "CommonConfig", "NICConfig", "IFOEConfig")


@dataclass(frozen=True, slots=True)
class AmdConfig:
    """What ``config.json`` asks of the AMD series.

    Attributes:
        custom_labels: ``(name, value)`` pairs put on every series, names lower case.
        fields: Series names to export; None exports every one.
        profiler: How to run rocpctl, or None when ``ProfilerMetrics`` leaves it off.
    """

    custom_labels: tuple[tuple[str, str], ...] = ()
    fields: frozenset[str] | None = None
    profiler: ProfilerSettings | None = None


def load_amd_config(path: Path, hostname: str) -> AmdConfig:
    """Read and check a device-metrics-exporter ``config.json``.

    Args:
        path: The file.
        hostname: This node's name, for per-host ``ProfilerMetrics`` entries.

    Returns:
        The parsed configuration.

    Raises:
        ConfigError: The file cannot be read, is not JSON, or asks for what gpuscale
            cannot do; the message names the file and key.
    """
    try:
        text = path.read_text()
    except OSError as err:
        raise config_error(
            f"--amd-metrics-config {path}", f"cannot read it ({err.strerror})", "fix the path"
        ) from None
    return parse_amd_config(text, str(path), hostname)


def parse_amd_config(text: str, where: str, hostname: str) -> AmdConfig:
    """Parse the text of a ``config.json``; see ``load_amd_config``.

    Raises:
        ConfigError: See ``load_amd_config``.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise config_error(
            f"{where}:{err.lineno}", f"not JSON ({err.msg})", "fix the syntax"
        ) from None
    require(isinstance(doc, dict), where, "is not a JSON object", "give a config.json object")
    unknown = sorted(set(doc) - {"GPUConfig", *_INERT_TOP})
    require(
        not unknown,
        f"{where} {', '.join(unknown)}",
        "unknown key",
        "use device-metrics-exporter's keys (GPUConfig, CommonConfig, ServerPort ...)",
    )
    common = _section(doc, "CommonConfig", where)
    prefix = common.get("MetricsFieldPrefix") or ""
    require(
        not prefix,
        f"{where} CommonConfig.MetricsFieldPrefix={prefix!r}",
        "gpuscale serves the unprefixed names",
        "remove it and leave the dashboards' g_metrics_prefix empty",
    )
    gpu = _section(doc, "GPUConfig", where)
    _refuse_unsupported(gpu, where)
    return AmdConfig(
        custom_labels=_custom_labels(gpu, where),
        fields=_fields(gpu, where),
        profiler=_profiler(gpu, where, hostname),
    )


def _section(doc: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = doc.get(key) or {}
    require(isinstance(value, dict), f"{where} {key}", "is not an object", "give a JSON object")
    return value


def _refuse_unsupported(gpu: dict[str, Any], where: str) -> None:
    extra = gpu.get("ExtraPodLabels") or {}
    require(
        not extra,
        f"{where} GPUConfig.ExtraPodLabels",
        "pod labels come from the Kubernetes API, which --source amd does not read",
        "remove it",
    )
    selector = gpu.get("Selector") or ""
    require(
        not selector,
        f"{where} GPUConfig.Selector={selector!r}",
        "gpuscale exports every AMD GPU of the node",
        "remove it",
    )
    thresholds = gpu.get("HealthThresholds") or {}
    raised = sorted(k for k, v in thresholds.items() if v not in (0, "", None, "0"))
    require(
        not raised,
        f"{where} GPUConfig.HealthThresholds.{','.join(raised)}",
        "gpuscale's gpu_health uses upstream's default thresholds (0)",
        "remove the entry or set it to 0",
    )
    for label in gpu.get("Labels") or []:
        name = str(label).upper()
        if name in _REFUSED_LABELS:
            raise config_error(
                f"{where} GPUConfig.Labels {name}", _REFUSED_LABELS[name], "remove it"
            )
        known = name.lower() in AMD_LABELS or name == "CLUSTER_NAME"
        require(
            known,
            f"{where} GPUConfig.Labels {name}",
            "not a label of device-metrics-exporter",
            f"use some of {', '.join(n.upper() for n in AMD_LABELS)}",
        )


def _custom_labels(gpu: dict[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    custom = gpu.get("CustomLabels") or {}
    require(
        isinstance(custom, dict),
        f"{where} GPUConfig.CustomLabels",
        "is not an object",
        'give {"NAME": "value"}',
    )
    require(
        len(custom) <= MAX_CUSTOM_LABELS,
        f"{where} GPUConfig.CustomLabels",
        f"{len(custom)} labels, device-metrics-exporter allows {MAX_CUSTOM_LABELS}",
        "drop some",
    )
    out = []
    for key, value in custom.items():
        name = str(key).lower()
        require(
            bool(_LABEL_NAME.fullmatch(name)) and not name.startswith("__"),
            f"{where} GPUConfig.CustomLabels.{key}",
            "not a Prometheus label name",
            "use letters, digits and underscores",
        )
        require(
            name not in AMD_LABELS,
            f"{where} GPUConfig.CustomLabels.{key}",
            "is one of the exporter's own labels, which a custom label cannot set",
            "pick another name",
        )
        out.append((name, str(value)))
    return tuple(out)


def _fields(gpu: dict[str, Any], where: str) -> frozenset[str] | None:
    listed = [str(f).lower() for f in gpu.get("Fields") or []]
    if not listed:
        return None
    # Upstream lists fields gpuscale does not serve (NIC, CPER, XGMI counters ...):
    # those stay off; a name no exporter has is a typo.
    bad = [f for f in listed if not f.startswith(("gpu_", "pcie_", "xgmi_"))]
    require(
        not bad,
        f"{where} GPUConfig.Fields {bad[0].upper() if bad else ''}",
        "not a device-metrics-exporter GPU field",
        "use names from its metrics list, e.g. GPU_PACKAGE_POWER",
    )
    return frozenset(f for f in listed if f in AMD_FIELDS) | {NODE_GPUS}


def _profiler(gpu: dict[str, Any], where: str, hostname: str) -> ProfilerSettings | None:
    toggles = gpu.get("ProfilerMetrics") or {}
    require(
        isinstance(toggles, dict),
        f"{where} GPUConfig.ProfilerMetrics",
        "is not an object",
        'give {"all": true} or {"<hostname>": true}',
    )
    enabled = toggles.get(hostname, toggles.get("all", False))
    require(
        isinstance(enabled, bool),
        f"{where} GPUConfig.ProfilerMetrics",
        f"{enabled!r} is not true or false",
        "give a boolean",
    )
    settings = gpu.get("ProfilerConfig") or {}
    interval = settings.get("SamplingInterval", MIN_SAMPLING_US) or MIN_SAMPLING_US
    delay = settings.get("PtlDelay", 0) or 0
    require(
        isinstance(interval, int) and interval >= MIN_SAMPLING_US,
        f"{where} GPUConfig.ProfilerConfig.SamplingInterval={interval!r}",
        f"the sampling window is microseconds, at least {MIN_SAMPLING_US}",
        f"give {MIN_SAMPLING_US} or more",
    )
    require(
        isinstance(delay, int) and delay >= 0,
        f"{where} GPUConfig.ProfilerConfig.PtlDelay={delay!r}",
        "not a number of milliseconds",
        "give 0 or more",
    )
    if not enabled:
        return None
    return ProfilerSettings(sampling_interval_us=interval, ptl_delay_ms=delay)
