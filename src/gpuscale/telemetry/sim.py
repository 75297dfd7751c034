"""The ``sim`` telemetry source: a simulated GPU host behind the same ``GpuSource`` seam as NVML.

``gpuscale exporter --source sim`` and ``gpuscale up`` need telemetry on machines with
no GPU, and tests need faults on demand: a GPU falling off the bus, an ECC double-bit
error, a failed fan. This source drives ``FleetPhysics`` with a load profile on the
wall clock (or any injected clock), and schedules faults given on the command line
(``--fault gpu-lost@30:gpu=3``, grammar in ``telemetry.faults``) or injected by tests.

Faults act where they act on real hardware: the physics (a hot card, a lowered power
limit, a capped clock, a full framebuffer), the work (an idle GPU a pod still holds,
a straggler busy longer for the same work), or the exporter itself (a GPU whose values
stop updating, an exporter that stops answering). docs/telemetry-model.md says what
each does to the series.
"""

import logging
import math
import socket
import time
import uuid
from collections.abc import Callable, Sequence

import numpy as np

from gpuscale.errors import TransientError, config_error, require
from gpuscale.ids import GpuUuid
from gpuscale.telemetry.base import DeviceSample, GpuInfo, Snapshot, Vendor, XidEvent
from gpuscale.telemetry.faults import DEFAULT_LIMIT_SHARE, HOST_KINDS, Fault, validate
from gpuscale.telemetry.loads import LoadProfile, sine
from gpuscale.telemetry.physics import (
    IDLE_BUSY,
    XID_FELL_OFF_BUS,
    FleetPhysics,
    GpuModel,
    gpu_model,
)

logger = logging.getLogger(__name__)

MAX_STEP_S = 60.0  # a sample after a long pause advances the physics by at most this
LOST_ERROR = "XID 79: GPU has fallen off the bus"
# The loaded model's weights, and the KV cache / activations that grow with load, as
# shares of the framebuffer (a served LLM, roughly).
RESIDENT_SHARE = 0.45
WORKING_SHARE_AT_FULL_LOAD = 0.40
_D = "DCGM_FI_DEV_"
# Clock-event reason bits (DCGM_CLOCKS_EVENT_REASON_*) raised by the violation counter
# that grew over the step: idle, software power cap, software thermal slowdown.
_REASON_OF_VIOLATION: tuple[tuple[str, int], ...] = (
    (f"{_D}LOW_UTIL_VIOLATION", 0x1),
    (f"{_D}POWER_VIOLATION", 0x4),
    (f"{_D}THERMAL_VIOLATION", 0x20),
)
HW_SLOWDOWN = 0x8  # DCGM_CLOCKS_EVENT_REASON_HW_SLOWDOWN: a straggler's clock held down
DOWN_ERROR = "simulated exporter down (exporter-down fault)"
DERIVED = (
    f"{_D}POWER_MGMT_LIMIT",
    f"{_D}FB_USED_PERCENT",
    f"{_D}CLOCKS_EVENT_REASONS",
    *(f"{_D}NVLINK_BANDWIDTH_L{link}" for link in range(18)),
)
"""Fields this source adds to the physics' own (see ``_add_derived``)."""
P2P_OK, P2P_NOT_SUPPORTED = 0, 5  # nvmlGpuP2PStatus_t over NVLink
P2P_DOMAIN = 8  # GPUs per NVLink baseboard (HGX H100/A100): P2P status is reported within it


def _static_attributes(spec: GpuModel, driver: str, serial: str) -> dict[str, str]:
    """The label fields NVML reports for this model, with plausible version strings."""
    return {
        "DCGM_FI_NVML_VERSION": f"12.{driver}",
        f"{_D}BRAND": "Tesla" if spec.short == "V100" else "NVIDIA",
        f"{_D}SERIAL": serial,
        f"{_D}OEM_INFOROM_VER": "1.1",
        f"{_D}ECC_INFOROM_VER": "7.0" if spec.hbm else "6.0",
        f"{_D}POWER_INFOROM_VER": "N/A",
        f"{_D}INFOROM_IMAGE_VER": f"G{spec.memory_bytes >> 30:03d}.0200.00.05",
        f"{_D}VBIOS_VERSION": "96.00.74.00.01",
    }


class SimSource:
    """A simulated GPU host that implements ``GpuSource``.

    Args:
        gpus: Number of GPUs.
        models: GPU model short names, cycled over the GPUs (``("H100", "L4")`` alternates).
        load: Demanded busy share over time; default a 5-minute sine around 50 %.
        seed: Seeds UUIDs, serials, per-GPU variation and load phases.
        clock: Seconds since the epoch; inject a fake clock in tests.
        hostname: ``Hostname`` label; default this machine's name.
        driver_version: Reported driver version.
        faults: Faults to schedule, relative to the first sample's clock.

    Raises:
        ConfigError: No GPUs, an unknown model, or a fault the exporter cannot inject
            or for a GPU that does not exist.
    """

    vendor: Vendor = "nvidia"

    def __init__(
        self,
        gpus: int = 8,
        models: Sequence[str] = ("H100",),
        *,
        load: LoadProfile | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.time,
        hostname: str | None = None,
        driver_version: str = "550.54.15",
        faults: Sequence[Fault] = (),
    ) -> None:
        require(
            gpus >= 1, f"--gpus {gpus}", "a simulated host needs at least 1 GPU", "give 1 or more"
        )
        require(bool(models), "--gpu-models", "names no GPU model", "name at least one, e.g. H100")
        specs = [gpu_model(models[i % len(models)]) for i in range(gpus)]
        self._clock = clock
        self._load: LoadProfile = load if load is not None else sine(seed=seed)
        self._hostname = hostname if hostname is not None else socket.gethostname()
        self._start = self._last = float(clock())
        memory = np.array([float(s.memory_bytes) for s in specs])
        self._working_full = WORKING_SHARE_AT_FULL_LOAD * memory
        self._physics = FleetPhysics(
            specs, seed=seed, resident_bytes=RESIDENT_SHARE * memory, start_s=self._start
        )
        rng = np.random.default_rng([seed, 0x5EED])
        self._devices = []
        for i, spec in enumerate(specs):
            uid = GpuUuid(f"GPU-{uuid.UUID(bytes=rng.bytes(16), version=4)}")
            serial = str(rng.integers(1_320_000_000_000, 1_660_000_000_000))
            attributes = _static_attributes(spec, driver_version, serial)
            # NVLink peer-to-peer within the GPU's 8-GPU baseboard (HGX), both ends with NVLink.
            for j in range(i - i % P2P_DOMAIN, min(i - i % P2P_DOMAIN + P2P_DOMAIN, gpus)):
                peer = specs[j]
                if j != i:
                    linked = spec.nvlink_links > 0 and peer.nvlink_links > 0
                    attributes[f"DCGM_EXP_P2P_STATUS:{j}"] = str(
                        P2P_OK if linked else P2P_NOT_SUPPORTED
                    )
            info = GpuInfo(
                index=i,
                uuid=uid,
                model=spec.name,
                pci_bus_id=f"00000000:{i + 1:02X}:00.0",
                device=f"nvidia{i}",
                vendor="nvidia",
                driver_version=driver_version,
                serial=serial,
                memory_total_bytes=spec.memory_bytes,
                attributes=tuple(attributes.items()),
            )
            self._devices.append(info)
        self._tdp = np.array([s.tdp_w for s in specs])
        self._idle_w = np.array([s.idle_w for s in specs])
        # What work-side faults change: the share of its speed each GPU keeps
        # (straggler) and which GPUs a pod holds without using (idle-allocated).
        self._speed, self._idle = np.ones(gpus), np.zeros(gpus, dtype=bool)
        self._served: list[dict[str, float]] = [{} for _ in range(gpus)]
        self._frozen: dict[int, dict[str, float]] = {}  # stale GPUs: values they repeat
        self.answering = True
        """False while an ``exporter-down`` fault lasts: ``sample`` raises."""
        self._links = np.array([float(s.nvlink_links) for s in specs])
        self._max_links = max(s.nvlink_links for s in specs)
        self._violations: dict[str, np.ndarray] | None = None
        self._pending: list[tuple[float, Fault, bool]] = []  # (due, fault, ends it)
        for fault in faults:
            self.inject(fault)
        logger.info(
            "simulated %d GPU(s) of %s on %s, seed %d", gpus, "/".join(models), self._hostname, seed
        )

    def devices(self) -> list[GpuInfo]:
        """The simulated GPUs, in index order."""
        return list(self._devices)

    def inject(self, fault: Fault) -> None:
        """Schedule ``fault``: it fires at the first sample at or after ``start + at_s``.

        A fault with a ``duration_s`` is cleared at the first sample at or after
        ``start + at_s + duration_s``.

        Raises:
            ConfigError: The exporter cannot inject the fault (its kind, no ``gpu``),
                or it names a GPU this host does not have.
        """
        validate(fault, "exporter")
        gpu = fault.gpu if fault.gpu is not None else -1
        if fault.kind not in HOST_KINDS and not 0 <= gpu < len(self._devices):
            raise config_error(
                f"--fault {fault.spec()!r}",
                f"this simulated host has GPUs 0..{len(self._devices) - 1}",
                "pick an index in that range",
            )
        if fault.kind == "power-cap" and fault.limit_w is not None:
            idle, tdp = self._idle_w[gpu], self._tdp[gpu]
            require(
                idle < fault.limit_w <= tdp,
                f"--fault {fault.spec()!r}",
                f"limit_w must be above GPU {gpu}'s idle power and at most its TDP",
                f"give watts in ({idle:g}, {tdp:g}]",
            )
        fire_at = max(self._start + fault.at_s, self._last)
        self._pending.append((fire_at, fault, False))
        if fault.duration_s is not None:
            self._pending.append((fire_at + fault.duration_s, fault, True))
        self._pending.sort(key=lambda item: item[0])
        logger.info("fault %s scheduled", fault.spec())

    def sample(self) -> Snapshot:
        """Advance the physics to now and read every field of every GPU.

        Returns:
            A snapshot stamped with the clock (seconds since the epoch). A lost GPU has
            ``up=False`` and no values; XID events ride on the sample of their GPU; a
            stale GPU repeats the values it had when its fault began.

        Raises:
            TransientError: An ``exporter-down`` fault lasts; the GPUs run on.
        """
        now = float(self._clock())
        dt = min(max(now - self._last, 0.0), MAX_STEP_S)
        self._last = now
        self._fire_due(now)
        n = len(self._devices)
        load = np.clip(np.asarray(self._load(now - self._start, n), dtype=float), 0.0, 1.0)
        # The same work keeps a slower GPU busy longer; a held idle GPU runs nothing.
        load = np.where(self._idle, 0.0, np.minimum(load / self._speed, 1.0))
        self._physics.time_s = now - dt
        self._physics.step(dt, load, self._working_full * load)
        fields = self._physics.fields()
        self._add_derived(fields)
        events: dict[int, list[XidEvent]] = {}
        for gpu, at, xid in self._physics.drain_xid_events():
            events.setdefault(gpu, []).append(XidEvent(timestamp=at, xid=xid))
        if not self.answering:
            raise TransientError(DOWN_ERROR, delay=1.0)
        names = list(fields)
        rows = np.vstack([fields[name] for name in names]).T.tolist()
        samples = []
        for info, row, lost in zip(self._devices, rows, self._physics.lost.tolist(), strict=True):
            xids = tuple(events.get(info.index, ()))
            if lost:
                samples.append(DeviceSample(info, {}, up=False, error=LOST_ERROR, xid_events=xids))
            elif self._frozen.get(info.index):  # a watch that stopped: old values, no events
                samples.append(DeviceSample(info, dict(self._frozen[info.index])))
            else:
                values = {k: v for k, v in zip(names, row, strict=True) if not math.isnan(v)}
                self._served[info.index] = values
                if info.index in self._frozen:  # stale from the first sample: freeze this one
                    self._frozen[info.index] = values
                samples.append(DeviceSample(info, values, xid_events=xids))
        return Snapshot(timestamp=now, hostname=self._hostname, devices=tuple(samples))

    def _add_derived(self, fields: dict[str, np.ndarray]) -> None:
        """Fields DCGM computes from others: limit, FB share, clock-event reasons, NVLink links.

        Each follows its inputs: NaN (absent) wherever an input is NaN.
        """
        fields[f"{_D}POWER_MGMT_LIMIT"] = np.where(
            np.isnan(fields[f"{_D}POWER_USAGE"]), np.nan, self._physics.power_limit_w
        )
        usable = fields[f"{_D}FB_TOTAL"] - fields[f"{_D}FB_RESERVED"]
        fields[f"{_D}FB_USED_PERCENT"] = fields[f"{_D}FB_USED"] / usable  # DCGM: 0.0-1.0
        previous = self._violations
        self._violations = {k: fields[k].copy() for k, _ in _REASON_OF_VIOLATION}
        reasons = np.zeros(len(self._devices))
        for key, bit in _REASON_OF_VIOLATION:
            now = fields[key]
            grew = now > previous[key] if previous is not None else np.zeros_like(now, bool)
            reasons += np.where(grew, bit, 0)
        held = (self._physics.clock_cap < 1.0) & (self._physics.busy >= IDLE_BUSY)
        reasons += np.where(held, HW_SLOWDOWN, 0)
        fields[f"{_D}CLOCKS_EVENT_REASONS"] = np.where(np.isnan(usable), np.nan, reasons)
        total = fields[f"{_D}NVLINK_BANDWIDTH_TOTAL"]
        with np.errstate(divide="ignore", invalid="ignore"):
            per_link = np.rint(total / self._links)  # traffic spreads evenly over the links
        for link in range(self._max_links):
            fields[f"{_D}NVLINK_BANDWIDTH_L{link}"] = np.where(link < self._links, per_link, np.nan)

    def _fire_due(self, now: float) -> None:
        while self._pending and self._pending[0][0] <= now:
            at, fault, ends = self._pending.pop(0)
            i = int(fault.gpu or 0)
            where = "the host" if fault.kind in HOST_KINDS else f"simulated GPU {i}"
            logger.warning(
                "%s %s fault on %s", "ending" if ends else "injecting", fault.kind, where
            )
            self._apply(fault, i, at, on=not ends)

    def _apply(self, fault: Fault, i: int, at: float, *, on: bool) -> None:
        """Start (``on``) or end ``fault`` on GPU ``i``; ``at`` stamps its XID events."""
        physics, kind = self._physics, fault.kind
        if kind == "gpu-lost":
            physics.inject_xid(i, XID_FELL_OFF_BUS, at)
        elif kind == "xid":
            physics.inject_xid(i, int(fault.code or XID_FELL_OFF_BUS), at)
        elif kind == "ecc-dbe":
            physics.inject_ecc_dbe(i, at)
        elif kind == "row-remap":
            physics.inject_row_remap_failure(i, at)
        elif kind == "thermal":
            if on:
                physics.inject_thermal(i, fault.rise_c)
            else:
                physics.clear_thermal(i)
        elif kind == "straggler":
            self._speed[i] = fault.factor if on else 1.0
            physics.set_clock_cap(i, fault.factor if on else 1.0)
        elif kind == "power-cap":
            limit = fault.limit_w or DEFAULT_LIMIT_SHARE * float(self._tdp[i])
            physics.set_power_limit(i, limit if on else None)
        elif kind == "memory-full":
            physics.set_memory_held(i, fault.share if on else 0.0)
        elif kind == "idle-allocated":
            self._idle[i] = on
        elif kind == "stale":
            if on:
                self._frozen[i] = self._served[i]
            else:
                self._frozen.pop(i, None)
        else:  # exporter-down
            self.answering = not on

    def close(self) -> None:
        """Nothing to release; present for the ``GpuSource`` protocol."""
        logger.debug("simulated source on %s closed", self._hostname)
