"""The fleet dashboard: what every GPU is doing and what is wrong with it.

Its NVIDIA panels read dcgm-exporter's own series names and labels, so the
dashboard works over stock dcgm-exporter as well as over ``gpuscale exporter``;
the XID-count, clock-event, violation and ECC panels need those rows enabled in
the counters file (they are commented out in upstream's default one). The
"all vendors" panels read the ``gpuscale:`` recording rules, which map NVIDIA
and AMD series into one schema, so an AMD fleet shows there too.
"""

from gpuscale.alerts.catalogue import POWER_CAPPED
from gpuscale.alerts.neutral import MEMORY_USED, POWER, TEMPERATURE, UTILIZATION
from gpuscale.exporter.dcgm import CLOCK_EVENTS, CLOCK_EVENTS_COUNT, XID_COUNT, XID_FIELD
from gpuscale.grafana.model import (
    BARS,
    HEATMAP_COLOURS,
    JSON,
    LabelVariable,
    Panel,
    Query,
    Row,
    dashboard,
)

UID = "gpuscale-fleet"
GPU = 'Hostname=~"$Hostname", gpu=~"$gpu"'
"""The matchers that narrow every panel to the chosen hosts and GPUs."""
PER_GPU = "{{Hostname}}/{{gpu}}"
# dcgm-exporter 3.x names the clock-event bitmask by its old name, 4.x by the new one.
CLOCK_REASONS = (
    '{__name__=~"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS|DCGM_FI_DEV_CLOCKS_EVENT_REASONS", ' + GPU + "}"
)


def _clock_reasons() -> str:
    """PromQL: one series per GPU and active clock-event reason, decoded from the bitmask."""
    return " or ".join(
        f'label_replace(floor({CLOCK_REASONS} / {bit}) % 2 == 1, "reason", "{name}", "", "")'
        for bit, name in sorted(CLOCK_EVENTS.items())
    )


def _overview() -> list[Panel | Row]:
    return [
        Row("Overview"),
        Panel(
            "GPUs reporting",
            "stat",
            (Query(f"count(DCGM_FI_DEV_GPU_UTIL{{{GPU}}})"),),
            "GPUs with a utilisation series (dcgm-exporter).",
            width=4,
            height=4,
        ),
        Panel(
            "GPUs lost",
            "stat",
            (Query(f"sum(1 - gpuscale_gpu_up{{{GPU}}})"),),
            "GPUs that stopped answering the driver (gpuscale_gpu_up 0; gpuscale exporter "
            "only). A lost GPU's other series disappear rather than read 0.",
            options={"colorMode": "background"},
            width=4,
            height=4,
        ),
        Panel(
            "Mean utilisation",
            "stat",
            (Query(f"avg(DCGM_FI_DEV_GPU_UTIL{{{GPU}}})"),),
            "Mean of DCGM_FI_DEV_GPU_UTIL over the chosen GPUs.",
            unit="percent",
            width=4,
            height=4,
        ),
        Panel(
            "Power draw",
            "stat",
            (Query(f"sum(DCGM_FI_DEV_POWER_USAGE{{{GPU}}})"),),
            "Sum of DCGM_FI_DEV_POWER_USAGE over the chosen GPUs.",
            unit="watt",
            width=4,
            height=4,
        ),
        Panel(
            "Hottest GPU",
            "stat",
            (Query(f"max(DCGM_FI_DEV_GPU_TEMP{{{GPU}}})"),),
            "Highest DCGM_FI_DEV_GPU_TEMP among the chosen GPUs.",
            unit="celsius",
            width=4,
            height=4,
        ),
        Panel(
            "GPUs by vendor",
            "stat",
            (Query(f"count by (vendor) ({UTILIZATION}{{{GPU}}})", "{{vendor}}"),),
            f"GPUs in the vendor-neutral schema ({UTILIZATION}), NVIDIA and AMD.",
            width=4,
            height=4,
        ),
    ]


def _nvidia() -> list[Panel | Row]:
    return [
        Row("NVIDIA: dcgm-exporter series"),
        Panel(
            "Utilisation per GPU",
            "heatmap",
            (Query(f"DCGM_FI_DEV_GPU_UTIL{{{GPU}}}", PER_GPU),),
            "DCGM_FI_DEV_GPU_UTIL, one row per GPU: the share of time a kernel ran.",
            unit="percent",
            width=24,
            height=10,
            options={
                "color": {
                    **HEATMAP_COLOURS,
                    "min": 0,
                    "max": 100,
                }
            },
        ),
        Panel(
            "Power per GPU",
            "timeseries",
            (Query(f"DCGM_FI_DEV_POWER_USAGE{{{GPU}}}", PER_GPU),),
            "DCGM_FI_DEV_POWER_USAGE: board power draw.",
            unit="watt",
        ),
        Panel(
            "Temperature per GPU",
            "timeseries",
            (
                Query(f"DCGM_FI_DEV_GPU_TEMP{{{GPU}}}", PER_GPU + " GPU"),
                Query(f"DCGM_FI_DEV_MEMORY_TEMP{{{GPU}}}", PER_GPU + " memory"),
            ),
            "DCGM_FI_DEV_GPU_TEMP (die) and DCGM_FI_DEV_MEMORY_TEMP (HBM).",
            unit="celsius",
        ),
        Panel(
            "Framebuffer memory per GPU",
            "timeseries",
            (
                Query(f"DCGM_FI_DEV_FB_USED{{{GPU}}}", PER_GPU + " used"),
                Query(f"DCGM_FI_DEV_FB_FREE{{{GPU}}}", PER_GPU + " free"),
            ),
            "DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_FREE, in MiB as DCGM reports them.",
            unit="mbytes",
            width=24,
        ),
    ]


def _errors() -> list[Panel | Row]:
    return [
        Row("NVIDIA: errors and throttling"),
        Panel(
            "Last XID per GPU",
            "table",
            (Query(f"{XID_FIELD}{{{GPU}}} != 0", instant=True),),
            f"{XID_FIELD}: the last XID each GPU reported, with err_code and err_msg "
            "(GPUs that reported none are left out).",
            options={"sortBy": [{"displayName": "Value", "desc": True}]},
        ),
        Panel(
            "XID events in the exporter's window",
            "timeseries",
            (Query(f'sum by (Hostname, gpu, xid) ({XID_COUNT}{{{GPU}, xid!=""}})', "{{xid}}"),),
            f"{XID_COUNT}: XID events per GPU and code within the exporter's "
            "--xid-count-window-size.",
            custom=BARS,
        ),
        Panel(
            "ECC errors (volatile)",
            "timeseries",
            (
                Query(f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{GPU}}}", PER_GPU + " double-bit"),
                Query(f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{GPU}}}", PER_GPU + " single-bit"),
            ),
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL and ..._SBE_VOL_TOTAL: ECC errors since the "
            "driver loaded. A double-bit error stops the application using the memory.",
        ),
        Panel(
            "Row remapping",
            "timeseries",
            (
                Query(
                    f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{GPU}}}",
                    PER_GPU + " remapped (uncorrectable)",
                ),
                Query(f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{GPU}}}", PER_GPU + " remap failed"),
            ),
            "Rows remapped after uncorrectable errors, and whether remapping failed "
            "(the GPU then needs service).",
        ),
        Panel(
            "Clock-event reasons active",
            "timeseries",
            (Query(_clock_reasons(), PER_GPU + " {{reason}}"),),
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (DCGM_FI_DEV_CLOCKS_EVENT_REASONS in "
            "dcgm-exporter 4.x) decoded bit by bit: each reason holding a GPU's clocks down now.",
            custom={"drawStyle": "points", "pointSize": 6},
        ),
        Panel(
            "Clock events in the exporter's window",
            "timeseries",
            (
                Query(
                    f"sum by (Hostname, gpu, clock_event) "
                    f'({CLOCK_EVENTS_COUNT}{{{GPU}, clock_event!=""}})',
                    PER_GPU + " {{clock_event}}",
                ),
            ),
            f"{CLOCK_EVENTS_COUNT}: collects in the exporter's window during which each "
            "clock-event reason was active.",
        ),
        Panel(
            "Share of time held down by power and heat",
            "timeseries",
            (
                Query(
                    f"rate(DCGM_FI_DEV_POWER_VIOLATION{{{GPU}}}[$__rate_interval]) / 1e9",
                    PER_GPU + " power",
                ),
                Query(
                    f"rate(DCGM_FI_DEV_THERMAL_VIOLATION{{{GPU}}}[$__rate_interval]) / 1e9",
                    PER_GPU + " thermal",
                ),
            ),
            "DCGM_FI_DEV_POWER_VIOLATION and ..._THERMAL_VIOLATION (nanoseconds of "
            "held-down clocks) as a share of wall time.",
            unit="percentunit",
            width=24,
        ),
    ]


# (title, record, what it holds, Grafana unit) of each vendor-neutral panel.
_NEUTRAL = (
    ("Utilisation", UTILIZATION, "NVIDIA GPU_UTIL and AMD gfx activity, 0-1", "percentunit"),
    ("Memory used", MEMORY_USED, "used share of the GPU's memory", "percentunit"),
    ("Power", POWER, "board power draw", "watt"),
    (
        "Temperature",
        TEMPERATURE,
        "the temperature each vendor throttles on (NVIDIA die, AMD junction)",
        "celsius",
    ),
)


def _neutral() -> list[Panel | Row]:
    per_vendor = "{{vendor}} " + PER_GPU
    return [
        Row("All vendors: gpuscale recording rules"),
        *(
            Panel(
                title,
                "timeseries",
                (Query(f"{record}{{{GPU}}}", per_vendor),),
                f"{record}: {what}.",
                unit=unit,
            )
            for title, record, what, unit in _NEUTRAL
        ),
        Panel(
            "Held at the power limit",
            "timeseries",
            (Query(f"{POWER_CAPPED}{{{GPU}}}", PER_GPU),),
            f"{POWER_CAPPED}: share of the last minute the GPU's clocks were held at its "
            "power limit (NVIDIA).",
            unit="percentunit",
            width=24,
        ),
    ]


def fleet() -> JSON:
    """The fleet dashboard.

    Returns:
        Grafana's JSON model of it.
    """
    # Hosts and GPUs from either schema, so AMD-only hosts are offered too.
    gpus = f'__name__=~"DCGM_FI_DEV_GPU_UTIL|{UTILIZATION}"'
    return dashboard(
        UID,
        "gpuscale / GPU fleet",
        "Utilisation, power, temperature, memory, errors and throttling of every GPU "
        "(dcgm-exporter series, and the gpuscale: schema for NVIDIA and AMD).",
        [
            LabelVariable("Hostname", "Hostname", f"{{{gpus}}}", "Host"),
            LabelVariable("gpu", "gpu", f'{{{gpus}, Hostname=~"$Hostname"}}', "GPU"),
        ],
        [*_overview(), *_nvidia(), *_errors(), *_neutral()],
    )
