"""The alerts dashboard: which of gpuscale's alerts fire, where, and how severe.

It reads Prometheus' own ``ALERTS`` series, narrowed to the names in the alert
catalogue (``gpuscale.alerts.catalogue``), so the dashboard lists exactly the
alerts ``gpuscale rules render`` writes and nothing of other rule files.
"""

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.model import alert_names
from gpuscale.grafana.model import JSON, STACKED_BARS, LabelVariable, Panel, Query, Row, dashboard

UID = "gpuscale-alerts"


def catalogue_matcher() -> str:
    """PromQL matcher for the catalogue's alert names.

    Returns:
        ``alertname=~"GpuFellOffBus|..."``, every name the default catalogue holds.
    """
    return f'alertname=~"{"|".join(alert_names(build_catalogue()))}"'


def alerts() -> JSON:
    """The alerts dashboard.

    Returns:
        Grafana's JSON model of it.
    """
    ours = f'{catalogue_matcher()}, severity=~"$severity", Hostname=~"$Hostname"'
    firing = f'ALERTS{{alertstate="firing", {ours}}}'
    pending = f'ALERTS{{alertstate="pending", {ours}}}'
    items: list[Panel | Row] = [
        Row("Now"),
        Panel(
            "Firing",
            "stat",
            (Query(f"count({firing})"),),
            "Alerts of the gpuscale catalogue firing now.",
            options={"colorMode": "background"},
            width=6,
            height=4,
        ),
        Panel(
            "Firing by severity",
            "stat",
            (Query(f"count by (severity) ({firing})", "{{severity}}"),),
            "Firing alerts per severity label.",
            width=6,
            height=4,
        ),
        Panel(
            "Pending",
            "stat",
            (Query(f"count({pending})"),),
            "Alerts whose condition holds but whose 'for' duration has not passed yet.",
            width=6,
            height=4,
        ),
        Panel(
            "GPUs with a firing alert",
            "stat",
            (Query(f"count(count by (Hostname, gpu) ({firing}))"),),
            "Distinct GPUs (host and index) named by a firing alert.",
            width=6,
            height=4,
        ),
        Panel(
            "Firing alerts",
            "table",
            (Query(firing, instant=True),),
            "Every firing alert with its labels: alert name, severity, host, GPU, UUID and, "
            "on Kubernetes, the pod holding the GPU. The runbook of each is in docs/alerts.md.",
            width=24,
            height=10,
            options={"sortBy": [{"displayName": "severity", "desc": False}]},
        ),
        Row("Over time"),
        Panel(
            "Firing by alert",
            "timeseries",
            (Query(f"count by (alertname, severity) ({firing})", "{{alertname}} ({{severity}})"),),
            "How many series of each alert fire.",
            custom=STACKED_BARS,
        ),
        Panel(
            "Pending by alert",
            "timeseries",
            (Query(f"count by (alertname, severity) ({pending})", "{{alertname}} ({{severity}})"),),
            "Alerts waiting out their 'for' duration.",
            custom=STACKED_BARS,
        ),
    ]
    return dashboard(
        UID,
        "gpuscale / Alerts",
        "Firing and pending alerts of the gpuscale catalogue, by severity, alert and GPU.",
        [
            LabelVariable("severity", "severity", f"ALERTS{{{catalogue_matcher()}}}", "Severity"),
            LabelVariable("Hostname", "Hostname", f"ALERTS{{{catalogue_matcher()}}}", "Host"),
        ],
        items,
    )
