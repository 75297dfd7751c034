"""An oracle that knows the future demand: the lower bound every policy is measured against.

A replica requested at ``t`` serves from ``t + lead_s`` (cold start, plus node
provisioning when the cluster must grow), and the next decision comes at
``t + interval_s``. So the fewest replicas that meet the SLO without ever
being caught short is the most needed over ``[t, t + lead_s + interval_s)``:
scale-up requests land exactly ``lead_s`` before the need, and replicas go as
soon as no need for them remains within that window. The simulator computes
``required_per_s`` (``sim.serving.required_replicas``); the oracle reads no
telemetry, so unhealthy data does not affect it.
"""

import logging
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from gpuscale.metrics.signal import Signal
from gpuscale.scaling.baseline import check_bounds, clamp, require
from gpuscale.scaling.policy import Decision, Observation, State

logger = logging.getLogger(__name__)


class OraclePolicy:
    """Replicas from a known per-second requirement, requested ``lead_s`` ahead.

    Args:
        required_per_s: Fewest Ready replicas needed in each second of the run.
        lead_s: Seconds from a request to a Ready replica.
        min_replicas: Lower bound.
        max_replicas: Upper bound (default: the trace's peak requirement, at least 1).
        interval_s: Seconds between decisions.
        name: Policy name in results.
    """

    def __init__(
        self,
        required_per_s: Sequence[int],
        lead_s: float,
        min_replicas: int = 0,
        max_replicas: int | None = None,
        interval_s: float = 5.0,
        name: str = "oracle",
    ) -> None:
        required = tuple(int(r) for r in required_per_s)
        require(bool(required), "OraclePolicy.required_per_s", "[]", "give one value a second")
        require(
            min(required) >= 0,
            "OraclePolicy.required_per_s",
            min(required),
            "replica counts must be 0 or more",
        )
        require(lead_s >= 0, "OraclePolicy.lead_s", lead_s, "use 0 or more seconds")
        require(interval_s > 0, "OraclePolicy.interval_s", interval_s, "use a period > 0 s")
        if max_replicas is None:
            max_replicas = max(1, min_replicas, *required)
        check_bounds("OraclePolicy", min_replicas, max_replicas)
        self.required = required
        self.lead_s = lead_s
        self.name = name
        self.interval_s = interval_s
        self.history_s = 0.0
        self.signals: Mapping[str, Signal] = MappingProxyType({})
        self.pod_signals: Mapping[str, Signal] = MappingProxyType({})
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas

    def needed(self, now: float) -> int:
        """Most replicas required in ``[now, now + lead_s + interval_s)``.

        Past the end of ``required_per_s`` the last value holds.

        Returns:
            Replicas.
        """
        start = max(0, math.floor(now))
        end = max(start + 1, math.ceil(now + self.lead_s + self.interval_s))
        if start >= len(self.required):
            return self.required[-1]
        return max(self.required[start:end])

    def decide(self, observation: Observation, state: State) -> Decision:
        """Look ahead and ask for what will be needed.

        Returns:
            The clamped look-ahead requirement, and an empty state.
        """
        need = self.needed(observation.now)
        replicas = clamp(need, self.min_replicas, self.max_replicas)
        horizon = self.lead_s + self.interval_s
        reason = f"max required over next {horizon:g} s is {need}"
        logger.info("%s: %d -> %d: %s", self.name, observation.target.desired, replicas, reason)
        return Decision(replicas, reason, {})
