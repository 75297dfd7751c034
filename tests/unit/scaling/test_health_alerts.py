"""A firing health alert on a pod's GPU takes that pod out of the capacity count."""

from gpuscale.scaling import health
from gpuscale.scaling.policy import Observation, PodStatus, TargetStatus


def _obs(alerts: dict[str, dict[str, float]]) -> Observation:
    pods = tuple(PodStatus(f"p{i}", True, 0.0, 0.0) for i in range(3))
    metrics = {health.SM: {f"p{i}": 0.5 for i in range(3)}, **alerts}
    return Observation(600.0, TargetStatus(3, pods), metrics, {})


def test_a_firing_fell_off_bus_alert_quarantines_its_pod():
    sick, state = health.assess(
        _obs({"alert:GpuFellOffBus": {"p1": 1.0}}),
        health.HealthState(),
        health.HealthConfig(quarantine_s=300.0),
    )
    assert sick == {"p1": "alert GpuFellOffBus"}
    assert state.pods["p1"].until == 900.0


def test_no_alert_no_verdict_and_other_alerts_do_not_count():
    sick, _ = health.assess(_obs({}), health.HealthState(), health.HealthConfig())
    assert sick == {}
    # Only the catalogue's health alerts are signals; a temperature alert is not one.
    assert "alert:GpuTemperatureHigh" not in health.POD_SIGNALS
    signal = health.POD_SIGNALS["alert:GpuEccDoubleBitError"]
    assert (signal.metric, dict(signal.matchers)) == (
        "ALERTS",
        {"alertname": "GpuEccDoubleBitError", "alertstate": "firing"},
    )
