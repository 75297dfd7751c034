"""The static baseline keeps one replica count whatever it sees."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.scaling.policy import Observation, TargetStatus
from gpuscale.scaling.static import StaticConfig, StaticPolicy


@given(st.integers(0, 1000), st.floats(0, 1e6), st.booleans())
def test_always_the_same_count(desired, now, healthy):
    policy = StaticPolicy(7)
    decision = policy.decide(
        Observation(now, TargetStatus(desired), healthy=healthy), policy.initial_state()
    )
    assert decision.replicas == 7
    assert decision.state.to_json() == {}


def test_bounds_are_the_count():
    policy = StaticPolicy(3)
    assert (policy.min_replicas, policy.max_replicas) == (3, 3)
    assert dict(policy.signals) == {}


def test_negative_count_is_a_config_error():
    with pytest.raises(ConfigError) as info:
        StaticPolicy(-1)
    assert str(info.value).startswith("StaticPolicy.replicas=-1")


def test_config_error_reads_where_what_and_fix():
    with pytest.raises(ConfigError) as info:
        StaticPolicy(-1)
    assert str(info.value) == "StaticPolicy.replicas=-1: out of range; use 0 or more"


def test_built_from_its_config():
    policy = StaticPolicy.from_config(StaticConfig(replicas=4, interval_s=30.0), "fixed")
    assert (policy.name, policy.replicas, policy.interval_s) == ("fixed", 4, 30.0)
