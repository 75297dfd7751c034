"""The GPUScaler CustomResourceDefinition, generated from the config models.

``deploy/crd/gpuscalers.gpuscale.io.yaml`` is this module's output (``python -m
gpuscale.control.crd > deploy/crd/gpuscalers.gpuscale.io.yaml``), and a test
fails when the two differ, so the file and the controller cannot drift apart.

Pydantic writes JSON Schema 2020-12; the API server wants a *structural*
OpenAPI v3.0 schema: no ``$ref``, a ``type`` on every node, ``nullable``
instead of a ``null`` branch, boolean ``exclusiveMinimum``, and no
``oneOf``/``anyOf`` that declares types of its own. The policy block, a union
tagged by ``name``, becomes one object holding every policy's keys with
``name`` an enum; which keys belong to which policy is checked by the
controller when it loads the document (the same models, per policy). A field
that takes one Signal or a list of them (KEDA's ``querySignal``) keeps its
value unpruned (``x-kubernetes-preserve-unknown-fields``).

A target may instead be a KEDA ScaledObject's ``spec`` (``control.scaledobject``):
its keys sit beside gpuscale's in the target's schema, and a CEL rule asks for
exactly one of ``policy`` and ``triggers``.

What OpenAPI cannot say is said in CEL (``x-kubernetes-validations``, served by
Kubernetes 1.25 and later): a target's ``minReplicas`` is not above its
``maxReplicas``, and each policy's target value is in the range its config
accepts (``POLICY_RULES``). A test evaluates every rule against objects the
controller accepts and refuses.
"""

import sys
from dataclasses import dataclass
from typing import Any

import yaml

from gpuscale.control.config import API_VERSION, KIND, GPUScalerSpec
from gpuscale.control.scaledobject import ScaledObjectTarget
from gpuscale.control.status import GPUScalerStatus

GROUP, VERSION = API_VERSION.split("/")
PLURAL = "gpuscalers"

_DROP = {"title", "default", "discriminator", "$defs"}


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """A bound on one policy parameter, checked by the API server as its config checks it.

    Attributes:
        policies: The ``policy.name`` values the bound applies to.
        key: The parameter's key in the ``policy`` block.
        condition: CEL with ``{v}`` for the parameter's value (a double for a ``number``).
        message: What the API server answers when the condition is false.
    """

    policies: tuple[str, ...]
    key: str
    condition: str
    message: str

    def rule(self) -> dict[str, str]:
        """The ``x-kubernetes-validations`` entry on the ``policy`` object.

        Returns:
            ``{"rule": ..., "message": ...}``; true for other policies and when the key
            is absent (its default is valid).
        """
        names = ", ".join(f"'{name}'" for name in self.policies)
        check = self.condition.format(v=f"self.{self.key}")
        return {
            "rule": f"!(self.name in [{names}]) || !has(self.{self.key}) || {check}",
            "message": self.message,
        }


# The controller's own checks (each config's __post_init__), for the values a user
# sets first: what one replica should carry.
POLICY_RULES = (
    PolicyRule(("static",), "replicas", "{v} >= 0", "static: replicas must be 0 or more"),
    PolicyRule(("hpa",), "targetAverageValue", "{v} > 0.0", "hpa: targetAverageValue must be > 0"),
    PolicyRule(
        ("hpa", "keda"), "tolerance", "{v} >= 0.0 && {v} < 1.0", "tolerance must be in [0, 1)"
    ),
    PolicyRule(("keda",), "threshold", "{v} > 0.0", "keda: threshold must be > 0"),
    PolicyRule(("kpa",), "target", "{v} > 0.0", "kpa: target must be > 0"),
    PolicyRule(("predictive", "hybrid"), "perReplica", "{v} > 0.0", "perReplica must be > 0"),
    PolicyRule(
        ("hybrid",), "smTarget", "{v} > 0.0 && {v} <= 1.0", "hybrid: smTarget must be in (0, 1]"
    ),
)

TARGET_RULES = (
    {
        "rule": "has(self.policy) != has(self.triggers)",
        "message": "give either policy (gpuscale's spelling) or triggers (a KEDA ScaledObject's "
        "spec), not both",
    },
    {
        "rule": "!has(self.policy) || has(self.maxReplicas)",
        "message": "maxReplicas is required with policy",
    },
    {
        "rule": "!has(self.policy) || !has(self.minReplicas) || "
        "self.minReplicas <= self.maxReplicas",
        "message": "minReplicas must not be above maxReplicas",
    },
    {
        "rule": "!has(self.policy) || self.policy.name != 'hpa' || !has(self.minReplicas) || "
        "self.minReplicas >= 1",
        "message": "hpa: minReplicas must be 1 or more (KEDA scales to zero)",
    },
    {
        "rule": "!has(self.policy) || self.policy.name != 'kpa' || (has(self.metrics) && "
        "has(self.metrics.scrapeIntervalSeconds) && self.metrics.scrapeIntervalSeconds <= 1)",
        "message": "kpa reads concurrency every second: set metrics.scrapeIntervalSeconds: 1 "
        "and scrape the pods' serving metrics that often",
    },
)
"""CEL rules on each target: bounds in order, the HPA's floor of one replica, and kpa's
one-second signal path (the controller refuses a kpa target Prometheus scrapes slower)."""


def _resolve(node: Any, defs: dict[str, Any]) -> Any:  # noqa: ANN401 - JSON
    """Inline every ``$ref``."""
    if isinstance(node, dict):
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return _resolve({**target, **rest}, defs)
        return {k: _resolve(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, defs) for v in node]
    return node


def _merge_objects(branches: list[dict[str, Any]]) -> dict[str, Any]:
    """One object schema with every branch's properties (the policy union)."""
    props: dict[str, Any] = {}
    for branch in branches:
        for key, sub in branch.get("properties", {}).items():
            if key == "name":
                names = props.setdefault("name", {"type": "string", "enum": []})
                names["enum"] += sub.get("enum") or [sub["const"]]
                names["description"] = "Policy name."
                # The CEL rules compare it; a bound length keeps their estimated cost
                # (which the API server checks when the CRD is applied) small.
                names["maxLength"] = max(len(n) for n in names["enum"])
            elif key not in props:
                props[key] = sub
    return {"type": "object", "properties": props, "required": ["name"]}


def structural(node: Any) -> Any:  # noqa: ANN401 - JSON
    """A resolved JSON Schema node as a structural OpenAPI v3.0 schema.

    Returns:
        The converted node.
    """
    if isinstance(node, list):
        return [structural(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    branches = node.get("anyOf") or node.get("oneOf")
    if branches is not None:
        real = [b for b in branches if b.get("type") != "null"]
        nullable = len(real) < len(branches)
        if len(real) == 1:
            out = structural({**real[0], **{k: v for k, v in node.items() if k not in _BR}})
        elif all(b.get("type") == "object" for b in real):
            out = structural(_merge_objects(real))
        else:
            out = {"x-kubernetes-preserve-unknown-fields": True}
        if "description" in node:
            out["description"] = node["description"]
        if nullable:
            out["nullable"] = True
        return out
    for key, value in node.items():
        if key in _DROP or (key == "additionalProperties" and value is False):
            continue
        if key == "const":
            out["enum"] = [value]
            out.setdefault("type", "string")
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "properties":
            out[key] = {k: structural(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = structural(value)
        elif key == "prefixItems":
            out["x-kubernetes-preserve-unknown-fields"] = True
        else:
            out[key] = value
    if out.get("type") == "array" and "items" not in out:
        out["items"] = {"x-kubernetes-preserve-unknown-fields": True}
        out.pop("x-kubernetes-preserve-unknown-fields", None)
    return out


_BR = {"anyOf", "oneOf", "discriminator"}


def spec_schema() -> dict[str, Any]:
    """The structural schema of ``spec``.

    Returns:
        OpenAPI v3.0 schema.
    """
    raw = GPUScalerSpec.model_json_schema(by_alias=True)
    resolved = _resolve({k: v for k, v in raw.items() if k != "$defs"}, raw.get("$defs", {}))
    spec = dict(structural(resolved))
    target = spec["properties"]["targets"]["items"]
    # A target may also be a KEDA ScaledObject's spec (its keys beside gpuscale's; the
    # controller reads which is which): only scaleTargetRef is common to both.
    keda = ScaledObjectTarget.model_json_schema(by_alias=True)
    keda = structural(_resolve({k: v for k, v in keda.items() if k != "$defs"}, keda["$defs"]))
    for key, sub in keda["properties"].items():
        target["properties"].setdefault(key, sub)
    # KEDA's trigger metadata is a map of strings ('100'), which the models read as
    # numbers and booleans: kept as written here, checked by the controller on load.
    target["properties"]["triggers"]["items"]["properties"]["metadata"] = {
        "type": "object",
        "description": "The trigger's metadata, as KEDA writes it (values are strings).",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    target["required"] = ["scaleTargetRef"]
    target["x-kubernetes-validations"] = [dict(r) for r in TARGET_RULES]
    policy = target["properties"]["policy"]
    policy["x-kubernetes-validations"] = [r.rule() for r in POLICY_RULES]
    return spec


def status_schema() -> dict[str, Any]:
    """The structural schema of ``status``, from the models the controller writes it with.

    Returns:
        OpenAPI v3.0 schema.
    """
    raw = GPUScalerStatus.model_json_schema(by_alias=True, mode="serialization")
    resolved = _resolve({k: v for k, v in raw.items() if k != "$defs"}, raw.get("$defs", {}))
    return dict(structural(resolved))


PRINTER_COLUMNS = (
    ("Target", "string", ".spec.targets[0].scaleTargetRef.name", "The (first) target's name."),
    ("Policy", "string", ".spec.targets[0].policy.name", "The (first) target's policy."),
    ("Min", "integer", ".spec.targets[0].minReplicas", "The (first) target's minReplicas."),
    ("Max", "integer", ".spec.targets[0].maxReplicas", "The (first) target's maxReplicas."),
    ("Current", "integer", ".status.currentReplicas", "Replicas now, all targets."),
    ("Desired", "integer", ".status.desiredReplicas", "Replicas wanted, all targets."),
    ("Ready", "string", '.status.conditions[?(@.type=="Ready")].status', "Every target scaled."),
    ("Age", "date", ".metadata.creationTimestamp", ""),
)
"""``kubectl get gpuscalers`` columns: (name, type, JSONPath, description)."""


def printer_columns() -> list[dict[str, str]]:
    """The CRD's ``additionalPrinterColumns``.

    Returns:
        One entry per column, in order.
    """
    out = []
    for name, kind, path, text in PRINTER_COLUMNS:
        column = {"name": name, "type": kind, "jsonPath": path}
        if text:
            column["description"] = text
        out.append(column)
    return out


def manifest() -> dict[str, Any]:
    """The CustomResourceDefinition object.

    Returns:
        ``apiextensions.k8s.io/v1`` CustomResourceDefinition.
    """
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": ["gs"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "Scale targets, their policies and bounds "
                            "(read by gpuscale autoscale; docs/autoscaler.md).",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": status_schema(),
                            },
                        }
                    },
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": printer_columns(),
                }
            ],
        },
    }


def render() -> str:
    """The CRD as YAML, as stored under ``deploy/crd/``.

    Returns:
        The YAML text, with a header saying how it was made.
    """
    header = "# Generated by `python -m gpuscale.control.crd`; do not edit by hand.\n"
    return header + yaml.safe_dump(manifest(), sort_keys=False, width=100)


if __name__ == "__main__":
    sys.stdout.write(render())
