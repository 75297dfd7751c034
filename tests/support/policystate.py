"""Policy-state helpers for tests: the JSON round trip the controller's annotation makes."""

import json
from typing import Any

from gpuscale.scaling.policy import RECORDING_RULE, SignalPath
from gpuscale.scaling.state import KeepsState
from gpuscale.scaling.static import StaticState


def through_json(policy: Any, state: Any) -> Any:
    """``state`` saved as the controller saves it and loaded back by ``policy``.

    Returns:
        The loaded state (equal to ``state`` when the round trip is exact).
    """
    return policy.load_state(json.loads(json.dumps(state.to_json())))


class Stateless(KeepsState[StaticState]):
    """Base of test policies that remember nothing: ``StaticState`` is their state.

    They read Prometheus through a recording rule (15 s late) unless they say otherwise,
    and never read the nodes' room.
    """

    state_type = StaticState
    signal_path: SignalPath = RECORDING_RULE
    reads_node_slots = False
