"""The alert catalogue evaluated in process: recording rules, alert states, ``ALERTS``.

The simulator and ``gpuscale up`` have no Prometheus, yet their policies and
their users need the same alerts Prometheus would raise from the same rules.
``RuleEvaluator`` runs the catalogue's groups the way Prometheus 2.42's rule
manager does: groups in order, rules in order within a group, each record
written back to the store at the evaluation time so later rules read it (and a
series that stops being returned goes stale); each alert goes pending when its
expression returns it and fires once it has held for ``for:``; a firing alert
that stops being returned resolves and is kept 15 minutes for notifiers; every
active alert is written as ``ALERTS{alertstate=...}`` and ``ALERTS_FOR_STATE``.
Every expression is parsed and checked when the evaluator is built, so a
construct the evaluator lacks fails at once, naming the rule.
"""

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import promql_parser as pp

from gpuscale.alerts.evaluate_binary import QueryError
from gpuscale.alerts.evaluate_promql import (
    LOOKBACK_MS,
    NAME,
    Engine,
    Labels,
    RemoteSelectors,
    SampleSource,
    UnsupportedQuery,
    check_supported,
)
from gpuscale.alerts.evaluate_template import expand
from gpuscale.alerts.model import AlertRule, RecordingRule, Rule, RuleGroup
from gpuscale.errors import ConfigError

logger = logging.getLogger(__name__)

RESOLVED_RETENTION_S = 900.0
"""How long Prometheus keeps a resolved alert to tell Alertmanager (``resolvedRetention``)."""


class RuleStore(SampleSource, Protocol):
    """A store the rules read from and write their results to (``MetricStore``)."""

    def ingest(
        self, t: float, metric: str, labels: Sequence[Mapping[str, str]], values: np.ndarray
    ) -> None:
        """Record one scrape (here: one rule's output) of one family at ``t``."""
        ...


@dataclass(slots=True)
class Alert:
    """One alert of one rule, as Prometheus's rule manager keeps it.

    Attributes:
        rule: The alerting rule.
        labels: Its labels (expression labels, rule labels, ``alertname``), sorted.
        annotations: Annotations expanded at the last evaluation that returned it.
        state: ``pending``, ``firing`` or ``inactive`` (resolved).
        active_at: When it went pending, seconds.
        value: The expression's value at the last evaluation that returned it.
        fired_at: When it fired, seconds (None while pending).
        resolved_at: When it resolved, seconds (None while active).
        last_sent_at: When a notifier last sent it (kept by the notifier).
    """

    rule: AlertRule
    labels: Labels
    annotations: dict[str, str]
    state: str
    active_at: float
    value: float
    fired_at: float | None = None
    resolved_at: float | None = None
    last_sent_at: float | None = None


@dataclass(slots=True)
class RuleStatus:
    """What ``/api/v1/rules`` reports of a rule: health, last error and timing."""

    rule: Rule
    health: str = "unknown"
    last_error: str = ""
    last_evaluation: float | None = None
    evaluation_s: float = 0.0
    alerts: dict[Labels, Alert] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What one evaluation produced: records written and alerts active, per rule.

    Attributes:
        t: Evaluation time, seconds.
        records: Per recording rule (group index, rule index): the samples written.
        alerts: Per alerting rule: ``(labels, state, active_at)`` of its pending and
            firing alerts.
    """

    t: float
    records: dict[tuple[int, int], list[tuple[Labels, float]]]
    alerts: dict[tuple[int, int], list[tuple[Labels, str, float]]]


def _parse(group: RuleGroup, rule: Rule) -> pp.Expr:
    name = rule.record if isinstance(rule, RecordingRule) else rule.alert
    where = f"rule {name} in group {group.name}"
    try:
        expr = pp.parse(rule.expr)
    except ValueError as exc:
        raise ConfigError(f"{where}: PromQL does not parse ({exc})") from None
    try:
        check_supported(expr)
    except UnsupportedQuery as exc:
        raise ConfigError(
            f"{where}: the in-process evaluator does not support {exc}; "
            "evaluate this catalogue with a real Prometheus (--prometheus URL)"
        ) from None
    return expr


class RuleEvaluator:
    """Runs rule groups over a store, as Prometheus's rule manager would.

    Args:
        groups: The catalogue (``build_catalogue``), in evaluation order.
        store: Where expressions read samples and results are written.
        lookback_s: The instant selectors' lookback (Prometheus's 5 minutes by default).
        remote: Answers the selectors of every series but the rules' own records and
            ``ALERTS`` (a real Prometheus: ``evaluate_remote``); None reads ``store``.

    Raises:
        ConfigError: A rule does not parse or uses a construct not supported here.
    """

    def __init__(
        self,
        groups: Sequence[RuleGroup],
        store: RuleStore,
        lookback_s: float = LOOKBACK_MS / 1000,
        remote: RemoteSelectors | None = None,
    ) -> None:
        self.groups = tuple(groups)
        self.store = store
        records = {r.record for g in self.groups for r in g.rules if isinstance(r, RecordingRule)}
        local = frozenset({*records, "ALERTS", "ALERTS_FOR_STATE"})
        self.engine = Engine(store, round(lookback_s * 1000), remote, local)
        self._exprs = [[_parse(g, r) for r in g.rules] for g in self.groups]
        self.status = [[RuleStatus(r) for r in g.rules] for g in self.groups]
        self._last: list[float | None] = [None] * len(self.groups)

    def evaluate(self, t: float) -> Evaluation:
        """Evaluate every group due at ``t`` (seconds), in order.

        A group with its own ``interval`` runs when that much time has passed since
        its last run; a group without one runs at every call.

        Returns:
            The records written and the alerts active after this evaluation.
        """
        ts = round(t * 1000)
        records: dict[tuple[int, int], list[tuple[Labels, float]]] = {}
        alerts: dict[tuple[int, int], list[tuple[Labels, str, float]]] = {}
        # Every evaluation writes a row of ALERTS, so an alert no longer active goes stale.
        for family in ("ALERTS", "ALERTS_FOR_STATE"):
            self.store.ingest(t, family, [], np.zeros(0))
        for gi, group in enumerate(self.groups):
            if not self._due(gi, group, t):
                continue
            self._last[gi] = t
            for ri, rule in enumerate(group.rules):
                status = self.status[gi][ri]
                started = time.perf_counter()
                try:
                    if isinstance(rule, RecordingRule):
                        records[(gi, ri)] = self._record(rule, self._exprs[gi][ri], t, ts)
                    else:
                        alerts[(gi, ri)] = self._alert(status, rule, self._exprs[gi][ri], t, ts)
                    status.health, status.last_error = "ok", ""
                except QueryError as exc:
                    status.health, status.last_error = "err", str(exc)
                    logger.warning("rule %s failed at %s: %s", _name(rule), t, exc)
                status.last_evaluation = t
                status.evaluation_s = time.perf_counter() - started
        return Evaluation(t, records, alerts)

    def _due(self, gi: int, group: RuleGroup, t: float) -> bool:
        if group.interval is None or self._last[gi] is None:
            return True
        from gpuscale.alerts.promql_text import duration_seconds

        last = self._last[gi]
        assert last is not None  # noqa: S101 - checked above
        return t - last >= duration_seconds(group.interval) - 1e-9

    def _result(self, expr: pp.Expr, ts: int) -> list[tuple[Labels, float]]:
        value = self.engine.evaluate(expr, ts)
        if isinstance(value, float):
            return [((), value)]
        if not isinstance(value, list) or (value and len(value[0]) != 2):
            raise QueryError("rule result is not a vector or scalar")
        return value  # type: ignore[return-value]

    def _record(
        self, rule: RecordingRule, expr: pp.Expr, t: float, ts: int
    ) -> list[tuple[Labels, float]]:
        out: dict[Labels, float] = {}
        for lab, v in self._result(expr, ts):
            labels = dict(lab)
            labels[NAME] = rule.record
            for k, val in rule.labels:
                if val:
                    labels[k] = val
                else:
                    labels.pop(k, None)
            key = tuple(sorted(labels.items()))
            if key in out:
                raise QueryError(
                    "vector contains metrics with the same labelset after applying rule labels"
                )
            out[key] = v
        written = [({k: v for k, v in lab if k != NAME}, v) for lab, v in out.items()]
        self.store.ingest(
            t, rule.record, [lab for lab, _ in written], np.array([v for _, v in written])
        )
        return list(out.items())

    def _alert(
        self, status: RuleStatus, rule: AlertRule, expr: pp.Expr, t: float, ts: int
    ) -> list[tuple[Labels, str, float]]:
        current: dict[Labels, tuple[float, dict[str, str]]] = {}
        for lab, v in self._result(expr, ts):
            base = {k: val for k, val in lab if k != NAME}
            labels = dict(base)
            for k, val in (("severity", rule.severity), *rule.labels):
                labels[k] = expand(val, base, v)
            labels["alertname"] = rule.alert
            key = tuple(sorted((k, val) for k, val in labels.items() if val))
            if key in current:
                raise QueryError(
                    "vector contains metrics with the same labelset after applying alert labels"
                )
            annotations = {
                "summary": expand(rule.summary, base, v),
                "description": expand(rule.description, base, v),
            }
            if rule.runbook_url is not None:
                annotations["runbook_url"] = expand(rule.runbook_url, base, v)
            current[key] = (v, annotations)
        active = status.alerts
        for key, (v, annotations) in current.items():
            alert = active.get(key)
            if alert is not None and alert.state != "inactive":
                alert.value, alert.annotations = v, annotations
            else:
                active[key] = Alert(rule, key, annotations, "pending", t, v)
        out: list[tuple[Labels, str, float]] = []
        for key, alert in list(active.items()):
            if key not in current:
                expired = (
                    alert.resolved_at is not None and t - alert.resolved_at > RESOLVED_RETENTION_S
                )
                if alert.state == "pending" or expired:
                    del active[key]
                if alert.state != "inactive":
                    alert.state, alert.resolved_at = "inactive", t
                continue
            if alert.state == "pending" and t - alert.active_at >= rule.for_s - 1e-9:
                alert.state, alert.fired_at = "firing", t
            out.append((key, alert.state, alert.active_at))
        self._write_alerts(t, out)
        return out

    def _write_alerts(self, t: float, alerts: list[tuple[Labels, str, float]]) -> None:
        if not alerts:
            return
        states = [{**dict(lab), "alertstate": state} for lab, state, _ in alerts]
        self.store.ingest(t, "ALERTS", states, np.ones(len(states)))
        # Prometheus writes the activation time in whole seconds (ActiveAt.Unix()).
        for_state = [dict(lab) for lab, _, _ in alerts]
        active_at = np.array([float(math.floor(a + 1e-9)) for _, _, a in alerts])
        self.store.ingest(t, "ALERTS_FOR_STATE", for_state, active_at)

    def active_alerts(self) -> list[Alert]:
        """Every pending, firing and recently resolved alert, rule by rule.

        Returns:
            The alerts; resolved ones have state ``inactive``.
        """
        return [a for row in self.status for s in row for a in s.alerts.values()]


def window_s(groups: Sequence[RuleGroup]) -> float:
    """How far back the rules read: their longest range plus offset, seconds.

    Returns:
        Seconds of history a store must keep for the rules to see what Prometheus sees.
    """
    longest = 0.0

    def walk(node: object) -> None:
        nonlocal longest
        if isinstance(node, pp.MatrixSelector):
            vs = node.vector_selector
            extra = vs.offset.total_seconds() if vs.offset is not None else 0.0
            longest = max(longest, extra + node.range.total_seconds())
        elif isinstance(node, pp.VectorSelector) and node.offset is not None:
            longest = max(longest, node.offset.total_seconds())
        for attr in ("expr", "lhs", "rhs", "param"):
            child = getattr(node, attr, None)
            if isinstance(child, pp.Expr):
                walk(child)
        for arg in getattr(node, "args", None) or ():
            walk(arg)

    for group in groups:
        for rule in group.rules:
            walk(pp.parse(rule.expr))
    return longest


def _name(rule: Rule) -> str:
    return rule.record if isinstance(rule, RecordingRule) else rule.alert
