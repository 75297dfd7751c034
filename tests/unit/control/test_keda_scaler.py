"""``gpuscale keda-scaler`` driven as KEDA drives it, beside ``gpuscale autoscale``'s controller.

A real gRPC client (grpcio, over mutual TLS) makes KEDA's calls against the real
server; the cluster is the Kubernetes API double through the real ``KubeActuator``,
the signals the real in-process store. Two identical Deployments get the same
per-pod data at the same clock: one is scaled by the controller as ``gpuscale
autoscale`` runs it, the other by the HPA KEDA would make, modelled from
Kubernetes' replica calculator (``tests.support.keda.hpa_replicas``) on the
metric the scaler returns, with the HPA's tolerance set to 0 as
docs/keda-scaler.md asks. Decision by decision, the two must agree.
"""

import grpc
import numpy as np
import pytest

from gpuscale.control.config import load
from gpuscale.control.controller import Controller
from gpuscale.control.seams import Settings
from gpuscale.control.targets import runtimes
from gpuscale.keda import externalscaler_pb2 as pb
from gpuscale.keda.scaler import METRIC_NAME, TARGET_SIZE, KedaScaler
from tests.support.control import saved_state
from tests.support.keda import (
    gpuscaler,
    hpa_replicas,
    keda_client,
    make_tls_files,
    scaled_object,
    scaler_server,
)

UTIL = "DCGM_FI_DEV_GPU_UTIL"
IN_FLIGHT = "gpuscale_serving_requests_in_flight"
QUEUE = "gpuscale_serving_queue_requests"
CTL, KEDA = "ctl", "keda"
"""The controller's namespace and the KEDA scaler's: one Deployment ``web`` in each."""

POLICIES = {
    "keda": {"policy": "keda", "threshold": "2", "pollingIntervalSeconds": "15"},
    "hpa": {"policy": "hpa", "targetAverageValue": "50", "downscaleStabilizationSeconds": "30"},
    "hybrid": {"policy": "hybrid", "perReplica": "3"},
}
"""Each policy's parameters as trigger metadata (strings, as KEDA passes them)."""

BOUNDS = {"minReplicas": "1", "maxReplicas": "24"}

DEMAND = [3, 6, 12, 20, 26, 30, 30, 24, 18, 12, 9, 6, 4, 3, 2] + [1] * 16
"""Requests in flight across the workload at each decision: a rise, a fall, then quiet long
enough (4 minutes) for every policy's scale-in delay (KEDA's and the HPA's 300 s window)."""


def scrape(store, kapi, t: float, demand: float) -> None:
    """One scrape of both namespaces: each pod carries its share of the demand."""
    pods = {ns: sorted(p["metadata"]["name"] for p in kapi.pods(ns)) for ns in (CTL, KEDA)}
    labels = [{"namespace": ns, "pod": p} for ns in pods for p in pods[ns]]
    share = [demand / len(pods[ns]) for ns in pods for _p in pods[ns]]
    store.ingest(t, IN_FLIGHT, labels, np.array(share))
    util = [min(100.0, 25.0 * s) for s in share]
    store.ingest(t, UTIL, labels, np.array(util))
    queues = [{"namespace": ns, "deployment": "web"} for ns in pods]
    store.ingest(t, QUEUE, queues, np.zeros(len(queues)))


def replicas_of(kapi, namespace: str) -> int:
    return int(kapi.get("apps/v1", "deployments", "web", namespace)["spec"]["replicas"])


@pytest.fixture
def tls(tmp_path):
    return make_tls_files(tmp_path)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_keda_sequence_over_mutual_tls_gives_the_controllers_replicas(
    policy, kapi, kact, kclock, store, tmp_path, tls
):
    metadata = {**POLICIES[policy], **BOUNDS, "scaleTargetName": "web"}
    kapi.create_deployment("web", CTL, replicas=2)
    kapi.create_deployment("web", KEDA, replicas=2)
    config = tmp_path / "scaler.yaml"
    config.write_text(gpuscaler(metadata, CTL))
    controller = Controller(
        runtimes(load(config)),
        store,
        kact,
        settings=Settings(sync_period_s=15.0, workers=1),
        clock=kclock,
    )
    scaler = KedaScaler(store, kact, sync_period_s=15.0, clock=kclock)
    ref = scaled_object("web-scaledobject", KEDA, scalerAddress="gpuscale:9443", **metadata)
    with (
        scaler_server(scaler, tls.server(mutual=True)) as server,
        keda_client(
            server.port, ca=tls.server_cert, cert=tls.client_cert, key=tls.client_key
        ) as keda,
    ):
        [spec] = keda.GetMetricSpec(ref, timeout=10).metricSpecs
        assert (spec.metricName, spec.targetSize, spec.targetSizeFloat) == (
            METRIC_NAME,
            TARGET_SIZE,
            float(TARGET_SIZE),
        )
        wanted, applied = [], []
        for demand in DEMAND:
            scrape(store, kapi, kclock() - 1, demand)
            [out] = controller.sync()
            current = replicas_of(kapi, KEDA)
            # KEDA's metrics adapter: GetMetrics, then IsActive; its polling loop: IsActive.
            [value] = keda.GetMetrics(
                pb.GetMetricsRequest(scaledObjectRef=ref, metricName=spec.metricName), timeout=10
            ).metricValues
            active = keda.IsActive(ref, timeout=10).result
            assert keda.IsActive(ref, timeout=10).result is active  # one decision per period
            hpa = hpa_replicas(
                value.metricValueFloat or value.metricValue,
                spec.targetSizeFloat,
                current,
                tolerance=0.0,
            )
            assert value.metricValue == out.replicas  # the decision itself, KEDA's int field
            assert active is (out.replicas > 0)
            kapi.patch_object("apps/v1", "deployments", "web", KEDA, {"spec": {"replicas": hpa}})
            wanted.append(out.replicas)
            applied.append(hpa)
            kclock.advance(15)
    assert applied == wanted
    peak = wanted.index(max(wanted))
    assert wanted[0] < max(wanted) < 24, f"{policy} must scale out within bounds: {wanted}"
    assert wanted[-1] < max(wanted), f"{policy} must scale in: {wanted}"
    assert wanted[:peak] == sorted(wanted[:peak])
    assert [replicas_of(kapi, ns) for ns in (CTL, KEDA)] == [wanted[-1], wanted[-1]]
    # The policy's state is kept where the controller keeps it (the state ConfigMap),
    # in the same form.
    saved = {ns: saved_state(kapi, "web", namespace=ns) for ns in (CTL, KEDA)}
    assert saved[KEDA]["policy"] == saved[CTL]["policy"] == policy
    assert saved[KEDA]["state"].keys() == saved[CTL]["state"].keys()


def test_stream_is_active_pushes_at_once_and_on_each_change(kapi, kact, kclock, store, tls):
    kapi.create_deployment("web", KEDA, replicas=1)
    metadata = {**POLICIES["keda"], "minReplicas": "0", "maxReplicas": "4"}
    ref = scaled_object("web", KEDA, scaleTargetName="web", **metadata)
    # Each decision is fresh (sync period ~0), so the stream re-decides every 50 ms.
    scaler = KedaScaler(store, kact, sync_period_s=1e-9, clock=kclock)
    with (
        scaler_server(scaler, tls.server(mutual=False)) as server,
        keda_client(server.port, ca=tls.server_cert) as keda,
    ):
        scrape_one(store, kapi, kclock() - 1, 4.0)
        stream = keda.StreamIsActive(ref, timeout=20)
        assert next(stream).result is True
        for _ in range(20):  # KEDA's cooldown: idle for cooldownPeriod before zero
            kclock.advance(30)
            scrape_one(store, kapi, kclock() - 1, 0.0)
        assert next(stream).result is False
        stream.cancel()


def scrape_one(store, kapi, t: float, demand: float) -> None:
    pods = sorted(p["metadata"]["name"] for p in kapi.pods(KEDA))
    store.ingest(
        t, IN_FLIGHT, [{"namespace": KEDA, "pod": p} for p in pods], np.full(len(pods), demand)
    )
    store.ingest(t, QUEUE, [{"namespace": KEDA, "deployment": "web"}], np.zeros(1))


def test_tls_refuses_plain_clients_wrong_cas_and_clients_without_a_certificate(
    kapi, kact, kclock, store, tls
):
    kapi.create_deployment("web", KEDA, replicas=3)
    ref = scaled_object("web", KEDA, scaleTargetName="web", **POLICIES["hpa"], **BOUNDS)
    scaler = KedaScaler(store, kact, clock=kclock)
    with scaler_server(scaler, tls.server(mutual=True)) as server:
        port = server.port
        attempts = {
            "plaintext": dict(ca=None),
            "unknown server CA": dict(ca=tls.other_ca, cert=tls.client_cert, key=tls.client_key),
            "no client certificate": dict(ca=tls.server_cert),
            "client certificate from another CA": dict(
                ca=tls.server_cert, cert=tls.other_ca, key=tls.other_ca.with_suffix(".key")
            ),
        }
        for what, how in attempts.items():
            with keda_client(port, **how) as keda, pytest.raises(grpc.RpcError) as err:
                keda.IsActive(ref, timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE, what
        with keda_client(
            port, ca=tls.server_cert, cert=tls.client_cert, key=tls.client_key
        ) as keda:
            # No data: the fail-safe holds at the current count, and says so.
            assert keda.IsActive(ref, timeout=5).result is True
            [value] = keda.GetMetrics(
                pb.GetMetricsRequest(scaledObjectRef=ref, metricName=METRIC_NAME), timeout=5
            ).metricValues
            assert (value.metricValue, value.metricValueFloat) == (3, 3.0)


def test_bad_metadata_is_one_line_naming_the_scaledobject_and_key(kapi, kact, kclock, store, tls):
    scaler = KedaScaler(store, kact, clock=kclock)
    cases = {
        "ScaledObject keda/web trigger metadata policy: is required": {"maxReplicas": "3"},
        "ScaledObject keda/web trigger metadata perReplca: unknown key": {
            "policy": "hybrid",
            "scaleTargetName": "web",
            "maxReplicas": "3",
            "perReplca": "2",
        },
        "ScaledObject keda/web trigger metadata maxReplicas: ": {
            "policy": "hpa",
            "scaleTargetName": "web",
            "maxReplicas": "many",
        },
        "ScaledObject keda/web trigger metadata policy: unknown policy 'nope'": {
            "policy": "nope",
            "scaleTargetName": "web",
            "maxReplicas": "3",
        },
    }
    with (
        scaler_server(scaler, tls.server(mutual=False)) as server,
        keda_client(server.port, ca=tls.server_cert) as keda,
    ):
        for start, metadata in cases.items():
            with pytest.raises(grpc.RpcError) as err:
                keda.GetMetricSpec(scaled_object("web", KEDA, **metadata), timeout=5)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.value.details().startswith(start), err.value.details()
            assert "\n" not in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            keda.GetMetrics(
                pb.GetMetricsRequest(
                    scaledObjectRef=scaled_object("web", KEDA, **POLICIES["hpa"], **BOUNDS),
                    metricName="other",
                ),
                timeout=5,
            )
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_cluster_failure_is_unavailable_and_the_next_call_decides_again(
    kapi, kact, kclock, store, tls
):
    ref = scaled_object("web", KEDA, scaleTargetName="web", **POLICIES["hpa"], **BOUNDS)
    scaler = KedaScaler(store, kact, clock=kclock)
    with (
        scaler_server(scaler, tls.server(mutual=False)) as server,
        keda_client(server.port, ca=tls.server_cert) as keda,
    ):
        with pytest.raises(grpc.RpcError) as err:
            keda.IsActive(ref, timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert err.value.details() == (
            "kube_unavailable: GET /apis/apps/v1/namespaces/keda/deployments/web/scale: "
            'HTTP 404: deployments.apps "web" not found'
        )
        kapi.create_deployment("web", KEDA, replicas=2)
        assert keda.IsActive(ref, timeout=10).result is True  # a failure is not kept
