"""Vendor-neutral recording rules: one schema for NVIDIA and AMD GPUs.

NVIDIA series keep dcgm-exporter's names and AMD series keep the names of AMD's
device-metrics-exporter. These rules map both into ``gpuscale:<quantity>:<unit>``
series in base units with dcgm-exporter's labels and a ``vendor`` label, so the
alerts below and the autoscaler read one schema whatever the vendor.
"""

from gpuscale.alerts.model import RecordingRule, from_amd

UTILIZATION = "gpuscale:gpu_utilization:ratio"
MEMORY_USED = "gpuscale:gpu_memory_used:ratio"
POWER = "gpuscale:gpu_power:watts"
TEMPERATURE = "gpuscale:gpu_temperature:celsius"

# (record, NVIDIA expression, AMD expression). AMD's exporter reports percent for
# activity and MB for VRAM (gpuscale.fields.amd); the junction (hotspot) temperature
# is the one AMD GPUs throttle on, as the die temperature is for NVIDIA.
_MAPPINGS = (
    (UTILIZATION, "DCGM_FI_DEV_GPU_UTIL / 100", "gpu_gfx_activity / 100"),
    (
        MEMORY_USED,
        "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)",
        "gpu_used_vram / gpu_total_vram",
    ),
    (POWER, "DCGM_FI_DEV_POWER_USAGE", "gpu_power_usage"),
    (TEMPERATURE, "DCGM_FI_DEV_GPU_TEMP", "gpu_junction_temperature"),
)


def neutral_rules() -> tuple[RecordingRule, ...]:
    """The recording rules of the neutral schema, NVIDIA then AMD for each quantity.

    Returns:
        Two rules per quantity, labelled ``vendor="nvidia"`` and ``vendor="amd"``.
    """
    rules: list[RecordingRule] = []
    for record, nvidia, amd in _MAPPINGS:
        rules.append(RecordingRule(record, nvidia, (("vendor", "nvidia"),)))
        rules.append(RecordingRule(record, from_amd(amd), (("vendor", "amd"),)))
    return tuple(rules)
