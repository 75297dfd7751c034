"""The CRD's CEL rules parse, pass what the controller accepts and refuse what it refuses.

The rules are evaluated with cel-python (a CEL implementation independent of the
API server's cel-go) against the object as the API server hands it to CEL: every
``number`` field a double, every ``integer`` an int.
"""

import copy
from pathlib import Path

import celpy
import pytest
import yaml

from gpuscale.control import config, crd
from gpuscale.control.targets import runtimes
from gpuscale.errors import ConfigError

ROOT = Path(__file__).parents[3]
EXAMPLE = ROOT / "deploy" / "examples" / "gpuscaler.yaml"

ENV = celpy.Environment()


def target_schema() -> dict:
    return crd.spec_schema()["properties"]["targets"]["items"]


def typed(value, node: dict):
    """``value`` with each number the type the schema gives it, as the API server does."""
    kind = node.get("type")
    if kind == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind == "object" and isinstance(value, dict):
        props, extra = node.get("properties", {}), node.get("additionalProperties")
        return {
            k: typed(v, props.get(k) or (extra if isinstance(extra, dict) else {}))
            for k, v in value.items()
        }
    if kind == "array" and isinstance(value, list):
        return [typed(v, node.get("items", {})) for v in value]
    return value


def failures(target: dict) -> list[str]:
    """Messages of the CEL rules ``target`` breaks, on the target and its policy."""
    schema = target_schema()
    obj = typed(target, schema)
    found = []
    for node, value in ((schema, obj), (schema["properties"]["policy"], obj["policy"])):
        for rule in node["x-kubernetes-validations"]:
            program = ENV.program(ENV.compile(rule["rule"]))
            if not bool(program.evaluate({"self": celpy.json_to_cel(value)})):
                found.append(rule["message"])
    return found


def controller_refuses(target: dict, tmp_path: Path) -> bool:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["targets"] = [target]
    path = tmp_path / "scaler.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        runtimes(config.load(path))  # as gpuscale autoscale reads --config at start
    except ConfigError:
        return True
    return False


def example_targets() -> list[dict]:
    return yaml.safe_load(EXAMPLE.read_text())["spec"]["targets"]


def test_every_rule_is_valid_cel():
    schema = target_schema()
    rules = (
        schema["x-kubernetes-validations"]
        + schema["properties"]["policy"]["x-kubernetes-validations"]
    )
    assert len(rules) == len(crd.TARGET_RULES) + len(crd.POLICY_RULES)
    for rule in rules:
        ENV.compile(rule["rule"])  # raises CELParseError on a syntax error
    with pytest.raises(celpy.CELParseError):
        ENV.compile("self.minReplicas <=")


def test_the_committed_crd_carries_the_rules():
    doc = yaml.safe_load((ROOT / "deploy" / "crd" / "gpuscalers.gpuscale.io.yaml").read_text())
    spec = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec == crd.spec_schema()


def test_the_example_targets_pass_every_rule(tmp_path):
    for target in example_targets():
        assert failures(target) == []
        assert not controller_refuses(target, tmp_path)


def hpa(**changes) -> dict:
    target = copy.deepcopy(example_targets()[0])
    policy = changes.pop("policy", {})
    target["policy"].update(policy)
    target.update(changes)
    return target


def with_policy(policy: dict, **changes) -> dict:
    return {**hpa(), "policy": policy, **changes}


# (target, the rule's message) for values the controller refuses, and the valid edge
# next to each, which both accept.
REFUSED = [
    (hpa(minReplicas=5, maxReplicas=4), "minReplicas must not be above maxReplicas"),
    (hpa(minReplicas=0), "hpa: minReplicas must be 1 or more (KEDA scales to zero)"),
    (hpa(policy={"targetAverageValue": 0}), "hpa: targetAverageValue must be > 0"),
    (hpa(policy={"targetAverageValue": -5.5}), "hpa: targetAverageValue must be > 0"),
    (hpa(policy={"tolerance": 1.0}), "tolerance must be in [0, 1)"),
    (with_policy({"name": "static", "replicas": -1}), "static: replicas must be 0 or more"),
    (with_policy({"name": "keda", "threshold": 0}), "keda: threshold must be > 0"),
    (
        with_policy({"name": "keda", "threshold": 5, "tolerance": -0.1}),
        "tolerance must be in [0, 1)",
    ),
    (
        with_policy({"name": "kpa", "target": -1}, metrics={"scrapeIntervalSeconds": 1}),
        "kpa: target must be > 0",
    ),
    (
        with_policy({"name": "kpa", "target": 1}),
        "kpa reads concurrency every second: set metrics.scrapeIntervalSeconds: 1 "
        "and scrape the pods' serving metrics that often",
    ),
    (
        with_policy({"name": "predictive", "perReplica": 0, "forecast": {}}),
        "perReplica must be > 0",
    ),
    (
        with_policy({"name": "hybrid", "perReplica": 1, "smTarget": 1.5, "forecast": {}}),
        "hybrid: smTarget must be in (0, 1]",
    ),
]

ACCEPTED = [
    hpa(minReplicas=4, maxReplicas=4),
    hpa(minReplicas=1),
    hpa(policy={"targetAverageValue": 0.001, "tolerance": 0}),
    with_policy({"name": "static", "replicas": 0}, minReplicas=0),
    with_policy({"name": "keda", "threshold": 0.5}, minReplicas=0),
    with_policy({"name": "kpa", "target": 1}, metrics={"scrapeIntervalSeconds": 1}),
]


@pytest.mark.parametrize(("target", "message"), REFUSED, ids=[m for _, m in REFUSED])
def test_crd_and_controller_both_refuse(target, message, tmp_path):
    assert failures(target) == [message]
    assert controller_refuses(target, tmp_path)


@pytest.mark.parametrize("target", ACCEPTED)
def test_crd_and_controller_both_accept_the_edge(target, tmp_path):
    assert failures(target) == []
    assert not controller_refuses(target, tmp_path)


def test_a_rule_names_only_its_own_policies():
    # kpa has a key "target" and hpa does not: hpa's rules never look at kpa's keys.
    assert failures(with_policy({"name": "keda", "threshold": 2, "target": -1})) == []


# A KEDA ScaledObject's spec as a target (control.scaledobject): metadata values are
# strings, as KEDA's CRD has them.
SCALED_OBJECT = {
    "scaleTargetRef": {"name": "web"},
    "minReplicaCount": 1,
    "maxReplicaCount": 5,
    "triggers": [
        {
            "type": "prometheus",
            "metadata": {"serverAddress": "http://p:9090", "query": "sum(x)", "threshold": "5"},
        }
    ],
}


def target_failures(target: dict) -> list[str]:
    """Messages of the target-level CEL rules ``target`` breaks (it may have no policy)."""
    schema = target_schema()
    value = celpy.json_to_cel(typed(target, schema))
    return [
        rule["message"]
        for rule in schema["x-kubernetes-validations"]
        if not bool(ENV.program(ENV.compile(rule["rule"])).evaluate({"self": value}))
    ]


def test_a_scaledobject_spec_is_a_target_for_the_crd_and_the_controller(tmp_path):
    schema = target_schema()
    assert set(SCALED_OBJECT) <= set(schema["properties"])
    assert schema["required"] == ["scaleTargetRef"]
    metadata = schema["properties"]["triggers"]["items"]["properties"]["metadata"]
    assert metadata["x-kubernetes-preserve-unknown-fields"] is True  # '5' stays a string
    assert target_failures(SCALED_OBJECT) == []
    assert not controller_refuses(SCALED_OBJECT, tmp_path)


def test_a_target_in_both_spellings_is_refused_by_both(tmp_path):
    both = {**SCALED_OBJECT, "maxReplicas": 5, "policy": {"name": "hpa"}}
    assert target_failures(both) == [
        "give either policy (gpuscale's spelling) or triggers (a KEDA ScaledObject's spec), "
        "not both"
    ]
    assert controller_refuses(both, tmp_path)
    neither = {"scaleTargetRef": {"name": "web"}, "maxReplicas": 5}
    assert "give either policy" in target_failures(neither)[0]
    assert controller_refuses(neither, tmp_path)
