"""The CRD under deploy/crd is the config models' schema, and is structural."""

from pathlib import Path

import yaml

from gpuscale.control import config, crd
from gpuscale.control.params import KINDS

ROOT = Path(__file__).parents[3]
CRD_FILE = ROOT / "deploy" / "crd" / "gpuscalers.gpuscale.io.yaml"
EXAMPLE = ROOT / "deploy" / "examples" / "gpuscaler.yaml"


def schema() -> dict:
    doc = yaml.safe_load(CRD_FILE.read_text())
    return doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_file_is_what_the_models_generate():
    # Regenerate with: python -m gpuscale.control.crd > deploy/crd/gpuscalers.gpuscale.io.yaml
    assert CRD_FILE.read_text() == crd.render()


def walk(node: dict, path: str = ""):
    yield path, node
    for key, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural():
    # apiextensions.k8s.io/v1 rules: a type on every node (or preserve-unknown-fields),
    # no $ref, no anyOf/oneOf declaring types, OpenAPI 3.0 boolean exclusive bounds.
    for path, node in walk(schema()):
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        assert not {"$ref", "anyOf", "oneOf", "const", "$defs", "prefixItems"} & node.keys(), path
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            assert node.get(bound, True) is True, path


def policy_schema() -> dict:
    spec = schema()["properties"]["spec"]
    return spec["properties"]["targets"]["items"]["properties"]["policy"]


def test_policy_block_holds_every_policys_keys_and_names():
    props = policy_schema()["properties"]
    assert props["name"]["enum"] == list(KINDS)
    for kind in KINDS.values():
        fields = config.policy_model(kind).model_fields
        keys = {f.alias or name for name, f in fields.items()}
        assert keys <= props.keys(), kind.name


def validate(value, node: dict, path: str = "") -> list[str]:
    """The subset of OpenAPI validation the API server applies to these types."""
    if node.get("x-kubernetes-preserve-unknown-fields") and "type" not in node:
        return []
    if value is None:
        return [] if node.get("nullable") else [f"{path}: null"]
    kind = node["type"]
    ok = {
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
    }[kind]
    if not ok:
        return [f"{path}: not {kind}"]
    errors = []
    if "enum" in node and value not in node["enum"]:
        errors.append(f"{path}: not in enum")
    if "minimum" in node and value < node["minimum"]:
        errors.append(f"{path}: below minimum")
    if kind == "object":
        for req in node.get("required", []):
            if req not in value:
                errors.append(f"{path}.{req}: required")
        for key, sub in value.items():
            if key in node.get("properties", {}):
                errors += validate(sub, node["properties"][key], f"{path}.{key}")
            elif isinstance(node.get("additionalProperties"), dict):
                errors += validate(sub, node["additionalProperties"], f"{path}.{key}")
            elif "properties" in node:
                errors.append(f"{path}.{key}: unknown field")
    if kind == "array":
        for i, item in enumerate(value):
            errors += validate(item, node["items"], f"{path}[{i}]")
    return errors


def test_example_is_valid_for_both_the_crd_and_the_controller():
    doc = yaml.safe_load(EXAMPLE.read_text())
    assert validate(doc, schema()) == []
    assert config.load(EXAMPLE)[0].metadata.name == doc["metadata"]["name"]


def test_crd_refuses_what_the_models_refuse():
    doc = yaml.safe_load(EXAMPLE.read_text())
    target = doc["spec"]["targets"][0]
    for key, bad in (("maxReplicas", 0), ("minReplicas", "two"), ("remediate", "yes")):
        broken = {**target, key: bad}
        assert validate({**doc, "spec": {"targets": [broken]}}, schema()), key
    unknown = {**target, "maxReplica": 3}
    assert validate({**doc, "spec": {"targets": [unknown]}}, schema())
    bad_policy = {**target, "policy": {**target["policy"], "name": "oracle"}}
    assert validate({**doc, "spec": {"targets": [bad_policy]}}, schema())
