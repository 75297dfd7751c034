"""The AMD field catalogue, under AMD device-metrics-exporter's own names.

AMD GPUs are exported the way ROCm/device-metrics-exporter exports them, so
that its Grafana dashboards and rules work unchanged; the recording rules map
both vendors into gpuscale's neutral schema. Names, units and labels below were
checked against the exporter's source (``gpuagent_gpu_metrics.go``,
``exporterconfig.proto``) and its metrics list. Units are the exporter's, not
base units: MB for VRAM, uJ for energy, Mb/s for PCIe bandwidth.

The exporter declares every GPU series as a Prometheus gauge, including the
ones that only grow (energy, ECC totals, PCIe replays); we keep that type so a
scrape of gpuscale looks like a scrape of the exporter.

Per-clock values: the exporter has one ``gpu_clock`` series with a
``clock_type`` label (``system``, ``memory``, ``data``, ``video``, ``soc``;
older releases spelled them ``GPU_CLOCK_TYPE_SYSTEM`` ...). A ``Snapshot``
holds flat ``name -> value`` maps, so each clock type is its own key,
``"gpu_clock|system"`` and ``"gpu_clock|memory"``: the part before ``|`` is the
series name and the part after is the ``clock_type`` label value. Use
``split_labelled_key`` to take a key apart.
"""

from gpuscale.fields.catalogue import Field, MetricType

#: Separator between series name and label value in a per-label key.
LABEL_KEY_SEPARATOR = "|"

#: The label that tells ``gpu_clock`` series apart.
CLOCK_TYPE_LABEL = "clock_type"

#: Labels device-metrics-exporter puts on GPU series. The first fifteen are the
#: ones it always exports (``gpuMandatoryLables``); the rest are optional and
#: switched on in its config. ``gpu_id`` is the GPU's index on the host.
AMD_LABELS: tuple[str, ...] = (
    "gpu_id",
    "card_model",
    "gpu_partition_id",
    "gpu_compute_partition_type",
    "gpu_memory_partition_type",
    "kfd_process_id",
    "deployment_mode",
    "serial_number",
    "pod",
    "namespace",
    "container",
    "job_id",
    "job_user",
    "job_partition",
    "hostname",
    # Optional labels.
    "gpu_uuid",
    "card_series",
    "card_vendor",
    "driver_version",
    "vbios_version",
    "cluster_name",
)


def labelled_key(name: str, label_value: str) -> str:
    """Build the snapshot key for one labelled value of a series.

    Args:
        name: Series name, e.g. ``gpu_clock``.
        label_value: Value of the series' distinguishing label, e.g. ``system``.

    Returns:
        The key, e.g. ``gpu_clock|system``.
    """
    return f"{name}{LABEL_KEY_SEPARATOR}{label_value}"


def split_labelled_key(key: str) -> tuple[str, str | None]:
    """Split a snapshot key into series name and label value.

    Args:
        key: A key from ``DeviceSample.values``.

    Returns:
        ``(series name, label value)``; the label value is None for a plain key.
    """
    name, sep, value = key.partition(LABEL_KEY_SEPARATOR)
    return (name, value) if sep else (name, None)


def _f(name: str, unit: str, help_: str, type_: MetricType = "gauge") -> Field:
    return Field(name, 0, type_, unit, help_, True)


_CATALOGUE: tuple[Field, ...] = (
    # Activity.
    _f("gpu_gfx_activity", "%", "Graphics engine busy share, 0 to 100."),
    _f("gpu_umc_activity", "%", "Memory controller busy share, 0 to 100."),
    _f("gpu_mma_activity", "%", "Multimedia engine busy share, 0 to 100 (older drivers)."),
    # Memory.
    _f("gpu_total_vram", "MB", "VRAM size."),
    _f("gpu_used_vram", "MB", "VRAM in use."),
    _f("gpu_free_vram", "MB", "VRAM not in use: total minus used."),
    # Power and energy.
    _f("gpu_package_power", "W", "Current socket power (MI300 and later)."),
    _f("gpu_average_package_power", "W", "Average socket power (MI200)."),
    _f("gpu_power_usage", "W", "GPU power draw: current socket power, else the average."),
    _f("gpu_energy_consumed", "uJ", "Energy used since the driver loaded; only grows."),
    # Temperature.
    _f("gpu_junction_temperature", "C", "Hotspot (junction) temperature."),
    _f("gpu_edge_temperature", "C", "Edge temperature."),
    _f("gpu_memory_temperature", "C", "VRAM (HBM) temperature."),
    # Clocks, one key per clock_type label value.
    _f(labelled_key("gpu_clock", "system"), "MHz", "Current graphics (system) clock."),
    _f(labelled_key("gpu_clock", "memory"), "MHz", "Current memory clock."),
    # ECC.
    _f("gpu_ecc_correct_total", "1", "Correctable ECC errors, all blocks; only grows."),
    _f("gpu_ecc_uncorrect_total", "1", "Uncorrectable ECC errors, all blocks; only grows."),
    # PCIe.
    _f("pcie_speed", "GT/s", "Current PCIe link speed."),
    _f("pcie_bandwidth", "Mb/s", "Current PCIe bandwidth use (MI300 and later)."),
    _f("pcie_replay_count", "1", "PCIe replays (NAKs); only grows."),
)

AMD_FIELDS: dict[str, Field] = {f.name: f for f in _CATALOGUE}

__all__ = [
    "AMD_FIELDS",
    "AMD_LABELS",
    "CLOCK_TYPE_LABEL",
    "LABEL_KEY_SEPARATOR",
    "labelled_key",
    "split_labelled_key",
]
