"""Prometheus's ``/api/v1/alerts`` and ``/api/v1/rules`` for the in-process evaluator.

Grafana, ``amtool``-style scripts and dashboards already read these two
endpoints from Prometheus, so ``gpuscale up`` serves the same JSON shapes
(Prometheus HTTP API, "Alerts" and "Rules"): an alert's ``labels``,
``annotations``, ``state``, ``activeAt`` and ``value`` (a string, as Go's
``strconv.FormatFloat(v, 'e', -1, 64)`` writes it); a group's rules with their
``health``, ``lastError``, ``evaluationTime`` and ``lastEvaluation``.
"""

import json
import logging
import math
import threading
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

from gpuscale.alerts.evaluate import Alert, RuleEvaluator, RuleStatus
from gpuscale.alerts.evaluate_notify import rfc3339
from gpuscale.alerts.model import AlertRule, RecordingRule
from gpuscale.alerts.promql_text import duration_seconds
from gpuscale.httpserver import HardenedHTTPServer, RequestHandler, WebGate

logger = logging.getLogger(__name__)


def go_exponent(v: float) -> str:
    """``v`` as ``strconv.FormatFloat(v, 'e', -1, 64)``: shortest digits, ``e+00`` exponent.

    Returns:
        The text, e.g. ``1e+00`` or ``8.5e+01``.
    """
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == 0:
        return "-0e+00" if math.copysign(1.0, v) < 0 else "0e+00"
    # repr is the shortest text that round-trips, as Go's -1 precision.
    sign, digits, exp = Decimal(repr(v)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    assert isinstance(exp, int)  # noqa: S101 - finite values have an int exponent
    exponent = exp + len(digits) - 1
    mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"


def _alert_json(alert: Alert) -> dict[str, Any]:
    return {
        "labels": dict(alert.labels),
        "annotations": dict(alert.annotations),
        "state": alert.state,
        "activeAt": rfc3339(alert.active_at),
        "value": go_exponent(alert.value),
    }


def alerts_json(evaluator: RuleEvaluator) -> dict[str, Any]:
    """The body of ``GET /api/v1/alerts``: every pending and firing alert.

    Returns:
        ``{"status": "success", "data": {"alerts": [...]}}``.
    """
    active = [a for a in evaluator.active_alerts() if a.state != "inactive"]
    return {"status": "success", "data": {"alerts": [_alert_json(a) for a in active]}}


def _rule_json(status: RuleStatus) -> dict[str, Any]:
    rule = status.rule
    common = {
        "health": status.health,
        "evaluationTime": status.evaluation_s,
        "lastEvaluation": (
            rfc3339(status.last_evaluation)
            if status.last_evaluation is not None
            else "0001-01-01T00:00:00Z"
        ),
    }
    if status.last_error:
        common["lastError"] = status.last_error
    if isinstance(rule, RecordingRule):
        return {
            "name": rule.record,
            "query": rule.expr,
            "labels": dict(rule.labels),
            "type": "recording",
            **common,
        }
    assert isinstance(rule, AlertRule)  # noqa: S101 - Rule is one of the two
    active = [a for a in status.alerts.values() if a.state != "inactive"]
    state = "inactive"
    if any(a.state == "firing" for a in active):
        state = "firing"
    elif active:
        state = "pending"
    return {
        "state": state,
        "name": rule.alert,
        "query": rule.expr,
        "duration": rule.for_s,
        "labels": {"severity": rule.severity, **dict(rule.labels)},
        "annotations": {
            "summary": rule.summary,
            "description": rule.description,
            "runbook_url": rule.runbook_url,
        },
        "alerts": [_alert_json(a) for a in active],
        "type": "alerting",
        **common,
    }


def rules_json(evaluator: RuleEvaluator, rule_type: str | None = None) -> dict[str, Any]:
    """The body of ``GET /api/v1/rules`` (``type=alert|record`` filters as Prometheus does).

    Returns:
        ``{"status": "success", "data": {"groups": [...]}}``.
    """
    groups = []
    for group, statuses in zip(evaluator.groups, evaluator.status, strict=True):
        rules = [_rule_json(s) for s in statuses]
        if rule_type == "alert":
            rules = [r for r in rules if r["type"] == "alerting"]
        elif rule_type == "record":
            rules = [r for r in rules if r["type"] == "recording"]
        evaluated = [s.last_evaluation for s in statuses if s.last_evaluation is not None]
        groups.append(
            {
                "name": group.name,
                "file": "gpuscale catalogue",
                "rules": rules,
                "interval": duration_seconds(group.interval) if group.interval else None,
                "limit": 0,
                "evaluationTime": sum(s.evaluation_s for s in statuses),
                "lastEvaluation": rfc3339(max(evaluated)) if evaluated else "0001-01-01T00:00:00Z",
            }
        )
    return {"status": "success", "data": {"groups": groups}}


class RulesApiServer(HardenedHTTPServer):
    """Serves ``/api/v1/alerts``, ``/api/v1/rules`` and ``/-/ready`` for one evaluator.

    Args:
        address: (host, port) to listen on; port 0 picks a free one.
        evaluator: The rules whose state is served.
        lock: Held by the evaluation loop while it changes the rules' state.
        interval_s: The evaluation interval, reported for groups without their own.
        gate: TLS, basic auth and headers from a web-config file; None serves plain HTTP.
    """

    def __init__(
        self,
        address: tuple[str, int],
        evaluator: RuleEvaluator,
        lock: threading.Lock,
        interval_s: float,
        gate: WebGate | None = None,
    ) -> None:
        self.evaluator, self.lock, self.interval_s = evaluator, lock, interval_s
        super().__init__(address, _Handler, gate=gate, name="rules-api")


class _Handler(RequestHandler):
    server: RulesApiServer

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server dispatches on this name
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        srv = self.server
        with srv.lock:
            if url.path == "/api/v1/alerts":
                body = alerts_json(srv.evaluator)
            elif url.path == "/api/v1/rules":
                kind = query.get("type", [])
                body = rules_json(srv.evaluator, kind[0] if kind else None)
                for group in body["data"]["groups"]:
                    if group["interval"] is None:
                        group["interval"] = srv.interval_s
            elif url.path == "/-/ready":
                body = {"status": "success", "data": "ready"}
            else:
                self._send(404, {"status": "error", "errorType": "not_found", "error": url.path})
                return
        self._send(200, body)
