"""Anomaly rules beyond fixed thresholds, in PromQL so they scale with Prometheus.

Three ways to tell a sick GPU from a busy one without a per-fleet threshold:

* **Peer comparison**: a GPU against the median of the busy GPUs of the same model
  (``GpuStraggler``). Power capping holds clocks no lower than the base clock
  (80 % of boost on an H100), so a clock well under its busy peers' median is a
  GPU that is slower at equal load, not one that is working harder.
* **Z-score against its own history**: the temperature's distance from its own
  recent mean in standard deviations (``GpuTemperatureAnomaly``), guarded by a
  minimum rise in Celsius so a GPU with a flat history does not page on 1 C.
* **Rate of change**: the temperature's least-squares slope (``GpuTemperatureRisingFast``),
  which sees a failed fan minutes before the temperature crosses a threshold.
"""

from gpuscale.alerts.model import HELD_BY, THE_GPU, Builder, RecordingRule, Rule, per_gpu
from gpuscale.alerts.neutral import TEMPERATURE, UTILIZATION

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
    history = f"{TEMPERATURE}[{z.window}]"
    rules: list[Rule] = [
        RecordingRule(
            PEER_RATIO,
            f"({busy}) / on (modelName) group_left () ({peers}) "
            f"and on (modelName) (count by (modelName) ({busy}) >= 2)",
        ),
        RecordingRule(
            ZSCORE,
            f"({TEMPERATURE} - avg_over_time({history})) / stddev_over_time({history})",
        ),
    ]
    alerts = [
        b.alert(
            "GpuStraggler",
            strag,
            per_gpu(f"{PEER_RATIO} < {strag.threshold}"),
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
                f"{ZSCORE} > {z.threshold} and on (Hostname, gpu) "
                f"({TEMPERATURE} - avg_over_time({history}) > {z.min_rise_c})"
            ),
            f'{THE_GPU} is unusually hot for itself ({{{{ $value | printf "%.1f" }}}} sigma)',
            f"Its temperature is more than {z.threshold:g} standard deviations and "
            f"{z.min_rise_c:g} C above its own mean over {z.window}.{HELD_BY} Check its fans "
            "and airflow before it throttles.",
        ),
        b.alert(
            "GpuTemperatureRisingFast",
            fast,
            per_gpu(f"deriv({TEMPERATURE}[{fast.window}]) > {fast.threshold}"),
            f'{THE_GPU} heats up {{{{ $value | printf "%.2f" }}}} C/s',
            f"Its temperature rose faster than {fast.threshold:g} C/s over {fast.window}, "
            f"faster than load changes explain.{HELD_BY} Check its fans and airflow.",
        ),
    ]
    return rules + [r for r in alerts if getattr(a, r.alert).enabled]
