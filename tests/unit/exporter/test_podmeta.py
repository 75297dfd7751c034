"""Pod labels and UIDs from an HTTPS double of the API server's Pod GET."""

import pytest

from gpuscale.exporter.collector import SnapshotFamilies
from gpuscale.exporter.configmap import in_cluster
from gpuscale.exporter.exposition import render
from gpuscale.exporter.podmeta import PodMetadata, sanitize_label_name
from gpuscale.fields import parse_counters
from tests.support.apiserver import ApiServer
from tests.support.exposition import parse

LABELS = {"app.kubernetes.io/name": "vllm", "team": "ml", "pod-template-hash": "abc"}


@pytest.fixture
def api(tmp_path):
    server = ApiServer(tmp_path / "sa")
    server.pods[("ml", "llm-0")] = {"uid": "3f7c-uid", "labels": LABELS}
    yield server
    server.stop()


def test_labels_sanitized_allowlist_and_uid(api):
    meta = PodMetadata(in_cluster("x", api.env()), labels=True, uid=True, allow=["^app", "team"])
    meta.update({("ml", "llm-0")})
    assert meta.get("ml", "llm-0") == ("3f7c-uid", {"app_kubernetes_io_name": "vllm", "team": "ml"})
    assert sanitize_label_name("a.b/c-d") == "a_b_c_d"


def test_each_pod_is_fetched_once_and_forgotten_when_it_lets_go(api):
    meta = PodMetadata(in_cluster("x", api.env()), labels=True, uid=False)
    for _ in range(3):
        meta.update({("ml", "llm-0")})
    assert api.gets.count("/api/v1/namespaces/ml/pods/llm-0") == 1
    sanitized = {"app_kubernetes_io_name": "vllm", "team": "ml", "pod_template_hash": "abc"}
    assert meta.get("ml", "llm-0") == (None, sanitized)  # no allowlist: all; no UID asked
    meta.update(set())
    assert meta.get("ml", "llm-0") is None


def test_a_pod_the_api_does_not_know_stays_unlabelled(api):
    meta = PodMetadata(in_cluster("x", api.env()), labels=True, uid=True)
    meta.update({("ml", "gone")})
    assert meta.get("ml", "gone") is None


class _Pods:
    def lookup(self, uuid, index, mig_instance_id=None):
        from gpuscale.exporter.pods import PodRef

        return PodRef("llm-0", "ml", "server") if index == 0 else None


def test_series_carry_pod_labels_among_labels_and_pod_uid_among_attributes(api, source):
    meta = PodMetadata(in_cluster("x", api.env()), labels=True, uid=True, allow=["team"])
    meta.update({("ml", "llm-0")})
    rows = parse_counters("DCGM_FI_DEV_GPU_UTIL, gauge, u\nDCGM_FI_DRIVER_VERSION, label, d")
    text = render(SnapshotFamilies(rows, pods=_Pods(), pod_meta=meta).build(source.sample(), {}))
    gpu0 = next(
        p for p, _ in parse(text.decode())["DCGM_FI_DEV_GPU_UTIL"].samples if dict(p)["gpu"] == "0"
    )
    keys = [k for k, _ in gpu0]
    assert keys[6:] == [
        "DCGM_FI_DRIVER_VERSION",
        "team",
        "container",
        "namespace",
        "pod",
        "pod_uid",
    ]
    assert dict(gpu0)["pod_uid"] == "3f7c-uid"
