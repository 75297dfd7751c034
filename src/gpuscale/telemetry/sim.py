"""The ``sim`` telemetry source: a simulated GPU host behind the same ``GpuSource`` seam as NVML.

``gpuscale exporter --source sim`` and ``gpuscale up`` need telemetry on machines with
no GPU, and tests need faults on demand: a GPU falling off the bus, an ECC double-bit
error, a failed fan. This source drives ``FleetPhysics`` with a load profile on the
wall clock (or any injected clock), and schedules faults given on the command line
(``--fault xid:79:gpu=3:at=30``) or injected by tests.
"""

import logging
import math
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, cast, get_args

import numpy as np

from gpuscale.errors import ConfigError
from gpuscale.ids import GpuUuid
from gpuscale.telemetry.base import DeviceSample, GpuInfo, Snapshot, Vendor, XidEvent
from gpuscale.telemetry.loads import LoadProfile, sine
from gpuscale.telemetry.physics import XID_FELL_OFF_BUS, FleetPhysics, gpu_model

logger = logging.getLogger(__name__)

FaultKind = Literal["xid", "ecc-dbe", "thermal", "row-remap"]
FAULT_FORMS = (
    "xid:CODE:gpu=N[:at=SECONDS], ecc-dbe:gpu=N[:at=SECONDS], "
    "thermal:gpu=N[:at=SECONDS][:extra=CELSIUS], row-remap:gpu=N[:at=SECONDS]"
)
MAX_STEP_S = 60.0  # a sample after a long pause advances the physics by at most this
LOST_ERROR = "XID 79: GPU has fallen off the bus"
# The loaded model's weights, and the KV cache / activations that grow with load, as
# shares of the framebuffer (a served LLM, roughly).
RESIDENT_SHARE = 0.45
WORKING_SHARE_AT_FULL_LOAD = 0.40


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One fault to inject into a simulated GPU.

    Attributes:
        kind: ``xid`` (any XID; 79 takes the GPU off the bus), ``ecc-dbe`` (double-bit
            ECC error, XID 48), ``thermal`` (failed cooling), ``row-remap`` (row remap
            failure, XID 64).
        gpu: Index of the GPU on the host.
        at_s: Seconds after the source started; 0 means at the next sample.
        xid: XID code for ``kind="xid"``.
        extra_c: Rise of the equilibrium temperature for ``kind="thermal"``, Celsius.
    """

    kind: FaultKind
    gpu: int
    at_s: float = 0.0
    xid: int = XID_FELL_OFF_BUS
    extra_c: float = 20.0

    def __post_init__(self) -> None:
        """Reject a fault that could never fire.

        Raises:
            ConfigError: Unknown kind, negative GPU index or time.
        """
        if self.kind not in get_args(FaultKind) or self.gpu < 0 or not self.at_s >= 0:
            raise ConfigError(
                f"fault {self.kind}:gpu={self.gpu}:at={self.at_s} is invalid; "
                f"accepted forms: {FAULT_FORMS}"
            )


def parse_fault(spec: str) -> FaultSpec:
    """Parse a ``--fault`` spec, e.g. ``xid:79:gpu=3:at=30`` or ``thermal:gpu=0:extra=25``.

    Raises:
        ConfigError: The spec is malformed; the message names it and the accepted forms.
    """

    def bad(reason: str) -> ConfigError:
        return ConfigError(f"fault spec {spec!r}: {reason}; accepted forms: {FAULT_FORMS}")

    kind, *parts = spec.strip().split(":")
    if kind not in get_args(FaultKind):
        raise bad(f"unknown kind {kind!r}")
    xid = XID_FELL_OFF_BUS
    if kind == "xid" and parts and "=" not in parts[0]:
        code, *parts = parts
        if not code.isdigit() or int(code) < 1:
            raise bad(f"XID code {code!r} is not a positive integer")
        xid = int(code)
    allowed = {"gpu", "at"} | ({"extra"} if kind == "thermal" else set())
    values: dict[str, str] = {}
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq or key not in allowed:
            raise bad(f"{part!r} is not one of {', '.join(f'{k}=...' for k in sorted(allowed))}")
        if key in values:
            raise bad(f"{key} is given twice")
        values[key] = value
    if "gpu" not in values:
        raise bad("gpu=N is required")
    if not values["gpu"].isdigit():
        raise bad(f"gpu={values['gpu']} is not a GPU index (0, 1, ...)")
    at_s = _number(values.get("at", "0"), "at", bad)
    extra_c = _number(values.get("extra", "20"), "extra", bad)
    if kind == "thermal" and extra_c <= 0:
        raise bad(f"extra={values['extra']} must be degrees Celsius above 0")
    return FaultSpec(cast(FaultKind, kind), int(values["gpu"]), at_s, xid, extra_c)


def _number(text: str, key: str, bad: Callable[[str], ConfigError]) -> float:
    try:
        value = float(text)
    except ValueError:
        raise bad(f"{key}={text} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise bad(f"{key}={text} must be a number >= 0")
    return value


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
        ConfigError: No GPUs, an unknown model, or a fault for a GPU that does not exist.
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
        faults: Sequence[FaultSpec] = (),
    ) -> None:
        if gpus < 1:
            raise ConfigError(f"--gpus {gpus}: a simulated host needs at least 1 GPU")
        if not models:
            raise ConfigError("--models is empty: name at least one GPU model, e.g. H100")
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
        self._devices = [
            GpuInfo(
                index=i,
                uuid=GpuUuid(f"GPU-{uuid.UUID(bytes=rng.bytes(16), version=4)}"),
                model=spec.name,
                pci_bus_id=f"00000000:{i + 1:02X}:00.0",
                device=f"nvidia{i}",
                vendor="nvidia",
                driver_version=driver_version,
                serial=str(rng.integers(1_320_000_000_000, 1_660_000_000_000)),
                memory_total_bytes=spec.memory_bytes,
            )
            for i, spec in enumerate(specs)
        ]
        self._pending: list[tuple[float, FaultSpec]] = []
        for fault in faults:
            self.inject(fault)
        logger.info(
            "simulated %d GPU(s) of %s on %s, seed %d", gpus, "/".join(models), self._hostname, seed
        )

    def devices(self) -> list[GpuInfo]:
        """The simulated GPUs, in index order."""
        return list(self._devices)

    def inject(self, fault: FaultSpec) -> None:
        """Schedule ``fault``: it fires at the first sample at or after ``start + at_s``.

        Raises:
            ConfigError: The fault names a GPU this host does not have.
        """
        if not 0 <= fault.gpu < len(self._devices):
            raise ConfigError(
                f"fault on gpu={fault.gpu}: this simulated host has GPUs "
                f"0..{len(self._devices) - 1}: pick an index in that range"
            )
        fire_at = max(self._start + fault.at_s, self._last)
        self._pending.append((fire_at, fault))
        self._pending.sort(key=lambda item: item[0])
        logger.info("fault %s scheduled on GPU %d at %.1f s", fault.kind, fault.gpu, fault.at_s)

    def sample(self) -> Snapshot:
        """Advance the physics to now and read every field of every GPU.

        Returns:
            A snapshot stamped with the clock (seconds since the epoch). A lost GPU has
            ``up=False`` and no values; XID events ride on the sample of their GPU.
        """
        now = float(self._clock())
        dt = min(max(now - self._last, 0.0), MAX_STEP_S)
        self._last = now
        self._fire_due(now)
        n = len(self._devices)
        load = np.clip(np.asarray(self._load(now - self._start, n), dtype=float), 0.0, 1.0)
        self._physics.time_s = now - dt
        self._physics.step(dt, load, self._working_full * load)
        fields = self._physics.fields()
        events: dict[int, list[XidEvent]] = {}
        for gpu, at, xid in self._physics.drain_xid_events():
            events.setdefault(gpu, []).append(XidEvent(timestamp=at, xid=xid))
        names = list(fields)
        rows = np.vstack([fields[name] for name in names]).T.tolist()
        samples = []
        for info, row, lost in zip(self._devices, rows, self._physics.lost.tolist(), strict=True):
            xids = tuple(events.get(info.index, ()))
            if lost:
                samples.append(DeviceSample(info, {}, up=False, error=LOST_ERROR, xid_events=xids))
            else:
                values = {k: v for k, v in zip(names, row, strict=True) if not math.isnan(v)}
                samples.append(DeviceSample(info, values, xid_events=xids))
        return Snapshot(timestamp=now, hostname=self._hostname, devices=tuple(samples))

    def _fire_due(self, now: float) -> None:
        while self._pending and self._pending[0][0] <= now:
            at, fault = self._pending.pop(0)
            physics, i = self._physics, fault.gpu
            logger.warning("injecting %s fault on simulated GPU %d", fault.kind, i)
            if fault.kind == "xid":
                physics.inject_xid(i, fault.xid, at)
            elif fault.kind == "ecc-dbe":
                physics.inject_ecc_dbe(i, at)
            elif fault.kind == "thermal":
                physics.inject_thermal(i, fault.extra_c)
            else:
                physics.inject_row_remap_failure(i, at)

    def close(self) -> None:
        """Nothing to release; present for the ``GpuSource`` protocol."""
        logger.debug("simulated source on %s closed", self._hostname)
