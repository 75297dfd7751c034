"""Settings of the alert catalogue, read from a YAML file and checked before anything renders.

Every threshold, window, ``for:`` duration and severity in the catalogue comes
from here, so operators tune the rules to their fleet without editing PromQL.
A mistake in the file ends with one line naming the file, the line, the key
path and what is wrong, the way every other gpuscale input does.
"""

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, BaseModel, Field, ValidationError

from gpuscale.alerts.alert_settings import (
    Alerts,
    AlertSettings,
    Duration,
    Settings,
    Severity,
    Window,
)
from gpuscale.alerts.promql_text import (
    check_label_name,
    check_regex,
    check_selector,
    check_template_free,
    duration_seconds,
)
from gpuscale.alerts.resource import ResourceMetadata
from gpuscale.errors import ConfigError, config_error, require
from gpuscale.inputs import file_where, load_yaml, read_text_file
from gpuscale.metrics.serving_stacks import VLLM, VLLM_TTFT

LabelName = Annotated[str, AfterValidator(check_label_name)]
LabelValue = Annotated[str, AfterValidator(check_template_free)]
Regex = Annotated[str, AfterValidator(check_regex)]
Selector = Annotated[str, AfterValidator(check_selector)]


class BurnWindow(Settings):
    """One multi-window burn-rate alert: both windows burn faster than ``factor``."""

    long: Window
    short: Window
    factor: float = Field(gt=0)
    severity: Severity = "critical"
    for_: Duration = Field(default="2m", alias="for")


class Slo(Settings):
    """A request SLI of a scaled workload: ``good`` and ``total`` are counter selectors.

    The error ratio over a window is ``1 - rate(good) / rate(total)``, summed by ``by``.
    """

    name: Annotated[str, Field(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")]
    objective: float = Field(gt=0.0, lt=1.0)
    good: Selector
    total: Selector
    by: tuple[LabelName, ...] = ()


def _unique_names(slos: tuple[Slo, ...]) -> tuple[Slo, ...]:
    names = [s.name for s in slos]
    if len(set(names)) < len(names):
        msg = "names an SLO twice; its records and alerts would collide"
        raise ValueError(msg)
    return slos


def _distinct_alerts(windows: tuple[BurnWindow, ...]) -> tuple[BurnWindow, ...]:
    # An alert's identity is its labels: long_window and severity (and the SLO).
    keys = [(duration_seconds(w.long), w.severity) for w in windows]
    if len(set(keys)) < len(keys):
        msg = "holds two windows with the same long window and severity (the same alert)"
        raise ValueError(msg)
    return windows


Slos = Annotated[tuple[Slo, ...], AfterValidator(_unique_names)]
BurnWindows = Annotated[tuple[BurnWindow, ...], AfterValidator(_distinct_alerts)]


# Google SRE workbook, chapter "Alerting on SLOs", multiwindow multi-burn-rate table:
# 2 % of a 30-day budget in 1 h is a burn rate of 14.4, 5 % in 6 h is 6.
DEFAULT_BURN_WINDOWS = (
    BurnWindow(long="1h", short="5m", factor=14.4),
    BurnWindow.model_validate({"long": "6h", "short": "30m", "factor": 6.0, "for": "5m"}),
)
# vLLM's TTFT histogram has a 2.5 s bucket; a request with a slower first token is an error.
# The names are the serving-stack preset's, so the SLO and the autoscaler read one series.
TTFT_SLO_BOUND_S = 2.5
DEFAULT_SLOS = (
    Slo(
        name="ttft",
        objective=0.99,
        good=f'{VLLM_TTFT.name}_bucket{{le="{TTFT_SLO_BOUND_S:g}"}}',
        total=f"{VLLM_TTFT.name}_count",
        by=("namespace", VLLM.model_label),
    ),
)


EXPORTER_JOBS = "gpuscale-exporter|dcgm-exporter|nvidia-dcgm-exporter|.+-dcgm-exporter"
"""Scrape jobs of GPU exporters: gpuscale's; dcgm-exporter's manifest and Helm chart (its
Service, ``<release>-dcgm-exporter`` unless the release name holds ``dcgm-exporter``); the GPU
Operator's ``nvidia-dcgm-exporter``."""

RESERVED_LABELS = frozenset(
    {"alertname", "severity", "xid", "signal", "slo", "long_window", "vendor", "instance", "job"}
    | {"Hostname", "gpu", "UUID", "modelName", "namespace", "pod", "container"}
)
"""Labels the catalogue's alerts carry themselves; a label of the settings would override them."""


def _check_runbook_url(url: str) -> str:
    scheme, _, rest = url.partition("://")
    if scheme not in ("http", "https") or not rest or any(c.isspace() for c in url):
        msg = "is not an http:// or https:// address without spaces"
        raise ValueError(msg)
    return check_template_free(url)


RunbookUrl = Annotated[str, AfterValidator(_check_runbook_url)]


def _check_unreserved(labels: dict[str, str]) -> dict[str, str]:
    taken = sorted(set(labels) & RESERVED_LABELS)
    if taken:
        msg = f"sets {', '.join(taken)}, which the catalogue's alerts carry themselves"
        raise ValueError(msg)
    return labels


AlertLabels = Annotated[dict[LabelName, LabelValue], AfterValidator(_check_unreserved)]


class AlertConfig(Settings):
    """The whole settings file; every key is optional.

    Attributes:
        exporter_job: Regular expression of the scrape jobs of GPU exporters.
        violation_unit: What one count of DCGM's ``*_VIOLATION`` counters is: ``ns``
            (what DCGM reports and dcgm-exporter 4.x and gpuscale's exporter serve) or
            ``us`` (for exporters that scaled the counters to microseconds).
        runbook_url: Base URL of the runbooks (where docs/alerts.md is served); each alert
            links ``URL#alertname`` in lower case. None leaves the link out.
        labels: Extra labels put on every alert (a team, a route).
        prometheus_rule: Metadata of the rendered ``PrometheusRule`` (name, namespace, labels).
        interval: Evaluation interval of every group; None keeps Prometheus's global one.
        alerts: Settings per alert.
        slos: SLIs of the scaled workloads, each with burn-rate alerts.
        burn_windows: The window pairs and burn factors of those alerts.
    """

    exporter_job: Regex = EXPORTER_JOBS
    violation_unit: Literal["us", "ns"] = "ns"
    runbook_url: RunbookUrl | None = None
    labels: AlertLabels = Field(default_factory=dict)
    interval: Duration | None = None
    alerts: Alerts = Alerts()
    slos: Slos = DEFAULT_SLOS
    burn_windows: BurnWindows = DEFAULT_BURN_WINDOWS
    prometheus_rule: ResourceMetadata = ResourceMetadata()


def _lines(node: yaml.Node) -> dict[str, int]:
    """Each dotted key path (list items by index) to its 1-based line."""
    lines: dict[str, int] = {}
    pending: list[tuple[str, yaml.Node]] = [("", node)]
    seen: set[int] = set()
    while pending:
        prefix, current = pending.pop()
        if id(current) in seen:  # an alias: its lines are those of its anchor
            continue
        seen.add(id(current))
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
    # A key of the file may hold a newline or tab; the message stays one line.
    shown = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in key)
    return f"{path}{'' if line is None else f':{line}'}{' ' if key else ''}{shown}"


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
    bad = _control_character(data)
    if bad is not None:
        raise config_error(
            _where(path, lines, bad),
            "holds a control character or an unpaired surrogate (an escape such as \\0)",
            "remove it",
        )
    try:
        return AlertConfig.model_validate(data or {})
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(part) for part in err["loc"])
        if err["type"] == "extra_forbidden":
            return _unknown(path, lines, key)
        problem = " ".join(str(err["msg"]).split()).removeprefix("Value error, ")
        problem = problem[:1].lower() + problem[1:]
        if problem.split(" ", 1)[0] in _VERBS:  # the checks' own messages: "is not a ..."
            problem = f"the value {problem}"
        fix = "see docs/alerts.md for the keys and their defaults"
        raise config_error(_where(path, lines, key), problem, fix) from None


_VERBS = frozenset({"is", "holds", "must", "sets", "starts", "names"})


def _control_character(data: object, key: str = "") -> str | None:
    """The key path of the first string (key or value) holding a character no setting may hold.

    Control characters other than tab and newline reach the file only through
    escapes, and an unpaired surrogate cannot be written as UTF-8 at all.
    """
    pending: list[tuple[str, object]] = [(key, data)]
    seen: set[int] = set()
    while pending:
        where, value = pending.pop()
        if isinstance(value, str):
            if any(_forbidden(c) for c in value):
                return where
        elif isinstance(value, dict | list) and id(value) not in seen:
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                here = f"{where}.{k}" if where else str(k)
                if isinstance(k, str) and any(_forbidden(c) for c in k):
                    return where or "(a key)"
                pending.append((here, v))
    return None


def _forbidden(c: str) -> bool:
    return (c < " " and c not in "\t\n") or c == "\x7f" or "\ud800" <= c <= "\udfff"


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


__all__ = [
    "AlertConfig",
    "AlertSettings",
    "ConfigError",
    "Severity",
    "duration_seconds",
    "load_config",
]


def default_settings_yaml() -> str:
    """The settings file with every key at its default, to copy and edit.

    Returns:
        YAML text that ``parse_config`` reads back to ``AlertConfig()``.
    """
    data = AlertConfig().model_dump(by_alias=True, mode="json")
    header = "# gpuscale alert settings, every key at its default (docs/alerts.md).\n"
    return header + yaml.safe_dump(data, sort_keys=False)
