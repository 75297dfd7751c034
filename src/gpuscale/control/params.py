"""Policy parameters in a GPUScaler: the scaling configs themselves, spelled the Kubernetes way.

The policies take frozen config dataclasses (``HpaConfig``, ``KedaConfig``, ...)
and the simulator builds them from Python. A GPUScaler names the same fields in
YAML, camelCase as every Kubernetes object does (``target_average_value`` is
``targetAverageValue``, a ``_s`` suffix reads ``Seconds``; a field whose
``metadata["key"]`` is set takes that key, the upstream API's spelling where it
differs, as an HPA policy's ``type``). Rather than write
each policy's schema a second time, this module derives a pydantic model from
each config dataclass (nested dataclasses included), so a field added to a
policy config appears in the GPUScaler schema, its validation and the CRD with
no other change; ``build`` turns a validated model back into the dataclass,
whose own ``__post_init__`` checks then run unchanged.
"""

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from gpuscale.metrics.signal import Signal
from gpuscale.scaling.catalogue import BOUNDS as BOUNDS
from gpuscale.scaling.catalogue import LIVE_KINDS, PolicyKind

_DATACLASS_OF: dict[type[BaseModel], type[Any]] = {}
_MODEL_OF: dict[tuple[type[Any], frozenset[str]], type[BaseModel]] = {}


def camel(name: str) -> str:
    """The YAML key of a config field: ``sync_period_s`` -> ``syncPeriodSeconds``.

    Returns:
        The camelCase key.
    """
    name = re.sub(r"_s$", "_seconds", name)
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _descriptions(cls: type[Any]) -> dict[str, str]:
    """Field descriptions from the Google-style ``Attributes:`` section of a docstring."""
    found: dict[str, str] = {}
    doc = "\n".join((c.__doc__ or "") for c in reversed(cls.__mro__) if dataclasses.is_dataclass(c))
    current: str | None = None
    for line in doc.splitlines():
        m = re.match(r"^\s{8}(\w+): (.*)$", line)
        if m:
            current = m.group(1)
            found[current] = m.group(2).strip()
        elif current and re.match(r"^\s{12}\S", line):
            found[current] += " " + line.strip()
        else:
            current = None
    return found


def _convert(tp: Any) -> Any:  # noqa: ANN401 - a typing expression in, one out
    """The pydantic-side type of a dataclass field's type."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return model_for(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return Union[tuple(_convert(a) for a in args)]  # noqa: UP007 - built from a tuple
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return types.GenericAlias(tuple, (_convert(args[0]), ...))
        return types.GenericAlias(tuple, tuple(_convert(a) for a in args))
    if origin in (Mapping, dict) or tp is Mapping:
        return types.GenericAlias(dict, (args[0], _convert(args[1])) if args else (str, Any))
    return tp


def model_for(cls: type[Any], exclude: frozenset[str] = frozenset()) -> type[BaseModel]:
    """The pydantic model of a config dataclass: camelCase keys, unknown keys refused.

    Args:
        cls: A dataclass.
        exclude: Fields left out (set elsewhere, e.g. the bounds).

    Returns:
        The model (one per dataclass and exclusion, cached).
    """
    key = (cls, exclude)
    if key in _MODEL_OF:
        return _MODEL_OF[key]
    hints = typing.get_type_hints(cls)
    docs = _descriptions(cls)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        unit = f.metadata.get("unit") or ""
        alias: str = f.metadata.get("key") or camel(f.name)  # the upstream API's spelling
        text = docs.get(f.name, "") + (f" Unit: {unit}." if unit and unit != "metric unit" else "")
        spec: Any
        if f.default is not dataclasses.MISSING:
            spec = Field(f.default, alias=alias, description=text or None)
        elif f.default_factory is not dataclasses.MISSING:
            spec = Field(default_factory=f.default_factory, alias=alias, description=text)
        else:
            spec = Field(alias=alias, description=text or None)
        fields[f.name] = (_convert(hints[f.name]), spec)
    model: type[BaseModel] = create_model(
        f"{cls.__name__}Model",
        __config__=ConfigDict(
            extra="forbid", frozen=True, arbitrary_types_allowed=True, allow_inf_nan=False
        ),
        __doc__=(cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else None,
        **fields,
    )
    _MODEL_OF[key] = model
    _DATACLASS_OF[model] = cls
    return model


def _value(v: Any) -> Any:  # noqa: ANN401 - any validated value
    if isinstance(v, BaseModel):
        return build(v)
    if isinstance(v, tuple | list):
        return tuple(_value(x) for x in v)
    if isinstance(v, dict):
        return {k: _value(x) for k, x in v.items()}
    return v


def build(model: BaseModel, **overrides: Any) -> Any:  # noqa: ANN401 - the dataclass built
    """The config dataclass a validated model stands for.

    Args:
        model: An instance of a ``model_for`` model.
        overrides: Fields set from elsewhere in the GPUScaler (the bounds).

    Returns:
        The dataclass instance; its ``__post_init__`` checks have run.

    Raises:
        ConfigError: The dataclass refused a value.
    """
    cls = _DATACLASS_OF[type(model)]
    own = {f.name for f in dataclasses.fields(cls)}
    kwargs = {n: _value(getattr(model, n)) for n in type(model).model_fields if n in own}
    return cls(**kwargs, **overrides)


KINDS: Mapping[str, PolicyKind] = LIVE_KINDS
"""The policies a GPUScaler may name: the catalogue's live kinds (not the hindsight oracle)."""


@functools.cache
def policy_model(kind: PolicyKind) -> type[BaseModel]:
    """The model of a ``policy:`` block: ``name`` plus the config's fields but the bounds.

    Returns:
        A model whose ``name`` is the literal policy name (the union's discriminator).
    """
    base = model_for(kind.config_type, frozenset(BOUNDS))
    tag: Any = typing.cast(Any, Literal)[kind.name]
    model = create_model(
        f"{kind.config_type.__name__}Policy",
        __base__=base,
        name=(tag, Field(description="Policy name.")),
    )
    _DATACLASS_OF[model] = kind.config_type
    return model


SIGNAL_MODEL = model_for(Signal)
"""A Signal in YAML: ``metric``, ``matchers``, ``aggregation``, ``by``, ``window``."""
