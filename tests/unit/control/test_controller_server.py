"""The controller's /metrics and /healthz over real HTTP on 127.0.0.1."""

import httpx
import pytest

from gpuscale.control.server import ControllerMetrics, HealthState, TelemetryServer
from tests.support.kubeapi import ManualClock


@pytest.fixture
def served():
    clock = ManualClock(0.0)
    metrics, health = ControllerMetrics(), HealthState(45.0, clock=clock)
    server = TelemetryServer(metrics, health, "127.0.0.1", 0)
    server.start()
    yield metrics, clock, f"http://127.0.0.1:{server.port}"
    server.stop()


def test_metrics_names_the_issue_asks_for(served):
    metrics, _, url = served
    metrics.desired.labels("ns/Deployment/web").set(4)
    metrics.current.labels("ns/Deployment/web").set(2)
    metrics.errors.labels("ns/Deployment/web", "forbidden").inc()
    metrics.last_read.labels("ns/Deployment/web").set(1.7e9)
    metrics.duration.observe(0.02)
    text = httpx.get(f"{url}/metrics").text
    assert 'gpuscale_autoscaler_desired_replicas{target="ns/Deployment/web"} 4.0' in text
    assert 'gpuscale_autoscaler_current_replicas{target="ns/Deployment/web"} 2.0' in text
    assert (
        'gpuscale_autoscaler_errors_total{reason="forbidden",target="ns/Deployment/web"} 1.0'
        in text
    )
    assert "gpuscale_autoscaler_decision_duration_seconds_count 1.0" in text
    assert "gpuscale_autoscaler_last_successful_metrics_read_timestamp_seconds{" in text


def test_healthz_turns_503_when_the_loop_stalls(served):
    _, clock, url = served
    assert httpx.get(f"{url}/healthz").status_code == 200
    clock.advance(46.0)
    stalled = httpx.get(f"{url}/healthz")
    assert stalled.status_code == 503
    assert "loop stalled" in stalled.text
    assert httpx.get(f"{url}/nope").status_code == 404
