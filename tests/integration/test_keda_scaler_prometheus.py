"""The KEDA scaler reading a real Prometheus decides as the controller does on the same samples.

A Prometheus holds backfilled samples of a workload's demand (requests in flight,
rising then falling) in two namespaces; the controller as ``gpuscale autoscale``
runs it scales one Deployment, and the HPA KEDA would make (Kubernetes' replica
calculator, tolerance 0) scales the other from the metric the scaler returns over
mutual TLS, decision by decision on the same clock.
"""

import shutil
import time
from pathlib import Path

import pytest

from gpuscale.control.config import load
from gpuscale.control.controller import Controller
from gpuscale.control.kubernetes import KubeActuator
from gpuscale.control.seams import Settings
from gpuscale.control.targets import runtimes
from gpuscale.keda import externalscaler_pb2 as pb
from gpuscale.keda.scaler import METRIC_NAME, TARGET_SIZE, KedaScaler
from gpuscale.metrics.prometheus import PrometheusSource
from tests.support.keda import (
    gpuscaler,
    hpa_replicas,
    keda_client,
    make_tls_files,
    scaled_object,
    scaler_server,
)
from tests.support.kubeapi import KubeApiDouble, ManualClock
from tests.support.tsdb import Series, backfilled_prometheus, history_start

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not all(shutil.which(b) for b in ("prometheus", "promtool")),
        reason="prometheus or promtool not installed",
    ),
]

IN_FLIGHT = "gpuscale_serving_requests_in_flight"
QUEUE = "gpuscale_serving_queue_requests"
CTL, KEDA = "ctl", "keda"
STEP_S = 15
DECISIONS = 40
METADATA = {
    "policy": "keda",
    "threshold": "2",
    "pollingIntervalSeconds": "15",
    "cooldownPeriodSeconds": "120",
    "minReplicas": "1",
    "maxReplicas": "20",
    "scaleTargetName": "web",
}


def demand(k: int) -> float:
    """Requests in flight at the k-th step: up to 30 and back down to 2."""
    return max(2.0, 30.0 - abs(k - 12) * 2.5)


def test_the_scaler_on_prometheus_decides_as_the_controller(tmp_path: Path):
    start = float(history_start(time.time()))
    steps = [start + STEP_S * k for k in range(DECISIONS + 4)]
    series = [
        Series(metric, {"namespace": ns, "deployment": "web"}, points)
        for ns in (CTL, KEDA)
        for metric, points in (
            (IN_FLIGHT, [(t, demand(k)) for k, t in enumerate(steps)]),
            (QUEUE, [(t, 0.0) for t in steps]),
        )
    ]
    prom_dir = tmp_path / "prom"
    prom_dir.mkdir()
    prom = backfilled_prometheus(prom_dir, series)
    clock = ManualClock(start + 1)
    tls = make_tls_files(tmp_path)
    config = tmp_path / "scaler.yaml"
    config.write_text(gpuscaler(METADATA, CTL))
    wanted, applied = [], []
    try:
        with KubeApiDouble(clock=clock) as api:
            for ns in (CTL, KEDA):
                api.create_deployment("web", ns, replicas=2)
            kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
            act = KubeActuator.connect(kubeconfig, clock=clock)
            source = PrometheusSource(prom.url)
            controller = Controller(
                runtimes(load(config)), source, act, settings=Settings(workers=1), clock=clock
            )
            scaler = KedaScaler(source, act, clock=clock)
            ref = scaled_object("web", KEDA, **METADATA)
            request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName=METRIC_NAME)
            with (
                scaler_server(scaler, tls.server(mutual=True)) as server,
                keda_client(
                    server.port, ca=tls.server_cert, cert=tls.client_cert, key=tls.client_key
                ) as keda,
            ):
                for _ in range(DECISIONS):
                    [out] = controller.sync()
                    current = int(
                        api.get("apps/v1", "deployments", "web", KEDA)["spec"]["replicas"]
                    )
                    [value] = keda.GetMetrics(request, timeout=10).metricValues
                    assert keda.IsActive(ref, timeout=10).result is (out.replicas > 0)
                    hpa = hpa_replicas(value.metricValueFloat, TARGET_SIZE, current, 0.0)
                    api.patch_object(
                        "apps/v1", "deployments", "web", KEDA, {"spec": {"replicas": hpa}}
                    )
                    assert out.held is None, out.reason  # Prometheus answered every decision
                    wanted.append(out.replicas)
                    applied.append(hpa)
                    clock.advance(STEP_S)
            source.close()
            act.close()
    finally:
        prom.process.stop()
    assert applied == wanted
    # The demand moved the decision both ways, so a scaler that answered otherwise would show.
    assert wanted[0] < max(wanted) <= 15, wanted  # at most ceil(30 / 2): KEDA's formula at peak
    assert wanted[-1] < max(wanted), wanted
