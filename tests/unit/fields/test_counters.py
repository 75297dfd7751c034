from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.fields import DCGM_FIELDS, default_counters, parse_counters, read_counters

# The layout of dcgm-exporter's own default-counters.csv: comment rows with trailing
# commas, aligned columns and a stray space before a comma.
DCGM_STYLE = """# Format,,
# If line starts with a '#' it is considered a comment,,
# DCGM FIELD, Prometheus metric type, help message

# Clocks,,
DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).
DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).
# DCGM_FI_DEV_POWER_VIOLATION,       counter, Throttling duration due to power constraints (in us).
DCGM_FI_DRIVER_VERSION,        label, Driver Version
"""


def test_reads_dcgm_exporter_layout_with_comments_and_stray_spaces():
    counters = parse_counters(DCGM_STYLE, "default-counters.csv")
    assert [c.name for c in counters] == [
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DRIVER_VERSION",
    ]
    assert [c.type for c in counters] == ["gauge", "gauge", "gauge", "counter", "label"]
    assert counters[0].help == "SM clock frequency (in MHz)."


def test_help_may_contain_commas():
    (counter,) = parse_counters("DCGM_FI_DEV_GPU_UTIL, gauge, util, in percent, sampled")
    assert counter.help == "util, in percent, sampled"


def test_missing_help_falls_back_to_catalogue():
    (counter,) = parse_counters("DCGM_FI_DEV_GPU_UTIL, gauge")
    assert counter.help == DCGM_FIELDS["DCGM_FI_DEV_GPU_UTIL"].help


@pytest.mark.parametrize("type_", ["gauge", "counter", "histogram", "summary", "label"])
def test_accepts_every_dcgm_exporter_type(type_):
    (counter,) = parse_counters(f"DCGM_FI_DEV_GPU_UTIL, {type_}, x")
    assert counter.type == type_


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        (
            "DCGM_FI_DEV_GPU_UTIL, gauge, ok\nDCGM_FI_NOPE, gauge, x",
            2,
            "2:1: not a DCGM field name",
        ),
        ("# c\n\nDCGM_FI_DEV_GPU_UTIL, gaugee, x", 3, "3:2: unknown metric type for DCGM_FI"),
        ("DCGM_FI_DEV_GPU_UTIL gauge x", 1, "malformed row"),
        ("DCGM_FI_DEV_GPU_UTIL, , x", 1, "malformed row"),
    ],
)
def test_bad_rows_name_file_and_line(text, line, fragment):
    with pytest.raises(ConfigError) as err:
        parse_counters(text, "my.csv")
    message = str(err.value)
    assert message.startswith(f"my.csv:{line}:")
    assert fragment in message
    assert "NOPE" not in message  # the row is never quoted
    assert "gaugee" not in message
    assert "\n" not in message


def test_unreadable_file_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"missing\.csv: cannot be read"):
        read_counters(tmp_path / "missing.csv")


def test_default_set_matches_dcgm_exporter_defaults():
    names = {c.name for c in default_counters()}
    # dcgm-exporter's shipped default-counters.csv enables these (25 series + the driver label).
    expected = {
        "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DRIVER_VERSION",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
    }  # fmt: skip
    assert names == expected


def test_catalogue_has_the_fields_dcgm_exporter_ships_commented_out():
    commented = [
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_RETIRED_PENDING",
        "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
        "DCGM_FI_DEV_LOW_UTIL_VIOLATION", "DCGM_FI_DEV_RELIABILITY_VIOLATION",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES",
    ]  # fmt: skip
    for name in commented:
        field = DCGM_FIELDS[name]
        assert not field.default, name
        assert field.field_id > 0, name
    assert DCGM_FIELDS["DCGM_FI_DEV_GPU_UTIL"].field_id == 203
    assert DCGM_FIELDS["DCGM_FI_PROF_SM_ACTIVE"].field_id == 1002
    assert DCGM_FIELDS["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"].field_id == 311


@given(st.lists(st.sampled_from(sorted(DCGM_FIELDS)), unique=True, max_size=20))
def test_any_subset_round_trips_through_the_file_format(names):
    text = "\n".join(f"  {n} ,  {DCGM_FIELDS[n].type} , {DCGM_FIELDS[n].help}" for n in names)
    parsed = parse_counters(text)
    assert [c.name for c in parsed] == names
    assert [c.help for c in parsed] == [DCGM_FIELDS[n].help for n in names]


def test_a_repeated_row_keeps_the_first_as_dcgm_exporter_serves_it(caplog):
    counters = parse_counters("DCGM_FI_DEV_GPU_UTIL, gauge, a\nDCGM_FI_DEV_GPU_UTIL, gauge, b", "x")
    assert [(c.name, c.help) for c in counters] == [("DCGM_FI_DEV_GPU_UTIL", "a")]
    assert "x:2: DCGM_FI_DEV_GPU_UTIL is already listed on line 1" in caplog.text


def test_legacy_names_resolve_to_their_field_and_keep_their_name():
    sm, throttle = parse_counters(
        "dcgm_sm_clock, gauge, SM clock\nDCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, why"
    )
    assert (sm.name, sm.field.name, sm.field.field_id) == (
        "dcgm_sm_clock",
        "DCGM_FI_DEV_SM_CLOCK",
        100,
    )
    assert (throttle.field.name, throttle.field.field_id) == (
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        112,
    )


def test_built_in_default_is_dcgm_exporters_file_with_its_help_texts():
    counters = {c.name: c for c in default_counters()}
    assert counters["DCGM_FI_DEV_SM_CLOCK"].help == "SM clock frequency (in MHz)."
    assert "DCGM_EXP_XID_ERRORS_COUNT" not in counters  # commented out upstream
    assert counters["DCGM_FI_DRIVER_VERSION"].type == "label"
