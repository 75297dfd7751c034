"""How an evaluation is shown: a terminal table, a Markdown table and an HTML report.

The same ``Evaluation`` feeds all three, so the table printed by
``gpuscale evaluate``, the one pasted into the README and the one in
``report.html`` never disagree. The HTML file is self-contained: its figures
are embedded PNGs, so it can be mailed or attached to a pull request. Every
policy parameter is printed with the unit its policy registered for it.
"""

import html
import logging
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from gpuscale.evaluate.plots import TRADEOFF_TITLE, all_figures
from gpuscale.evaluate.results import Evaluation, Interval, PolicySummary, write_results
from gpuscale.evaluate.stats import UPPER
from gpuscale.sim.outcome import RunResult

logger = logging.getLogger(__name__)

COLUMNS = (
    "policy",
    "GPU-h @ target",
    "x oracle",
    "GPU-h",
    "within SLO",
    "GPU util",
    "p50 s",
    "p99 s",
    "requests",
    "dropped",
    "in flight",
    "TTFT ok",
    "TPOT ok",
    "scale events",
    "kWh",
    "burst recovery s",
)
"""Table columns, in order. ``GPU-h @ target`` is read off the policy's knob sweep at
the target attainment and ``x oracle`` compares it with the oracle's (without a target,
``x oracle`` compares ``GPU-h``); ``<=`` marks an upper bound: even the cheapest swept
point, after the sweep's extension (``evaluate.bracket``), exceeded the target.
``GPU-h`` onwards are the fair parameters' means over seeds (the oracle's: its searched
plan on each seed), with the half-width of the 95 % interval after ``±``. GPU-hours
count what the caption says (node GPUs until scale-down, or the pods' GPUs), from the
warm-up on. ``kWh`` is the simulated power of the Ready nodes' GPUs from the warm-up on;
``burst recovery s`` the mean time from a burst's onset to the target attainment held
again (``evaluate.bursts``; ``-`` without a burst). ``TTFT ok`` and ``TPOT ok`` are, on
LLM traces, the shares of requests meeting each objective (``within SLO`` counts those
meeting both); ``DASH_NOTES`` says why any cell reads ``-``."""

GPU_HOURS_BASIS = {
    "node": "node GPUs until scale-down",
    "allocated": "GPUs held by pods",
}
"""How the caption names what GPU-hours count (``Evaluation.gpu_hours_basis``)."""

NEVER = "never reaches"
"""What the table says for a policy whose curve never reaches the target attainment."""

BOUND = "<= "
"""Prefix of a cost at the target that is only an upper bound (``stats.UPPER``)."""

PARAMETER_COLUMNS = ("policy", "parameter", "value", "unit")
"""Columns of the parameter table (``parameter_rows``)."""


def _number(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100.0:.1f}%"


def _plus_minus(mean: float | None, interval: Interval, fmt: str, factor: float = 1.0) -> str:
    """``mean ±half-width`` of a symmetric interval, scaled by ``factor``; ``-`` if no mean."""
    if mean is None:
        return "-"
    text = format(mean * factor, fmt)
    low, high = interval
    if low is not None and high is not None:
        text += " ±" + format((high - low) / 2.0 * factor, fmt)
    return text


def _percent_ci(mean: float | None, interval: Interval, fmt: str) -> str:
    """``mean% [low, high]`` of a share, in percent; ``-`` if no mean.

    A share's interval (``stats.proportion_ci``) is not symmetric near 100 %, so
    both ends are printed.
    """
    text = _plus_minus(mean, (None, None), fmt, 100.0)
    low, high = interval
    if mean is not None:
        text += "%"
        if low is not None and high is not None:
            text += f" [{format(low * 100.0, fmt)}, {format(high * 100.0, fmt)}]"
    return text


OURS = ("hybrid", "predictive")
"""gpuscale's own policies; every other policy but the oracle is a baseline."""

NOT_COMPARED = ("oracle", "ceiling")
"""Reference runs, not policies a user would deploy."""


def _reading(s: PolicySummary, cost: float) -> str:
    bound = "at most " if s.gpu_hours_at_target_bound == UPPER else ""
    text = f"{bound}{cost:.1f} GPU-h"
    low, high = s.gpu_hours_at_target_ci95
    if low is not None and high is not None:
        text += f" (95 % CI {low:.1f} to {high:.1f})"
    return text


def _x_oracle(s: PolicySummary) -> str:
    if s.x_oracle_at_target is None:
        return ""
    text = f", {s.x_oracle_at_target:.2f}x the oracle"
    low, high = s.x_oracle_at_target_ci95
    if low is not None and high is not None:
        text += f" ({low:.2f} to {high:.2f})"
    return text


def verdict(evaluation: Evaluation) -> str:
    """One sentence: at the target, which policy is cheapest and by how much.

    Compares every policy but the oracle at the same attainment (GPU-hours read off
    each knob curve at the target), against the oracle and against the cheapest
    baseline (or, where a baseline is cheapest, gpuscale's own best policy against
    it), with the 95 % intervals and the seed count.

    Returns:
        The verdict, plain text.
    """
    e = evaluation
    seeds = f"{e.seeds} seed{'s' if e.seeds != 1 else ''}"
    if e.target_attainment is None:
        return (
            f"No target attainment was set ({seeds}), so the policies ran at their fair "
            "parameters only and are not compared at the same attainment: read the table."
        )
    target = f"{e.target_attainment * 100.0:g} % of requests within SLO"
    reached = {
        name: s
        for name, s in e.policies.items()
        if name not in NOT_COMPARED and s.gpu_hours_at_target is not None
    }
    if not reached:
        return f"At {target} ({seeds}), no policy reaches the target."
    cost = {name: s.gpu_hours_at_target or 0.0 for name, s in reached.items()}
    best = min(reached, key=cost.__getitem__)
    text = f"At {target} ({seeds}), {best} is the cheapest policy: "
    text += _reading(reached[best], cost[best])
    text += _x_oracle(reached[best])
    baselines = [n for n in reached if n not in OURS]
    ours = [n for n in reached if n in OURS]
    if best in OURS and len(baselines) > 0:
        rival = min(baselines, key=cost.__getitem__)
        saved = 1.0 - cost[best] / cost[rival]
        text += f"; {100.0 * saved:.0f} % under the cheapest baseline, {rival}"
        text += f" ({cost[rival]:.1f} GPU-h)"
    elif best not in OURS and ours:
        mine = min(ours, key=cost.__getitem__)
        extra = cost[mine] / cost[best] - 1.0
        text += (
            f"; gpuscale's best, {mine}, costs {100.0 * extra:.0f} % more ({cost[mine]:.1f} GPU-h)"
        )
    if any(s.gpu_hours_at_target_bound == UPPER for s in reached.values()):
        text += "; 'at most' and '<=' mark curves the sweep could not bring below the target"
    return text + "."


DASH_NOTES = {
    "GPU-h @ target": "no target attainment was set, so no knob was swept",
    "x oracle": "no oracle ran, or the policy never reaches the target",
    "within SLO": "no request arrived",
    "GPU util": "no GPU was allocated",
    "p50 s": "no request completed",
    "p99 s": "no request completed",
    "TTFT ok": "not an LLM trace: requests are judged on end-to-end latency",
    "TPOT ok": "not an LLM trace: requests are judged on end-to-end latency",
    "kWh": "the runs did not record power",
    "burst recovery s": (
        "no burst: the arrival rate never rose above twice the median of the 5 minutes "
        "before (evaluate.bursts)"
    ),
}
"""Why a cell of each column reads ``-``."""


def dash_notes(rows: Sequence[Sequence[str]]) -> list[str]:
    """A footnote for each column in which some cell reads ``-``, in column order.

    Returns:
        ``column: why`` lines.
    """
    return [
        f"{column}: - means {DASH_NOTES[column]}"
        for i, column in enumerate(COLUMNS)
        if column in DASH_NOTES and any(row[i] == "-" for row in rows)
    ]


def table_rows(evaluation: Evaluation) -> list[list[str]]:
    """The comparison as rows of text, one per policy, in ``COLUMNS`` order.

    Returns:
        Rows of formatted cells.
    """
    swept = evaluation.target_attainment is not None
    ratios = evaluation.gpu_hours_vs("oracle")
    rows = []
    for name, s in evaluation.policies.items():
        if not swept:
            at_target, ratio = "-", _number(ratios.get(name), ".2f")
        elif s.gpu_hours_at_target is None:
            at_target, ratio = NEVER, "-"
        else:
            at_target = _plus_minus(s.gpu_hours_at_target, s.gpu_hours_at_target_ci95, ".2f")
            ratio = _plus_minus(s.x_oracle_at_target, s.x_oracle_at_target_ci95, ".2f")
            if s.gpu_hours_at_target_bound == UPPER:  # the curve never fell below the target
                at_target, ratio = f"{BOUND}{at_target}", f"{BOUND}{ratio}"
        rows.append(_row(name, s, at_target, ratio))
    return rows


def _row(name: str, s: PolicySummary, at_target: str, ratio: str) -> list[str]:
    return [
        name,
        at_target,
        ratio,
        _plus_minus(s.gpu_hours, s.gpu_hours_ci95, ".2f"),
        _percent_ci(s.slo_attainment, s.slo_attainment_ci95, ".1f"),
        _percent(s.mean_gpu_utilization),
        _number(s.p50_latency_s, ".2f"),
        _number(s.p99_latency_s, ".2f"),
        f"{s.requests:.0f}",
        f"{s.dropped_requests:.0f}",
        f"{s.in_flight_requests:.0f}",
        _percent(s.ttft_within_slo),
        _percent(s.tpot_within_slo),
        str(s.scale_events),
        _plus_minus(s.energy_kwh, s.energy_kwh_ci95, ".0f"),
        _plus_minus(s.burst_recovery_s, s.burst_recovery_s_ci95, ".0f"),
    ]


def _caption(evaluation: Evaluation) -> str:
    faults = ", ".join(evaluation.faults) or "none"
    e = evaluation
    seeds = f"seed {e.seed}" if e.seeds == 1 else f"seeds {e.seed}-{e.seed + e.seeds - 1}"
    text = (
        f"trace {e.trace} x{e.scale:g}, {e.duration_s:.0f} s, {seeds}, "
        f"warm-up {e.warmup_s:g} s not scored, arrivals in the last {e.timeout_s:g} s "
        "(the drop timeout) not judged"
    )
    if not e.attainment_from_warmup:
        text += " (GPU-hours; attainment over the whole run)"
    text += ", GPU-h: " + GPU_HOURS_BASIS.get(e.gpu_hours_basis, e.gpu_hours_basis)
    text += f", SLO {e.slo_latency_s:g} s"
    if e.target_attainment is not None:
        text += f", target {e.target_attainment * 100.0:g}%"
    if e.ceiling is not None:
        text += f", ceiling {_percent_ci(e.ceiling, e.ceiling_ci95, '.2f')}"
    return f"{text}, faults: {faults}"


def comparison_table(evaluation: Evaluation) -> Table:
    """The comparison as a rich table for the terminal.

    Returns:
        A table with one row per policy.
    """
    table = Table(title=_caption(evaluation))
    for i, column in enumerate(COLUMNS):
        table.add_column(column, justify="left" if i == 0 else "right")
    for row in table_rows(evaluation):
        table.add_row(*row)
    return table


FAULT_COLUMNS = ("Policy", "Fault", "Pod", "First alert", "Detect (s)", "Mitigate (s)")
"""Columns of the fault table: each injected fault's time to detect and to mitigate."""


def fault_rows(evaluation: Evaluation) -> list[list[str]]:
    """Per policy and injected fault: the first alert, time to detect and to mitigate.

    Returns:
        Rows of text (``-`` where not detected or not mitigated); empty when the runs
        did not evaluate the alert catalogue.
    """
    return [
        [
            name,
            f.spec,
            f.pod or "-",
            f.alert or "-",
            _number(f.detect_s, ".0f"),
            _number(f.mitigate_s, ".0f"),
        ]
        for name, s in evaluation.policies.items()
        for f in s.fault_timings
    ]


def fault_table(evaluation: Evaluation) -> Table | None:
    """The fault table for the terminal, or None when there is nothing to show.

    Returns:
        A rich table with one row per policy and fault.
    """
    rows = fault_rows(evaluation)
    if not rows:
        return None
    table = Table(
        title="Injected faults: time to detect (first firing alert on the GPU) "
        "and to mitigate (replica Ready again, or the faulty pod out of service)"
    )
    for i, column in enumerate(FAULT_COLUMNS):
        table.add_column(column, justify="left" if i < 4 else "right")
    for row in rows:
        table.add_row(*row)
    return table


STEP_COLUMNS = ("policy", "holds", "pods replaced", "pods remediated")
"""Columns of the decision-step table: the fail-safe's holds by reason and the pods deleted."""


def step_rows(evaluation: Evaluation) -> list[list[str]]:
    """Per policy: the decision step's holds by reason and the pods it deleted (seed means).

    Returns:
        Rows of text; empty when no run held or deleted a pod.
    """
    rows = []
    for name, s in evaluation.policies.items():
        if s.holds or s.pods_replaced or s.pods_remediated:
            holds = ", ".join(f"{r} {n:g}" for r, n in s.holds.items()) or "0"
            rows.append([name, holds, f"{s.pods_replaced:g}", f"{s.pods_remediated:g}"])
    return rows


def step_table(evaluation: Evaluation) -> Table | None:
    """The decision-step table for the terminal, or None when there is nothing to show.

    Returns:
        A rich table with one row per policy that held or deleted a pod.
    """
    rows = step_rows(evaluation)
    if not rows:
        return None
    table = Table(
        title="Decision step: holds on unfit data by reason, pods deleted (means over seeds)"
    )
    for i, column in enumerate(STEP_COLUMNS):
        table.add_column(column, justify="left" if i < 2 else "right")
    for row in rows:
        table.add_row(*row)
    return table


def markdown_table(evaluation: Evaluation) -> str:
    """The comparison as a Markdown table, ready for the README.

    Returns:
        The table text, a caption line first.
    """
    rows = table_rows(evaluation)
    lines = [
        verdict(evaluation),
        "",
        f"_{_caption(evaluation)}_",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(COLUMNS))) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    notes = dash_notes(rows)
    if notes:
        lines += ["", *notes]
    faults = fault_rows(evaluation)
    if faults:
        lines += ["", "| " + " | ".join(FAULT_COLUMNS) + " |"]
        lines.append("|" + "|".join("---" if i < 4 else "---:" for i in range(6)) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in faults]
    steps = step_rows(evaluation)
    if steps:
        lines += ["", "| " + " | ".join(STEP_COLUMNS) + " |", "|---|---|---:|---:|"]
        lines += ["| " + " | ".join(row) + " |" for row in steps]
    return "\n".join(lines) + "\n"


def format_value(value: object) -> str:
    """A parameter's value as the report prints it (floats to six significant digits).

    Returns:
        The text.
    """
    return format(value, ".6g") if isinstance(value, float) else str(value)


def parameter_rows(evaluation: Evaluation) -> list[list[str]]:
    """Every policy's parameters, one row each: policy, parameter, value, unit.

    Returns:
        Rows of text, policies in run order.
    """
    return [
        [name, key, format_value(value), s.units.get(key, "")]
        for name, s in evaluation.policies.items()
        for key, value in s.parameters.items()
    ]


def _html_table(columns: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _llm_note(evaluation: Evaluation) -> str:
    if not any(s.ttft_within_slo is not None for s in evaluation.policies.values()):
        return ""
    return (
        "<p>LLM trace: a request is within the SLO when its time to first token is within "
        "its objective and its time per output token within its own (each against the "
        "request's idle prefill and decode times; docs/serving-model.md). TTFT ok and TPOT "
        "ok give the share of requests meeting each; the timelines' latency panels show "
        "end-to-end latency, which is not the SLO, and their last panel the share within "
        "the SLO each minute.</p>"
    )


def render_html(evaluation: Evaluation, results: Sequence[RunResult]) -> str:
    """A self-contained HTML report: verdict, scenario, table, parameters and figures.

    Each part is a ``<section>`` with an id (``verdict``, ``comparison``,
    ``parameters``, ``faults``, ``tradeoff``, ``timelines``), so a browser test can find
    and screenshot it.

    Args:
        evaluation: The scores.
        results: The runs behind them, for the timelines.

    Returns:
        The HTML document.
    """
    rows = table_rows(evaluation)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in dash_notes(rows))
    intervals = (
        "<p>GPU-hours ± is the half-width of the 95 % Student-t interval over seeds; "
        "within SLO [low, high] is a 95 % bootstrap interval over seeds, which stays "
        "within 0 to 100 %.</p>"
    )
    fault_rows_ = fault_rows(evaluation)
    faults = (
        '<section id="faults"><h2>Injected faults: time to detect and to mitigate</h2>'
        f"{_html_table(FAULT_COLUMNS, fault_rows_)}</section>"
        if fault_rows_
        else ""
    )
    rendered = all_figures(evaluation, results)
    tradeoff = "".join(
        f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{png}"></figure>'
        for title, png in rendered.items()
        if title == TRADEOFF_TITLE
    )
    timelines = "".join(
        f'<figure><h3>{html.escape(title)}</h3><img alt="{html.escape(title)}" '
        f'src="data:image/png;base64,{png}"></figure>'
        for title, png in rendered.items()
        if title != TRADEOFF_TITLE
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>gpuscale evaluation: {html.escape(evaluation.trace)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; margin-bottom: 1em; }}
td, th {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
table.params td:last-child, table.params th:last-child {{ text-align: left; }}
#verdict p.verdict {{ font-size: 1.2em; font-weight: bold; }}
figure {{ margin: 0 0 1.5em 0; }}
figure h3 {{ margin: 0.2em 0; }}
img {{ display: block; width: 100%; height: auto; }}
</style></head><body>
<h1>gpuscale evaluation</h1>
<section id="verdict"><p class="verdict">{html.escape(verdict(evaluation))}</p>
<p>{html.escape(_caption(evaluation))}</p></section>
<section id="comparison"><h2>Comparison</h2>
{_html_table(COLUMNS, rows)}
<ul class="notes">{notes}</ul>{intervals}{_llm_note(evaluation)}</section>
<section id="tradeoff"><h2>{html.escape(TRADEOFF_TITLE)}</h2>{tradeoff}</section>
<section id="parameters"><h2>Policy parameters</h2>
{_html_table(PARAMETER_COLUMNS, parameter_rows(evaluation), "params")}</section>
{faults}
<section id="timelines"><h2>Timelines</h2>
{timelines}</section>
</body></html>
"""


def write_report(
    evaluation: Evaluation, results: Sequence[RunResult], out_dir: Path
) -> tuple[Path, Path]:
    """Write ``results.json`` and ``report.html`` into ``out_dir`` (created if needed).

    Returns:
        The paths of the JSON and HTML files.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "results.json"
    html_path = out_dir / "report.html"
    write_results(evaluation, json_path)
    html_path.write_text(render_html(evaluation, results))
    logger.debug("wrote %s and %s", json_path, html_path)  # the CLI tells the user
    return json_path, html_path
