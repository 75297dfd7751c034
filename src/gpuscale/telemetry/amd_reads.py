"""Which amdsmi call feeds each device-metrics-exporter series, and the reads themselves.

``telemetry/amd.py`` owns the amdsmi module and its one chokepoint; this
module gets the module object and a per-device batch from it and turns amdsmi
answers into values in the exporter's units. ``FEEDS`` is the documented map
from each series to the amdsmi call that feeds it (docs/exporter.md shows it).
A series amdsmi does not answer for a GPU is absent, never 0; ``AmdSource``
logs each such absence once per GPU.

Where amdsmi reports a list (HBM stacks, XCCs, clocks, XGMI links) each valid
entry becomes one value with the exporter's index label; ``"N/A"`` entries are
skipped, as the exporter skips values it marks not applicable. Per-XCC lists
come per XCP (partition); a GPU reads the row of its own partition.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gpuscale.fields.amd import ECC_BLOCKS, labelled_key
from gpuscale.telemetry.batch import FieldBatch

_MIB = 1024 * 1024

_METRICS = "amdsmi_get_gpu_metrics_info"
_VIOLATIONS = "amdsmi_get_violation_status"
_PCIE = "amdsmi_get_pcie_info"
_ECC_BLOCK = "amdsmi_get_gpu_ecc_count"

#: Series name -> the amdsmi call that feeds it.
FEEDS: dict[str, str] = {
    "gpu_health": f"{_ECC_BLOCK} (per block; unhealthy when any uncorrectable count > 0)",
    "gpu_package_power": "amdsmi_get_power_info (current_socket_power)",
    "gpu_average_package_power": "amdsmi_get_power_info (average_socket_power)",
    "gpu_power_usage": "amdsmi_get_power_info (current, else average socket power)",
    "gpu_energy_consumed": "amdsmi_get_energy_count (accumulator x resolution)",
    "gpu_edge_temperature": "amdsmi_get_temp_metric (EDGE, CURRENT)",
    "gpu_junction_temperature": "amdsmi_get_temp_metric (HOTSPOT, CURRENT)",
    "gpu_memory_temperature": "amdsmi_get_temp_metric (VRAM, CURRENT)",
    "gpu_hbm_temperature": f"{_METRICS} (temperature_hbm)",
    "gpu_gfx_activity": "amdsmi_get_gpu_activity (gfx_activity)",
    "gpu_umc_activity": "amdsmi_get_gpu_activity (umc_activity)",
    "gpu_mma_activity": "amdsmi_get_gpu_activity (mm_activity)",
    "gpu_vcn_activity": f"{_METRICS} (vcn_activity)",
    "gpu_jpeg_activity": f"{_METRICS} (jpeg_activity)",
    "gpu_gfx_busy_instantaneous": f"{_METRICS} (xcp_stats.gfx_busy_inst)",
    "gpu_vcn_busy_instantaneous": f"{_METRICS} (xcp_stats.vcn_busy)",
    "gpu_jpeg_busy_instantaneous": f"{_METRICS} (xcp_stats.jpeg_busy)",
    "gpu_voltage": f"{_METRICS} (voltage_soc)",
    "gpu_gfx_voltage": f"{_METRICS} (voltage_gfx)",
    "gpu_memory_voltage": f"{_METRICS} (voltage_mem)",
    "pcie_speed": f"{_PCIE} (pcie_metric.pcie_speed)",
    "pcie_max_speed": f"{_PCIE} (pcie_static.max_pcie_speed)",
    "pcie_bandwidth": f"{_PCIE} (pcie_metric.pcie_bandwidth)",
    "pcie_replay_count": f"{_PCIE} (pcie_metric.pcie_replay_count)",
    "pcie_recovery_count": f"{_PCIE} (pcie_metric.pcie_l0_to_recovery_count)",
    "pcie_replay_rollover_count": f"{_PCIE} (pcie_metric.pcie_replay_roll_over_count)",
    "pcie_nack_sent_count": f"{_PCIE} (pcie_metric.pcie_nak_sent_count)",
    "pcie_nack_received_count": f"{_PCIE} (pcie_metric.pcie_nak_received_count)",
    "pcie_bidirectional_bandwidth": f"{_METRICS} (pcie_bandwidth_acc)",
    "gpu_clock": f"{_METRICS} (current_gfxclks, current_uclk, current_vclk0s, ...)",
    "gpu_min_clock": "amdsmi_get_clock_info (min_clk, per clock type)",
    "gpu_max_clock": "amdsmi_get_clock_info (max_clk, per clock type)",
    "gpu_vram_max_bandwidth": f"{_METRICS} (vram_max_bandwidth)",
    "gpu_total_vram": "amdsmi_get_gpu_vram_usage (vram_total)",
    "gpu_used_vram": "amdsmi_get_gpu_vram_usage (vram_used)",
    "gpu_free_vram": "amdsmi_get_gpu_vram_usage (total - used)",
    "gpu_total_visible_vram": "amdsmi_get_gpu_memory_total (VIS_VRAM)",
    "gpu_used_visible_vram": "amdsmi_get_gpu_memory_usage (VIS_VRAM)",
    "gpu_free_visible_vram": "amdsmi_get_gpu_memory_total/usage (VIS_VRAM)",
    "gpu_total_gtt": "amdsmi_get_gpu_memory_total (GTT)",
    "gpu_used_gtt": "amdsmi_get_gpu_memory_usage (GTT)",
    "gpu_free_gtt": "amdsmi_get_gpu_memory_total/usage (GTT)",
    "gpu_ecc_correct_total": "amdsmi_get_gpu_total_ecc_count (correctable_count)",
    "gpu_ecc_uncorrect_total": "amdsmi_get_gpu_total_ecc_count (uncorrectable_count)",
    "gpu_ecc_deferred_total": "amdsmi_get_gpu_total_ecc_count (deferred_count)",
    **{
        f"gpu_ecc_{kind}_{block}": f"{_ECC_BLOCK} ({block.upper()})"
        for block in ECC_BLOCKS
        for kind in ("correct", "uncorrect", "deferred")
    },
    "gpu_xgmi_link_rx": f"{_METRICS} (xgmi_read_data_acc)",
    "gpu_xgmi_link_tx": f"{_METRICS} (xgmi_write_data_acc)",
    "gpu_prof_gui_util_percent": "amdsmi_get_gpu_activity (gfx_activity: graphics engine busy)",
}

# amdsmi's violation keys -> the exporter's gpu_violation_* suffix.
_VIOLATION_SCALARS: dict[str, str] = {
    "acc_counter": "current_accumulated_counter",
    "acc_prochot_thrm": "processor_hot_residency_accumulated",
    "acc_ppt_pwr": "ppt_residency_accumulated",
    "acc_socket_thrm": "socket_thermal_residency_accumulated",
    "acc_vr_thrm": "vr_thermal_residency_accumulated",
    "acc_hbm_thrm": "hbm_thermal_residency_accumulated",
    "per_prochot_thrm": "processor_hot_residency_percentage",
    "per_ppt_pwr": "ppt_residency_percentage",
    "per_socket_thrm": "socket_thermal_residency_percentage",
    "per_vr_thrm": "vr_thermal_residency_percentage",
    "per_hbm_thrm": "hbm_thermal_residency_percentage",
}
_VIOLATION_PER_XCC: dict[str, str] = {
    "acc_gfx_clk_below_host_limit_pwr": "gfx_clock_below_host_limit_power_accumulated",
    "acc_gfx_clk_below_host_limit_thm": "gfx_clock_below_host_limit_thermal_accumulated",
    "acc_low_utilization": "low_utilization_accumulated",
    "acc_gfx_clk_below_host_limit_total": "gfx_clock_below_host_limit_total_accumulated",
    "per_gfx_clk_below_host_limit_pwr": "gfx_clock_below_host_limit_power_percentage",
    "per_gfx_clk_below_host_limit_thm": "gfx_clock_below_host_limit_thermal_percentage",
    "per_low_utilization": "low_utilization_percentage",
    "per_gfx_clk_below_host_limit_total": "gfx_clock_below_host_limit_total_percentage",
}
FEEDS.update({f"gpu_violation_{v}": _VIOLATIONS for v in _VIOLATION_SCALARS.values()})
FEEDS.update({f"gpu_violation_{v}": _VIOLATIONS for v in _VIOLATION_PER_XCC.values()})

# The exporter's clock_type values, in the order its clock_index runs, with
# gpu_metrics' list key, its single-value fallback and amdsmi's clock type.
_CLOCKS: tuple[tuple[str, str, str, str], ...] = (
    ("system", "current_gfxclks", "current_gfxclk", "GFX"),
    ("memory", "", "current_uclk", "MEM"),
    ("video", "current_vclk0s", "current_vclk0", "VCLK0"),
    ("data", "current_dclk0s", "current_dclk0", "DCLK0"),
    ("soc", "current_socclks", "current_socclk", "SOC"),
)

# AMD block enum member for each exporter ECC block name.
_BLOCK_ENUM = {block: block.upper() for block in ECC_BLOCKS} | {"bif": "PCIE_BIF"}


def num(value: object) -> float | None:
    """A number from amdsmi, or None for its ``"N/A"`` and other non-numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(slots=True)
class AmdBatch(FieldBatch):
    """One pass over one AMD GPU; amdsmi answers dicts and ``"N/A"`` for unknowns."""

    def put(self, name: str, value: object) -> None:
        """Store a numeric value; ``"N/A"`` and None leave the field absent."""
        number = num(value)
        if number is not None:
            self.values[name] = number

    def put_list(self, name: str, label: str, values: object) -> None:
        """Store each numeric entry of a list under ``label=<position>``."""
        if isinstance(values, list | tuple):
            for index, value in enumerate(values):
                self.put(labelled_key(name, **{label: str(index)}), value)

    def dict_fields(self, fn: str, keys: Mapping[str, str], *args: object) -> dict[str, Any]:
        """Call a dict-returning getter and store ``keys`` (amdsmi key -> field name)."""
        answer = self.get(tuple(keys.values()), fn, *args) or {}
        for key, name in keys.items():
            self.put(name, answer.get(key))
        return dict(answer)


def _row(values: object, xcp: int) -> Sequence[object]:
    """This partition's row of a per-XCP table; a flat list is already one row."""
    if not isinstance(values, list) or not values:
        return []
    if isinstance(values[0], list):
        return values[xcp] if xcp < len(values) else []
    return values


def read_device(b: AmdBatch, amd: ModuleType, xcp: int) -> None:
    """Read every series of one GPU into ``b``.

    Args:
        b: The GPU's batch; its chokepoint sorts amdsmi errors.
        amd: The amdsmi module (or its fake).
        xcp: The GPU's partition index, which picks its row of per-XCP tables.
    """
    _activity(b)
    _memory(b, amd)
    _power(b)
    _temperatures(b, amd)
    metrics = b.get(_metrics_fields(), _METRICS) or {}
    _from_metrics(b, metrics, xcp)
    _clocks(b, amd, metrics)
    _ecc(b, amd)
    _pcie(b)
    _violations(b, xcp)


def _metrics_fields() -> tuple[str, ...]:
    return tuple(name for name, call in FEEDS.items() if call.startswith(_METRICS))


def _activity(b: AmdBatch) -> None:
    answer = b.dict_fields(
        "amdsmi_get_gpu_activity",
        {
            "gfx_activity": "gpu_gfx_activity",
            "umc_activity": "gpu_umc_activity",
            "mm_activity": "gpu_mma_activity",
        },
    )
    b.put("gpu_prof_gui_util_percent", answer.get("gfx_activity"))


def _memory(b: AmdBatch, amd: ModuleType) -> None:
    vram = b.dict_fields(
        "amdsmi_get_gpu_vram_usage",
        {"vram_total": "gpu_total_vram", "vram_used": "gpu_used_vram"},
    )
    total, used = num(vram.get("vram_total")), num(vram.get("vram_used"))
    b.put("gpu_free_vram", None if total is None or used is None else total - used)
    for kind, suffix in (
        (amd.AmdSmiMemoryType.VIS_VRAM, "visible_vram"),
        (amd.AmdSmiMemoryType.GTT, "gtt"),
    ):
        names = (f"gpu_total_{suffix}", f"gpu_used_{suffix}", f"gpu_free_{suffix}")
        total = num(b.get(names, "amdsmi_get_gpu_memory_total", kind))
        used = num(b.get(names, "amdsmi_get_gpu_memory_usage", kind))
        b.put(names[0], None if total is None else total / _MIB)
        b.put(names[1], None if used is None else used / _MIB)
        b.put(names[2], None if total is None or used is None else (total - used) / _MIB)


def _power(b: AmdBatch) -> None:
    power = b.dict_fields(
        "amdsmi_get_power_info",
        {
            "current_socket_power": "gpu_package_power",
            "average_socket_power": "gpu_average_package_power",
        },
    )
    current, average = (num(power.get(k)) for k in ("current_socket_power", "average_socket_power"))
    b.put("gpu_power_usage", current if current is not None else average)
    energy = b.get(("gpu_energy_consumed",), "amdsmi_get_energy_count") or {}
    ticks, resolution = num(energy.get("energy_accumulator")), num(energy.get("counter_resolution"))
    b.put(
        "gpu_energy_consumed", None if ticks is None or resolution is None else ticks * resolution
    )


def _temperatures(b: AmdBatch, amd: ModuleType) -> None:
    sensors = amd.AmdSmiTemperatureType
    current = amd.AmdSmiTemperatureMetric.CURRENT
    for name, sensor in (
        ("gpu_junction_temperature", sensors.HOTSPOT),
        ("gpu_edge_temperature", sensors.EDGE),
        ("gpu_memory_temperature", sensors.VRAM),
    ):
        b.put(name, b.get((name,), "amdsmi_get_temp_metric", sensor, current))


def _from_metrics(b: AmdBatch, m: Mapping[str, Any], xcp: int) -> None:
    b.put_list("gpu_hbm_temperature", "hbm_index", m.get("temperature_hbm"))
    b.put_list("gpu_vcn_activity", "vcn_index", m.get("vcn_activity"))
    b.put_list("gpu_jpeg_activity", "jpeg_index", m.get("jpeg_activity"))
    for name, key in (
        ("gpu_gfx_busy_instantaneous", "xcp_stats.gfx_busy_inst"),
        ("gpu_vcn_busy_instantaneous", "xcp_stats.vcn_busy"),
        ("gpu_jpeg_busy_instantaneous", "xcp_stats.jpeg_busy"),
    ):
        b.put_list(name, "xcc_index", list(_row(m.get(key), xcp)))
    for name, key in (
        ("gpu_voltage", "voltage_soc"),
        ("gpu_gfx_voltage", "voltage_gfx"),
        ("gpu_memory_voltage", "voltage_mem"),
        ("gpu_vram_max_bandwidth", "vram_max_bandwidth"),
        ("pcie_bidirectional_bandwidth", "pcie_bandwidth_acc"),
    ):
        b.put(name, m.get(key))
    b.put_list("gpu_xgmi_link_rx", "link_index", m.get("xgmi_read_data_acc"))
    b.put_list("gpu_xgmi_link_tx", "link_index", m.get("xgmi_write_data_acc"))


def _clocks(b: AmdBatch, amd: ModuleType, m: Mapping[str, Any]) -> None:
    """gpu_clock and its min/max, one clock_index running over every clock in _CLOCKS order."""
    index = 0
    names = ("gpu_clock", "gpu_min_clock", "gpu_max_clock")
    for clock_type, list_key, single_key, amd_type in _CLOCKS:
        listed = m.get(list_key) if list_key else None
        values = listed if isinstance(listed, list) else [m.get(single_key)]
        valid = [v for v in values if num(v) is not None]
        if not valid:
            continue
        kind = getattr(amd.AmdSmiClkType, amd_type)
        limits = b.get(names[1:], "amdsmi_get_clock_info", kind) or {}
        for value in valid:
            labels = {"clock_index": str(index), "clock_type": clock_type}
            b.put(labelled_key("gpu_clock", **labels), value)
            b.put(labelled_key("gpu_min_clock", **labels), limits.get("min_clk"))
            b.put(labelled_key("gpu_max_clock", **labels), limits.get("max_clk"))
            index += 1


def _ecc(b: AmdBatch, amd: ModuleType) -> None:
    b.dict_fields(
        "amdsmi_get_gpu_total_ecc_count",
        {
            "correctable_count": "gpu_ecc_correct_total",
            "uncorrectable_count": "gpu_ecc_uncorrect_total",
            "deferred_count": "gpu_ecc_deferred_total",
        },
    )
    # The exporter's health check: unhealthy once any block's uncorrectable
    # count passes its threshold, 0 by default; healthy when nothing says otherwise.
    healthy = True
    for block in ECC_BLOCKS:
        names = tuple(f"gpu_ecc_{kind}_{block}" for kind in ("correct", "uncorrect", "deferred"))
        enum = getattr(amd.AmdSmiGpuBlock, _BLOCK_ENUM[block])
        answer = b.get(names, _ECC_BLOCK, enum) or {}
        for key, name in zip(
            ("correctable_count", "uncorrectable_count", "deferred_count"), names, strict=True
        ):
            b.put(name, answer.get(key))
        uncorrectable = num(answer.get("uncorrectable_count"))
        healthy = healthy and (uncorrectable is None or uncorrectable <= 0)
    b.put("gpu_health", 1.0 if healthy else 0.0)


def _pcie(b: AmdBatch) -> None:
    names = tuple(name for name, call in FEEDS.items() if call.startswith(_PCIE))
    answer = b.get(names, _PCIE) or {}
    metric, static = answer.get("pcie_metric") or {}, answer.get("pcie_static") or {}
    for name, value in (
        ("pcie_speed", metric.get("pcie_speed")),
        ("pcie_max_speed", static.get("max_pcie_speed")),
    ):
        speed = num(value)
        b.put(name, None if speed is None else speed / 1000)  # MT/s -> GT/s
    for name, key in (
        ("pcie_bandwidth", "pcie_bandwidth"),
        ("pcie_replay_count", "pcie_replay_count"),
        ("pcie_recovery_count", "pcie_l0_to_recovery_count"),
        ("pcie_replay_rollover_count", "pcie_replay_roll_over_count"),
        ("pcie_nack_sent_count", "pcie_nak_sent_count"),
        ("pcie_nack_received_count", "pcie_nak_received_count"),
    ):
        b.put(name, metric.get(key))


def _violations(b: AmdBatch, xcp: int) -> None:
    names = tuple(name for name, call in FEEDS.items() if call == _VIOLATIONS)
    answer = b.get(names, _VIOLATIONS) or {}
    for key, suffix in _VIOLATION_SCALARS.items():
        b.put(f"gpu_violation_{suffix}", answer.get(key))
    for key, suffix in _VIOLATION_PER_XCC.items():
        b.put_list(f"gpu_violation_{suffix}", "xcc_index", list(_row(answer.get(key), xcp)))
