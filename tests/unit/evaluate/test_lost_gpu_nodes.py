"""A GPU that falls off the bus leaves its node a replica short: node filling must see it.

``hybrid`` fills whole nodes. Told only ``node_size``, it asks for a multiple of 8
when a node holds 7, and the pod left pending opens a node for itself. Told each
node's slots (``TargetStatus.node_slots``), it does not. The same policy is run
with the slots and blind to them, so the test fails if the simulator stops
reporting the short node or the policy stops reading it.
"""

import dataclasses
from typing import Any

import pytest

from gpuscale.evaluate.runner import EvaluationRequest, build_policy
from gpuscale.scaling.policy import Decision, Observation, ScalingPolicy
from gpuscale.sim.engine import simulate


class BlindToNodeSlots:
    """The wrapped policy, its observations stripped of ``node_slots``."""

    def __init__(self, policy: ScalingPolicy[Any]) -> None:
        self._policy = policy

    def __getattr__(self, name: str) -> object:
        return getattr(self._policy, name)

    def decide(self, observation: Observation, state: Any) -> Decision[Any]:
        target = dataclasses.replace(observation.target, node_slots=())
        return self._policy.decide(dataclasses.replace(observation, target=target), state)


def node_gpu_hours(seed: int, faults: tuple[str, ...], *, blind: bool) -> float:
    prep = EvaluationRequest("ramp", policies=("hybrid",), seed=seed, faults=faults).prepare()
    policy = build_policy("hybrid", prep.configs["hybrid"], prep.required)
    return (
        simulate(prep.scenario, BlindToNodeSlots(policy) if blind else policy).node_gpu_seconds
        / 3600
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_node_short_of_a_gpu_opens_no_node_for_one_pod(seed):
    lost = ("gpu-lost@1200",)
    seeing, blind = node_gpu_hours(seed, lost, blind=False), node_gpu_hours(seed, lost, blind=True)
    assert seeing < blind, (seeing, blind)


def test_whole_nodes_read_the_same_with_or_without_their_slots():
    assert node_gpu_hours(0, (), blind=False) == node_gpu_hours(0, (), blind=True)
