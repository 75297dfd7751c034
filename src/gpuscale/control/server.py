"""The controller's own telemetry: ``/metrics`` for Prometheus and ``/healthz`` for the kubelet.

An autoscaler that fails quietly leaves a workload at whatever size it last
had. These series say what it decided and why it did not: the desired and
current replicas per target, how long a decision took, errors by reason, holds
by reason, when metrics were last read successfully, and whether this replica
holds the leader lease. ``/healthz`` answers 200 while the loop keeps turning
(a follower's loop turns too) and 503 once it has not for ``stall_after_s``,
so a wedged controller is restarted.

Every controller gets its own ``CollectorRegistry`` (never the global one), so
tests and several controllers in one process do not collide.
"""

import logging
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from gpuscale.httpserver import HardenedHTTPServer, RequestHandler, WebGate

logger = logging.getLogger(__name__)

PREFIX = "gpuscale_autoscaler"


class ControllerMetrics:
    """The series ``/metrics`` serves, on a registry of their own.

    Args:
        registry: Where to register; a fresh one when None.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.desired = Gauge(
            f"{PREFIX}_desired_replicas",
            "Replicas the controller set (or, dry run, would set) at its last decision.",
            ["target"],
            registry=r,
        )
        self.current = Gauge(
            f"{PREFIX}_current_replicas",
            "spec.replicas of the target read at the last decision.",
            ["target"],
            registry=r,
        )
        self.ready = Gauge(
            f"{PREFIX}_ready_replicas", "Ready pods of the target.", ["target"], registry=r
        )
        self.duration = Histogram(
            f"{PREFIX}_decision_duration_seconds",
            "Time to reconcile one target: status, metrics, policy, scale.",
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
        )
        self.sync_duration = Gauge(
            f"{PREFIX}_sync_duration_seconds",
            "Time the last sync over all targets took.",
            registry=r,
        )
        self.errors = Counter(
            f"{PREFIX}_errors",
            "Failures by target and reason (forbidden, kube_unavailable, metrics_unavailable, "
            "internal; event: an Event could not be recorded, the decision stands).",
            ["target", "reason"],
            registry=r,
        )
        self.holds = Counter(
            f"{PREFIX}_holds",
            "Decisions that held replicas because the data was unfit, by reason.",
            ["target", "reason"],
            registry=r,
        )
        self.metrics_healthy = Gauge(
            f"{PREFIX}_metrics_healthy",
            "1 when the target's last decision had fresh, complete, finite data.",
            ["target"],
            registry=r,
        )
        self.last_read = Gauge(
            f"{PREFIX}_last_successful_metrics_read_timestamp_seconds",
            "Unix time of the last successful metrics read for the target.",
            ["target"],
            registry=r,
        )
        self.remediations = Counter(
            f"{PREFIX}_remediations",
            "Pods deleted (or, dry run, that would be) because their GPU was unhealthy.",
            ["target", "evidence"],
            registry=r,
        )
        self.replacements = Counter(
            f"{PREFIX}_replacements",
            "Pods the policy had deleted for replacement (or, dry run, would have).",
            ["target"],
            registry=r,
        )
        self.state_writes = Counter(
            f"{PREFIX}_state_writes",
            "Writes of the target's policy state to the controller's state ConfigMap.",
            ["target"],
            registry=r,
        )
        self.leader = Gauge(
            f"{PREFIX}_leader", "1 while this replica holds the leader lease.", registry=r
        )
        self.last_sync = Gauge(
            f"{PREFIX}_last_sync_timestamp_seconds",
            "Unix time the loop last turned (leader or not).",
            registry=r,
        )


class HealthState:
    """When the loop last turned, for ``/healthz``.

    Args:
        stall_after_s: The loop is unhealthy once it has not turned for this long.
        clock: Seconds now.
    """

    def __init__(self, stall_after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_after_s = stall_after_s
        self._clock = clock
        self._last = clock()

    def beat(self) -> None:
        """Record that the loop turned."""
        self._last = self._clock()

    def healthy(self) -> tuple[bool, str]:
        """Whether the loop turned recently.

        Returns:
            (healthy, a one-line explanation).
        """
        age = self._clock() - self._last
        if age > self.stall_after_s:
            return False, f"loop stalled: last turn {age:.0f} s ago (> {self.stall_after_s:g} s)"
        return True, f"ok: last turn {age:.1f} s ago"


class _TelemetryHandler(RequestHandler):
    server: "_TelemetryHttp"

    def do_GET(self) -> None:  # noqa: N802 - http.server dispatches on this name
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body, code = generate_latest(self.server.registry), 200
            ctype = CONTENT_TYPE_LATEST
        elif path == "/healthz":
            ok, text = self.server.health.healthy()
            body, code, ctype = (text + "\n").encode(), 200 if ok else 503, "text/plain"
        else:
            body, code, ctype = b"not found: try /metrics or /healthz\n", 404, "text/plain"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _TelemetryHttp(HardenedHTTPServer):
    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        health: HealthState,
        gate: WebGate | None,
    ) -> None:
        self.registry, self.health = registry, health
        super().__init__(address, _TelemetryHandler, gate=gate, name="telemetry")


class TelemetryServer:
    """HTTP(S) server for ``/metrics`` and ``/healthz`` on a daemon thread.

    Args:
        metrics: What ``/metrics`` serves.
        health: What ``/healthz`` reports.
        host: Address to bind.
        port: Port (0 picks a free one; see ``port`` after ``start``).
        gate: TLS, basic auth and headers from a web-config file; None serves plain HTTP.

    Raises:
        OSError: The address cannot be bound.
    """

    def __init__(
        self,
        metrics: ControllerMetrics,
        health: HealthState,
        host: str,
        port: int,
        gate: WebGate | None = None,
    ) -> None:
        self._server = _TelemetryHttp((host, port), metrics.registry, health, gate)
        self.port = self._server.port

    def start(self) -> None:
        """Serve in the background."""
        self._server.serve_in_background()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
