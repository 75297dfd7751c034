import threading
import time
from collections.abc import Callable

import pytest

from gpuscale.errors import TransientError
from gpuscale.ids import GpuUuid
from gpuscale.telemetry.base import DeviceSample, GpuInfo, Snapshot, XidEvent


class ScriptedSource:
    """A GpuSource whose behaviour each test scripts: values, lost GPUs, hangs, failures."""

    vendor = "nvidia"

    def __init__(self, gpus: int = 2, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.infos = [
            GpuInfo(
                index=i,
                uuid=GpuUuid(f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd"),
                model="NVIDIA H100 80GB HBM3",
                pci_bus_id=f"00000000:{i + 1:02X}:00.0",
                device=f"nvidia{i}",
                vendor="nvidia",
                driver_version="550.54.15",
            )
            for i in range(gpus)
        ]
        self.values = {
            i: {"DCGM_FI_DEV_GPU_UTIL": 50.0 + i, "DCGM_FI_DEV_POWER_USAGE": 300.0}
            for i in range(gpus)
        }
        self.lost: set[int] = set()
        self.failed_fields: dict[int, tuple[str, ...]] = {}
        self.xids: dict[int, list[XidEvent]] = {}
        self.hang = threading.Event()
        self.release = threading.Event()
        self.raise_next = False
        self.retry_delay = 1.0  # the delay of the TransientError raise_next raises
        self.closed = 0
        self.calls = 0

    def devices(self) -> list[GpuInfo]:
        return list(self.infos)

    def sample(self) -> Snapshot:
        self.calls += 1
        if self.hang.is_set():
            self.release.wait(10)
        if self.raise_next:
            raise TransientError("backend went away", self.retry_delay)
        samples = []
        for info in self.infos:
            i = info.index
            if i in self.lost:
                samples.append(DeviceSample(info, {}, up=False, error="GPU is lost"))
                continue
            samples.append(
                DeviceSample(
                    info,
                    dict(self.values[i]),
                    failed_fields=self.failed_fields.get(i, ()),
                    xid_events=tuple(self.xids.pop(i, [])),
                )
            )
        return Snapshot(self._clock(), "node-a", tuple(samples))

    def close(self) -> None:
        self.closed += 1


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def source() -> ScriptedSource:
    return ScriptedSource()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
