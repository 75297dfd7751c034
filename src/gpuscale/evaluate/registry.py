"""The registry mechanics: what the harness knows of a policy, and the one list of them.

``evaluate.policies`` holds the entries (one ``register(PolicySpec(...))`` per
policy) and re-exports everything here, so callers import ``evaluate.policies``
(importing this module alone registers nothing). A ``PolicySpec`` says
everything the harness needs: the policy's typed config (a frozen dataclass, so
it pickles to worker processes), how its fair parameters follow from the
scenario (``FairInputs``), and the unit of every parameter the report prints.
The policy itself, its config type and its builder are the kind's in the one
catalogue (``scaling.catalogue``): the harness adds only its fair settings and
its sweep knob.

Like ``evaluate.policies``, this module imports no numpy and no simulator.
"""

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gpuscale.errors import config_error
from gpuscale.evaluate.knobs import Knob
from gpuscale.scaling.catalogue import PolicyKind
from gpuscale.scaling.policy import ScalingPolicy

C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class FairInputs:
    """What the fair rules read from a scenario (the rules are in ``runner``'s docstring).

    Attributes:
        min_replicas: Lower bound every policy shares, replicas.
        max_replicas: Upper bound every policy shares, replicas.
        static_replicas: The static quantile of the per-second requirement, replicas.
        target_utilization: The one utilisation target of the reactive baselines, 0 to 1.
        per_replica: Requests (in flight plus queued) one replica holds at that target.
        lead_s: The cold start the oracle plans for, seconds.
        hold_s: Termination grace plus that cold start, seconds.
        node_lead_s: Node provisioning time when the run must grow its nodes, else 0 s.
        fast_capacity: Replicas that fit on the nodes that are always up.
        node_size: Replicas (GPUs) per node.
        node_keep_s: An idle node is removed after this long, seconds.
        wait_budget_s: The wait in the queue a mean request may have and still meet its
            SLO, seconds: an LLM's TTFT budget for the trace's mean prompt, else the
            latency SLO less the mean service time.
        pod_concurrency: Requests one replica's server serves at once, as its
            deployer configures it (the scenario's slots, bounded by the KV cache
            for LLMs).
    """

    min_replicas: int
    max_replicas: int
    static_replicas: int
    target_utilization: float
    per_replica: float
    lead_s: float
    hold_s: float
    node_lead_s: float
    fast_capacity: int
    node_size: int
    node_keep_s: float
    wait_budget_s: float
    pod_concurrency: int


@dataclass(frozen=True, slots=True)
class PolicySpec(Generic[C]):
    """One policy as the harness knows it.

    Attributes:
        name: The ``--policy`` name, also the policy's name in results.
        kind: The catalogue's kind it runs (``scaling.catalogue``).
        fair: Derives the config from the scenario by the policy's fair rule.
        fair_fields: The config fields the fair rule sets: recorded in ``results.json``
            and printed, with units, in the report.
        units: Units by field name, for fields whose meaning the harness fixes (the
            signal a target is on); they override the field's ``metadata["unit"]``.
        knob: The main knob a sweep varies for the cost-against-attainment curve
            (``evaluate.knobs``); None runs the fair config alone.
        default: Whether ``gpuscale evaluate`` runs it when no ``--policy`` is given
            (every policy can be chosen by name).
    """

    name: str
    kind: PolicyKind
    fair: Callable[[FairInputs], C]
    fair_fields: tuple[str, ...]
    units: Mapping[str, str] = field(default_factory=dict)
    knob: Knob | None = None
    default: bool = True

    @property
    def config_type(self) -> type[C]:
        """The kind's config dataclass."""
        return self.kind.config_type

    def build(self, config: C, required: Sequence[int], name: str) -> ScalingPolicy[Any]:
        """The policy from its config (only a hindsight kind reads ``required``).

        Returns:
            The policy.
        """
        return self.kind.build(config, name, required)

    def unit(self, key: str) -> str | None:
        """The unit of a config field: ``units``, else its ``metadata["unit"]``.

        Returns:
            The unit, or None when neither gives one.
        """
        if key in self.units:
            return self.units[key]
        for f in dataclasses.fields(self.config_type):  # type: ignore[arg-type]
            if f.name == key and "unit" in f.metadata:
                return str(f.metadata["unit"])
        return None

    def record(self, config: C) -> dict[str, Any]:
        """The fair fields of a config, as recorded in ``results.json``.

        Returns:
            Field name to value, in ``fair_fields`` order.
        """
        return {key: getattr(config, key) for key in self.fair_fields}

    def fair_units(self) -> dict[str, str]:
        """The unit of each fair field.

        Returns:
            Field name to unit (``register`` checks every fair field has one).
        """
        return {key: self.unit(key) or "" for key in self.fair_fields}


_REGISTRY: dict[str, PolicySpec[Any]] = {}


def register(spec: PolicySpec[Any]) -> None:
    """Add a policy; it runs after those registered before it.

    Raises:
        ValueError: The name is taken, the config is not a dataclass, or a fair field
            is not a field of the config or has no unit.
    """
    if spec.name in _REGISTRY:
        raise ValueError(f"policy {spec.name!r} is registered twice")
    if not dataclasses.is_dataclass(spec.config_type):
        raise ValueError(f"policy {spec.name!r}: config {spec.config_type!r} is not a dataclass")
    known = {f.name for f in dataclasses.fields(spec.config_type)}
    for key in spec.fair_fields:
        if key not in known or spec.unit(key) is None:
            raise ValueError(f"policy {spec.name!r}: fair field {key!r} is unknown or has no unit")
    _REGISTRY[spec.name] = spec


def unregister(name: str) -> None:
    """Remove a policy (for tests and plug-ins that registered one); unknown names are ignored."""
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    """Every registered policy, in run and report order.

    Returns:
        The names.
    """
    return tuple(_REGISTRY)


def get(name: str) -> PolicySpec[Any]:
    """The spec of a registered policy.

    Returns:
        The spec.

    Raises:
        ConfigError: No policy has that name.
    """
    spec = _REGISTRY.get(name)
    if spec is None:
        raise config_error(f"--policy {name}", "unknown policy", f"use one of {', '.join(names())}")
    return spec


def default_names() -> tuple[str, ...]:
    """The policies run when none is chosen, in run and report order.

    Returns:
        The names of the specs with ``default`` set.
    """
    return tuple(name for name, spec in _REGISTRY.items() if spec.default)


def choose(requested: Sequence[str]) -> tuple[str, ...]:
    """Check a selection of policies; none selected means the defaults (``default_names``).

    Returns:
        The names, in the order given.

    Raises:
        ConfigError: A name is unknown or repeated.
    """
    if not requested:
        return default_names()
    for name in requested:
        get(name)
    if len(set(requested)) != len(requested):
        raise config_error(
            f"--policy {' '.join(requested)}", "a policy is named twice", "name each once"
        )
    return tuple(requested)
