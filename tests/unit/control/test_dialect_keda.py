"""A KEDA ScaledObject pasted from KEDA's docs: accepted as it is, decided as ``keda`` decides."""

import math
import re
import textwrap
from pathlib import Path

import pytest

from gpuscale.control import config
from gpuscale.control.targets import runtime
from gpuscale.errors import ConfigError
from gpuscale.metrics.prometheus import PrometheusSource
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.baseline import HpaBehavior, RatePolicy, ScalingRules
from gpuscale.scaling.catalogue import get
from gpuscale.scaling.keda import KedaConfig, KedaFallback
from gpuscale.scaling.step import DecisionStep, StepSettings
from tests.support.dialects import FollowingPods, ScriptedQuery

QUERY = 'sum(rate(http_requests_total{deployment="my-deployment"}[2m]))'

HEAD = """\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: web, namespace: default}
spec:
  targets:
"""

# The first example of https://keda.sh/docs/2.18/scalers/prometheus/ (Examples): its
# ScaledObject's spec, fields and values as the page gives them.
DOCS_EXAMPLE = """\
  - scaleTargetRef:
      name: my-deployment
    triggers:
    - type: prometheus
      metadata:
        serverAddress: http://<prometheus-host>:9090
        threshold: '100'
        query: sum(rate(http_requests_total{deployment="my-deployment"}[2m]))
"""

# https://keda.sh/docs/2.15/reference/scaledobject-spec/ (Overview: the spec's optional
# sections with the values shown there) around the trigger of
# https://keda.sh/docs/2.18/scalers/prometheus/ (Trigger Specification, every field).
SPEC_REFERENCE = """\
  - scaleTargetRef:
      name: my-deployment
    pollingInterval:  30
    cooldownPeriod:   300
    initialCooldownPeriod:  0
    idleReplicaCount: 0
    minReplicaCount:  1
    maxReplicaCount:  100
    fallback:
      failureThreshold: 3
      replicas: 6
    advanced:
      restoreToOriginalReplicaCount: false
      horizontalPodAutoscalerConfig:
        behavior:
          scaleDown:
            stabilizationWindowSeconds: 300
            policies:
            - type: Percent
              value: 100
              periodSeconds: 15
    triggers:
    - type: prometheus
      metadata:
        serverAddress: http://<prometheus-host>:9090
        query: sum(rate(http_requests_total{deployment="my-deployment"}[2m]))
        threshold: '100.50'
        activationThreshold: '5.5'
        namespace: example-namespace
        customHeaders: X-Client-Id=cid,X-Tenant-Id=tid,X-Organization-Id=oid
        ignoreNullValues: false
        queryParameters: key-1=value-1,key-2=value-2
        unsafeSsl: "false"
        timeout: "1000"
"""

DOCS_EXAMPLE_GPUSCALE_WAY = KedaConfig(
    threshold=100.0,
    query_signal=Signal("prometheus", query=QUERY, optional=True),  # ignoreNullValues: true
    min_replicas=0,
    max_replicas=100,
)

SPEC_REFERENCE_GPUSCALE_WAY = KedaConfig(
    threshold=100.5,
    activation_threshold=5.5,
    query_signal=Signal("prometheus", query=QUERY),
    polling_interval_s=30.0,
    cooldown_period_s=300.0,
    min_replicas=0,
    active_min_replicas=1,
    max_replicas=100,
    fallback=KedaFallback(failure_threshold=3, replicas=6),
    behavior=HpaBehavior(
        scale_down=ScalingRules((RatePolicy("Percent", 100, 15.0),), "Max", 300.0)
    ),
)


def load(tmp_path: Path, targets: str) -> config.GPUScaler:
    path = tmp_path / "scaler.yaml"
    path.write_text(HEAD + targets)
    return config.load(path)[0]


def decisions(step: DecisionStep, values: list[float | None], start: int) -> list[tuple]:
    """Replicas, held or not, at each 15 s sync while the query reads ``values``."""
    workload, state, out = FollowingPods(start), step.policy.initial_state(), []
    step.source.value = lambda t: values[min(int(t // 15) - 1, len(values) - 1)]
    for i in range(len(values)):
        t = 15.0 * (i + 1)
        outcome = step.run(workload, lambda t=t: t, state)
        state = outcome.state
        out.append((outcome.replicas, outcome.held is not None))
    return out


def both(tmp_path: Path, targets: str, way: KedaConfig) -> tuple[DecisionStep, DecisionStep]:
    doc = load(tmp_path, targets)
    rt = runtime(doc, doc.spec.targets[0])
    assert config.policy_config(doc.spec.targets[0]) == way
    settings = StepSettings(rt.spec.min_replicas, rt.spec.max_replicas, namespace="default")
    pasted = DecisionStep(rt.policy, ScriptedQuery(lambda t: 0.0), settings, rt.policy.signal_path)
    policy = get("keda").build(way, "keda")
    ours = DecisionStep(policy, ScriptedQuery(lambda t: 0.0), settings, policy.signal_path)
    return pasted, ours


def test_the_docs_prometheus_example_decides_as_keda_the_gpuscale_way(tmp_path):
    pasted, ours = both(tmp_path, DOCS_EXAMPLE, DOCS_EXAMPLE_GPUSCALE_WAY)
    # Idle, a burst of 730 requests/s, then quiet (an empty result reads as 0).
    values = [0.0] * 4 + [730.0] * 12 + [0.0] * 50
    got = decisions(pasted, values, start=0)
    assert got == decisions(ours, values, start=0)
    replicas = [r for r, _ in got]
    assert replicas[4] == 1  # activated from zero to max(minReplicaCount, 1)
    assert max(replicas) == math.ceil(730 / 100)  # the HPA's AverageValue: ceil(value / 100)
    assert replicas[-1] == 0  # back to zero after the cooldown
    assert pasted.source.queries == {QUERY}  # the query as written, no matcher added


def test_the_spec_reference_with_fallback_and_idle_count_decides_alike(tmp_path):
    pasted, ours = both(tmp_path, SPEC_REFERENCE, SPEC_REFERENCE_GPUSCALE_WAY)
    # Busy, then Prometheus fails for 8 syncs, then the load is gone.
    values: list[float | None] = [0.0] * 2 + [300.0] * 10 + [None] * 8 + [0.0] * 50
    got = decisions(pasted, values, start=0)
    assert got == decisions(ours, values, start=0)
    replicas = [r for r, _ in got]
    assert replicas[2] == 1  # idle 0 -> minReplicaCount 1 on activation
    assert replicas[11] == math.ceil(300 / 100.5)
    failing = replicas[12:20]
    # Three failed reads are tolerated, the fourth heads for fallback.replicas (6), the
    # scale-up policies (+4 pods or +100 % per 15 s) allowing it at once from 3.
    assert failing[:3] == [3, 3, 3]
    assert failing[3:] == [6] * 5
    assert all(held for _, held in got[12:20])  # each still reported as a failed read
    assert replicas[-1] == 0  # inactive past the cooldown: down to idleReplicaCount


def test_the_triggers_server_settings_become_the_targets_own_source(tmp_path):
    doc = load(tmp_path, SPEC_REFERENCE)
    server = doc.spec.targets[0].metrics.server
    assert server.address == "http://<prometheus-host>:9090"
    assert server.headers == {
        "X-Client-Id": "cid",
        "X-Tenant-Id": "tid",
        "X-Organization-Id": "oid",
    }
    assert server.query_parameters == {
        "key-1": "value-1",
        "key-2": "value-2",
        "namespace": "example-namespace",
    }
    assert (server.insecure_skip_verify, server.timeout_seconds) == (False, 1.0)
    rt = runtime(doc, doc.spec.targets[0])
    assert isinstance(rt.source, PrometheusSource)
    assert rt.source.timeout_s == 1.0


@pytest.mark.parametrize(
    ("change", "where", "says"),
    [
        (
            (
                "      metadata:\n",
                "      authenticationRef: {name: keda-prom-creds}\n      metadata:\n",
            ),
            "triggers[0].authenticationRef",
            "gpuscale reads no TriggerAuthentication",
        ),
        (
            ("        threshold: '100'\n", "        threshold: '100'\n        authModes: bearer\n"),
            "triggers[0].metadata.authModes",
            "is not supported",
        ),
        (("type: prometheus", "type: kafka"), "triggers[0].type", "prometheus"),
        (("threshold: '100'", "threshold: 'lots'"), "metadata.threshold", "valid number"),
        (("[2m]))", "[2m])"), "metadata.query", "not valid PromQL"),
        (
            ("  - scaleTargetRef:\n", "  - idleReplicaCount: 1\n    scaleTargetRef:\n"),
            "spec.targets[0]",
            "idleReplicaCount 1 must be below minReplicaCount",
        ),
    ],
)
def test_what_gpuscale_does_not_do_is_refused_in_one_line(tmp_path, change, where, says):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, DOCS_EXAMPLE.replace(*change))
    message = str(info.value)
    assert "\n" not in message
    assert where in message
    assert says in message


def test_two_triggers_are_refused_naming_the_list(tmp_path):
    second = DOCS_EXAMPLE.split("    triggers:\n")[1]
    with pytest.raises(ConfigError, match=r"triggers: .*at most 1 item"):
        load(tmp_path, DOCS_EXAMPLE + second)


def test_the_guides_examples_load_as_they_are_printed(tmp_path):
    guide = (Path(__file__).parents[3] / "docs" / "autoscaler.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", guide, re.DOTALL)
    scalers = [b for b in blocks if "kind: GPUScaler" in b]
    assert len(scalers) >= 3
    kinds = set()
    for i, text in enumerate(scalers):
        path = tmp_path / f"guide-{i}.yaml"
        path.write_text(text)
        for target in config.load(path)[0].spec.targets:
            kinds.add(type(config.policy_config(target)).__name__)  # its own checks pass
    assert kinds == {"HpaConfig", "KedaConfig"}


# The same example as the page prints it, the whole document.
DOCS_DOCUMENT = (
    "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n"
    "  name: prometheus-scaledobject\n  namespace: default\nspec:\n"
    + textwrap.indent(textwrap.dedent(DOCS_EXAMPLE.replace("  - ", "    ", 1)), "  ")
)


def test_a_whole_scaledobject_document_is_a_gpuscaler_of_its_name(tmp_path):
    path = tmp_path / "scaledobject.yaml"
    path.write_text(DOCS_DOCUMENT)
    [doc] = config.load(path)
    assert (doc.metadata.name, doc.metadata.namespace) == ("prometheus-scaledobject", "default")
    assert config.policy_config(doc.spec.targets[0]) == DOCS_EXAMPLE_GPUSCALE_WAY
    path.write_text(DOCS_DOCUMENT.replace("threshold: '100'", "threshold: 'lots'"))
    with pytest.raises(ConfigError) as info:
        config.load(path)
    # Its own line and key path, not those of the GPUScaler it is read as.
    assert f"{path}:13 spec.triggers[0].metadata.threshold:" in str(info.value)


def test_a_paused_scaledobject_is_refused_naming_the_annotation(tmp_path):
    path = tmp_path / "scaledobject.yaml"
    path.write_text(
        DOCS_DOCUMENT.replace(
            "  namespace: default\n",
            '  namespace: default\n  annotations:\n    autoscaling.keda.sh/paused: "true"\n',
        )
    )
    with pytest.raises(ConfigError, match=r"metadata\.annotations\.autoscaling\.keda\.sh/paused"):
        config.load(path)
