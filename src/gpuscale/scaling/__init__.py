"""Scaling policies: pure decisions from observations, the same in simulation and production."""

from gpuscale.scaling.policy import (
    Decision,
    Observation,
    PodStatus,
    ScalingPolicy,
    TargetStatus,
)

__all__ = ["Decision", "Observation", "PodStatus", "ScalingPolicy", "TargetStatus"]
