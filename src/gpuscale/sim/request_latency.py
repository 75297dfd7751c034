"""From the per-request queue's records to what a run reports: exact latency totals.

``requests.RequestQueue`` knows each request's arrival, start and end, so its
latency summary needs no queueing model: this module counts. It fills the same
``latency.LatencySummary`` as the fluid's ``latency.summarise_latency`` and
scores against the same objectives: end-to-end latency within the SLO, or for
LLM scoring a time to first token within its budget (``LlmScoring.ttft_budget_s``
of the request's own prompt) and a time per output token within the objective in
the second it entered service (``llm.tpot_ok_per_second``, from the exact busy
slots and arrivals of each second).
"""

import numpy as np

from gpuscale.sim.latency import LATENCY_EDGES_S, LatencySummary
from gpuscale.sim.llm import LlmScoring, tpot_ok_per_second
from gpuscale.sim.requests import RequestRecords
from gpuscale.sim.workload import FloatArray, RequestProfile


def summarise_requests(
    records: RequestRecords,
    *,
    slo_s: float,
    row_steps: int,
    n_rows: int,
    profile: RequestProfile | None = None,
    llm: LlmScoring | None = None,
) -> LatencySummary:
    """Count the completed requests' latencies, totals and per-row percentiles.

    Rows hold the requests by the second they entered service, as the fluid's do.
    Nothing is dropped here: the queue counted its timeouts itself.

    Returns:
        The summary; percentiles per row of ``row_steps`` seconds.
    """
    end = np.asarray(records.end_s, dtype=float)
    done = np.flatnonzero(~np.isnan(end))
    arrival = records.arrival_s[done]
    start = np.asarray(records.start_s, dtype=float)[done]
    latency = end[done] - arrival
    entered = np.minimum(np.floor(start).astype(np.int64), max(len(records.servers) - 1, 0))
    rows = np.minimum(entered // max(row_steps, 1), n_rows - 1)
    ttft_within = tpot_within = None
    if llm is not None and profile is not None and records.context is not None:
        budget = llm.ttft_budget_s(records.context[done])
        ttft = start - arrival <= budget
        ok = tpot_ok_per_second(llm, records.busy, records.arrivals, records.servers, profile)
        tpot = ok[entered] > 0.5 if ok.size else np.zeros(done.size, dtype=bool)
        ttft_within, tpot_within = float(ttft.sum()), float(tpot.sum())
        within = ttft & tpot
    else:
        within = latency <= slo_s
    edges = LATENCY_EDGES_S
    clipped = np.clip(latency, 0.0, edges[-1])
    counts, _ = np.histogram(clipped, bins=edges)
    completed = float(done.size)
    mean = float(latency.mean()) if done.size else float("nan")
    row_completed = np.bincount(rows, minlength=n_rows)[:n_rows].astype(float)
    row_within = np.bincount(rows, weights=within.astype(float), minlength=n_rows)[:n_rows]
    return LatencySummary(
        completed,
        float(within.sum()),
        0.0,
        mean,
        counts.astype(float),
        _row_quantile(rows, latency, n_rows, 0.5),
        _row_quantile(rows, latency, n_rows, 0.99),
        row_completed,
        np.asarray(row_within, dtype=float),
        ttft_within,
        tpot_within,
    )


def _row_quantile(rows: np.ndarray, x: FloatArray, n_rows: int, q: float) -> FloatArray:
    """Per row, the ``q`` quantile of its values (linear interpolation; NaN when empty)."""
    out = np.full(n_rows, np.nan)
    if x.size == 0:
        return out
    order = np.lexsort((x, rows))
    xs, rs = x[order], rows[order]
    count = np.bincount(rs, minlength=n_rows)[:n_rows]
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    have = count > 0
    pos = q * (count[have] - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, count[have] - 1)
    w = pos - lo
    base = first[have]
    out[have] = xs[base + lo] * (1.0 - w) + xs[base + hi] * w
    return out
