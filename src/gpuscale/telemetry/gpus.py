"""The catalogue of simulated GPU products: published figures and derived thermal constants.

The device physics and the cluster simulator both need to know what an H100 or an L4
is: power limit, idle power, clocks, memory, links, thermal limits. The figures live
here, one frozen value per product, so that the physics module holds only behaviour.
"""

from dataclasses import dataclass

from gpuscale.errors import ConfigError

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class GpuModel:
    """Published figures for one GPU product, and the thermal constants derived from them.

    Attributes:
        name: ``modelName`` as NVML reports it.
        short: Catalogue key (``H100``).
        tdp_w: Default power limit; idle_w: board power with no kernels running (W).
        memory_bytes: Framebuffer size as NVML reports it (nvidia-smi's MiB total).
        max_sm_clock_mhz: Boost SM clock; base_sm_clock_mhz: the power-limit floor.
        mem_clock_mhz: Memory clock in P0; idle_sm_clock_mhz: SM clock when idle.
        slowdown_temp_c: Die temperature where thermal throttling starts.
        shutdown_temp_c: Die temperature where the card shuts down.
        thermal_resistance_c_per_w: Steady-state die rise over inlet air per watt.
        thermal_time_constant_s: First-order time constant of the die temperature.
        pcie_bytes_per_s, nvlink_bytes_per_s: Per direction, all links; 0 without NVLink.
        fb_reserved_mib: Framebuffer the driver reserves (nvidia-smi "Reserved"), approximate.
        hbm: HBM memory, which has a temperature sensor (GDDR parts report none).
        nvenc: The chip has video encoders (Hopper and A100 have none).
        row_remapping: Ampere and later remap rows; Volta retires pages instead.
        nvlink_links: NVLink links (NVML's NVML_NVLINK_MAX_LINKS that answer active); on
            AMD parts the Infinity Fabric (XGMI) links, with ``nvlink_bytes_per_s`` their total.
        vendor: ``nvidia``, or ``amd`` for Instinct parts, which the sim source serves under
            AMD device-metrics-exporter's names (``telemetry/amd_sim.py``).
    """

    name: str
    short: str
    tdp_w: float
    idle_w: float
    memory_bytes: int
    max_sm_clock_mhz: float
    base_sm_clock_mhz: float
    mem_clock_mhz: float
    slowdown_temp_c: float
    shutdown_temp_c: float
    thermal_resistance_c_per_w: float
    thermal_time_constant_s: float
    pcie_bytes_per_s: float
    nvlink_bytes_per_s: float
    idle_sm_clock_mhz: float = 210.0
    fb_reserved_mib: int = 0
    hbm: bool = True
    nvenc: bool = False
    row_remapping: bool = True
    nvlink_links: int = 0
    vendor: str = "nvidia"


# Sources: TDP, clocks, memory and link bandwidths from NVIDIA's datasheets (H100 SXM5
# datasheet 2023; H200 datasheet 2024; A100 datasheet 2021; L4 product brief 2023; A10
# datasheet, A10G as AWS g5 reports it; V100 datasheet 2020). Memory totals (MiB) and
# idle power are nvidia-smi readings of idle cards; reserved framebuffer is ~.
# Thresholds are `nvidia-smi -q` "GPU Slowdown/Shutdown Temp" (H100 PCIe product brief
# PB-11133: 89/92 C). Thermal resistance is an estimate, not a datasheet figure: (typical
# full-load die temperature of an air-cooled server at 25 C inlet - 25) / TDP. Time
# constants estimate heat-sink lag (minutes to settle). Values marked ~ are approximate.
# fmt: off
_CATALOGUE = (
    # H100 SXM5: 700 W, 80 GB HBM3, 1980 MHz boost, PCIe Gen5 x16 (64 GB/s per direction),
    # NVLink 4 at 900 GB/s total. Full load ~78 C.
    GpuModel("NVIDIA H100 80GB HBM3", "H100", 700.0, 70.0, 81559 * MIB, 1980.0, 1590.0, 2619.0,
             89.0, 92.0, 0.076, 50.0, 64e9, 450e9, 345.0, 579, True, False, True, 18),
    # H200 SXM: 700 W, 141 GB HBM3e, the Hopper die and limits of the H100.
    GpuModel("NVIDIA H200", "H200", 700.0, 75.0, 143771 * MIB, 1980.0, 1590.0, 3201.0,
             89.0, 92.0, 0.076, 50.0, 64e9, 450e9, 345.0, 1024, True, False, True, 18),
    # A100 SXM4 80GB: 400 W, HBM2e, 1410 MHz boost, PCIe Gen4 x16, NVLink 3 at 600 GB/s
    # total; nvidia-smi slowdown 89 C, shutdown 92 C. Full load ~75 C.
    GpuModel("NVIDIA A100-SXM4-80GB", "A100", 400.0, 55.0, 81920 * MIB, 1410.0, 1275.0, 1593.0,
             89.0, 92.0, 0.125, 45.0, 32e9, 300e9, 210.0, 656, True, False, True, 12),
    # L4: 72 W passive low-profile card, 24 GB GDDR6, 795/2040 MHz, PCIe Gen4 x16, no
    # NVLink, two NVENC. Full load ~73 C; thresholds ~.
    GpuModel("NVIDIA L4", "L4", 72.0, 16.0, 23034 * MIB, 2040.0, 795.0, 6251.0,
             92.0, 95.0, 0.68, 40.0, 32e9, 0.0, 210.0, 434, False, True, True),
    # A10G (AWS g5): 300 W, 24 GB GDDR6, 1710 MHz boost, PCIe Gen4 x16, no NVLink.
    # Full load ~76 C; thresholds ~.
    GpuModel("NVIDIA A10G", "A10G", 300.0, 25.0, 23028 * MIB, 1710.0, 885.0, 6251.0,
             93.0, 98.0, 0.17, 45.0, 32e9, 0.0, 210.0, 434, False, True, True),
    # V100 SXM2 32GB: 300 W, HBM2, 1530 MHz boost, PCIe Gen3 x16, NVLink 2 at 300 GB/s
    # total; Volta retires pages instead of remapping rows. Slowdown 87 C, shutdown 90 C.
# Links: NVLink 4 on H100/H200 SXM has 18, NVLink 3 on A100 SXM 12, NVLink 2 on V100 6.
    GpuModel("Tesla V100-SXM2-32GB", "V100", 300.0, 40.0, 32510 * MIB, 1530.0, 1290.0, 877.0,
             87.0, 90.0, 0.167, 45.0, 16e9, 150e9, 135.0, 0, True, True, False, 6),
    # AMD Instinct (AMD datasheets: MI300X 2023, MI210 2022). MI300X OAM: 750 W, 192 GB
    # HBM3 (amd-smi's 196592 MB), 2100 MHz peak engine clock, 1300 MHz memory clock, PCIe
    # Gen5 x16, 7 Infinity Fabric links at 64 GB/s per direction each. MI210 PCIe card:
    # 300 W, 64 GB HBM2e, 1700 MHz, 1600 MHz memory, PCIe Gen4 x16, 3 bridge links at
    # 50 GB/s per direction each. Idle power, clock floors and thermal limits are ~.
    GpuModel("AMD Instinct MI300X", "MI300X", 750.0, 140.0, 196592 * MIB, 2100.0, 1300.0,
             1300.0, 100.0, 105.0, 0.08, 50.0, 64e9, 448e9, 132.0, 0, True, False, True, 7,
             "amd"),
    GpuModel("AMD Instinct MI210", "MI210", 300.0, 40.0, 65520 * MIB, 1700.0, 1000.0,
             1600.0, 100.0, 105.0, 0.18, 45.0, 32e9, 150e9, 500.0, 0, True, False, True, 3,
             "amd"),
)
# fmt: on
GPU_MODELS: dict[str, GpuModel] = {m.short: m for m in _CATALOGUE}


def gpu_model(short: str) -> GpuModel:
    """Look up a GPU model by its short name (``H100``), case-insensitively.

    Raises:
        ConfigError: The name is not in the catalogue.
    """
    found = GPU_MODELS.get(short) or GPU_MODELS.get(short.upper())
    if found is None:
        choices = ", ".join(GPU_MODELS)
        raise ConfigError(f"GPU model {short!r} is unknown: choose one of {choices}")
    return found
