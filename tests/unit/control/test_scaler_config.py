"""The GPUScaler file: valid documents build the policies' own configs; bad ones get one line."""

import textwrap
from pathlib import Path

import pytest
import yaml

from gpuscale.control import config
from gpuscale.control.params import KINDS, camel, model_for
from gpuscale.errors import ConfigError
from gpuscale.scaling.hpa import HpaConfig
from gpuscale.scaling.keda import KedaConfig

EXAMPLE = Path(__file__).parents[3] / "deploy" / "examples" / "gpuscaler.yaml"

BASE = """\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: llm, namespace: serving}
spec:
  targets:
    - scaleTargetRef: {name: a}
      maxReplicas: 8
      policy: {name: hpa, targetAverageValue: 60}
    - scaleTargetRef: {name: b}
      maxReplicas: 4
      policy: {name: keda, threshold: 100}
    - scaleTargetRef: {name: c, kind: StatefulSet}
      minReplicas: 2
      maxReplicas: 4
      policy:
        name: hpa
        targetAverageValue: 50
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scaler.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        config.load(write(tmp_path, text))
    message = str(info.value)
    assert "\n" not in message
    assert "Traceback" not in message
    return message


def test_example_in_deploy_loads_and_builds_every_policy():
    docs = config.load(EXAMPLE)
    built = [config.policy_config(t) for d in docs for t in d.spec.targets]
    assert isinstance(built[0], HpaConfig)
    assert isinstance(built[1], KedaConfig)
    assert (built[0].min_replicas, built[0].max_replicas) == (2, 16)
    assert built[0].downscale_stabilization_s == 120.0
    assert built[1].query_signal.matchers == {"namespace": "serving", "container": "embedder"}


def test_camel_case_keys_and_seconds_suffix():
    assert camel("target_average_value") == "targetAverageValue"
    assert camel("downscale_stabilization_s") == "downscaleStabilizationSeconds"
    assert camel("metric") == "metric"


def test_every_config_field_but_the_bounds_is_a_policy_key():
    # The schema is derived, not copied: each field of each live policy's config is a key.
    for kind in KINDS.values():
        keys = {f.alias for f in model_for(kind.config_type).model_fields.values()}
        fields = config.policy_model(kind).model_fields
        policy_keys = {f.alias or name for name, f in fields.items()}
        assert keys - {"minReplicas", "maxReplicas"} <= policy_keys
        assert "name" in policy_keys


def test_nested_dataclasses_round_trip_to_the_policy_config(tmp_path):
    text = BASE.replace(
        "policy: {name: hpa, targetAverageValue: 60}",
        "policy: {name: hpa, targetAverageValue: 60, behavior: "
        "{scaleUp: {policies: [{type: Pods, value: 2, periodSeconds: 30}], selectPolicy: Min}}}",
    )
    cfg = config.policy_config(config.load(write(tmp_path, text))[0].spec.targets[0])
    assert cfg.behavior.scale_up.policies[0].period_s == 30.0
    assert cfg.behavior.scale_up.select_policy == "Min"
    assert cfg.behavior.scale_down.stabilization_window_s == 300.0  # the API server default


def test_several_documents_and_a_list_both_load(tmp_path):
    two = (
        BASE
        + "---\n"
        + BASE.replace("name: llm", "name: other").replace("namespace: serving", "namespace: x")
    )
    assert len(config.load(write(tmp_path, two))) == 2
    doc = yaml.safe_load(BASE)
    listed = yaml.safe_dump([doc, {**doc, "metadata": {"name": "y", "namespace": "z"}}])
    assert [d.metadata.namespace for d in config.load(write(tmp_path, listed))] == ["serving", "z"]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # pydantic's own checks: the key path, the line, and why
        (
            "targetAverageValue: 50",
            "targetAverageVal: 50",
            ":17 spec.targets[2].policy.targetAverageVal: unknown key",
        ),
        (
            "threshold: 100",
            "threshold: lots",
            ":11 spec.targets[1].policy.threshold: input should be a valid number",
        ),
        (
            "maxReplicas: 4\n      policy: {name: keda",
            "maxReplicas: 0\n      policy: {name: keda",
            ":10 spec.targets[1].maxReplicas: input should be greater than or equal to 1",
        ),
        (
            "name: keda",
            "name: kedda",
            ":11 spec.targets[1].policy: unknown policy 'kedda'; use one of static, hpa",
        ),
        (
            "minReplicas: 2",
            "minReplicas: 9",
            ":12 spec.targets[2]: minReplicas 9 is above maxReplicas 4",
        ),
        ("      maxReplicas: 8\n", "", ":6 spec.targets[0].maxReplicas: is required"),
        # the policy config's own __post_init__ checks, aimed back at the YAML key
        (
            "targetAverageValue: 50",
            "targetAverageValue: -5",
            ":17 spec.targets[2].policy.targetAverageValue: -5.0 is out of range; use a positive",
        ),
        (
            "minReplicas: 2",
            "minReplicas: 0",
            ":13 spec.targets[2].minReplicas: 0 is out of range; use 1 or more",
        ),
        # two targets for one workload
        (
            "{name: c, kind: StatefulSet}",
            "{name: a}",
            ":12 spec.targets[2].scaleTargetRef: Deployment serving/a is already scaled by",
        ),
        (
            "apiVersion: gpuscale.io/v1alpha1",
            "apiVersion: gpuscale.io/v1",
            ":1 apiVersion: input should be 'gpuscale.io/v1alpha1'",
        ),
    ],
)
def test_bad_key_names_file_line_and_key_path(tmp_path, old, new, expected):
    assert old in BASE
    message = error_of(tmp_path, BASE.replace(old, new, 1))
    assert message.startswith(str(tmp_path / "scaler.yaml") + expected), message


def test_unreadable_empty_and_broken_yaml(tmp_path):
    with pytest.raises(ConfigError, match="cannot be read"):
        config.load(tmp_path / "absent.yaml")
    assert "holds no GPUScaler" in error_of(tmp_path, "")
    assert ":2: " in error_of(tmp_path, "a: [1\nb: 2\n")


def test_missing_policy_name_says_what_to_set(tmp_path):
    message = error_of(
        tmp_path, BASE.replace("{name: hpa, targetAverageValue: 60}", "{targetAverageValue: 60}")
    )
    assert "spec.targets[0].policy: policy has no name; set policy.name to one of" in message


def test_a_signal_may_be_a_raw_query_and_a_broken_one_is_refused_on_load(tmp_path):
    good = BASE.replace(
        "policy: {name: keda, threshold: 100}",
        "policy: {name: keda, threshold: 100}\n"
        "      metrics: {signals: {query_0: {metric: load, "
        "query: 'sum(rate(x{model=~\"l.*\"}[1m]))'}}}",
    )
    target = config.load(write(tmp_path, good))[0].spec.targets[1]
    assert target.metrics.signals["query_0"].query == 'sum(rate(x{model=~"l.*"}[1m]))'
    bad = good.replace("[1m]))", "[1m])")
    with pytest.raises(ConfigError, match=r"metrics\.signals: signal query_0: not valid PromQL"):
        config.load(write(tmp_path, bad))


@pytest.mark.parametrize("value", ['"=~llama.*"', '"!=mistral"', '"!~x|y"'])
def test_a_matcher_written_as_an_operator_is_refused_naming_the_raw_query(tmp_path, value):
    text = BASE.replace(
        "policy: {name: keda, threshold: 100}",
        f"policy: {{name: keda, threshold: 100}}\n      metrics: {{matchers: {{model: {value}}}}}",
    )
    with pytest.raises(ConfigError, match=r"metrics\.matchers: matcher model is a label equality"):
        config.load(write(tmp_path, text))
