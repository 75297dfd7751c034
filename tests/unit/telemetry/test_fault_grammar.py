"""One fault grammar for exporter and simulator: forms, errors, old spellings, round trip."""

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.telemetry import faults as grammar
from gpuscale.telemetry.faults import DEFAULT_RISE_C, DEFAULT_SHARE, Fault, parse_fault, validate


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each test sees the once-per-process deprecation warnings afresh."""
    monkeypatch.setattr(grammar, "_warned", set())


@pytest.mark.parametrize(
    ("spec", "injector", "fault"),
    [
        ("gpu-lost@600", "simulator", Fault("gpu-lost", 600.0)),
        ("gpu-lost@60:gpu=3", "exporter", Fault("gpu-lost", 60.0, gpu=3)),
        ("xid@30:code=13:gpu=0", "exporter", Fault("xid", 30.0, gpu=0, code=13)),
        ("thermal@300:duration=600", "simulator", Fault("thermal", 300.0, duration_s=600.0)),
        (
            "thermal@0:gpu=1:rise_c=25:duration=300",
            "exporter",
            Fault("thermal", 0.0, gpu=1, duration_s=300.0, rise_c=25.0),
        ),
        ("ecc-dbe@900:replica=2", "simulator", Fault("ecc-dbe", 900.0, replica=2)),
        ("ecc-dbe@10:gpu=1", "exporter", Fault("ecc-dbe", 10.0, gpu=1)),
        ("row-remap@5:gpu=2", "exporter", Fault("row-remap", 5.0, gpu=2)),
        ("straggler@120:factor=0.3", "simulator", Fault("straggler", 120.0, factor=0.3)),
        (" gpu-lost@1.5:duration=60 ", "simulator", Fault("gpu-lost", 1.5, duration_s=60.0)),
        ("straggler@9:gpu=2:factor=0.4", "exporter", Fault("straggler", 9.0, gpu=2, factor=0.4)),
        (
            "power-cap@60:gpu=1:limit_w=300:duration=600",
            "exporter",
            Fault("power-cap", 60.0, gpu=1, duration_s=600.0, limit_w=300.0),
        ),
        (
            "memory-full@5:gpu=0:share=0.97",
            "exporter",
            Fault("memory-full", 5.0, gpu=0, share=0.97),
        ),
        ("idle-allocated@5:gpu=3", "exporter", Fault("idle-allocated", 5.0, gpu=3)),
        ("stale@5:gpu=0:duration=60", "exporter", Fault("stale", 5.0, gpu=0, duration_s=60.0)),
        (
            "exporter-down@30:duration=120",
            "exporter",
            Fault("exporter-down", 30.0, duration_s=120.0),
        ),
    ],
)
def test_documented_forms_parse_for_their_command(spec, injector, fault):
    assert parse_fault(spec, injector) == fault
    assert parse_fault(spec) == fault


def test_one_thermal_default_for_both_commands():
    exporter = parse_fault("thermal@0:gpu=0", "exporter")
    simulator = parse_fault("thermal@0", "simulator")
    assert exporter.rise_c == simulator.rise_c == DEFAULT_RISE_C == 35.0


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", "expected KIND@SECONDS"),
        ("gpu-lost", "expected KIND@SECONDS"),
        ("melt@5", "unknown fault kind 'melt'"),
        ("thermal@soon", "at='soon' is not a number >= 0"),
        ("thermal@-5", "at='-5' is not a number >= 0"),
        ("thermal@inf", "at='inf' is not a number >= 0"),
        ("straggler@5:factor=2", "factor must be in (0, 1]"),
        ("straggler@5:factor=0", "factor must be in (0, 1]"),
        ("thermal@5:bogus=1", "'bogus=1' is not one of"),
        ("thermal@5:factor=0.5", "'factor=0.5' is not one of"),
        ("ecc-dbe@5:duration=10", "'duration=10' is not one of"),
        ("thermal@5:duration=1:duration=2", "duration is given twice"),
        ("thermal@5:rise_c=1:extra_c=2", "rise_c is given twice"),
        ("thermal@5:rise_c=0", "rise_c must be Celsius > 0"),
        ("gpu-lost@5:replica=1.5", "replica=1.5 must be a whole number"),
        ("gpu-lost@5:replica", "'replica' is not one of"),
        ("xid@5:gpu=1", "xid needs code=N"),
        ("xid@5:code=0:gpu=1", "code must be an XID number >= 1"),
        ("xid:0:gpu=1", "code must be an XID number >= 1"),
        ("ecc-dbe:gpu=1:gpu=2", "gpu is given twice"),
        ("row-remap:gpu=1:extra=3", "'extra=3' is not one of"),
        ("thermal@5:limit_w=300", "'limit_w=300' is not one of"),
        ("power-cap@5:limit_w=0", "limit_w must be watts > 0"),
        ("memory-full@5:share=0", "share must be in (0, 1]"),
        ("memory-full@5:share=1.5", "share must be in (0, 1]"),
        ("stale@5:factor=0.5", "'factor=0.5' is not one of"),
    ],
)
def test_bad_specs_are_one_line_config_errors_naming_spec_problem_and_forms(spec, problem):
    with pytest.raises(ConfigError) as err:
        parse_fault(spec)
    message = str(err.value)
    assert message.startswith(f"--fault {spec!r}: {problem}")
    assert "; use KIND@SECONDS[:key=value]..., KIND one of gpu-lost, xid, thermal" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("spec", "injector", "problem", "forms"),
    [
        ("straggler@5", "exporter", "gpu=N is required", "straggler@SECONDS:gpu=N"),
        (
            "power-cap@5:replica=0",
            "simulator",
            "the simulator (gpuscale evaluate) cannot inject power-cap faults",
            "straggler@SECONDS[:replica=N]",
        ),
        (
            "exporter-down@5:gpu=1",
            "exporter",
            "exporter-down hits the whole host, not one GPU",
            "exporter-down@SECONDS[:duration=SECONDS]",
        ),
        (
            "xid@5:code=13",
            "simulator",
            "the simulator (gpuscale evaluate) cannot inject xid faults",
            "straggler@SECONDS[:replica=N]",
        ),
        (
            "row-remap@5",
            "simulator",
            "the simulator (gpuscale evaluate) cannot inject row-remap faults",
            "straggler@SECONDS[:replica=N]",
        ),
        (
            "gpu-lost@5:gpu=1",
            "simulator",
            "gpu=N does not apply to the simulator",
            "name the target with replica=N",
        ),
        (
            "gpu-lost@5:replica=1",
            "exporter",
            "replica=N does not apply to gpuscale exporter",
            "name the target with gpu=N",
        ),
        ("thermal@5", "exporter", "gpu=N is required", "thermal@SECONDS:gpu=N"),
        ("gpu-lost@5:gpu=0:duration=9", "exporter", "the exporter cannot end a gpu-lost", ""),
        ("melt@5", "exporter", "unknown fault kind", "row-remap@SECONDS:gpu=N"),
    ],
)
def test_a_kind_or_key_the_command_cannot_inject_is_a_one_line_error(
    spec, injector, problem, forms
):
    with pytest.raises(ConfigError) as err:
        parse_fault(spec, injector)
    message = str(err.value)
    assert message.startswith(f"--fault {spec!r}: {problem}")
    assert forms in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("old", "fault", "new"),
    [
        ("xid:79:gpu=3:at=60", Fault("gpu-lost", 60.0, gpu=3), "gpu-lost@60:gpu=3"),
        ("xid:gpu=2", Fault("gpu-lost", 0.0, gpu=2), "gpu-lost@0:gpu=2"),
        ("xid:13:gpu=0", Fault("xid", 0.0, gpu=0, code=13), "xid@0:code=13:gpu=0"),
        ("ecc-dbe:gpu=1:at=10", Fault("ecc-dbe", 10.0, gpu=1), "ecc-dbe@10:gpu=1"),
        (
            "thermal:gpu=0:extra=25:at=5.5",
            Fault("thermal", 5.5, gpu=0, rise_c=25.0),
            "thermal@5.5:gpu=0:rise_c=25",
        ),
        ("row-remap:gpu=2:at=5", Fault("row-remap", 5.0, gpu=2), "row-remap@5:gpu=2"),
        ("thermal@0:extra_c=50", Fault("thermal", 0.0, rise_c=50.0), "thermal@0:rise_c=50"),
        ("thermal@0:gpu=1:extra=30", Fault("thermal", 0.0, gpu=1, rise_c=30.0), None),
    ],
)
def test_old_spellings_still_parse_with_one_warning_naming_the_new_one(old, fault, new, caplog):
    new = new or fault.spec()
    with caplog.at_level(logging.WARNING, logger="gpuscale.telemetry.faults"):
        assert parse_fault(old) == fault
        assert parse_fault(old) == fault  # warned once, not twice
    warnings = [r for r in caplog.records if r.name == "gpuscale.telemetry.faults"]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert "deprecated" in text
    assert repr(old) in text
    assert repr(new) in text
    assert parse_fault(new) == fault


def test_new_spellings_log_no_warning(caplog):
    with caplog.at_level(logging.WARNING):
        parse_fault("thermal@300:gpu=1:rise_c=40:duration=60", "exporter")
        parse_fault("straggler@5:replica=0:factor=0.2", "simulator")
    assert caplog.records == []


def test_validate_checks_faults_built_in_code():
    with pytest.raises(ConfigError, match=r"^--fault 'straggler@1:factor=2': factor must be"):
        validate(Fault("straggler", 1.0, factor=2.0))
    with pytest.raises(ConfigError, match="rise_c is for thermal only"):
        validate(Fault("ecc-dbe", 1.0, rise_c=20.0))
    assert validate(Fault("ecc-dbe", 1.0, gpu=0), "exporter") == Fault("ecc-dbe", 1.0, gpu=0)


TIMES = st.one_of(
    st.integers(0, 10**7).map(float),
    st.floats(0.0, 1e9, allow_nan=False, allow_infinity=False),
)


@st.composite
def faults(draw):
    kind = draw(st.sampled_from(grammar.KINDS))
    target = draw(st.sampled_from(["gpu", "replica", None]))
    index = draw(st.integers(0, 4096))
    keys = grammar._KIND_KEYS[kind]
    return Fault(
        kind,
        draw(TIMES),
        gpu=index if target == "gpu" else None,
        replica=index if target == "replica" else None,
        code=draw(st.integers(1, 200)) if "code" in keys else None,
        duration_s=draw(st.one_of(st.none(), TIMES)) if "duration" in keys else None,
        factor=draw(st.floats(1e-6, 1.0)) if "factor" in keys else 0.5,
        rise_c=draw(st.floats(0.01, 200.0)) if "rise_c" in keys else DEFAULT_RISE_C,
        limit_w=draw(st.one_of(st.none(), st.floats(1e-3, 1e5))) if "limit_w" in keys else None,
        share=draw(st.floats(1e-6, 1.0)) if "share" in keys else DEFAULT_SHARE,
    )


@settings(max_examples=300, deadline=None)
@given(faults())
def test_every_fault_round_trips_through_its_spec(fault):
    assert parse_fault(fault.spec()) == fault
