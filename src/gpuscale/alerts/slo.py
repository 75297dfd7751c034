"""Multi-window, multi-burn-rate SLO alerts for the scaled workloads.

This follows the Google SRE workbook ("Alerting on SLOs"): an alert fires when
the error budget burns faster than ``factor`` times the sustainable rate over a
long window (how much budget is gone) and over a short window (it is still
burning), so it fires fast on a sharp outage and resets soon after it ends.
The SLI is configurable: the share of requests that were good, from two counters.
"""

from gpuscale.alerts.config import Slo
from gpuscale.alerts.model import Builder, RecordingRule, Rule, by

ERROR_RATIO = "gpuscale:slo_errors:ratio_rate{window}"


def _ratio(slo: Slo, window: str) -> str:
    group = f"sum by ({by(slo.by)})" if slo.by else "sum"
    return f"1 - ({group} (rate({slo.good}[{window}])) / {group} (rate({slo.total}[{window}])))"


def _number(value: float) -> str:
    return f"{value:.6g}"


def slo_rules(b: Builder) -> list[Rule]:
    """Error-ratio recording rules per SLO and window, then one alert per window pair.

    Returns:
        The rules, empty when no SLO is configured.
    """
    config = b.config
    windows = list(dict.fromkeys(w for bw in config.burn_windows for w in (bw.short, bw.long)))
    records: list[Rule] = []
    alerts: list[Rule] = []
    for slo in config.slos:
        label = (("slo", slo.name),)
        records += [
            RecordingRule(ERROR_RATIO.format(window=w), _ratio(slo, w), label) for w in windows
        ]
        budget = 1.0 - slo.objective
        who = "/".join(f"{{{{ $labels.{name} }}}}" for name in slo.by)
        of = f" of {who}" if who else ""
        for bw in config.burn_windows:
            limit = _number(bw.factor * budget)
            sel = f'{{slo="{slo.name}"}}'
            long_ = f"{ERROR_RATIO.format(window=bw.long)}{sel}"
            short = f"{ERROR_RATIO.format(window=bw.short)}{sel}"
            alerts.append(
                b.alert(
                    "SloErrorBudgetBurn",
                    bw,
                    f"{long_} > {limit} and {short} > {limit}",
                    f"SLO {slo.name}{of} burns its error budget {_number(bw.factor)}x too fast",
                    f"Over {bw.long} and {bw.short} more than "
                    f"{_number(100 * bw.factor * budget)} % of requests failed the {slo.name} "
                    f"SLI ({_number(100 * slo.objective)} % objective); at this rate the 30-day "
                    f"error budget is gone in {30 / bw.factor:.3g} days. Check the "
                    "workload's replicas, its GPUs and the autoscaler.",
                    labels=(("slo", slo.name), ("long_window", bw.long)),
                )
            )
    return records + alerts
