"""The autoscaler dashboard: what the controller decided, on what demand, and when it held.

It reads the controller's own series (``gpuscale_autoscaler_*``, served on its
``/metrics``; ``gpuscale.control.server`` defines them) and, for demand, the
vendor-neutral utilisation of the GPUs the target namespace's pods hold.
The controller exports no forecast, so there is no forecast band; the text
reason of each decision goes to the controller's log and to the target's
``SuccessfulRescale`` and ``MetricsUnhealthy`` Events, not to a series (free
text would make an unbounded label), so the decisions panel shows when and
how replicas changed and the holds panel why the controller refused to act.
"""

from gpuscale.alerts.neutral import UTILIZATION
from gpuscale.control.server import PREFIX
from gpuscale.grafana.model import (
    BARS,
    JSON,
    STACKED_BARS,
    LabelVariable,
    Panel,
    Query,
    Row,
    dashboard,
)

UID = "gpuscale-autoscaler"
TARGET = 'target=~"$target"'
ON_POD = f'{UTILIZATION}{{namespace=~"$namespace", pod!=""}}'
"""Utilisation of the GPUs that pods in the chosen namespaces hold."""


def _metric(name: str) -> str:
    return f"{PREFIX}_{name}"


def _increase(counter: str, label: str, window: str = "$__rate_interval") -> Query:
    """How much a per-target counter rose over ``window``, per target and ``label``."""
    return Query(
        f"sum by (target, {label}) (increase({_metric(counter)}{{{TARGET}}}[{window}]))",
        f"{{{{target}}}} {{{{{label}}}}}",
        instant=window == "$__range",
    )


def _scaling() -> list[Panel | Row]:
    return [
        Row("Scaling"),
        Panel(
            "Replicas",
            "timeseries",
            (
                Query(f"{_metric('desired_replicas')}{{{TARGET}}}", "{{target}} desired"),
                Query(f"{_metric('current_replicas')}{{{TARGET}}}", "{{target}} spec"),
                Query(f"{_metric('ready_replicas')}{{{TARGET}}}", "{{target}} ready"),
            ),
            "Replicas the controller set at its last decision (desired), the target's "
            "spec.replicas it read (spec) and its Ready pods (ready).",
            custom={"lineInterpolation": "stepAfter"},
        ),
        Panel(
            "Demand and ready capacity",
            "timeseries",
            (
                Query(f"sum by (namespace) ({ON_POD})", "{{namespace}} demand"),
                Query(f"count by (namespace) ({ON_POD})", "{{namespace}} GPUs held"),
            ),
            f"Demand: busy GPU-equivalents, the sum of {UTILIZATION} over the GPUs the "
            "namespace's pods hold. Capacity: how many GPUs those pods hold.",
        ),
        Panel(
            "Scaling decisions",
            "timeseries",
            (
                Query(
                    f"changes({_metric('desired_replicas')}{{{TARGET}}}[$__rate_interval])",
                    "{{target}}",
                ),
            ),
            "Changes of the desired replicas: each bar is the controller scaling. The "
            "reason of each decision is in the controller's log and the target's "
            "SuccessfulRescale Events.",
            custom=BARS,
        ),
        Panel(
            "Holds by reason",
            "timeseries",
            (_increase("holds_total", "reason"),),
            "Decisions that held replicas because the data was unfit: missing, nan, "
            "stale, or unavailable (Prometheus did not answer). A hold never scales in.",
            custom=STACKED_BARS,
        ),
        Panel(
            "Errors by reason",
            "timeseries",
            (_increase("errors_total", "reason"),),
            "Reconciles that failed, by reason: forbidden (RBAC), kube_unavailable (the "
            "API server did not answer or the target is missing), metrics_unavailable, "
            "internal; event: an Event could not be recorded (the decision stands).",
            custom=STACKED_BARS,
        ),
        Panel(
            "Metrics healthy",
            "timeseries",
            (Query(f"{_metric('metrics_healthy')}{{{TARGET}}}", "{{target}}"),),
            "1 when the target's last decision had fresh, complete, finite data.",
            custom={"lineInterpolation": "stepAfter"},
        ),
        Panel(
            "Age of the last good metrics read",
            "timeseries",
            (
                Query(
                    f"time() - "
                    f"{_metric('last_successful_metrics_read_timestamp_seconds')}{{{TARGET}}}",
                    "{{target}}",
                ),
            ),
            "Seconds since the controller last read the target's metrics successfully.",
            unit="s",
        ),
        Panel(
            "Remediations",
            "timeseries",
            (_increase("remediations_total", "evidence"),),
            "Pods deleted because their GPU was unhealthy, by evidence: gpu_down, xid, "
            "dbe or alert.",
            custom=BARS,
        ),
        Panel(
            "Remediations in the range",
            "bargauge",
            (_increase("remediations_total", "evidence", "$__range"),),
            "Pods deleted over the dashboard's time range, by target and evidence.",
        ),
    ]


def _controller() -> list[Panel | Row]:
    return [
        Row("Controller"),
        Panel(
            "Leader",
            "timeseries",
            (Query(f"{_metric('leader')}", "{{instance}}"),),
            "1 on the replica holding the leader lease; only the leader scales.",
            custom={"lineInterpolation": "stepAfter"},
            width=8,
        ),
        Panel(
            "Sync duration",
            "timeseries",
            (
                Query(_metric("sync_duration_seconds"), "{{instance}} last sync"),
                Query(
                    f"histogram_quantile(0.99, sum by (instance, le) "
                    f"(rate({_metric('decision_duration_seconds_bucket')}[$__rate_interval])))",
                    "{{instance}} p99 decision",
                ),
            ),
            "Time the last sync over all targets took, and the 99th percentile of one "
            "target's decision (status, metrics, policy, scale).",
            unit="s",
            width=8,
        ),
        Panel(
            "Time since the loop last turned",
            "timeseries",
            (Query(f"time() - {_metric('last_sync_timestamp_seconds')}", "{{instance}}"),),
            "Seconds since each replica's loop last turned (leader or not); /healthz "
            "fails once this passes the stall limit.",
            unit="s",
            width=8,
        ),
    ]


def autoscaler() -> JSON:
    """The autoscaler dashboard.

    Returns:
        Grafana's JSON model of it.
    """
    targets = _metric("desired_replicas")
    return dashboard(
        UID,
        "gpuscale / Autoscaler",
        "Replicas, demand, holds, remediations, leadership and sync time of gpuscale autoscale.",
        [
            LabelVariable("target", "target", targets, "Target"),
            # A target is namespace/Kind/name: the namespace is what comes before the slash.
            LabelVariable(
                "namespace",
                "target",
                f"{targets}{{{TARGET}}}",
                "Namespace",
                regex="/^([^/]+)\\//",
            ),
        ],
        [*_scaling(), *_controller()],
    )
