"""Rules as values, and the few PromQL shapes every GPU rule is built from.

The catalogue is data before it is YAML: the renderer writes it for Prometheus
or the Prometheus Operator, the backtest queries its expressions, and the tests
read its names, all from the same ``RuleGroup`` values.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from gpuscale.alerts.alert_settings import AlertSettings
from gpuscale.alerts.config import AlertConfig, BurnWindow
from gpuscale.alerts.promql_text import duration_seconds, promql_string

GPU = ("Hostname", "gpu")
"""Labels that name one physical GPU: dcgm-exporter's host name and GPU index."""
PER_GPU = ("Hostname", "gpu", "UUID", "modelName", "namespace", "pod", "container")
"""Labels an alert about one GPU carries: which GPU, and which pod holds it."""
AMD_TO_DCGM = (("gpu", "gpu_id"), ("Hostname", "hostname"), ("modelName", "card_model"))
"""AMD device-metrics-exporter labels renamed to dcgm-exporter's, so both vendors share rules."""


@dataclass(frozen=True, slots=True)
class RecordingRule:
    """A Prometheus recording rule.

    Attributes:
        record: Name of the series it writes.
        expr: PromQL.
        labels: Labels added to the result.
    """

    record: str
    expr: str
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class AlertRule:
    """A Prometheus alerting rule.

    Attributes:
        alert: Alert name.
        expr: PromQL; every series it returns is one alert.
        for_: How long the expression must hold before the alert fires (a duration).
        severity: ``critical``, ``warning`` or ``info``.
        summary: One-line annotation (a Go template over ``$labels`` and ``$value``).
        description: Longer annotation: what it means and what to do first.
        runbook_url: Link to the alert's runbook paragraph; None when no base is set.
        labels: Labels added besides ``severity``.
    """

    alert: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    runbook_url: str | None
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def for_s(self) -> int:
        """The ``for:`` duration in seconds."""
        return duration_seconds(self.for_)


Rule = RecordingRule | AlertRule


@dataclass(frozen=True, slots=True)
class RuleGroup:
    """A rule group: Prometheus evaluates its rules in order, each at ``interval``.

    Attributes:
        name: Group name, unique in a file.
        rules: Recording and alerting rules, in evaluation order.
        interval: Evaluation interval (a duration), None for Prometheus's global one.
    """

    name: str
    rules: tuple[Rule, ...]
    interval: str | None = None


def by(labels: Sequence[str]) -> str:
    """A comma-separated label list for ``by``, ``on`` or ``without``."""
    return ", ".join(labels)


def per_gpu(expr: str, extra: Sequence[str] = ()) -> str:
    """``expr`` reduced to one series per GPU (and per ``extra`` label), keeping ``PER_GPU``."""
    return f"max by ({by((*PER_GPU, *extra))}) ({expr})"


def any_of(*exprs: str) -> str:
    """The union of per-GPU expressions: one series per GPU, the first expression's wins."""
    return f" or on ({by(GPU)}) ".join(f"({e})" for e in exprs)


def from_amd(expr: str) -> str:
    """``expr`` over AMD series, with AMD's labels renamed to dcgm-exporter's.

    ``gpu_uuid`` is optional in AMD's exporter, so ``UUID`` is copied only when
    it is there; the AMD names are then dropped so the two vendors' series match.
    """
    renamed = expr
    for new, old in (*AMD_TO_DCGM, ("UUID", "gpu_uuid")):
        renamed = f'label_replace({renamed}, "{new}", "$1", "{old}", "(.+)")'
    dropped = by([old for _, old in AMD_TO_DCGM] + ["gpu_uuid"])
    return f"max without ({dropped}) ({renamed})"


def exporter_jobs(config: AlertConfig) -> str:
    """The braces selecting the GPU exporters' scrape jobs: ``{job=~"<exporter_job>"}``.

    The pattern is a quoted PromQL string, so a quote or backslash in the
    setting stays inside it.
    """
    return f"{{job=~{promql_string(config.exporter_job)}}}"


def alerts_of(groups: Sequence[RuleGroup]) -> list[AlertRule]:
    """Every alerting rule in ``groups``, in order."""
    return [r for g in groups for r in g.rules if isinstance(r, AlertRule)]


def alert_names(groups: Sequence[RuleGroup]) -> list[str]:
    """Distinct alert names in ``groups``, in order of first appearance."""
    return list(dict.fromkeys(a.alert for a in alerts_of(groups)))


THE_GPU = "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on {{ $labels.Hostname }}"
"""How a summary names the GPU."""
HELD_BY = "{{ if $labels.pod }} Held by {{ $labels.namespace }}/{{ $labels.pod }}.{{ end }}"
"""A description's note of the pod holding the GPU, when the exporter knows it."""


class Builder:
    """Makes ``AlertRule``s with the catalogue's shared settings (runbook base, extra labels)."""

    def __init__(self, config: AlertConfig) -> None:
        self.config = config

    def alert(
        self,
        name: str,
        settings: AlertSettings | BurnWindow,
        expr: str,
        summary: str,
        description: str,
        severity: str | None = None,
        labels: tuple[tuple[str, str], ...] = (),
    ) -> AlertRule:
        """One alerting rule named ``name`` with ``settings``' ``for:`` and severity.

        Returns:
            The rule, its runbook URL ``<runbook_url>#<name in lower case>`` (None
            when the settings have no ``runbook_url``).
        """
        base = self.config.runbook_url
        return AlertRule(
            alert=name,
            expr=expr,
            for_=settings.for_,
            severity=severity or settings.severity,
            summary=summary,
            description=description,
            runbook_url=None if base is None else f"{base}#{name.lower()}",
            labels=(*sorted(self.config.labels.items()), *labels),
        )
