"""A ScaledObject's trigger metadata as a gpuscale target: the few keys a KEDA user writes.

KEDA hands an external scaler the ScaledObject's name and namespace and its
trigger's ``metadata``, a map of strings, and nothing else (not the
ScaledObject's ``scaleTargetRef``, nor its replica bounds). So the metadata
names the workload, the bounds and the policy, and every other key is one of
the policy's own parameters, spelled as in a GPUScaler's ``policy:`` block::

    policy: hybrid                # any live policy of the catalogue
    scaleTargetName: llm          # the Deployment the ScaledObject scales
    maxReplicas: "16"
    perReplica: "4"               # hybrid's own parameter

The metadata becomes one GPUScaler target, validated by the very schema
``gpuscale autoscale --config`` reads (``control.config``), and then the same
runtime target (``control.targets.runtime``): a policy that validates here
behaves as it does in the controller. Scalars stay strings for the schema to
convert (``"16"`` to 16, ``"true"`` to True); a value that opens with ``{`` or
``[`` is read as YAML flow (``metrics: '{matchers: {model: llama}}'``). KEDA's
own keys (``scalerAddress``, ``enableTLS``, ``unsafeSsl``) are skipped, and a
key ``xFromEnv``, whose value KEDA has resolved from the workload's
environment, stands for ``x``. A mistake is one line naming the ScaledObject,
the key and what to do.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from gpuscale.control.config import (
    API_VERSION,
    KIND,
    GPUScaler,
    _policy_error,
    _problem,
    policy_config,
)
from gpuscale.control.params import KINDS
from gpuscale.control.targets import TargetRuntime, runtime
from gpuscale.errors import ConfigError, config_error
from gpuscale.inputs import load_yaml

KEDA_KEYS = frozenset({"scalerAddress", "enableTLS", "unsafeSsl"})
"""Keys KEDA's external scaler reads itself; they reach the scaler too, and are skipped."""

FROM_ENV = "FromEnv"
"""KEDA's suffix for a key whose value it read from the scaled workload's environment."""

POLICY = "policy"
"""The key naming the policy."""

SCALE_TARGET = {
    "scaleTargetName": "name",
    "scaleTargetKind": "kind",
    "scaleTargetApiVersion": "apiVersion",
}
"""Keys naming the workload, to its ``scaleTargetRef`` field (namespace: the ScaledObject's)."""

TARGET_KEYS = frozenset(
    {"minReplicas", "maxReplicas", "maxScaleUpStep", "maxScaleDownStep", "metrics"}
    | {"remediate", "cordon", "placement"}
)
"""Keys of the GPUScaler target itself; every other key is a policy parameter."""

_MAX_VALUE_CHARS = 64 * 1024
"""A structured value longer than this is refused (KEDA's metadata is small text)."""


def where(namespace: str, name: str, key: str = "") -> str:
    """How an error names a ScaledObject's trigger metadata, and a key of it.

    Returns:
        ``ScaledObject NS/NAME trigger metadata[ KEY]``.
    """
    place = f"ScaledObject {namespace}/{name} trigger metadata"
    return f"{place} {key}" if key else place


def _value(text: str, place: str) -> Any:  # noqa: ANN401 - a string, or a parsed structure
    """A metadata value for the schema: a string, or YAML flow when it opens a structure."""
    if not text.lstrip().startswith(("{", "[")):
        return text
    if len(text) > _MAX_VALUE_CHARS:
        raise config_error(place, f"is longer than {_MAX_VALUE_CHARS} characters", "shorten it")

    def at(line: int | None = None, column: int | None = None) -> str:
        return place if column is None else f"{place} (column {column})"

    documents = load_yaml(text, at)
    return documents[0][0] if documents else None


def target_document(name: str, namespace: str, metadata: Mapping[str, str]) -> dict[str, Any]:
    """The one-target GPUScaler the metadata stands for (before validation).

    Args:
        name: The ScaledObject's name.
        namespace: Its namespace (the workload's too).
        metadata: The trigger's metadata.

    Returns:
        A GPUScaler document as ``control.config`` validates it.

    Raises:
        ConfigError: ``policy`` is missing, or a structured value does not parse.
    """
    keys = {
        key.removesuffix(FROM_ENV): value for key, value in metadata.items() if key not in KEDA_KEYS
    }
    if not keys.get(POLICY):
        raise config_error(
            where(namespace, name, POLICY),
            "is required",
            f"name the gpuscale policy: one of {', '.join(KINDS)}",
        )
    ref: dict[str, Any] = {}  # the namespace is the ScaledObject's (the document's)
    target: dict[str, Any] = {"scaleTargetRef": ref}
    policy: dict[str, Any] = {"name": keys.pop(POLICY)}
    for key, text in keys.items():
        if key == "name":  # the policy block's tag: it would rename the policy
            raise config_error(
                where(namespace, name, key), "unknown key", "name the policy with the key policy"
            )
        if key in SCALE_TARGET:
            ref[SCALE_TARGET[key]] = text
        elif key in TARGET_KEYS:
            target[key] = _value(text, where(namespace, name, key))
        else:
            policy[key] = _value(text, where(namespace, name, key))
    target["policy"] = policy
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"targets": [target]},
    }


def _key(loc: Sequence[int | str]) -> str:
    """The metadata key of a location inside the target (``policy.<tag>.perReplica`` ...)."""
    parts = [str(p) for p in loc]
    if parts[:1] == ["scaleTargetRef"]:
        field = parts[1] if len(parts) > 1 else "name"
        return next((k for k, f in SCALE_TARGET.items() if f == field), "scaleTargetName")
    if parts[:1] == [POLICY]:
        parts = parts[1:]
        if parts and parts[0] in KINDS:
            parts = parts[1:]
        if not parts:
            return POLICY
    return parts[0] + (f" (at {'.'.join(parts[1:])})" if len(parts) > 1 else "")


def target_runtime(name: str, namespace: str, metadata: Mapping[str, str]) -> TargetRuntime:
    """The runtime target (policy built, signals scoped) a trigger's metadata names.

    Args:
        name: The ScaledObject's name.
        namespace: Its namespace.
        metadata: The trigger's metadata.

    Returns:
        What the controller's reconcile runs.

    Raises:
        ConfigError: One line naming the ScaledObject, the key and what to do.
    """
    doc_data = target_document(name, namespace, metadata)
    at: Callable[[Sequence[int | str]], str] = lambda loc: where(  # noqa: E731
        namespace, name, _key(loc)
    )
    try:
        doc = GPUScaler.model_validate(doc_data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        problem, fix = _problem(err)
        if loc[:3] != ("spec", "targets", 0):  # the ScaledObject's own name or namespace
            raise config_error(where(namespace, name), problem, fix) from None
        raise config_error(at(loc[3:]), problem, fix) from None
    [target] = doc.spec.targets
    try:
        policy_config(target)
    except ConfigError as exc:
        raise _policy_error(exc, (), at) from None
    return runtime(doc, target)
