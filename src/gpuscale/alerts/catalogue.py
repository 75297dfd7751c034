"""The alert catalogue: GPU health, anomaly and SLO burn-rate rules over dcgm-exporter's series.

``build_catalogue`` turns the settings (``gpuscale.alerts.config``) into rule
groups: the vendor-neutral recording rules first, then hardware health, then
anomalies; the SLO burn rates in a group of their own. Each alert has a severity, a summary, a
description that says what to do first, and a link to its runbook in
``docs/alerts.md``. Expressions return one series per GPU with the GPU's
``Hostname``, ``gpu``, ``UUID`` and ``modelName`` and, on Kubernetes, the
``namespace``, ``pod`` and ``container`` holding it.
"""

from gpuscale.alerts import xid
from gpuscale.alerts.anomaly import anomaly_rules
from gpuscale.alerts.config import AlertConfig
from gpuscale.alerts.model import (
    GPU,
    HELD_BY,
    THE_GPU,
    AlertRule,
    Builder,
    RecordingRule,
    RuleGroup,
    any_of,
    by,
    exporter_jobs,
    from_amd,
    per_gpu,
)
from gpuscale.alerts.neutral import MEMORY_USED, TEMPERATURE, UTILIZATION, neutral_rules
from gpuscale.alerts.slo import slo_rules

XID_RECENT = "gpuscale:gpu_xid_recent:info"
"""1 per GPU and XID code (label ``xid``) while a new last XID is within ``GpuXidError.window``."""

_LAST_XID = "DCGM_FI_DEV_XID_ERRORS"


def _recent_xid(b: Builder) -> str:
    """The last XID (``DCGM_FI_DEV_XID_ERRORS``, in dcgm-exporter's default counters) as a label.

    The gauge holds the last XID a GPU reported, 0 when none, and dcgm-exporter
    labels it with the code (``err_code``, ``err_msg``): a new XID is a new series.
    A GPU's value is new when it differs from the one ``window`` ago, or changed
    within one series (an exporter without those labels); a GPU with no value
    ``window`` ago (a new node, an exporter back after a long outage) has nothing
    to compare and stays quiet. ``count_values`` turns the code into the ``xid`` label.
    """
    w = b.config.alerts.GpuXidError.window
    now = f"max without (err_code, err_msg) ({_LAST_XID} != 0)"
    before = f"max by ({by(GPU)}) ({_LAST_XID} offset {w})"
    moved = f"max without (err_code, err_msg) ({_LAST_XID} != 0 and changes({_LAST_XID}[{w}]) > 0)"
    return (
        f'count_values without () ("xid", ({now} != on ({by(GPU)}) group_left () {before}) '
        f"or {moved})"
    )


def _xid(code: int) -> str:
    return any_of(
        per_gpu(f'DCGM_EXP_XID_ERRORS_COUNT{{xid="{code}"}} > 0'),
        per_gpu(f'{XID_RECENT}{{xid="{code}"}}'),
    )


def _fell_off_bus(b: Builder) -> AlertRule:
    s = b.config.alerts.GpuFellOffBus
    # A GPU whose series were there within the window and are gone now, while the
    # exporter that served them still answers: the exporter dropped the GPU.
    vanished = (
        f"(max by (Hostname, gpu, UUID, modelName, instance, job) "
        f"(last_over_time(DCGM_FI_DEV_GPU_UTIL[{s.vanished_window}])) "
        f"unless on (Hostname, gpu) DCGM_FI_DEV_GPU_UTIL) and on (instance, job) (up == 1)"
    )
    expr = any_of(
        per_gpu("gpuscale_gpu_up == 0"),
        _xid(79),
        f"max by (Hostname, gpu, UUID, modelName) ({vanished})",
    )
    return b.alert(
        "GpuFellOffBus",
        s,
        expr,
        f"{THE_GPU} fell off the bus",
        "The GPU stopped answering the driver (XID 79, gpuscale_gpu_up 0, or its series "
        f"vanished while its exporter is up).{HELD_BY} Drain the node and reboot it; "
        "check power, PCIe seating and cooling.",
    )


def _xid_errors(b: Builder) -> list[AlertRule]:
    s = b.config.alerts.GpuXidError
    excluded = "|".join(str(c) for c in s.exclude_codes) or "none"
    critical = "|".join(str(c) for c in s.critical_codes if c not in s.exclude_codes) or "none"
    summary = f"XID {{{{ $labels.xid }}}} on {THE_GPU}"
    description = (
        f"The GPU reported XID {{{{ $labels.xid }}}} in the last {s.window}: "
        f"{xid.meaning_template()}.{HELD_BY}"
    )
    split = (
        (("critical", f'xid=~"{critical}"'), (s.severity, f'xid!~"{excluded}|{critical}"'))
        if s.severity != "critical"
        # Every code critical: one rule, as two with the same labels are duplicates.
        else (("critical", f'xid!~"{excluded}"'),)
    )
    rules = []
    for severity, matcher in split:
        # The exporter's count by code when it is switched on; the last XID otherwise.
        # A GPU and code both report is one alert.
        counts = f'DCGM_EXP_XID_ERRORS_COUNT{{{matcher}, xid!~"{excluded}"}} > 0'
        last = f'{XID_RECENT}{{{matcher}, xid!~"{excluded}"}}'
        expr = (
            f"({per_gpu(counts, ('xid',))}) or on ({by((*GPU, 'xid'))}) ({per_gpu(last, ('xid',))})"
        )
        rules.append(b.alert("GpuXidError", s, expr, summary, description, severity))
    return rules


def _ecc(b: Builder) -> AlertRule:
    s = b.config.alerts.GpuEccDoubleBitError
    w = s.window
    expr = any_of(
        per_gpu(f"increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[{w}]) > 0"),
        per_gpu(f"increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS[{w}]) > 0"),
        per_gpu(f"increase(DCGM_FI_DEV_RETIRED_DBE[{w}]) > 0"),
        _xid(48),
        per_gpu(from_amd(f"increase(gpu_ecc_uncorrect_total[{w}]) > 0")),
    )
    return b.alert(
        "GpuEccDoubleBitError",
        s,
        expr,
        f"Uncorrectable (double-bit) ECC error on {THE_GPU}",
        f"Memory returned data it could not correct within the last {w} (XID 48); the "
        f"application using it was stopped or will see corrupt data.{HELD_BY} Drain and "
        "reset the GPU; replace it if it recurs.",
    )


def _row_remap(b: Builder) -> AlertRule:
    s = b.config.alerts.GpuRowRemapFailure
    expr = any_of(per_gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE > 0"), _xid(64))
    return b.alert(
        "GpuRowRemapFailure",
        s,
        expr,
        f"Row remapping failed on {THE_GPU}",
        "The GPU ran out of spare memory rows to replace failing ones (XID 64); errors on "
        f"those rows can no longer be contained.{HELD_BY} Drain it and send it for service.",
    )


POWER_CAPPED = "gpuscale:gpu_power_capped:ratio"
"""Share of the last ``GpuPowerCapped.window`` the GPU's clocks were held at its power limit."""


def _held_share(b: Builder, counter: str, window: str) -> str:
    # DCGM's violation counters count micro- (or, in newer releases, nano-) seconds
    # of held-down clocks; divided, the rate is the share of time held down.
    per_s = "1e9" if b.config.violation_unit == "ns" else "1e6"
    return f"rate({counter}[{window}]) / {per_s}"


def health_records(b: Builder) -> list[RecordingRule]:
    """Records the health alerts read: the recent last XID, and the power-capped share.

    Returns:
        The recording rules, to be evaluated before the alerts.
    """
    window = b.config.alerts.GpuPowerCapped.window
    return [
        RecordingRule(XID_RECENT, _recent_xid(b)),
        RecordingRule(POWER_CAPPED, _held_share(b, "DCGM_FI_DEV_POWER_VIOLATION", window)),
    ]


def _thermal(b: Builder) -> list[AlertRule]:
    s = b.config.alerts.GpuThermalThrottling
    counter = "DCGM_FI_DEV_THERMAL_VIOLATION"
    action = "Check fans, inlet air and neighbouring cards; the GPU serves slower until it cools."
    held = b.alert(
        "GpuThermalThrottling",
        s,
        per_gpu(f"{_held_share(b, counter, s.window)} > {s.threshold}"),
        f"{THE_GPU} is thermally throttled",
        f"Clocks were held down {{{{ $value | humanizePercentage }}}} of the last {s.window} "
        f"({counter}).{HELD_BY} {action}",
        labels=(("signal", counter),),
    )
    # dcgm-exporter's default counters leave the violation counter off; a GPU without
    # it is judged by its die temperature against the slowdown temperature instead.
    hot = f"DCGM_FI_DEV_GPU_TEMP >= {s.slowdown_c} unless on ({by(GPU)}) {counter}"
    at_slowdown = b.alert(
        "GpuThermalThrottling",
        s,
        per_gpu(hot),
        f"{THE_GPU} is at its slowdown temperature",
        f"The die is at {{{{ $value }}}} C, at or above {s.slowdown_c:g} C, where NVIDIA "
        f"data-centre GPUs slow their clocks ({counter}, which measures the slowdown, is not "
        f"exported).{HELD_BY} {action}",
        labels=(("signal", "DCGM_FI_DEV_GPU_TEMP"),),
    )
    return [held, at_slowdown]


def _power_capped(b: Builder) -> AlertRule:
    s = b.config.alerts.GpuPowerCapped
    # The highest capped share of any window in the last dip_window: a lull in the load
    # that takes the GPU under its limit for a while does not restart for:.
    expr = per_gpu(f"max_over_time({POWER_CAPPED}[{s.dip_window}]) > {s.threshold}")
    return b.alert(
        "GpuPowerCapped",
        s,
        expr,
        f"{THE_GPU} is held at its power limit",
        f"Clocks were held at the power limit over {s.threshold:.0%} of a {s.window} window "
        f"within the last {s.dip_window}, for {s.for_} (DCGM_FI_DEV_POWER_VIOLATION; peak "
        f"share {{{{ $value | humanizePercentage }}}}).{HELD_BY} Expected under heavy "
        "load; if it persists at modest load, check the power limit "
        "(nvidia-smi -q -d POWER) and the PSU.",
    )


def _gauges(b: Builder) -> list[AlertRule]:
    a = b.config.alerts
    temp, mem, idle = a.GpuTemperatureHigh, a.GpuMemoryNearFull, a.GpuIdleWhileAllocated
    return [
        b.alert(
            "GpuTemperatureHigh",
            temp,
            per_gpu(f"{TEMPERATURE} > {temp.threshold}"),
            f"{THE_GPU} is at {{{{ $value }}}} C",
            f"The die is above {temp.threshold:g} C, near where clocks slow down.{HELD_BY} "
            "Check fans, inlet air and neighbouring cards.",
        ),
        b.alert(
            "GpuMemoryNearFull",
            mem,
            per_gpu(f"{MEMORY_USED} > {mem.threshold}"),
            f"{THE_GPU} memory is {{{{ $value | humanizePercentage }}}} full",
            f"Framebuffer use is above {mem.threshold:.0%}; the next allocation may fail "
            f"with out-of-memory.{HELD_BY} Lower the batch or KV-cache share, or add a replica.",
        ),
        b.alert(
            "GpuIdleWhileAllocated",
            idle,
            per_gpu(f'{UTILIZATION}{{pod!=""}} <= {idle.threshold}'),
            f"{THE_GPU} is allocated to {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} and idle",
            f"The GPU has been busy at most {idle.threshold:.0%} of the time for {idle.for_} "
            "while a pod holds it: money spent on nothing. Scale the workload in or "
            "release the GPU.",
        ),
    ]


def _exporter(b: Builder) -> list[AlertRule]:
    a = b.config.alerts
    down, stale = a.GpuExporterDown, a.GpuMetricsStale
    up = f"up{exporter_jobs(b.config)}"
    # A target whose scrape fails; one scraped within the window that has no up series
    # now (its pod or node went away, and with it the target); no target at all for the
    # whole window (the last form stays once the window has passed).
    gone = f"last_over_time({up}[{down.vanished_window}])"
    expr = f"({up} == 0) or ({gone} unless on (instance, job) {up}) or absent({gone})"
    frozen = (
        f"changes(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[{stale.window}]) == 0 "
        # Two samples at least: a window shorter than the scrape interval holds one,
        # which never changes.
        f"and count_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[{stale.window}]) > 1 "
        "and DCGM_FI_DEV_POWER_USAGE > 0 "
        # Only a series that existed a whole window ago: a new one has not had time to move.
        f"and DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION offset {stale.window}"
    )
    stale_text = (
        "The exporter answers but its values are old or frozen; alerts and autoscaling "
        "are reading the past. Check the exporter's log and the driver (nvidia-smi)."
    )
    return [
        b.alert(
            "GpuExporterDown",
            down,
            expr,
            "{{ if $labels.instance }}GPU exporter {{ $labels.instance }} is down or gone"
            "{{ else }}No GPU exporter is scraped{{ end }}",
            "Prometheus cannot scrape the GPU exporter, its target vanished within the last "
            f"{down.vanished_window}, or no target of the GPU exporters' jobs was seen in "
            f"that time; no GPU alert on that node can fire. Check the exporter pod and the node.",
        ),
        b.alert(
            "GpuMetricsStale",
            stale,
            f"(gpuscale_exporter_snapshot_age_seconds{exporter_jobs(b.config)} "
            f"> {stale.threshold}) or ({per_gpu(frozen)})",
            f"{{{{ if $labels.gpu }}}}Telemetry of {THE_GPU}{{{{ else }}}}Telemetry from "
            "{{ $labels.instance }}{{ end }} is stale",
            f"The exporter serves values over {stale.threshold:g} s old, or a GPU's energy "
            f"counter did not move for {stale.window} while its power reads above 0. " + stale_text,
        ),
    ]


def health_rules(b: Builder) -> list[AlertRule]:
    """Hardware and exporter health alerts.

    Returns:
        The rules of every enabled alert.
    """
    a = b.config.alerts
    rules = [
        _fell_off_bus(b),
        *_xid_errors(b),
        _ecc(b),
        _row_remap(b),
        *_thermal(b),
        _power_capped(b),
        *_gauges(b),
        *_exporter(b),
    ]
    return [r for r in rules if getattr(a, r.alert).enabled]


def build_catalogue(config: AlertConfig | None = None) -> tuple[RuleGroup, ...]:
    """The whole catalogue for ``config`` (defaults when None).

    Returns:
        ``gpuscale.gpu`` (neutral records, health, anomaly), and ``gpuscale.slo``
        (its own records and alerts) when any SLO is configured.
    """
    config = config or AlertConfig()
    b = Builder(config)
    interval = config.interval
    # Prometheus runs groups concurrently (and promtool in no fixed order), so the
    # neutral records share a group with the alerts that read them: a group's rules
    # run in order, and an alert sees the records of the same evaluation.
    gpu = (*neutral_rules(), *health_records(b), *health_rules(b), *anomaly_rules(b))
    groups = [RuleGroup("gpuscale.gpu", gpu, interval)]
    slo = slo_rules(b)
    if slo:
        groups.append(RuleGroup("gpuscale.slo", tuple(slo), interval))
    return tuple(groups)
