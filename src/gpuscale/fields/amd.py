"""The AMD field catalogue, under AMD device-metrics-exporter's own names.

AMD GPUs are exported the way ROCm/device-metrics-exporter exports them, so
that its Grafana dashboards and rules work unchanged; the recording rules map
both vendors into gpuscale's neutral schema. Names, help texts, units and
labels below were checked against the exporter's source
(``pkg/amdgpu/gpuagent/gpuagent_gpu_metrics.go``, ``exporterconfig.proto``)
and ``docs/configuration/metricslist.md``. Units are the exporter's, not base
units: MB for VRAM, uJ for energy, Mb/s for PCIe bandwidth, GT/s for PCIe speed.

The exporter declares every GPU series as a Prometheus gauge, including the
ones that only grow (energy, ECC totals, PCIe replays); we keep that type so a
scrape of gpuscale looks like a scrape of the exporter.

Per-index values: some series carry an index label (``gpu_clock`` has
``clock_index`` and ``clock_type``, ``gpu_hbm_temperature`` has ``hbm_index``,
``gpu_gfx_busy_instantaneous`` has ``xcc_index`` ...). A ``Snapshot`` holds
flat ``name -> value`` maps, so each labelled value is its own key,
``"gpu_clock|clock_index=0,clock_type=system"``: the part before ``|`` is the
series name and the rest its extra labels. ``labelled_key`` builds such a key
and ``split_labelled_key`` takes it apart.
"""

from gpuscale.fields.catalogue import Field

#: Separator between series name and extra labels in a per-label key.
LABEL_KEY_SEPARATOR = "|"

#: The series that is not per GPU: the number of GPUs on the node (label: hostname).
NODE_GPUS = "gpu_nodes_total"

#: Labels device-metrics-exporter always puts on GPU series
#: (``gpuMandatoryLables``), in its order; ``gpu_id`` is the GPU's index on the host.
AMD_MANDATORY_LABELS: tuple[str, ...] = (
    "gpu_id",
    "card_model",
    "gpu_partition_id",
    "gpu_compute_partition_type",
    "gpu_memory_partition_type",
    "deployment_mode",
    "serial_number",
    "pod",
    "namespace",
    "container",
    "job_id",
    "job_user",
    "job_partition",
    "hostname",
)

#: Optional labels the exporter adds when its config lists them. We add the
#: static ones AMD's dashboards read (``gpu_uuid`` and the info-panel labels).
AMD_OPTIONAL_LABELS: tuple[str, ...] = (
    "gpu_uuid",
    "card_series",
    "card_vendor",
    "driver_version",
    "vbios_version",
)

#: The one custom label the exporter allows (its ``CustomLabels`` config); it goes
#: on every series, ``gpu_nodes_total`` included, and only when it is set.
CLUSTER_LABEL = "cluster_name"

#: Every label of a GPU series, mandatory first (``cluster_name`` follows when set).
AMD_LABELS: tuple[str, ...] = AMD_MANDATORY_LABELS + AMD_OPTIONAL_LABELS


def labelled_key(name: str, **labels: str) -> str:
    """Build the snapshot key for one labelled value of a series.

    Args:
        name: Series name, e.g. ``gpu_clock``.
        **labels: The value's extra labels, e.g. ``clock_index="0", clock_type="system"``.

    Returns:
        The key, e.g. ``gpu_clock|clock_index=0,clock_type=system``.
    """
    if not labels:
        return name
    return name + LABEL_KEY_SEPARATOR + ",".join(f"{k}={v}" for k, v in labels.items())


def split_labelled_key(key: str) -> tuple[str, dict[str, str]]:
    """Split a snapshot key into series name and extra labels.

    Args:
        key: A key from ``DeviceSample.values``.

    Returns:
        ``(series name, extra labels)``; the labels are empty for a plain key.
    """
    name, sep, rest = key.partition(LABEL_KEY_SEPARATOR)
    if not sep:
        return name, {}
    return name, dict(pair.split("=", 1) for pair in rest.split(","))


def _f(name: str, unit: str, help_: str) -> Field:
    return Field(name, 0, "gauge", unit, help_, True)


#: ECC blocks as the exporter names them (``gpu_ecc_<kind>_<block>``).
ECC_BLOCKS: tuple[str, ...] = (
    "sdma",
    "gfx",
    "mmhub",
    "athub",
    "bif",
    "hdp",
    "xgmi_wafl",
    "df",
    "smn",
    "sem",
    "mp0",
    "mp1",
    "fuse",
    "umc",
    "mca",
    "vcn",
    "jpeg",
    "ih",
    "mpio",
)


def _ecc() -> tuple[Field, ...]:
    fields = [
        _f("gpu_ecc_correct_total", "1", "Total Correctable error count"),
        _f("gpu_ecc_uncorrect_total", "1", "Total Uncorrectable error count"),
        _f(
            "gpu_ecc_deferred_total",
            "1",
            "Total accumulated deferred ECC errors across all GPU blocks",
        ),
    ]
    for block in ECC_BLOCKS:
        shown = block.upper().replace("XGMI_", "") if block != "fuse" else "Fuse"
        fields += [
            _f(f"gpu_ecc_correct_{block}", "1", f"Correctable error count in {shown} block"),
            _f(f"gpu_ecc_uncorrect_{block}", "1", f"Uncorrectable error count in {shown} block"),
            _f(
                f"gpu_ecc_deferred_{block}",
                "1",
                f"Accumulated deferred ECC errors in {block.upper().replace('_', ' ')} block",
            ),
        ]
    return tuple(fields)


_VIOLATIONS: tuple[tuple[str, str], ...] = (
    ("current_accumulated_counter", "current accumulated violation counter"),
    ("processor_hot_residency_accumulated", "process hot residency accumulated violation counter"),
    ("ppt_residency_accumulated", "package power tracking accumulated violation counter"),
    ("socket_thermal_residency_accumulated", "socket thermal accumulated violation counter"),
    ("vr_thermal_residency_accumulated", "voltage rail accumulated violation counter"),
    ("hbm_thermal_residency_accumulated", "HBM accumulated violation counter"),
    ("processor_hot_residency_percentage", "process hot residency percentage violation counter"),
    ("ppt_residency_percentage", "package power tracking percentage violation counter"),
    ("socket_thermal_residency_percentage", "socket thermal percentage violation counter"),
    ("vr_thermal_residency_percentage", "voltage rail percentage violation counter"),
    ("hbm_thermal_residency_percentage", "HBM percentage violation counter"),
    (
        "gfx_clock_below_host_limit_power_accumulated",
        "GFX clock below host limit power accumulated violation counter",
    ),
    (
        "gfx_clock_below_host_limit_thermal_accumulated",
        "GFX clock below host limit thermal accumulated violation counter",
    ),
    ("low_utilization_accumulated", "GPU low utilization accumulated violation counter"),
    (
        "gfx_clock_below_host_limit_total_accumulated",
        "GFX clock below host limit total accumulated violation counter",
    ),
    (
        "gfx_clock_below_host_limit_power_percentage",
        "GFX clock below host limit power percentage violation counter",
    ),
    (
        "gfx_clock_below_host_limit_thermal_percentage",
        "GFX clock below host limit thermal percentage violation counter",
    ),
    ("low_utilization_percentage", "GPU utilization percentage violation counter"),
    (
        "gfx_clock_below_host_limit_total_percentage",
        "GFX clock below host limit total percentage violation counter",
    ),
)

_XCP = "per accelerated compute processor(xcp) per compute core (xcc), as per partitioning"
_CATALOGUE: tuple[Field, ...] = (
    _f(NODE_GPUS, "1", "Number of GPUs in the node"),
    _f("gpu_health", "1", "Health of the GPU (0 = Unhealthy | 1 = Healthy)"),
    # Power and energy.
    _f("gpu_package_power", "W", "Current socket power in Watts"),
    _f("gpu_average_package_power", "W", "Average socket power in Watts"),
    _f("gpu_power_usage", "W", "GPU Power usage in Watts"),
    _f("gpu_energy_consumed", "uJ", "Accumulated energy consumed by the GPU in uJ"),
    # Temperature.
    _f("gpu_edge_temperature", "C", "Current edge temperature in Celsius"),
    _f("gpu_junction_temperature", "C", "Current junction/hotspot temperature in Celsius"),
    _f("gpu_memory_temperature", "C", "Current memory temperature in Celsius"),
    _f("gpu_hbm_temperature", "C", "List of current HBM temperatures in Celsius"),
    # Activity.
    _f("gpu_gfx_activity", "%", "Graphics engine usage in Percentage (0-100)"),
    _f("gpu_umc_activity", "%", "Memory engine usage in Percentage (0-100)"),
    _f("gpu_mma_activity", "%", "Average MultiMedia (MM) engine usage in Percentage (0-100)"),
    _f(
        "gpu_vcn_activity",
        "%",
        "List of Video Core Next (VCN) encode/decode usage in percentage",
    ),
    _f("gpu_jpeg_activity", "%", "List of JPEG engine usage in Percentage (0-100)"),
    _f("gpu_gfx_busy_instantaneous", "%", f"Gfx busy instantaneous {_XCP} of the system"),
    _f("gpu_vcn_busy_instantaneous", "%", f"Vcn busy instantaneous {_XCP} of the system"),
    _f("gpu_jpeg_busy_instantaneous", "%", f"Jpeg busy instantaneous {_XCP} of the system"),
    # Voltage (deprecated upstream; served where amdsmi still reports it).
    _f("gpu_voltage", "mV", "Current SoC voltage in mV"),
    _f("gpu_gfx_voltage", "mV", "Current gfx voltage in mV"),
    _f("gpu_memory_voltage", "mV", "Current memory voltage in mV"),
    # PCIe.
    _f("pcie_speed", "GT/s", "Current PCIe speed in GT/s"),
    _f("pcie_max_speed", "GT/s", "Maximum PCIe speed in GT/s"),
    _f("pcie_bandwidth", "Mb/s", "Current PCIe bandwidth in Mb/s"),
    _f("pcie_replay_count", "1", "Total number of PCIe replays"),
    _f("pcie_recovery_count", "1", "Total number of PCIe recoveries"),
    _f("pcie_replay_rollover_count", "1", "PCIe replay accumulated count"),
    _f("pcie_nack_sent_count", "1", "PCIe NAK sent accumulated count"),
    _f("pcie_nack_received_count", "1", "PCIe NAK received accumulated count"),
    _f("pcie_bidirectional_bandwidth", "GB/s", "Accumulated bandwidth on PCIe link in GB/sec"),
    # Clocks.
    _f("gpu_clock", "MHz", "List of current GPU clock frequencies in MHz"),
    _f("gpu_min_clock", "MHz", "List of current GPU min clock frequencies in MHz"),
    _f("gpu_max_clock", "MHz", "List of current GPU max clock frequencies in MHz"),
    # Memory.
    _f("gpu_vram_max_bandwidth", "GB/s", "GPU VRAM maximum bandwidth at max memory clock in GB/s"),
    _f("gpu_total_vram", "MB", "Total VRAM memory of the GPU (in MB)"),
    _f("gpu_used_vram", "MB", "Used VRAM memory of the GPU (in MB)"),
    _f("gpu_free_vram", "MB", "Free VRAM memory of the GPU (in MB)"),
    _f("gpu_total_visible_vram", "MB", "Total visible VRAM memory of the GPU (in MB)"),
    _f("gpu_used_visible_vram", "MB", "Used visible VRAM memory of the GPU (in MB)"),
    _f("gpu_free_visible_vram", "MB", "Free visible VRAM memory of the GPU (in MB)"),
    _f("gpu_total_gtt", "MB", "Total graphics translation table memory of the GPU (in MB)"),
    _f("gpu_used_gtt", "MB", "Used graphics translation table memory of the GPU (in MB)"),
    _f("gpu_free_gtt", "MB", "Free graphics translation table memory of the GPU (in MB)"),
    *_ecc(),
    # XGMI.
    _f("gpu_xgmi_link_rx", "KB", "Accumulated XGMI Link Data Read in KB"),
    _f("gpu_xgmi_link_tx", "KB", "Accumulated XGMI Link Data Write in KB"),
    *(_f(f"gpu_violation_{name}", "1", help_) for name, help_ in _VIOLATIONS),
    # Profiler series: rocprofiler-sdk derived counters, read through AMD's rocpctl
    # (telemetry/amd_prof.py); gpu_prof_gui_util_percent falls back to amdsmi's
    # graphics-engine busy share when the profiler is off.
    _f("gpu_prof_gui_util_percent", "%", "Percentage of the time that GUI is active"),
    _f(
        "gpu_prof_sm_active",
        "%",
        "The percentage of GPUTime vector ALU instructions are processed."
        " Value range: 0% (bad) to 100% (optimal)",
    ),
    _f("gpu_prof_occupancy_per_cu", "1", "Mean occupancy per compute unit"),
    _f("gpu_prof_occupancy_per_active_cu", "1", "Mean occupancy per active compute unit"),
    _f("gpu_prof_simd_utilization", "1", "Fraction of time the SIMDs are being utilized [0,1]"),
    _f("gpu_prof_tensor_active_percent", "%", "MFMA Utililization Unit: percent"),
)

#: Family name -> field, in exposition order.
AMD_FIELDS: dict[str, Field] = {f.name: f for f in _CATALOGUE}

#: gpu_prof_* family -> the rocprofiler-sdk derived counter device-metrics-exporter
#: reads for it (its rocpctl output ``Field``), and the range it clamps the value to
#: (upstream ``NormalizePercent`` / ``NormalizeFraction``; None: not clamped).
PROFILER_COUNTERS: dict[str, tuple[str, float | None]] = {
    "gpu_prof_gui_util_percent": ("GPU_UTIL", 100.0),
    "gpu_prof_sm_active": ("VALUBusy", 100.0),
    "gpu_prof_occupancy_per_cu": ("MeanOccupancyPerCU", None),
    "gpu_prof_occupancy_per_active_cu": ("MeanOccupancyPerActiveCU", None),
    "gpu_prof_simd_utilization": ("SIMD_UTILIZATION", 1.0),
    "gpu_prof_tensor_active_percent": ("MfmaUtil", 100.0),
}

#: gpu_prof_* families only the profiler gives (no amdsmi call does): absent, never 0,
#: on a node where the profiler is off or fails.
AMD_PROFILER_ONLY: tuple[str, ...] = tuple(
    name for name in PROFILER_COUNTERS if name != "gpu_prof_gui_util_percent"
)

__all__ = [
    "AMD_FIELDS",
    "AMD_LABELS",
    "AMD_MANDATORY_LABELS",
    "AMD_OPTIONAL_LABELS",
    "AMD_PROFILER_ONLY",
    "CLUSTER_LABEL",
    "ECC_BLOCKS",
    "LABEL_KEY_SEPARATOR",
    "NODE_GPUS",
    "PROFILER_COUNTERS",
    "labelled_key",
    "split_labelled_key",
]
