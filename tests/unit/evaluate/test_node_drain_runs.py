"""A whole run with cluster-autoscaler's drains keeps every request and bills less."""

import logging

import pytest

from gpuscale.evaluate.runner import EvaluationRequest, run_one
from gpuscale.sim.cluster import ClusterConfig


def keda_on_diurnal(threshold: float) -> tuple[float, float, float]:
    cluster = ClusterConfig(scale_down_gpu_utilization_threshold=threshold)
    prepared = EvaluationRequest("diurnal", ("keda",), 4, duration_s=7200, cluster=cluster)
    result = run_one(prepared.prepare(), "keda", quiet=True)
    ended = result.completed_requests + result.dropped + result.in_flight_requests
    return result.node_gpu_seconds, result.requests, ended


def test_drained_nodes_cost_less_and_every_arrival_still_ends_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # KEDA on diurnal x4 leaves a node with a few pods after a scale-in within two
    # hours: with the default threshold (0.5) it is drained, with 0 it stays up.
    kept, requests_kept, ended_kept = keda_on_diurnal(0.0)
    with caplog.at_level(logging.DEBUG, logger="gpuscale.sim.cluster"):
        drained, requests, ended = keda_on_diurnal(0.5)
    assert any("draining under-used node" in r.getMessage() for r in caplog.records)
    assert drained < kept
    assert requests == requests_kept  # the same arrivals
    assert ended == pytest.approx(requests, abs=1e-6)  # conservation, after evictions too
    assert ended_kept == pytest.approx(requests_kept, abs=1e-6)


def test_defaults_are_cluster_autoscalers() -> None:
    # cluster-autoscaler's flag defaults: --scale-down-unneeded-time=10m,
    # --scale-down-gpu-utilization-threshold=0.5, --scale-down-delay-after-add=10m.
    c = ClusterConfig()
    assert (c.node_idle_remove_s, c.scale_down_gpu_utilization_threshold) == (600.0, 0.5)
    assert c.scale_down_delay_after_add_s == 600.0
