"""One place that turns a run's queue records into its latency summary.

The engine and the fixed-fleet check (``fixed.serve_fixed``) score a run the
same way: service-time shape from the trace's profile when it has one, TTFT and
TPOT for an LLM config on a trace with token counts, end-to-end latency
otherwise. Keeping the choice here keeps the two in step, and the per-request
queue's exact records are scored against the same objectives.
"""

from typing import TYPE_CHECKING

from gpuscale.sim.latency import LatencyRecords, LatencySummary, summarise_latency
from gpuscale.sim.request_latency import summarise_requests
from gpuscale.sim.requests import RequestRecords
from gpuscale.sim.serving import llm_scoring, service_scv

if TYPE_CHECKING:
    from gpuscale.sim.engine import Scenario


def summarise_run(
    records: LatencyRecords | RequestRecords,
    scenario: "Scenario",
    slots: int,
    *,
    row_steps: int,
    n_rows: int,
) -> LatencySummary:
    """Score what a run's queue recorded over ``scenario``.

    The per-request queue's records are counted (``request_latency``); the fluid's
    portions are turned into latency distributions (``latency.summarise_latency``).

    Args:
        records: The queue's records.
        scenario: The run's scenario (SLO, timeout, serving, workload).
        slots: Batch slots per replica the run used.
        row_steps: Seconds per timeline row.
        n_rows: Timeline rows.

    Returns:
        The latency summary.
    """
    wl, serving = scenario.workload, scenario.serving
    llm = llm_scoring(serving, scenario.cluster.gpu_model, slots, wl)
    if isinstance(records, RequestRecords):
        return summarise_requests(
            records,
            slo_s=scenario.slo_latency_s,
            row_steps=row_steps,
            n_rows=n_rows,
            profile=wl.profile,
            llm=llm,
        )
    return summarise_latency(
        records,
        slo_s=scenario.slo_latency_s,
        timeout_s=scenario.timeout_s,
        row_steps=row_steps,
        n_rows=n_rows,
        rate_window_s=serving.rate_window_s,
        service_scv=service_scv(serving, wl),
        profile=wl.profile,
        llm=llm,
    )
