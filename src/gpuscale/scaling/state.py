"""Typed policy state: what a policy remembers between decisions, and its JSON form.

A policy's memory crosses two boundaries: the simulator keeps it in memory between
calls, and the live controller writes it to a ConfigMap it owns and reads
it back after a restart or a change of leader. Each policy therefore declares its
memory as a frozen dataclass (so the type checker sees every field a policy reads),
and this module gives every such class one JSON form, one loader and one
``essential()`` view, written once with pydantic instead of by hand per policy.

``essential()`` is the JSON form without the time-keeping that a steady load moves
at every decision ("last polled at t"). A caller may write the state only when
``essential()`` changes (and otherwise now and then), so after a restart such a
field may lag by that long; each policy says which of its fields are marked
``CLOCK`` and why that lag is safe.
"""

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

import pydantic

CLOCK: Mapping[str, Any] = {"clock": True}
"""Field metadata of a time that only records time passing: ``essential()`` keeps
only whether it is set (a ``None`` stays ``None``, any time reads ``True``)."""


class PolicyState(Protocol):
    """What every policy's state offers its callers."""

    def to_json(self) -> dict[str, Any]:
        """The state as JSON data: ``json.dumps`` accepts it as it is.

        Returns:
            Plain dicts, lists, strings, numbers, booleans and None.
        """
        ...

    def essential(self) -> dict[str, Any]:
        """``to_json()`` less the time-keeping a steady load moves at every decision.

        Two states with equal ``essential()`` make the same decisions, except for
        time-keeping that may lag by as long as the caller waits between writes.

        Returns:
            JSON data, as ``to_json``.
        """
        ...


class StateError(ValueError):
    """Stored state this policy cannot read; the message names the key path."""


_ADAPTERS: dict[type, pydantic.TypeAdapter[Any]] = {}


def _adapter(cls: type) -> pydantic.TypeAdapter[Any]:
    """The class's pydantic adapter, built once (building one costs milliseconds)."""
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = pydantic.TypeAdapter(cls)
    return adapter


def _where(error: Mapping[str, Any]) -> str:
    return ".".join(str(part) for part in error["loc"]) or "(top level)"


class JsonState:
    """Base of the policies' frozen state dataclasses: JSON form, loading, ``essential``.

    A subclass is a ``@dataclass(frozen=True, slots=True)`` whose fields are JSON
    types, tuples, mappings with string keys, ``Literal``s and other such state
    classes; pydantic serialises and validates them, nested ones included. Floats
    round-trip exactly (``json.dumps`` writes their ``repr``).
    """

    __slots__ = ()
    # Infinities and NaN stay floats (json.dumps writes them as Infinity and NaN)
    # rather than turning into null, so a state loads back as it was saved.
    __pydantic_config__: ClassVar[pydantic.ConfigDict] = pydantic.ConfigDict(
        ser_json_inf_nan="constants"
    )

    def to_json(self) -> dict[str, Any]:
        """The state as JSON data.

        Returns:
            A dict that ``json.dumps`` accepts without ``default=``.
        """
        data: dict[str, Any] = _adapter(type(self)).dump_python(self, mode="json")
        return data

    def essential(self) -> dict[str, Any]:
        """``to_json()`` with each ``CLOCK`` field reduced to whether it is set.

        A field that holds a nested state contributes that state's ``essential()``.

        Returns:
            JSON data.
        """
        data = self.to_json()
        for f in fields(self):  # type: ignore[arg-type]  # subclasses are dataclasses
            value = getattr(self, f.name)
            if f.metadata.get("clock"):
                data[f.name] = None if value is None else True
            elif isinstance(value, JsonState):
                data[f.name] = value.essential()
        return data

    @classmethod
    def from_json(cls, data: object) -> Self:
        """Load a state saved by ``to_json``.

        Args:
            data: Decoded JSON.

        Returns:
            The state.

        Raises:
            StateError: When ``data`` does not hold this state (wrong type, bad value);
                the message names the first offending key path.
        """
        try:
            state: Self = _adapter(cls).validate_python(data)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
            raise StateError(f"{cls.__name__} key {_where(first)}: {first['msg']}{more}") from None
        return state


J = TypeVar("J", bound=JsonState)


class KeepsState(Generic[J]):
    """Base of a policy whose state is one ``JsonState`` class: its two state methods.

    A subclass names that class as ``state_type``; its first state is the class's
    defaults, and a saved one loads with ``from_json``.
    """

    state_type: type[J]

    def initial_state(self) -> J:
        """The state of a policy that has decided nothing yet.

        Returns:
            ``state_type()``: every field at its default.
        """
        return self.state_type()

    def load_state(self, data: Mapping[str, Any]) -> J:
        """Read a state saved with ``to_json`` (after a JSON round trip).

        Returns:
            The state, equal to the one saved.
        """
        return self.state_type.from_json(data)
