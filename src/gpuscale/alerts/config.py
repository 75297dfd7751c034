"""Settings of the alert catalogue, read from a YAML file and checked before anything renders.

Every threshold, window, ``for:`` duration and severity in the catalogue comes
from here, so operators tune the rules to their fleet without editing PromQL.
A mistake in the file ends with one line naming the file, the line, the key
path and what is wrong, the way every other gpuscale input does.
"""

import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from gpuscale.errors import ConfigError, config_error, require
from gpuscale.inputs import file_where, load_yaml, read_text_file

Severity = Literal["critical", "warning", "info"]

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_UNITS_S = (86_400, 3_600, 60, 1)


def duration_seconds(text: str) -> int:
    """Seconds in a Prometheus duration such as ``5m`` or ``1h30m``.

    Returns:
        Whole seconds, 0 for ``0s``.

    Raises:
        ValueError: ``text`` is not a duration in d, h, m and s.
    """
    match = _DURATION.fullmatch(text)
    if not text or match is None:
        msg = f"{text!r} is not a duration such as 30s, 5m, 1h or 1h30m"
        raise ValueError(msg)
    return sum(int(part or 0) * unit for part, unit in zip(match.groups(), _UNITS_S, strict=True))


def _check_duration(text: str) -> str:
    duration_seconds(text)
    return text


Duration = Annotated[str, AfterValidator(_check_duration)]
"""A Prometheus duration, kept as text so the rendered file shows what the user wrote."""
Share = Annotated[float, Field(ge=0.0, le=1.0)]


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class AlertSettings(_Settings):
    """What every alert takes: on or off, how long it must hold, and how loud it is."""

    enabled: bool = True
    for_: Duration = Field(default="0s", alias="for")
    severity: Severity = "warning"


class FellOffBus(AlertSettings):
    """``GpuFellOffBus``: ``vanished_window`` is how long a vanished GPU's series is remembered."""

    for_: Duration = Field(default="0s", alias="for")
    severity: Severity = "critical"
    vanished_window: Duration = "1h"


class XidError(AlertSettings):
    """``GpuXidError``: codes with an alert of their own are excluded; some are critical."""

    exclude_codes: tuple[int, ...] = (48, 64, 79)
    critical_codes: tuple[int, ...] = (61, 62, 74, 95, 119, 120)


class Counted(AlertSettings):
    """An alert on any increase of an error counter over ``window``."""

    severity: Severity = "critical"
    window: Duration = "10m"


class ShareOfTime(AlertSettings):
    """An alert on the share of time (0 to 1) a clock limit held the GPU down over ``window``."""

    threshold: Share = 0.05
    window: Duration = "5m"


class TemperatureHigh(AlertSettings):
    """``GpuTemperatureHigh``: die temperature above ``threshold`` Celsius for ``for``."""

    for_: Duration = Field(default="1m", alias="for")
    threshold: float = 85.0


class MemoryNearFull(AlertSettings):
    """``GpuMemoryNearFull``: framebuffer use above ``threshold`` (0 to 1)."""

    for_: Duration = Field(default="10m", alias="for")
    threshold: Share = 0.95


class ThermalThrottling(ShareOfTime):
    """``GpuThermalThrottling``: clocks held down by temperature over ``threshold`` of the time."""

    for_: Duration = Field(default="2m", alias="for")


class PowerCapped(ShareOfTime):
    """``GpuPowerCapped``: held at the power limit over ``threshold`` of a ``window``.

    Any such ``window`` in the last ``dip_window`` counts, so a load lull does not restart ``for``.
    """

    for_: Duration = Field(default="15m", alias="for")
    severity: Severity = "info"
    threshold: Share = 0.5
    window: Duration = "1m"
    dip_window: Duration = "5m"


class RowRemapFailure(AlertSettings):
    """``GpuRowRemapFailure``: a failed row remap (the GPU needs service)."""

    severity: Severity = "critical"


class Idle(AlertSettings):
    """``GpuIdleWhileAllocated``: utilization at or below ``threshold`` (0 to 1) for ``for``."""

    for_: Duration = Field(default="1h", alias="for")
    severity: Severity = "info"
    threshold: Share = 0.01


class Straggler(AlertSettings):
    """``GpuStraggler``: SM clock below ``threshold`` of its model's median while busy.

    Busy is ``min_utilization`` or more; the last busy comparison stands for ``dip_window``.
    """

    for_: Duration = Field(default="5m", alias="for")
    threshold: Share = 0.75
    min_utilization: Share = 0.3
    dip_window: Duration = "5m"


class ZScore(AlertSettings):
    """Mean temperature over ``recent`` against its own ``window`` of history ending ``gap`` ago.

    Fires above ``threshold`` standard deviations and ``min_rise_c`` Celsius.
    """

    for_: Duration = Field(default="1m", alias="for")
    threshold: float = Field(default=2.0, gt=0)
    min_rise_c: float = Field(default=10.0, ge=0)
    recent: Duration = "30s"
    window: Duration = "1h"
    gap: Duration = "10m"


class RisingFast(AlertSettings):
    """The mean temperature over ``window`` against the one before, in Celsius per second.

    ``window`` should span several periods of the load's swing, so the means cancel it.
    """

    for_: Duration = Field(default="0s", alias="for")
    threshold: float = Field(default=0.01, gt=0)
    window: Duration = "10m"


class ExporterDown(AlertSettings):
    """``GpuExporterDown``: the scrape of a GPU exporter fails."""

    for_: Duration = Field(default="2m", alias="for")
    severity: Severity = "critical"


class Stale(AlertSettings):
    """``GpuMetricsStale``: values older than ``threshold`` seconds, or frozen over ``window``.

    ``window`` must exceed the exporter's update interval (dcgm-exporter: 30 s) plus a scrape.
    """

    for_: Duration = Field(default="2m", alias="for")
    threshold: float = Field(default=60.0, gt=0)
    window: Duration = "45s"


class Alerts(_Settings):
    """Settings per alert, under the alert's name."""

    GpuFellOffBus: FellOffBus = FellOffBus()
    GpuXidError: XidError = XidError()
    GpuEccDoubleBitError: Counted = Counted()
    GpuRowRemapFailure: RowRemapFailure = RowRemapFailure()
    GpuThermalThrottling: ThermalThrottling = ThermalThrottling()
    GpuPowerCapped: PowerCapped = PowerCapped()
    GpuTemperatureHigh: TemperatureHigh = TemperatureHigh()
    GpuMemoryNearFull: MemoryNearFull = MemoryNearFull()
    GpuIdleWhileAllocated: Idle = Idle()
    GpuStraggler: Straggler = Straggler()
    GpuTemperatureAnomaly: ZScore = ZScore()
    GpuTemperatureRisingFast: RisingFast = RisingFast()
    GpuExporterDown: ExporterDown = ExporterDown()
    GpuMetricsStale: Stale = Stale()


class BurnWindow(_Settings):
    """One multi-window burn-rate alert: both windows burn faster than ``factor``."""

    long: Duration
    short: Duration
    factor: float = Field(gt=0)
    severity: Severity = "critical"
    for_: Duration = Field(default="2m", alias="for")


class Slo(_Settings):
    """A request SLI of a scaled workload: ``good`` and ``total`` are counter selectors.

    The error ratio over a window is ``1 - rate(good) / rate(total)``, summed by ``by``.
    """

    name: Annotated[str, Field(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")]
    objective: float = Field(gt=0.0, lt=1.0)
    good: str
    total: str
    by: tuple[str, ...] = ()


# Google SRE workbook, chapter "Alerting on SLOs", multiwindow multi-burn-rate table:
# 2 % of a 30-day budget in 1 h is a burn rate of 14.4, 5 % in 6 h is 6.
DEFAULT_BURN_WINDOWS = (
    BurnWindow(long="1h", short="5m", factor=14.4),
    BurnWindow.model_validate({"long": "6h", "short": "30m", "factor": 6.0, "for": "5m"}),
)
# vLLM's TTFT histogram has a 2.5 s bucket; a request with a slower first token is an error.
DEFAULT_SLOS = (
    Slo(
        name="ttft",
        objective=0.99,
        good='vllm:time_to_first_token_seconds_bucket{le="2.5"}',
        total="vllm:time_to_first_token_seconds_count",
        by=("namespace", "model_name"),
    ),
)


class AlertConfig(_Settings):
    """The whole settings file; every key is optional.

    Attributes:
        exporter_job: Regular expression of the scrape jobs of GPU exporters.
        violation_unit: What one count of DCGM's ``*_VIOLATION`` counters is: ``ns``
            (what DCGM reports and dcgm-exporter 4.x and gpuscale's exporter serve) or
            ``us`` (for exporters that scaled the counters to microseconds).
        runbook_url: Base URL of the runbooks; each alert links ``URL#alertname`` in lower case.
        labels: Extra labels put on every alert (a team, a route).
        interval: Evaluation interval of every group; None keeps Prometheus's global one.
        alerts: Settings per alert.
        slos: SLIs of the scaled workloads, each with burn-rate alerts.
        burn_windows: The window pairs and burn factors of those alerts.
    """

    exporter_job: str = "dcgm-exporter|gpuscale-exporter"
    violation_unit: Literal["us", "ns"] = "ns"
    runbook_url: str = "https://github.com/gpuscale/gpuscale/blob/main/docs/alerts.md"
    labels: dict[str, str] = {}
    interval: Duration | None = None
    alerts: Alerts = Alerts()
    slos: tuple[Slo, ...] = DEFAULT_SLOS
    burn_windows: tuple[BurnWindow, ...] = DEFAULT_BURN_WINDOWS


def _lines(node: yaml.Node) -> dict[str, int]:
    """Each dotted key path (list items by index) to its 1-based line."""
    lines: dict[str, int] = {}
    pending: list[tuple[str, yaml.Node]] = [("", node)]
    while pending:
        prefix, current = pending.pop()
        if isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                dotted = f"{prefix}{key.value}"
                lines.setdefault(dotted, key.start_mark.line + 1)
                pending.append((f"{dotted}.", value))
        elif isinstance(current, yaml.SequenceNode):
            for i, item in enumerate(current.value):
                lines.setdefault(f"{prefix}{i}", item.start_mark.line + 1)
                pending.append((f"{prefix}{i}.", item))
    return lines


def _where(path: Path, lines: dict[str, int], key: str) -> str:
    """``file:line key`` for the deepest part of ``key`` the file has a line for."""
    parts = key.split(".")
    line = next(
        (lines[k] for k in (".".join(parts[:n]) for n in range(len(parts), 0, -1)) if k in lines),
        None,
    )
    return f"{path}{'' if line is None else f':{line}'}{' ' if key else ''}{key}"


def parse_config(text: str, path: Path) -> AlertConfig:
    """Validate the YAML text of a settings file.

    Args:
        text: The file's text.
        path: The file, for messages.

    Returns:
        The settings, defaults filled in.

    Raises:
        ConfigError: ``<path>:<line> <key.path>: <why>; <what to do>``.
    """
    documents = load_yaml(text, file_where(path))
    require(len(documents) <= 1, str(path), "holds several YAML documents", "keep one")
    data, node = documents[0] if documents else (None, None)
    lines = {} if node is None else _lines(node)
    require(
        data is None or isinstance(data, dict),
        str(path),
        "is not a mapping",
        "write `key: value` lines at the top level",
    )
    try:
        return AlertConfig.model_validate(data or {})
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(part) for part in err["loc"])
        if err["type"] == "extra_forbidden":
            return _unknown(path, lines, key)
        problem = " ".join(str(err["msg"]).split()).removeprefix("Value error, ")
        fix = "see docs/alerts.md for the keys and their defaults"
        raise config_error(
            _where(path, lines, key), problem[:1].lower() + problem[1:], fix
        ) from None


def _unknown(path: Path, lines: dict[str, int], key: str) -> AlertConfig:
    """Raise the error for an unknown key, listing the keys its section takes."""
    parent = key.rpartition(".")[0]
    section: type[BaseModel] = AlertConfig
    for part in parent.split(".") if parent else ():
        field = section.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            section = annotation
        else:
            break
    valid = ", ".join(f.alias or name for name, f in section.model_fields.items())
    raise config_error(
        _where(path, lines, key), "unknown key", f"remove it or fix its spelling (valid: {valid})"
    )


def load_config(path: Path | None) -> AlertConfig:
    """Read the settings file at ``path``; None gives the defaults.

    Returns:
        The settings.

    Raises:
        ConfigError: The file cannot be read or is not valid (one line, see ``parse_config``).
    """
    if path is None:
        return AlertConfig()
    text = read_text_file(path, "--config")
    return parse_config(text, path)


__all__ = ["AlertConfig", "AlertSettings", "ConfigError", "Severity", "load_config"]


def default_settings_yaml() -> str:
    """The settings file with every key at its default, to copy and edit.

    Returns:
        YAML text that ``parse_config`` reads back to ``AlertConfig()``.
    """
    data = AlertConfig().model_dump(by_alias=True, mode="json")
    header = "# gpuscale alert settings, every key at its default (docs/alerts.md).\n"
    return header + yaml.safe_dump(data, sort_keys=False)
