"""From the fluid queue's records to what a run reports: latency totals and percentiles.

The fluid queue (``fluid.py``) records, for each portion of requests entering
service, how long it waited and how big its requests were. This module turns
those records, after the run and vectorised over all of them, into the latency
histogram, SLO attainment, stochastic timeouts and per-row p50/p99 that
``RunResult`` carries. ``InService`` keeps track of how much of each portion is
still in service, so a portion can be taken back out (a request interrupted or
still in flight at the end) and counted once.
"""

import math
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from gpuscale.sim.latency_cdf import (
    LATENCY_EDGES_S as LATENCY_EDGES_S,  # re-exported: the histogram's edges live here too
)
from gpuscale.sim.latency_cdf import (
    cdf_coefficients,
    cdf_on_edges,
    mean_wait_cdf,
    row_quantile,
    underflow_cut,
)
from gpuscale.sim.llm import LlmScoring, tpot_ok_per_second
from gpuscale.sim.queueing import erlang_c, latency_cdf, service_phases
from gpuscale.sim.workload import FloatArray, RequestProfile

SPREAD_RHO_CAP = 0.95
"""Utilisation cap for the stationary wait spread: a queue past it is a backlog, not noise."""

NO_WAIT = 1e-6
"""Erlang C below this counts as no wait at all."""

_BLOCK = 256
"""Portions whose CDFs are built at once: a block of them stays in the cache."""

BACKLOG_FACTOR = 3.0
"""Backlog: the smoothed fluid wait past this many stationary mean waits (less is noise)."""


Column = npt.NDArray[Any]
"""One column of the fluid queue's records (float64, or int64 for seconds and slots)."""

_FIRST_ROWS = 1024
"""Rows each record column starts with; they double as they fill."""


def _grown(columns: tuple[Column, ...], used: int, rows: int) -> tuple[Column, ...]:
    """The columns' first ``used`` rows copied into arrays of at least ``rows`` (twice as many)."""
    size = max(2 * columns[0].size, rows)
    out = []
    for col in columns:
        new = np.zeros(size, dtype=col.dtype)
        new[:used] = col[:used]
        out.append(new)
    return tuple(out)


class _Rows:
    """A record column's rows in use: a view of ``group[index][:used]``, to read or write."""

    def __init__(self, group: str, index: int, used: str) -> None:
        self.group, self.index, self.used = group, index, used

    @overload
    def __get__(self, records: None, owner: type | None = None) -> "_Rows": ...
    @overload
    def __get__(self, records: "LatencyRecords", owner: type | None = None) -> Column: ...
    def __get__(
        self, records: "LatencyRecords | None", owner: type | None = None
    ) -> "Column | _Rows":
        if records is None:  # looked up on the class (help(), introspection)
            return self
        column: Column = getattr(records, self.group)[self.index]
        return column[: getattr(records, self.used)]


class LatencyRecords:
    """Portions of requests entering service in a fluid queue, and its state each second.

    The columns are numpy arrays that double as they fill, so the compiled block
    (``fluid_kernel``) writes them in place. ``portions`` rows of the per-portion
    columns and ``seconds`` rows of the per-second ones are in use; each attribute
    below is a view of those rows, which moves when the records grow (read it
    again after adding).

    Attributes:
        step: Second each portion entered service, per portion (non-decreasing).
        count: Requests in the portion (lowered when some are taken back out).
        wait_s: Their mean wait from arrival to entering service, seconds.
        size_s: Their work per request, reference-GPU seconds.
        log_g_at_entry: ``InService.log_g`` when the portion entered service.
        entered: Requests in the portion when it entered service.
        per_size_s: Service seconds per reference-GPU second of work, per second.
        offered_s: Service seconds that arrived, per second.
        servers: Ready slots, per second.
        busy: Requests in service at the end of each second.
        arrivals: Requests arriving, per second.
        retried: Indices of portions that are requests on their second try.
    """

    __slots__ = ("per_portion", "per_second", "portions", "retried", "seconds")

    step = _Rows("per_portion", 0, "portions")
    count = _Rows("per_portion", 1, "portions")
    wait_s = _Rows("per_portion", 2, "portions")
    size_s = _Rows("per_portion", 3, "portions")
    log_g_at_entry = _Rows("per_portion", 4, "portions")
    entered = _Rows("per_portion", 5, "portions")
    per_size_s = _Rows("per_second", 0, "seconds")
    offered_s = _Rows("per_second", 1, "seconds")
    servers = _Rows("per_second", 2, "seconds")
    busy = _Rows("per_second", 3, "seconds")
    arrivals = _Rows("per_second", 4, "seconds")

    def __init__(self) -> None:
        self.portions = 0
        self.seconds = 0
        self.retried: set[int] = set()
        n, f, i = _FIRST_ROWS, np.float64, np.int64
        # The columns whole, in the order above (the compiled block takes them so).
        self.per_portion: tuple[Column, ...] = tuple(np.zeros(n, d) for d in (i, f, f, f, f, f))
        self.per_second: tuple[Column, ...] = tuple(np.zeros(n, d) for d in (f, f, i, f, f))

    def reserve(self, portions: int, seconds: int) -> None:
        """Make room for ``portions`` more portions and ``seconds`` more seconds."""
        if self.portions + portions > self.per_portion[0].size:
            self.per_portion = _grown(self.per_portion, self.portions, self.portions + portions)
        if self.seconds + seconds > self.per_second[0].size:
            self.per_second = _grown(self.per_second, self.seconds, self.seconds + seconds)

    def add_portion(
        self, step: int, count: float, wait_s: float, size_s: float, log_g: float
    ) -> None:
        """Record ``count`` requests entering service at second ``step``, ``log_g`` then."""
        self.reserve(1, 0)
        i = self.portions
        values = (step, count, wait_s, size_s, log_g, count)
        for column, value in zip(self.per_portion, values, strict=True):
            column[i] = value
        self.portions = i + 1

    def add_second(
        self, per_size_s: float, offered_s: float, servers: int, busy: float, arrivals: float
    ) -> None:
        """Record one second's queue state."""
        self.reserve(0, 1)
        i = self.seconds
        values = (per_size_s, offered_s, servers, busy, arrivals)
        for column, value in zip(self.per_second, values, strict=True):
            column[i] = value
        self.seconds = i + 1


_GONE_LOG = -30.0
"""A portion whose in-service share fell below e^-30 (1e-13) is out of service."""


class InService:
    """How much of each recorded portion is still in service.

    Requests leave service in proportion to what is in service (every portion loses
    the same share each second, as with exponential service), so one running log
    survival ``log_g`` says it all: portion ``i`` still has
    ``entered[i] * exp(log_g - log_g_at_entry[i])`` requests in service (both
    columns of the records, written as each portion is recorded). The queue lowers
    ``log_g`` each second as ``served`` does.

    Args:
        records: The portions, whose counts ``remove`` lowers.
    """

    def __init__(self, records: LatencyRecords) -> None:
        self.records = records
        self.log_g = 0.0
        self.live = 0  # portions before this index are out of service

    def served(self, left: float) -> None:
        """A share ``1 - left`` of everything in service left it."""
        if left > 1e-12:
            self.log_g += math.log(left)
        else:  # nothing is left in service
            self.live, self.log_g = self.records.portions, 0.0

    def take(self, share: float) -> tuple[list[int], list[float]]:
        """Take ``share`` (0 to 1) of every portion still in service out of it.

        Returns:
            The portions' indices and the requests taken from each.
        """
        rec = self.records
        lg, i, end = rec.log_g_at_entry, self.live, rec.portions
        # The first portion from ``live`` on not yet out of service (those before it are).
        gone = self.log_g - lg[i:end] < _GONE_LOG
        i += int(np.argmin(gone)) if not gone.all() else gone.size
        self.live = i
        if i >= end or share <= 0.0:
            return [], []
        surv = np.exp(self.log_g - lg[i:])
        amounts = (share * rec.entered[i:] * surv).tolist()
        self.served(1.0 - min(share, 1.0))
        return list(range(i, end)), amounts

    def remove(self, idx: list[int], amounts: list[float]) -> list[float]:
        """Lower the recorded portions by what was taken (they did not complete).

        Returns:
            The amounts removed, each capped at what its portion still counts.
        """
        count = self.records.count
        have = count[idx].tolist()
        out = [c if c < x else x for x, c in zip(amounts, have, strict=True)]  # min(x, c)
        count[idx] = [c - x for c, x in zip(have, out, strict=True)]
        return out


class Draining:
    """Requests finishing on a deleted replica, taken out of service by ``InService.take``.

    Args:
        idx: The portions they belong to.
        taken: Requests taken from each.
        service_s: Their mean service time on the replica; a share ``1 - exp(-1 /
            service_s)`` of what is left completes each second.
    """

    __slots__ = ("decay", "idx", "left", "taken", "total")

    def __init__(self, idx: list[int], taken: list[float], service_s: float) -> None:
        self.idx, self.taken = idx, taken
        self.total = float(sum(taken))
        self.left = 1.0
        self.decay = math.exp(-1.0 / max(service_s, 1e-9))

    @property
    def requests(self) -> float:
        """Requests still in service on the replica."""
        return self.total * self.left


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Latency outcome of the served requests.

    Attributes:
        completed: Requests served (after the timeout tail is removed).
        within_slo: Of those, requests with latency at most the SLO.
        dropped: Requests of the stationary wait's tail past the timeout, dropped.
        mean_latency_s: Mean end-to-end latency, seconds (NaN when none served).
        counts: Served requests per ``LATENCY_EDGES_S`` bin.
        p50_s: Median latency per row, seconds (NaN for rows with none).
        p99_s: 99th percentile per row, seconds.
        row_completed: Requests served, per row (by the second they entered service).
        row_within_slo: Of those, requests within the SLO, per row.
        ttft_within_slo: LLM scoring: requests meeting the TTFT objective, else None.
        tpot_within_slo: LLM scoring: requests meeting the TPOT objective, else None.
    """

    completed: float
    within_slo: float
    dropped: float
    mean_latency_s: float
    counts: FloatArray
    p50_s: FloatArray
    p99_s: FloatArray
    row_completed: FloatArray
    row_within_slo: FloatArray
    ttft_within_slo: float | None = None
    tpot_within_slo: float | None = None


def centred_mean(x: FloatArray, window: int) -> FloatArray:
    """Moving average over a centred window of ``window`` samples (shrunk at the ends).

    Returns:
        The averaged series, same length.
    """
    x = np.asarray(x, dtype=float)
    if window <= 1 or x.size == 0:
        return x.copy()
    c = np.concatenate([[0.0], np.cumsum(x)])
    n = x.size
    lo = np.clip(np.arange(n) - window // 2, 0, n)
    hi = np.clip(lo + window, 0, n)
    lo = np.clip(hi - window, 0, n)
    return np.asarray((c[hi] - c[lo]) / np.maximum(hi - lo, 1), dtype=float)


def backlog_delay(
    step: npt.NDArray[np.int64], n: FloatArray, wait_s: FloatArray, steps: int, window: int
) -> FloatArray:
    """Per portion, the request-weighted mean wait (s) of a centred ``window`` of seconds."""
    total = centred_mean(np.bincount(step, n * wait_s, steps).astype(float), window)
    count = centred_mean(np.bincount(step, n, steps).astype(float), window)
    return np.asarray(total / np.maximum(count, 1e-300), dtype=float)[step]


def summarise_latency(
    records: LatencyRecords,
    *,
    slo_s: float,
    timeout_s: float,
    row_steps: int,
    n_rows: int,
    rate_window_s: int = 60,
    service_scv: float = 1.0,
    profile: RequestProfile | None = None,
    llm: LlmScoring | None = None,
    chunk: int = 4096,
) -> LatencySummary:
    """Turn portions entering service into latency distributions, totals and percentiles.

    A portion that entered service after a mean wait ``D`` is served in a mean ``m``.
    The stationary M/M/k queue at the load of the surrounding ``rate_window_s``
    seconds (capped at ``SPREAD_RHO_CAP``) gives every portion's wait its spread: 0
    with probability ``1 - P``, else exponential with mean ``theta`` (Allen-Cunneen,
    ``service_scv``). A backlog adds a fixed delay: the windowed mean of ``D`` less
    ``BACKLOG_FACTOR * P * theta``, when positive. Without a backlog the spread's
    tail past the timeout is dropped; with one the FIFO has dropped it already.

    With a ``profile`` the SLO attainment takes service times from its measured
    distribution (``work_q`` scaled to each portion's mean) instead of the
    two-moment fit; the histogram and percentiles keep the fit. With ``llm`` a request
    is within the SLO when it meets both its TTFT and its TPOT objective
    (``llm.LlmScoring``); the histogram stays end-to-end latency.

    Returns:
        The summary; percentiles per row of ``row_steps`` seconds.
    """
    edges = LATENCY_EDGES_S
    row_cdf = np.zeros((n_rows, edges.size))
    if not records.portions:
        counts = np.zeros(edges.size - 1)
        nan, zero = np.full(n_rows, np.nan), np.zeros(n_rows)
        none = None if llm is None else 0.0
        return LatencySummary(
            0.0, 0.0, 0.0, float("nan"), counts, nan, nan.copy(), zero, zero.copy(), none, none
        )
    # Copies (np.array): the columns are views of the queue's own arrays.
    step = np.array(records.step, dtype=np.int64)
    n = np.array(records.count, dtype=float)
    servers = np.maximum(np.array(records.servers, dtype=float), 1.0)
    offered = centred_mean(np.array(records.offered_s, dtype=float), rate_window_s)
    rho = np.minimum(offered / servers, SPREAD_RHO_CAP)
    k = servers[step]
    m = np.array(records.size_s, dtype=float) * np.array(records.per_size_s, dtype=float)[step]
    pe = erlang_c(k, rho[step] * k)
    pe[pe < NO_WAIT] = 0.0  # skips the wait term's work where no request waits
    theta = 0.5 * (1.0 + service_scv) * np.maximum(m, 1e-12) / (k * (1.0 - rho[step]))
    delay = np.array(records.wait_s, dtype=float)
    # A retry enters service ahead of the queue, its wait counted from its first
    # arrival: that wait is its own, not the queue's, so it sets its own delay and
    # does not spread over the first tries of the window around it.
    again = np.fromiter(records.retried, dtype=np.int64, count=len(records.retried))
    firsts = n.copy()
    firsts[again] = 0.0
    d0 = backlog_delay(step, firsts, delay, servers.size, rate_window_s)
    d0[again] = delay[again]
    d0 = np.maximum(d0 - BACKLOG_FACTOR * pe * theta, 0.0)
    tail = pe * np.exp(-np.maximum(timeout_s - d0, 0.0) / theta)
    backlog = d0 > 1e-9
    p_drop = np.where(backlog, 0.0, tail)
    scale = np.where(backlog, 1.0 / np.maximum(1.0 - tail, 1e-12), 1.0)
    keep = n * (1.0 - p_drop)
    shift, phases = service_phases(service_scv)
    start = d0 + shift * m  # the fixed part of the service time, if any
    f_slo = np.zeros(n.size)
    for weight, mean in phases:
        f_slo += weight * latency_cdf(np.asarray(slo_s), start, pe, theta, mean * m)
    ttft_within = tpot_within = None
    if llm is not None and profile is not None and profile.context_q is not None:
        ones = np.ones(n.size)
        budget = llm.ttft_budget_s(profile.context_q)
        ttft = mean_wait_cdf(-d0, ones, budget, pe, theta, chunk)
        ttft = np.minimum(ttft * scale, 1.0)
        per_second = (records.busy.tolist(), records.arrivals.tolist(), records.servers.tolist())
        tpot_ok = tpot_ok_per_second(llm, *per_second, profile)
        ok = tpot_ok[step]
        ttft_within = float((n * ttft).sum())
        tpot_within = float((keep * ok).sum())
        f_slo = ttft * ok
    else:
        if profile is not None:
            f_slo = mean_wait_cdf(slo_s - d0, -m, profile.work_q, pe, theta, chunk)
        f_slo = np.minimum(f_slo * scale, 1.0)
        if slo_s > timeout_s:
            f_slo = np.maximum(f_slo - p_drop, 0.0)
    rows = np.minimum(step // max(row_steps, 1), n_rows - 1)
    coefficients = [(w, cdf_coefficients(pe, theta, mean * m)) for w, mean in phases]
    for lo in range(0, n.size, chunk):
        hi = min(lo + chunk, n.size)
        cdf = np.zeros((hi - lo, LATENCY_EDGES_S.size))
        for s0 in range(lo, hi, _BLOCK):  # blocks that stay in the cache, element by element
            s1 = min(s0 + _BLOCK, hi)
            block = cdf[s0 - lo : s1 - lo]
            parts = [
                (w, (a[s0:s1], b[s0:s1], m_[s0:s1], t_[s0:s1]))
                for w, (a, b, m_, t_) in coefficients
            ]
            cut = underflow_cut(start[s0:s1], [coef for _, coef in parts])
            for i, (weight, (a, b, inv_m, inv_t)) in enumerate(parts):
                if i == 0 and weight == 1.0:  # the block is still 0, and 0.0 + x is x
                    cdf_on_edges(start[s0:s1], a, b, inv_m, inv_t, cut, into=block[:, :cut])
                    block[:, cut:] = 1.0  # past the cut the CDF is exactly 1
                    continue
                part = cdf_on_edges(start[s0:s1], a, b, inv_m, inv_t, cut)
                if i == 0:  # as above (no part is -0.0, so assigning it is adding it to 0)
                    block[:, :cut] = weight * part
                    block[:, cut:] = weight * 1.0
                    continue
                block[:, :cut] += part if weight == 1.0 else weight * part
                if cut < LATENCY_EDGES_S.size:  # past the cut ``part`` is exactly 1
                    block[:, cut:] += 1.0 if weight == 1.0 else weight * 1.0
            np.multiply(block, scale[s0:s1, None], out=block)
            np.minimum(block, 1.0, out=block)
            block[:, -1] = 1.0
            block *= keep[s0:s1, None]
        r = rows[lo:hi]
        starts = np.concatenate([[0], np.flatnonzero(r[1:] != r[:-1]) + 1])
        row_cdf[r[starts]] += np.add.reduceat(cdf, starts, axis=0)
    counts = np.diff(row_cdf.sum(axis=0))
    completed = float(keep.sum())
    mean = float((keep * (delay + m)).sum() / completed) if completed > 0 else float("nan")
    return LatencySummary(
        completed,
        float((n * f_slo).sum()),
        float((n * p_drop).sum()),
        mean,
        counts,
        row_quantile(row_cdf, 0.5),
        row_quantile(row_cdf, 0.99),
        np.asarray(np.bincount(rows, weights=keep, minlength=n_rows)[:n_rows], dtype=float),
        np.asarray(np.bincount(rows, weights=n * f_slo, minlength=n_rows)[:n_rows], dtype=float),
        ttft_within,
        tpot_within,
    )
