"""Anomaly rules beyond fixed thresholds, in PromQL so they scale with Prometheus.

Three ways to tell a sick GPU from a busy one without a per-fleet threshold:

* **Peer comparison**: a GPU against the median of the busy GPUs of the same model
  (``GpuStraggler``). Power capping holds clocks no lower than the base clock
  (80 % of boost on an H100), so a clock well under its busy peers' median is a
  GPU that is slower at equal load, not one that is working harder. A GPU's last
  busy comparison stands through a load dip, so a serving lull does not restart
  ``for:``.
* **Z-score against its own history**: the temperature's mean over the last
  30 seconds against the mean and spread of its own past hour, the last minutes left
  out so a fault does not hide in its own baseline (``GpuTemperatureAnomaly``).
  A load swing is in that spread (a sine strays at most 1.41 sigma from its mean),
  so the short mean does not read load as a fault. A minimum rise in Celsius keeps
  a GPU with a flat history from paging on 1 C.
* **Rate of change**: how fast the temperature's 10-minute mean rises
  (``GpuTemperatureRisingFast``). Its windows span several periods of the load's
  swing: a serving GPU's temperature follows its load by 20 C within minutes, so
  the slope of shorter means is mostly load.

Both temperature rules hold only while the GPU's exporter was up through the
windows they read: over an outage Prometheus holds the last sample for its
5-minute lookback, and a mean over that is no sign of the GPU's state.
"""

from gpuscale.alerts.model import (
    HELD_BY,
    THE_GPU,
    Builder,
    RecordingRule,
    Rule,
    exporter_jobs,
    per_gpu,
)
from gpuscale.alerts.neutral import TEMPERATURE, UTILIZATION
from gpuscale.alerts.promql_text import duration_seconds

PEER_RATIO = "gpuscale:gpu_sm_clock:peer_ratio"
ZSCORE = "gpuscale:gpu_temperature:zscore"


def anomaly_rules(b: Builder) -> list[Rule]:
    """Recording rules for the peer ratio and z-score, then the anomaly alerts.

    Returns:
        Rules in evaluation order (records before the alerts that read them).
    """
    a = b.config.alerts
    strag, z, fast = a.GpuStraggler, a.GpuTemperatureAnomaly, a.GpuTemperatureRisingFast
    busy = f"DCGM_FI_DEV_SM_CLOCK and on (Hostname, gpu) ({UTILIZATION} >= {strag.min_utilization})"
    peers = f"quantile by (modelName) (0.5, {busy})"
    recent = f"avg_over_time({TEMPERATURE}[{z.recent}])"
    past = f"{TEMPERATURE}[{z.window}] offset {z.gap}"
    rise = f"{recent} - avg_over_time({past})"
    w = duration_seconds(fast.window)
    slope = (
        f"(avg_over_time({TEMPERATURE}[{fast.window}]) - "
        f"avg_over_time({TEMPERATURE}[{fast.window}] offset {fast.window})) / {w}"
    )
    # Only GPUs with the whole history the statistic reads: a new series (a node just
    # started, a GPU just replaced) has no baseline yet.
    z_age = duration_seconds(z.window) + duration_seconds(z.gap)
    z_rise = f"({rise} > {z.min_rise_c}) and {TEMPERATURE} offset {z_age}s"
    slope_full = f"({slope} > {fast.threshold}) and {TEMPERATURE} offset {2 * w}s"
    # Only while the GPU's exporter was scraped through the whole recent window: the
    # samples from before an outage (held for the lookback once it starts) are no
    # sign of the GPU's state, and a mean over them moves for no reason on the GPU.
    up = f"up{exporter_jobs(b.config)}"
    z_up = f"min_over_time({up}[{z.recent}]) == 1"
    fast_up = f"min_over_time({up}[{2 * w}s]) == 1"
    rules: list[Rule] = [
        RecordingRule(
            PEER_RATIO,
            f"({busy}) / on (modelName) group_left () ({peers}) "
            f"and on (modelName) (count by (modelName) ({busy}) >= 2)",
        ),
        RecordingRule(ZSCORE, f"({rise}) / stddev_over_time({past})"),
    ]
    alerts = [
        b.alert(
            "GpuStraggler",
            strag,
            # Its last busy comparison: a dip under min_utilization (a serving load's
            # lull) leaves no comparison, and must not restart for:.
            per_gpu(f"last_over_time({PEER_RATIO}[{strag.dip_window}]) < {strag.threshold}"),
            f"{THE_GPU} runs at {{{{ $value | humanizePercentage }}}} of its peers' clock",
            "While busy, its SM clock is far below the median of the busy "
            "{{ $labels.modelName }} GPUs, so it is slower at equal load and holds back "
            f"every job it is part of.{HELD_BY} Look for thermal or power throttling; "
            "move the work off it.",
        ),
        b.alert(
            "GpuTemperatureAnomaly",
            z,
            per_gpu(
                f"{ZSCORE} > {z.threshold} and on (Hostname, gpu) ({z_rise}) "
                f"and on (instance, job) ({z_up})"
            ),
            f'{THE_GPU} is unusually hot for itself ({{{{ $value | printf "%.1f" }}}} sigma)',
            f"Its mean temperature over {z.recent} is more than {z.threshold:g} standard "
            f"deviations and {z.min_rise_c:g} C above its own {z.window} before the last "
            f"{z.gap}.{HELD_BY} Check its fans and airflow before it throttles.",
        ),
        b.alert(
            "GpuTemperatureRisingFast",
            fast,
            per_gpu(f"{slope_full} and on (instance, job) ({fast_up})"),
            f'{THE_GPU} heats up {{{{ $value | printf "%.3f" }}}} C/s',
            f"Its mean temperature over the last {fast.window} is more than "
            f"{fast.threshold * w:g} C above the {fast.window} before.{HELD_BY} "
            "Check its fans and airflow.",
        ),
    ]
    return rules + [r for r in alerts if getattr(a, r.alert).enabled]
