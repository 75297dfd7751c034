"""Simulated AMD Instinct GPUs, served under AMD device-metrics-exporter's names and labels.

``gpuscale exporter --source sim --gpu-models MI300X,MI210`` needs the same
physics as the NVIDIA models (load, power, heat, memory, faults) but the series
an AMD node exports, so AMD's dashboards and the ``gpuscale:*`` recording rules
can be tried without an AMD GPU. This source drives ``SimSource`` and translates
each simulated reading into the exporter's series and units, the way amdsmi
and rocprofiler would report the same device state:

- power, energy (mJ -> uJ), junction/memory temperature, VRAM (MiB = amd-smi's MB),
  clocks per XCC, PCIe and XGMI traffic, ECC counts (HBM errors are the UMC block),
  ``gpu_health`` (0 once an uncorrectable error is counted, upstream's rule);
- the ``gpu_prof_*`` profiler counters from the same activity model as DCGM's
  profiling fields (docs/telemetry-model.md), normalised as rocprofiler's derived
  counters are: ``GPU_UTIL`` = 100 x GR_ENGINE_ACTIVE (busy share of elapsed time);
  ``VALUBusy``, ``MeanOccupancyPerCU`` and ``MfmaUtil`` are per *active* GPU cycle
  (divided by GR_ENGINE_ACTIVE), so they follow the batch fill while busy;
  ``SIMD_UTILIZATION`` is busy CU cycles over elapsed ones (SM_ACTIVE), and
  ``MeanOccupancyPerActiveCU`` divides the wave occupancy by it. A counter whose
  denominator is 0 (an idle GPU) is absent, as rocprofiler gives no number for it.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gpuscale.fields.amd import AMD_PROFILER_ONLY, labelled_key
from gpuscale.ids import GpuUuid
from gpuscale.telemetry.amd import custom_labels, with_job
from gpuscale.telemetry.amd_config import AmdConfig
from gpuscale.telemetry.base import DeviceSample, GpuInfo, Snapshot, Vendor
from gpuscale.telemetry.gpus import GPU_MODELS, GpuModel
from gpuscale.telemetry.sim import SimSource
from gpuscale.telemetry.slurm import SlurmJobs

WAVES_PER_CU = 32.0
"""Wave slots per compute unit on CDNA2/CDNA3 (4 SIMDs x 8): full occupancy."""
EDGE_BELOW_JUNCTION_C = 10.0
"""How much cooler the edge sensor reads than the hotspot under load (~)."""
AMDGPU_DRIVER = "6.10.5"
_P = "DCGM_FI_PROF_"
_D = "DCGM_FI_DEV_"


@dataclass(frozen=True, slots=True)
class Board:
    """What amdsmi reports about one Instinct product that the physics does not model.

    Attributes:
        part: Board part number, the exporter's ``card_model`` (its dashboards filter on it).
        xccs: Compute dies (XCCs) in SPX mode: one ``gpu_clock``/busy value each.
        hbm_stacks: HBM stacks with a temperature sensor amdsmi reports (MI300X: none).
        pcie_gt_s: PCIe link speed, GT/s (Gen5 32, Gen4 16).
        average_power: Reports average rather than current socket power (MI200).
        edge_sensor: Has an edge temperature sensor (MI300X reports none).
        vbios: A VBIOS version string of the product's form.
    """

    part: str
    xccs: int
    hbm_stacks: int
    pcie_gt_s: float
    average_power: bool
    edge_sensor: bool
    vbios: str


BOARDS: dict[str, Board] = {
    "MI300X": Board("102-G30211-00", 8, 0, 32.0, False, False, "022.040.003.043.000001"),
    "MI210": Board("102-D67305-00", 1, 4, 16.0, True, True, "113-D67301-063"),
}


def put_profiler(out: dict[str, float], v: Mapping[str, float]) -> None:
    """The gpu_prof_* values rocprofiler's derived counters give for this activity."""
    gr, sm = v.get(f"{_P}GR_ENGINE_ACTIVE"), v.get(f"{_P}SM_ACTIVE")
    occ, tensor = v.get(f"{_P}SM_OCCUPANCY"), v.get(f"{_P}PIPE_TENSOR_ACTIVE")
    if gr is None or sm is None or occ is None or tensor is None:
        return
    out["gpu_prof_gui_util_percent"] = 100.0 * gr
    out["gpu_prof_simd_utilization"] = sm
    if gr > 0:
        out["gpu_prof_sm_active"] = min(100.0, 100.0 * sm / gr)
        out["gpu_prof_occupancy_per_cu"] = WAVES_PER_CU * occ / gr
        out["gpu_prof_tensor_active_percent"] = min(100.0, 100.0 * tensor / gr)
    if sm > 0:
        out["gpu_prof_occupancy_per_active_cu"] = WAVES_PER_CU * occ / sm


class AmdSimSource:
    """Simulated AMD GPUs behind ``GpuSource``, with device-metrics-exporter's series.

    Args:
        sim: The simulated host; every model must be an AMD one (``BOARDS``).
        cluster_name: ``cluster_name`` label; ``GPUSCALE_CLUSTER_NAME`` when None.
        slurm: Slurm jobs per GPU (AMD's prolog files); ``/var/run/exporter`` when None.
        config: ``config.json`` settings: custom labels, fields, and whether the
            profiler is on (without a config it is, as the simulation costs nothing).
    """

    vendor: Vendor = "amd"

    def __init__(
        self,
        sim: SimSource,
        *,
        cluster_name: str | None = None,
        slurm: SlurmJobs | None = None,
        config: AmdConfig | None = None,
    ) -> None:
        self._sim = sim
        self._config = config
        self._profiler = config is None or config.profiler is not None
        custom = custom_labels(config or AmdConfig(), cluster_name)
        self._cluster = dict(custom).get("cluster_name", "")
        self._slurm = slurm if slurm is not None else SlurmJobs()
        by_name = {m.name: m for m in GPU_MODELS.values()}
        self._specs: list[tuple[GpuModel, Board]] = []
        self._devices: list[GpuInfo] = []
        for info in sim.devices():
            spec = by_name[info.model]
            board = BOARDS[spec.short]
            self._specs.append((spec, board))
            labels = (
                ("card_model", board.part),
                ("gpu_partition_id", "0"),
                ("gpu_compute_partition_type", "spx"),
                ("gpu_memory_partition_type", "nps1"),
                ("deployment_mode", "baremetal"),
                ("card_series", spec.name),
                ("card_vendor", "Advanced Micro Devices Inc. [AMD/ATI]"),
                ("vbios_version", board.vbios),
                *custom,
            )
            self._devices.append(
                GpuInfo(
                    index=info.index,
                    uuid=GpuUuid(str(info.uuid).removeprefix("GPU-")),
                    model=spec.name,
                    # The device plugin names AMD GPUs by PCI address, as the amdsmi fake does.
                    pci_bus_id=f"0000:{0x0C + 0x10 * info.index:02x}:00.0",
                    device=f"card{info.index + 1}",
                    vendor="amd",
                    driver_version=AMDGPU_DRIVER,
                    serial=info.serial,
                    memory_total_bytes=info.memory_total_bytes,
                    vendor_labels=labels,
                )
            )
        self._xgmi_kb = [[0.0, 0.0] for _ in self._devices]  # accumulated rx, tx per GPU
        self._last: float | None = None

    def devices(self) -> list[GpuInfo]:
        """The simulated AMD GPUs, in index order (the exporter's ``gpu_id``)."""
        return list(self._devices)

    def sample(self) -> Snapshot:
        """Advance the simulation and read every GPU in the exporter's series and units.

        Returns:
            A snapshot of AMD series; a lost GPU has ``up=False`` and no values.
        """
        snap = self._sim.sample()
        dt = 0.0 if self._last is None else max(0.0, snap.timestamp - self._last)
        self._last = snap.timestamp
        jobs = self._slurm.by_gpu()
        devices = []
        for sample, info in zip(snap.devices, self._devices, strict=True):
            amd = with_job(info, jobs.get(info.index), self._cluster)
            if not sample.up:
                devices.append(DeviceSample(amd, {}, up=False, error=sample.error))
                continue
            values = self._translate(info.index, sample.values, dt)
            keep = self._config.fields if self._config is not None else None
            if keep is not None:
                values = {k: x for k, x in values.items() if k.split("|", 1)[0] in keep}
            devices.append(DeviceSample(amd, values))
        return Snapshot(timestamp=snap.timestamp, hostname=snap.hostname, devices=tuple(devices))

    def close(self) -> None:
        """Close the simulated host."""
        self._sim.close()

    def _translate(self, index: int, v: Mapping[str, float], dt: float) -> dict[str, float]:
        spec, board = self._specs[index]
        out: dict[str, float] = {}

        def put(name: str, key: str, scale: float = 1.0, **labels: str) -> None:
            if key in v and not math.isnan(v[key]):
                out[labelled_key(name, **labels)] = v[key] * scale

        dbe = v.get(f"{_D}ECC_DBE_VOL_TOTAL")
        if dbe is not None:
            out["gpu_health"] = 0.0 if dbe > 0 else 1.0
        power = "gpu_average_package_power" if board.average_power else "gpu_package_power"
        put(power, f"{_D}POWER_USAGE")
        put("gpu_power_usage", f"{_D}POWER_USAGE")
        put("gpu_energy_consumed", f"{_D}TOTAL_ENERGY_CONSUMPTION", 1000.0)  # mJ -> uJ
        put("gpu_junction_temperature", f"{_D}GPU_TEMP")
        put("gpu_memory_temperature", f"{_D}MEMORY_TEMP")
        if board.edge_sensor and f"{_D}GPU_TEMP" in v:
            out["gpu_edge_temperature"] = v[f"{_D}GPU_TEMP"] - EDGE_BELOW_JUNCTION_C
        for stack in range(board.hbm_stacks):
            put("gpu_hbm_temperature", f"{_D}MEMORY_TEMP", hbm_index=str(stack))
        put("gpu_gfx_activity", f"{_D}GPU_UTIL")
        put("gpu_umc_activity", f"{_D}MEM_COPY_UTIL")
        put("gpu_mma_activity", f"{_D}DEC_UTIL")
        for xcc in range(board.xccs if board.xccs > 1 else 0):  # MI200 has no per-XCP stats
            put("gpu_gfx_busy_instantaneous", f"{_D}GPU_UTIL", xcc_index=str(xcc))
        self._clocks(out, v, spec, board)
        put("gpu_total_vram", f"{_D}FB_TOTAL")
        put("gpu_used_vram", f"{_D}FB_USED")
        put("gpu_free_vram", f"{_D}FB_FREE")
        self._pcie(out, v, board)
        for kind, key in (("correct", "ECC_SBE_VOL_TOTAL"), ("uncorrect", "ECC_DBE_VOL_TOTAL")):
            put(f"gpu_ecc_{kind}_total", f"{_D}{key}")
            put(f"gpu_ecc_{kind}_umc", f"{_D}{key}")  # HBM errors: the memory controller block
        self._xgmi(out, index, v, spec, dt)
        if self._profiler:
            put_profiler(out, v)
        else:  # amdsmi's gfx_activity stands in, as on a real node
            put("gpu_prof_gui_util_percent", f"{_D}GPU_UTIL")
        return {k: x for k, x in out.items() if self._profiler or k not in AMD_PROFILER_ONLY}

    @staticmethod
    def _clocks(
        out: dict[str, float], v: Mapping[str, float], spec: GpuModel, board: Board
    ) -> None:
        """``gpu_clock``: the XCCs' graphics clocks as ``system``, then ``memory``."""
        sm, mem = v.get(f"{_D}SM_CLOCK"), v.get(f"{_D}MEM_CLOCK")
        rows = [("system", sm, spec.idle_sm_clock_mhz, spec.max_sm_clock_mhz)] * board.xccs
        rows.append(("memory", mem, spec.mem_clock_mhz, spec.mem_clock_mhz))
        for index, (kind, now, low, high) in enumerate(rows):
            labels = {"clock_index": str(index), "clock_type": kind}
            if now is not None:
                out[labelled_key("gpu_clock", **labels)] = now
            out[labelled_key("gpu_min_clock", **labels)] = low
            out[labelled_key("gpu_max_clock", **labels)] = high

    @staticmethod
    def _pcie(out: dict[str, float], v: Mapping[str, float], board: Board) -> None:
        """Link speed, bandwidth (Mb/s) and the error counters of a healthy simulated link."""
        out["pcie_speed"] = out["pcie_max_speed"] = board.pcie_gt_s
        tx, rx = v.get(f"{_P}PCIE_TX_BYTES"), v.get(f"{_P}PCIE_RX_BYTES")
        if tx is not None and rx is not None:
            out["pcie_bandwidth"] = (tx + rx) * 8 / 1e6
        replays = v.get(f"{_D}PCIE_REPLAY_COUNTER")
        if replays is not None:
            out["pcie_replay_count"] = replays
            # The simulated link never rolls its replay counter over, NAKs or retrains.
            for name in (
                "pcie_replay_rollover_count",
                "pcie_recovery_count",
                "pcie_nack_sent_count",
                "pcie_nack_received_count",
            ):
                out[name] = 0.0

    def _xgmi(
        self, out: dict[str, float], index: int, v: Mapping[str, float], spec: GpuModel, dt: float
    ) -> None:
        """XGMI KB read/written per link, accumulated from the simulated link traffic."""
        rx, tx = v.get(f"{_P}NVLINK_RX_BYTES"), v.get(f"{_P}NVLINK_TX_BYTES")
        links = spec.nvlink_links
        if rx is None or tx is None or links == 0:
            return
        acc = self._xgmi_kb[index]
        acc[0] += rx * dt / 1000.0
        acc[1] += tx * dt / 1000.0
        for link in range(links):
            out[labelled_key("gpu_xgmi_link_rx", link_index=str(link))] = acc[0] / links
            out[labelled_key("gpu_xgmi_link_tx", link_index=str(link))] = acc[1] / links
