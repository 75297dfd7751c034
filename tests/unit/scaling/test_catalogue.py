"""The one policy catalogue: every reader gets the same kinds, and the docs' table is its own."""

import re
from pathlib import Path

import pytest

from gpuscale.control.params import KINDS as GPUSCALER_KINDS
from gpuscale.evaluate import policies as harness
from gpuscale.scaling.catalogue import KINDS, LIVE_KINDS, path_table
from gpuscale.scaling.oracle import OracleConfig
from gpuscale.scaling.policy import SignalPath

DOCS = Path(__file__).resolve().parents[3] / "docs" / "baselines.md"
REQUIRED = {"static": {"replicas": 2}, "keda": {"threshold": 1.0}}


@pytest.mark.parametrize("name", list(KINDS))
def test_each_kind_builds_a_policy_declaring_the_kinds_path(name):
    kind = KINDS[name]
    config = kind.config_type(**REQUIRED.get(name, {}))
    policy = kind.build(config, name, [1, 2, 3] if kind.hindsight else None)
    assert isinstance(policy.signal_path, SignalPath)
    assert policy.signal_path == kind.path
    assert isinstance(policy.reads_node_slots, bool)


def test_the_controller_and_the_harness_read_the_same_catalogue():
    assert dict(GPUSCALER_KINDS) == dict(LIVE_KINDS) == dict(KINDS)
    for name in harness.names():
        kind = harness.get(name).kind
        assert kind is (harness.ORACLE if name == "oracle" else KINDS[kind.name])


def test_the_harness_oracle_is_a_hindsight_kind_that_needs_the_requirement():
    assert not harness.ORACLE.live
    with pytest.raises(ValueError, match="hindsight"):
        harness.ORACLE.build(OracleConfig(lead_s=60.0), "oracle")
    policy = harness.ORACLE.build(OracleConfig(lead_s=60.0), "oracle", [1, 2, 3])
    assert policy.signal_path == harness.ORACLE.path


def test_docs_path_table_is_generated_from_the_declarations():
    text = DOCS.read_text()
    found = re.search(
        r"<!-- generated: scaling.catalogue.path_table -->\n(.*?)<!-- end generated -->",
        text,
        re.S,
    )
    assert found is not None, "docs/baselines.md lost its generated block"
    assert found.group(1) == path_table()
    assert "| kpa | the pods' serving totals, sampled by the autoscaler itself | 1 s |" in text
