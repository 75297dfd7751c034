"""Per-alert settings: the knobs of each alert in the catalogue, and the types they are made of.

Each alert's thresholds, windows, ``for:`` and severity live in one frozen
model named after the alert, so the settings file, the renderer and the
backtest's sweeps read the same fields. Every value here is pasted into PromQL,
so numbers must be finite and durations are checked with Prometheus's grammar
(``gpuscale.alerts.promql_text``).
"""

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from gpuscale.alerts.promql_text import check_duration, check_window

Severity = Literal["critical", "warning", "info"]

Duration = Annotated[str, AfterValidator(check_duration)]
"""A Prometheus duration (``for:``, ``offset``), kept as the user wrote it in the rendered file."""
Window = Annotated[str, AfterValidator(check_window)]
"""A range-selector window: a Prometheus duration above zero."""
Share = Annotated[float, Field(ge=0.0, le=1.0)]


class Settings(BaseModel):
    """Base of every settings section: unknown keys, NaN and infinity refused; values frozen."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False
    )


class AlertSettings(Settings):
    """What every alert takes: on or off, how long it must hold, and how loud it is."""

    enabled: bool = True
    for_: Duration = Field(default="0s", alias="for")
    severity: Severity = "warning"


class FellOffBus(AlertSettings):
    """``GpuFellOffBus``: ``vanished_window`` is how long a vanished GPU's series is remembered."""

    for_: Duration = Field(default="0s", alias="for")
    severity: Severity = "critical"
    vanished_window: Window = "1h"


class XidError(AlertSettings):
    """``GpuXidError``: codes with an alert of their own are excluded; some are critical.

    ``window`` is how long a new value of ``DCGM_FI_DEV_XID_ERRORS`` (the last XID,
    in dcgm-exporter's default counters) keeps the alert firing.
    """

    window: Window = "5m"
    exclude_codes: tuple[int, ...] = (48, 64, 79)
    critical_codes: tuple[int, ...] = (61, 62, 74, 95, 119, 120)


class Counted(AlertSettings):
    """An alert on any increase of an error counter over ``window``."""

    severity: Severity = "critical"
    window: Window = "10m"


class ShareOfTime(AlertSettings):
    """An alert on the share of time (0 to 1) a clock limit held the GPU down over ``window``."""

    threshold: Share = 0.05
    window: Window = "5m"


class TemperatureHigh(AlertSettings):
    """``GpuTemperatureHigh``: die temperature above ``threshold`` Celsius for ``for``."""

    for_: Duration = Field(default="1m", alias="for")
    threshold: float = 85.0


class MemoryNearFull(AlertSettings):
    """``GpuMemoryNearFull``: framebuffer use above ``threshold`` (0 to 1)."""

    for_: Duration = Field(default="10m", alias="for")
    threshold: Share = 0.95


class ThermalThrottling(ShareOfTime):
    """``GpuThermalThrottling``: clocks held down by temperature over ``threshold`` of the time.

    Where the violation counter is not exported (dcgm-exporter's default counters),
    a die at or above ``slowdown_c`` Celsius, where NVIDIA data-centre GPUs begin to
    slow down (``nvidia-smi -q``: "GPU Slowdown Temp", about 87 to 93 C), stands for it.
    """

    for_: Duration = Field(default="2m", alias="for")
    slowdown_c: float = 87.0


class PowerCapped(ShareOfTime):
    """``GpuPowerCapped``: held at the power limit over ``threshold`` of a ``window``.

    Any such ``window`` in the last ``dip_window`` counts, so a load lull does not restart ``for``.
    """

    for_: Duration = Field(default="15m", alias="for")
    severity: Severity = "info"
    threshold: Share = 0.5
    window: Window = "1m"
    dip_window: Window = "5m"


class RowRemapFailure(AlertSettings):
    """``GpuRowRemapFailure``: a failed row remap (the GPU needs service)."""

    severity: Severity = "critical"


class Idle(AlertSettings):
    """``GpuIdleWhileAllocated``: utilization at or below ``threshold`` (0 to 1) for ``for``."""

    for_: Duration = Field(default="1h", alias="for")
    severity: Severity = "info"
    threshold: Share = 0.01


class Straggler(AlertSettings):
    """``GpuStraggler``: SM clock below ``threshold`` of its model's median while busy.

    Busy is ``min_utilization`` or more; the last busy comparison stands for ``dip_window``.
    """

    for_: Duration = Field(default="5m", alias="for")
    threshold: Share = 0.75
    min_utilization: Share = 0.3
    dip_window: Window = "5m"


class ZScore(AlertSettings):
    """Mean temperature over ``recent`` against its own ``window`` of history ending ``gap`` ago.

    Fires above ``threshold`` standard deviations and ``min_rise_c`` Celsius.
    """

    for_: Duration = Field(default="1m", alias="for")
    threshold: float = Field(default=2.0, gt=0)
    min_rise_c: float = Field(default=10.0, ge=0)
    recent: Window = "30s"
    window: Window = "1h"
    gap: Duration = "10m"


class RisingFast(AlertSettings):
    """The mean temperature over ``window`` against the one before, in Celsius per second.

    ``window`` should span several periods of the load's swing, so the means cancel it.
    """

    for_: Duration = Field(default="0s", alias="for")
    threshold: float = Field(default=0.01, gt=0)
    window: Window = "10m"


class ExporterDown(AlertSettings):
    """``GpuExporterDown``: the scrape of a GPU exporter fails, or its target vanished.

    A target scraped within ``vanished_window`` that has no ``up`` series now is
    missing (its pod or node went away); none at all of the jobs is missing too.
    """

    for_: Duration = Field(default="2m", alias="for")
    severity: Severity = "critical"
    vanished_window: Window = "1h"


class Stale(AlertSettings):
    """``GpuMetricsStale``: values older than ``threshold`` seconds, or frozen over ``window``.

    ``window`` must exceed the exporter's update interval (dcgm-exporter: 30 s) plus a scrape.
    """

    for_: Duration = Field(default="2m", alias="for")
    threshold: float = Field(default=60.0, gt=0)
    window: Window = "45s"


class Alerts(Settings):
    """Settings per alert, under the alert's name."""

    GpuFellOffBus: FellOffBus = FellOffBus()
    GpuXidError: XidError = XidError()
    GpuEccDoubleBitError: Counted = Counted()
    GpuRowRemapFailure: RowRemapFailure = RowRemapFailure()
    GpuThermalThrottling: ThermalThrottling = ThermalThrottling()
    GpuPowerCapped: PowerCapped = PowerCapped()
    GpuTemperatureHigh: TemperatureHigh = TemperatureHigh()
    GpuMemoryNearFull: MemoryNearFull = MemoryNearFull()
    GpuIdleWhileAllocated: Idle = Idle()
    GpuStraggler: Straggler = Straggler()
    GpuTemperatureAnomaly: ZScore = ZScore()
    GpuTemperatureRisingFast: RisingFast = RisingFast()
    GpuExporterDown: ExporterDown = ExporterDown()
    GpuMetricsStale: Stale = Stale()
