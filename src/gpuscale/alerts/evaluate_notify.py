"""Send the in-process evaluator's alerts to Alertmanager the way Prometheus 2.42 does.

Alertmanager decides that an alert has resolved when its ``endsAt`` passes, so
the sender's timing is part of the contract: after each evaluation every firing
alert is re-sent once ``resend_delay`` has passed since it was last sent, with
``endsAt`` four times the larger of the resend delay and the evaluation interval
ahead (two missed evaluations or sends do not resolve it); a resolved alert is
sent once more with ``endsAt`` at its resolution; pending alerts are never sent.
The body is Alertmanager's ``POST /api/v2/alerts`` list.
"""

import logging
from collections.abc import Iterable
from datetime import UTC, datetime

import httpx

from gpuscale.alerts.evaluate import Alert
from gpuscale.redact import redact_url

logger = logging.getLogger(__name__)

RESEND_DELAY_S = 60.0
"""Prometheus's default ``--rules.alert.resend-delay``."""


def rfc3339(t: float) -> str:
    """Seconds since the epoch as RFC 3339 in UTC, as Prometheus's API writes times.

    Returns:
        The text, e.g. ``2026-01-02T03:04:05.5Z``.
    """
    text = datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def needs_sending(alert: Alert, t: float, resend_delay_s: float) -> bool:
    """Prometheus's ``Alert.needsSending``: firing and due for a resend, or newly resolved.

    Returns:
        Whether to send ``alert`` at ``t``.
    """
    if alert.state == "pending":
        return False
    sent = alert.last_sent_at
    if alert.resolved_at is not None and (sent is None or alert.resolved_at > sent):
        return True
    return sent is None or sent + resend_delay_s < t


def to_send(
    alerts: Iterable[Alert], t: float, interval_s: float, resend_delay_s: float = RESEND_DELAY_S
) -> list[dict[str, object]]:
    """The alerts due at ``t``, as Alertmanager's API v2 objects; marks them sent.

    Args:
        alerts: Every alert the rules hold (pending, firing and recently resolved).
        t: Now, seconds since the epoch.
        interval_s: The rules' evaluation interval.
        resend_delay_s: Minimum time between two sends of a firing alert.

    Returns:
        ``{"labels", "annotations", "startsAt", "endsAt", "generatorURL"}`` per alert.
    """
    out: list[dict[str, object]] = []
    for alert in alerts:
        if not needs_sending(alert, t, resend_delay_s):
            continue
        alert.last_sent_at = t
        valid_until = t + 4 * max(resend_delay_s, interval_s)
        fired = alert.fired_at if alert.fired_at is not None else alert.active_at
        ends = alert.resolved_at if alert.resolved_at is not None else valid_until
        out.append(
            {
                "labels": dict(alert.labels),
                "annotations": dict(alert.annotations),
                "startsAt": rfc3339(fired),
                "endsAt": rfc3339(ends),
                "generatorURL": "",
            }
        )
    return out


class Notifier:
    """Posts alerts to one Alertmanager.

    Args:
        url: Alertmanager's base URL (``http://host:9093``).
        interval_s: The rules' evaluation interval, seconds.
        resend_delay_s: As Prometheus's ``--rules.alert.resend-delay``.
        timeout_s: Per request.
    """

    def __init__(
        self,
        url: str,
        interval_s: float,
        resend_delay_s: float = RESEND_DELAY_S,
        timeout_s: float = 10.0,
    ) -> None:
        self.url = url.rstrip("/") + "/api/v2/alerts"
        self.interval_s = interval_s
        self.resend_delay_s = resend_delay_s
        self._client = httpx.Client(timeout=timeout_s)
        self.sent = 0
        self.failures = 0

    def notify(self, alerts: Iterable[Alert], t: float) -> int:
        """Send what is due at ``t``; a failed send is logged, not raised (Prometheus retries).

        Returns:
            The number of alerts in the request (0 when nothing was due or it failed).
        """
        body = to_send(alerts, t, self.interval_s, self.resend_delay_s)
        if not body:
            return 0
        try:
            r = self._client.post(self.url, json=body)
            r.raise_for_status()
        except httpx.HTTPError as exc:
            self.failures += 1
            logger.warning(
                "sending %d alert(s) to %s failed: %s", len(body), redact_url(self.url), exc
            )
            return 0
        self.sent += len(body)
        return len(body)

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()
