"""A trigger's metadata is a GPUScaler target: the same schema, the same checks, one-line errors
naming the ScaledObject and the key."""

import textwrap

import pytest

from gpuscale.control.config import load
from gpuscale.control.targets import runtime
from gpuscale.errors import ConfigError
from gpuscale.keda.metadata import target_runtime

HYBRID = {
    "scalerAddress": "gpuscale-keda.gpuscale.svc:9443",  # KEDA's own keys reach us too
    "enableTLS": "true",
    "policy": "hybrid",
    "scaleTargetName": "llm",
    "scaleTargetKind": "StatefulSet",
    "minReplicasFromEnv": "2",  # KEDA resolved MIN_REPLICAS from the workload's env
    "maxReplicas": "16",
    "maxScaleUpStep": "4",
    "perReplica": "3.5",
    "metrics": "{matchers: {model: llama}, staleAfterSeconds: 90}",
}


def test_metadata_builds_the_target_a_gpuscaler_file_builds(tmp_path):
    path = tmp_path / "scaler.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            apiVersion: gpuscale.io/v1alpha1
            kind: GPUScaler
            metadata: {name: llm-so, namespace: serving}
            spec:
              targets:
              - scaleTargetRef: {kind: StatefulSet, name: llm}
                minReplicas: 2
                maxReplicas: 16
                maxScaleUpStep: 4
                metrics: {matchers: {model: llama}, staleAfterSeconds: 90}
                policy: {name: hybrid, perReplica: 3.5}
            """
        )
    )
    [doc] = load(path)
    want = runtime(doc, doc.spec.targets[0])
    got = target_runtime("llm-so", "serving", HYBRID)
    assert got.spec == want.spec
    assert got.ref == want.ref
    assert (got.ref.kind, got.ref.name, got.ref.namespace) == ("StatefulSet", "llm", "serving")
    assert got.policy.signals == want.policy.signals
    assert got.policy.signals["gpuscale_serving_requests_in_flight"].matchers == {
        "model": "llama",
        "namespace": "serving",
    }
    assert got.policy.inner.config == want.policy.inner.config
    assert got.policy.inner.config.per_replica == 3.5


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (
            {"scaleTargetName": "web", "maxReplicas": "3"},
            "ScaledObject ns/so trigger metadata policy: is required; name the gpuscale policy: "
            "one of static, hpa, keda, kpa, predictive, hybrid",
        ),
        (
            {"policy": "hpa", "maxReplicas": "3"},
            "ScaledObject ns/so trigger metadata scaleTargetName: is required; add it",
        ),
        (
            {"policy": "hpa", "scaleTargetName": "web", "maxReplicas": "3", "target": "5"},
            "ScaledObject ns/so trigger metadata target: unknown key; remove it or check its "
            "spelling (keys are camelCase)",
        ),
        (
            {"policy": "hpa", "scaleTargetName": "web", "maxReplicas": "3", "name": "kpa"},
            "ScaledObject ns/so trigger metadata name: unknown key; name the policy with the key "
            "policy",
        ),
        (
            {"policy": "hpa", "scaleTargetName": "Web!", "maxReplicas": "3"},
            "ScaledObject ns/so trigger metadata scaleTargetName: must be a DNS-1123 subdomain",
        ),
        (
            {"policy": "hpa", "scaleTargetName": "web", "maxReplicas": "3", "tolerance": "-1"},
            "ScaledObject ns/so trigger metadata tolerance: -1.0 is ",
        ),
        (
            {"policy": "hpa", "scaleTargetName": "web", "maxReplicas": "3", "metrics": "{a: [}"},
            "ScaledObject ns/so trigger metadata metrics",
        ),
        (
            {"policy": "hpa", "scaleTargetName": "web", "maxReplicas": "3", "metrics": "{a: 1}"},
            "ScaledObject ns/so trigger metadata metrics (at a): unknown key",
        ),
    ],
)
def test_a_mistake_is_one_line_naming_the_scaledobject_and_the_key(metadata, message):
    with pytest.raises(ConfigError) as err:
        target_runtime("so", "ns", metadata)
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_placement_is_a_target_key_as_in_a_gpuscaler():
    on = target_runtime("so", "ns", {**HYBRID, "placement": "true"})
    assert on.spec.placement is True
    assert target_runtime("so", "ns", HYBRID).spec.placement is False  # opt-in, as a GPUScaler's
