"""A fixed replica count: the baseline of provisioning for peak and never scaling.

Every comparison needs the number a team would pick without an autoscaler; the
harness sizes it (for example for the trace's p95 demand), and this policy
simply keeps it. It reads no telemetry, so unhealthy data cannot move it.
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gpuscale.errors import require
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.policy import PROMETHEUS_QUERY, Decision, Observation
from gpuscale.scaling.state import JsonState, KeepsState

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StaticConfig:
    """The parameters of a static policy; each field's unit is in its ``metadata``.

    Attributes:
        replicas: The count to keep (0 or more).
        interval_s: How often the controller asks, seconds.
    """

    replicas: int = field(metadata={"unit": "replicas"})
    interval_s: float = field(default=60.0, metadata={"unit": "s"})


@dataclass(frozen=True, slots=True)
class StaticState(JsonState):
    """A static policy remembers nothing: its JSON form is ``{}``."""


class StaticPolicy(KeepsState[StaticState]):
    """Always the same replica count.

    Args:
        replicas: The count to keep (0 or more).
        name: Policy name in results.
        interval_s: How often the controller asks, seconds.
    """

    state_type = StaticState

    def __init__(self, replicas: int, name: str = "static", interval_s: float = 60.0) -> None:
        require(
            replicas >= 0, f"StaticPolicy.replicas={replicas!r}", "out of range", "use 0 or more"
        )
        require(
            interval_s > 0,
            f"StaticPolicy.interval_s={interval_s!r}",
            "out of range",
            "use a period > 0 s",
        )
        self.replicas = replicas
        self.name = name
        self.interval_s = interval_s
        self.history_s = 0.0
        self.signals: Mapping[str, Signal] = MappingProxyType({})
        self.pod_signals: Mapping[str, Signal] = MappingProxyType({})
        self.min_replicas = replicas
        self.max_replicas = replicas
        self.signal_path = PROMETHEUS_QUERY  # reads nothing; the path is moot
        self.reads_node_slots = False

    @classmethod
    def from_config(cls, config: StaticConfig, name: str = "static") -> "StaticPolicy":
        """Build the policy from its config.

        Returns:
            The policy.
        """
        return cls(config.replicas, name=name, interval_s=config.interval_s)

    def decide(self, observation: Observation, state: StaticState) -> Decision[StaticState]:
        """Return the fixed count.

        Returns:
            ``replicas`` every time, and the state unchanged.
        """
        logger.debug("%s: %d -> %d: static", self.name, observation.target.desired, self.replicas)
        return Decision(self.replicas, f"static {self.replicas} replicas", state)
