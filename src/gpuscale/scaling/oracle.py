"""An oracle that knows the future demand: the lower bound every policy is measured against.

A replica requested at ``t`` serves from ``t + lead_s`` (cold start, plus node
provisioning when the cluster must grow), and the next decision comes at
``t + interval_s``. So the fewest replicas that meet the SLO without ever
being caught short is the most needed over ``[t, t + lead_s + interval_s)``:
scale-up requests land exactly ``lead_s`` before the need. A replica released
now and wanted again later costs its termination grace plus a new cold start
in GPU time that serves nothing, so the oracle keeps a replica through any dip
shorter than that break-even (``hold_s``) and releases it otherwise. The simulator computes
``required_per_s`` (``sim.serving.required_replicas``); the oracle reads no
telemetry, so unhealthy data does not affect it.
"""

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from gpuscale.errors import require
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.baseline import check_bounds, clamp
from gpuscale.scaling.policy import Decision, Observation, State

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class OracleConfig:
    """The oracle's parameters besides the requirement itself (see ``OraclePolicy``).

    Each field's unit is in its ``metadata["unit"]``.
    """

    lead_s: float = field(metadata={"unit": "s"})
    min_replicas: int = field(default=0, metadata={"unit": "replicas"})
    max_replicas: int | None = field(default=None, metadata={"unit": "replicas"})
    interval_s: float = field(default=5.0, metadata={"unit": "s"})
    hold_s: float = field(default=0.0, metadata={"unit": "s"})
    node_lead_s: float = field(default=0.0, metadata={"unit": "s"})
    fast_capacity: int | None = field(default=None, metadata={"unit": "replicas"})
    node_size: int = field(default=1, metadata={"unit": "replicas per node"})
    node_keep_s: float = field(default=0.0, metadata={"unit": "s"})


class OraclePolicy:
    """Replicas from a known per-second requirement, requested ``lead_s`` ahead.

    Args:
        required_per_s: Fewest Ready replicas needed in each second of the run.
        lead_s: Seconds from a request to a Ready replica.
        min_replicas: Lower bound.
        max_replicas: Upper bound (default: the trace's peak requirement, at least 1).
        interval_s: Seconds between decisions.
        hold_s: Break-even of releasing a replica and starting another (termination
            grace + cold start): replicas needed again within it are kept.
        node_lead_s: Extra seconds when the replicas do not fit on the nodes that are
            always there (node provisioning).
        fast_capacity: Replicas that fit on the nodes that are always up; None means all.
        node_size: Replicas per node.
        node_keep_s: An idle node is removed after this long; until then the replicas it
            held fit again without provisioning.
        name: Policy name in results.
    """

    def __init__(
        self,
        required_per_s: Sequence[int],
        lead_s: float,
        min_replicas: int = 0,
        max_replicas: int | None = None,
        interval_s: float = 5.0,
        hold_s: float = 0.0,
        node_lead_s: float = 0.0,
        fast_capacity: int | None = None,
        node_size: int = 1,
        node_keep_s: float = 0.0,
        name: str = "oracle",
    ) -> None:
        required = tuple(int(r) for r in required_per_s)
        where = "OraclePolicy."
        require(bool(required), f"{where}required_per_s=[]", "empty", "give one value a second")
        require(
            min(required) >= 0,
            f"{where}required_per_s={min(required)!r}",
            "out of range",
            "replica counts must be 0 or more",
        )
        for key, value, ok in (
            ("lead_s", lead_s, lead_s >= 0),
            ("hold_s", hold_s, hold_s >= 0),
            ("node_lead_s", node_lead_s, node_lead_s >= 0),
        ):
            require(ok, f"{where}{key}={value!r}", "out of range", "use 0 or more seconds")
        require(
            interval_s > 0,
            f"{where}interval_s={interval_s!r}",
            "out of range",
            "use a period > 0 s",
        )
        if max_replicas is None:
            max_replicas = max(1, min_replicas, *required)
        check_bounds("OraclePolicy", min_replicas, max_replicas)
        self.required = required
        self.lead_s = lead_s
        self.hold_s = hold_s
        self.node_lead_s = node_lead_s
        self.fast_capacity = fast_capacity
        self.node_size = max(1, node_size)
        self.node_keep_s = node_keep_s
        self.name = name
        self.interval_s = interval_s
        self.history_s = 0.0
        self.signals: Mapping[str, Signal] = MappingProxyType({})
        self.pod_signals: Mapping[str, Signal] = MappingProxyType({})
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas

    @classmethod
    def from_config(
        cls, required_per_s: Sequence[int], config: OracleConfig, name: str = "oracle"
    ) -> "OraclePolicy":
        """Build the oracle for a requirement from its config.

        Returns:
            The policy.
        """
        return cls(
            required_per_s,
            config.lead_s,
            min_replicas=config.min_replicas,
            max_replicas=config.max_replicas,
            interval_s=config.interval_s,
            hold_s=config.hold_s,
            node_lead_s=config.node_lead_s,
            fast_capacity=config.fast_capacity,
            node_size=config.node_size,
            node_keep_s=config.node_keep_s,
            name=name,
        )

    def needed(self, now: float, extra_s: float = 0.0) -> int:
        """Most replicas required in ``[now, now + lead_s + interval_s + extra_s)``.

        Past the end of ``required_per_s`` the last value holds.

        Returns:
            Replicas.
        """
        start = max(0, math.floor(now))
        end = max(start + 1, math.ceil(now + self.lead_s + self.interval_s + extra_s))
        if start >= len(self.required):
            return self.required[-1]
        return max(self.required[start:end])

    def _capacity(self, now: float, recent: list[list[float]]) -> int | None:
        """Replicas that fit without waiting for a node: standing nodes plus recent ones."""
        if self.fast_capacity is None:
            return None
        held = max((r for t, r in recent if now - t <= self.node_keep_s), default=0.0)
        nodes = math.ceil(held / self.node_size)
        return max(self.fast_capacity, nodes * self.node_size)

    def decide(self, observation: Observation, state: State) -> Decision:
        """Look ahead and ask for what will be needed.

        Returns:
            The clamped look-ahead requirement, and the recent requests (which tell
            which nodes are still up).
        """
        now = observation.now
        recent = [list(p) for p in state.get("recent", []) if now - p[0] <= self.node_keep_s]
        need = self.needed(now)
        capacity = self._capacity(now, recent)
        if self.node_lead_s > 0:
            # Replicas beyond the nodes that are up wait for a node too: ask that much earlier.
            far = self.needed(now, self.node_lead_s)
            if capacity is None or far > capacity:
                need = max(need, far)
        # Never grow on the longer horizon, only decline to shrink across short dips.
        keep = min(observation.target.desired, self.needed(now, self.hold_s))
        replicas = clamp(max(need, keep), self.min_replicas, self.max_replicas)
        horizon = self.lead_s + self.interval_s
        reason = f"max required over next {horizon:g} s is {need}"
        if keep > need:
            reason += f"; keeping {keep}: needed again within {self.hold_s:g} s"
        logger.info("%s: %d -> %d: %s", self.name, observation.target.desired, replicas, reason)
        if self.node_keep_s > 0 and (not recent or recent[-1][1] != replicas):
            recent.append([now, float(replicas)])
        return Decision(replicas, reason, {"recent": recent} if self.node_keep_s > 0 else {})
