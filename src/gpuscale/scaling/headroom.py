"""The headroom a demand's own history calls for: a floor learned from its bursts.

A forecast follows the level; a reactive rule follows a rise a cold start late.
Neither holds capacity for a burst that arrives faster than a pod starts, and a
per-replica knob tuned per trace only buys such headroom everywhere at once. What
a deployment can learn instead is how far its demand has jumped above its recent
level within the time new capacity takes to serve: at each decision, the mean of
the demand offered (``hybrid`` passes the arrival rate times the service time where
it has both, else what its reactive need reads: in service, the queue at its weight
and its growth) over the last ``burst_window_s``, over its mean in the
``baseline_window_s`` that ended one lead time ago (a naive forecast made when
capacity for now had to be asked for; a mean, since the lowest point of a noisy
window would read noise as a burst). A baseline that ended where the burst window
starts would take in a crowd's own rise and read the crowd lower than it came.
Those ratios go into a histogram, each weighted by that window's demand (a
request-weighted record, as the SLO is), and the floor is the ratio at the target
attainment's quantile times the level now:
the capacity that, had it stood at every past decision, would have held the burst
windows for that share of the requests. The level is the lower of the baseline's
mean and the demand now: during a burst the level it started from (not the burst
again), and after one the demand as it decays (not the burst's tail in the mean).
That level lags a step: a load that returns at once after a dip is measured
against the dip for a lead time and a baseline window. ``hybrid`` therefore
applies the quantile to the load now while a rise stands beyond the highest
ratio recorded (``highest``), until it is back within the quantile.

A ratio read from a quiet level and applied to a level still high after a burst
would hold a multiple of the burst itself, so the floor is capped by the demand's
own quantile at the same share: a second, sparse histogram of the burst windows'
demand, request-weighted too. Both histograms forget: every weight halves over the
memory ``hybrid`` gives them (a day), so a burst seen today holds capacity for its
like tomorrow, and one from last week no longer does.

What stands carries a burst only until capacity asked for at its start serves,
and its requests may wait their budget meanwhile; so the floor holds the share of
the burst's load that keeps the longest wait within the budget by then
(``lead_share``: the lead over the lead and the wait).

With no burst in its history the ratio stays near one and the floor under the
reactive need; after one burst the floor holds capacity for its like, as a
static fleet sized for it would, but scaled to the level of the moment. Both
histograms are bounded (``RATIO_EDGES``; demand bins visited, an eighth of a
doubling apart, ``LEVEL_BINS_PER_DOUBLING``), so the state stays small however
long the history.
"""

import math
from collections.abc import Callable, Sequence

from gpuscale.scaling.poisson import poisson_cdf, poisson_pmf
from gpuscale.scaling.policy import Series

RATIO_EDGES: tuple[float, ...] = tuple(2.0 ** (k / 8.0) for k in range(41))
"""Upper edges of the ratio histogram's bins: eighths of a doubling, 1 to 32 (a ratio
above 32 counts in the last bin)."""


def burst_ratio(
    points: Series,
    now: float,
    burst_window_s: float,
    baseline_window_s: float,
    lead_s: float = 0.0,
) -> tuple[float, float, float] | None:
    """The mean over the last burst window against the mean of the window before it.

    A mean, not the window's peak: the peak of a few noisy samples reads their
    scatter as a burst, and the floor would hold it at every decision.

    Args:
        points: Demand as (time, value) points, oldest first.
        now: The decision's time, seconds.
        burst_window_s: The burst window, seconds.
        baseline_window_s: The window whose mean is the baseline, seconds.
        lead_s: How long new capacity takes to serve (``baseline_end``): the
            baseline ends this long ago, or where the burst window starts if later.

    Returns:
        (ratio, the burst window's mean demand, the baseline's mean); None until at least
        half the baseline window has points, or while their mean is zero.
    """
    recent = [v for t, v in points if t > now - burst_window_s]
    edge = baseline_end(now, burst_window_s, lead_s)
    before = [(t, v) for t, v in points if edge - baseline_window_s < t <= edge]
    if not recent or not before or before[0][0] > edge - baseline_window_s / 2.0:
        return None  # less than half the baseline window seen: no level to measure against
    base = sum(v for _, v in before) / len(before)
    if base <= 0:
        return None
    burst = max(sum(recent) / len(recent), 0.0)
    return burst / base, burst, base


def baseline_end(now: float, burst_window_s: float, lead_s: float) -> float:
    """Where the baseline window ends: one lead time ago, or at the burst window's start.

    Capacity asked for at the level of ``lead_s`` ago is what serves now, so a burst
    is how far demand rose within that lead: a baseline that ended at the burst
    window's start would take in a crowd's first minutes (a one-minute rise, read
    by a one-minute window) and read the crowd as lower than it came.
    """
    return now - max(burst_window_s, lead_s)


def history_to_read_s(burst_window_s: float, share: float) -> float:
    """Seconds of history before the floor's quantile at ``share`` can be read.

    Among ``n`` windows the chance that the next one's burst is higher than all of
    them is about ``1 / (n + 1)``, so a quantile at ``share`` is read from at least
    ``1 / (1 - share)`` windows: 100 one-minute windows (100 minutes) at 0.99. With
    less, the history has not yet shown the bursts the target must hold for.
    """
    return burst_window_s / (1.0 - share)


def level(
    points: Series,
    now: float,
    burst_window_s: float,
    baseline_window_s: float,
    lead_s: float = 0.0,
) -> float | None:
    """The level a floor scales: the baseline window's mean, or the demand now if lower.

    Returns:
        The level, or None without points.
    """
    if not points:
        return None
    edge = baseline_end(now, burst_window_s, lead_s)
    window = [v for t, v in points if edge - baseline_window_s < t <= edge]
    latest = points[-1][1]
    return min(sum(window) / len(window), latest) if window else latest


def record(weights: Sequence[float], ratio: float, weight: float) -> tuple[float, ...]:
    """The histogram with one more ratio counted at ``weight``.

    Args:
        weights: Weight per ``RATIO_EDGES`` bin (empty: none yet).
        ratio: The burst ratio.
        weight: Its weight (the burst window's demand).

    Returns:
        The new weights, one per bin.
    """
    out = list(weights) or [0.0] * len(RATIO_EDGES)
    index = next((i for i, edge in enumerate(RATIO_EDGES) if ratio <= edge), len(out) - 1)
    out[index] += weight
    return tuple(out)


def within_bin(lower: float, upper: float, below: float, weight: float, wanted: float) -> float:
    """Where the quantile with ``wanted`` weight below it lies in a bin.

    Log-linearly between the bin's edges (they are a constant ratio apart), as
    Prometheus's ``histogram_quantile`` reads linearly within a bucket: the bin's
    upper edge would overstate the quantile by up to a bin, an eighth of a doubling
    (9 %), and the floor with it.

    Args:
        lower: The bin's lower edge (> 0).
        upper: Its upper edge.
        below: The weight in the bins below it.
        weight: Its own weight (> 0).
        wanted: The weight below the quantile.

    Returns:
        The quantile.
    """
    part = min(max((wanted - below) / weight, 0.0), 1.0)
    return float(lower * (upper / lower) ** part)


def quantile(weights: Sequence[float], share: float) -> float | None:
    """The ratio below which ``share`` of the recorded weight lies, read within its bin.

    In the first bin (ratios of 1 and below) it is 1: a load at or under its
    baseline calls for no headroom.

    Returns:
        The ratio, or None while nothing is recorded.
    """
    total = sum(weights)
    if total <= 0:
        return None
    wanted = share * total - 1e-12
    running = 0.0
    for i, (edge, w) in enumerate(zip(RATIO_EDGES, weights, strict=True)):
        running += w
        if running >= wanted:
            if i == 0:
                return edge
            return within_bin(RATIO_EDGES[i - 1], edge, running - w, w, wanted)
    return RATIO_EDGES[-1]


def highest(weights: Sequence[float]) -> float | None:
    """The upper edge of the highest bin with weight: the largest ratio recorded.

    Returns:
        The ratio, or None while nothing is recorded.
    """
    top = max((i for i, w in enumerate(weights) if w > 0), default=None)
    return None if top is None else RATIO_EDGES[top]


LEVEL_BINS_PER_DOUBLING = 8
"""Bins per doubling of the demand histogram: a floor read within 9 % of the demand."""


def level_bin(demand: float) -> int:
    """The demand histogram's bin holding ``demand`` (> 0).

    Bin ``k`` is ``(2^((k-1)/8), 2^(k/8)]``.
    """
    return math.ceil(math.log2(demand) * LEVEL_BINS_PER_DOUBLING - 1e-9)


def record_level(
    levels: Sequence[tuple[int, float]], demand: float, weight: float
) -> tuple[tuple[int, float], ...]:
    """The sparse demand histogram with one more reading counted at ``weight``.

    Sparse (``(bin, weight)`` pairs, bins ascending) since a deployment's demand
    visits few of the bins a histogram of every scale would hold.

    Returns:
        The new pairs; ``levels`` unchanged when ``demand`` is not positive.
    """
    if demand <= 0 or weight <= 0:
        return tuple(levels)
    out = dict(levels)
    k = level_bin(demand)
    out[k] = out.get(k, 0.0) + weight
    return tuple(sorted(out.items()))


def level_quantile(levels: Sequence[tuple[int, float]], share: float) -> float | None:
    """The demand below which ``share`` of the recorded weight lies, read within its bin.

    Returns:
        The demand, or None while nothing is recorded.
    """
    total = sum(w for _, w in levels)
    if total <= 0:
        return None
    wanted = share * total - 1e-12
    running = 0.0
    for k, w in levels:
        running += w
        if running >= wanted:
            upper = 2.0 ** (k / LEVEL_BINS_PER_DOUBLING)
            lower = 2.0 ** ((k - 1) / LEVEL_BINS_PER_DOUBLING)
            return within_bin(lower, upper, running - w, w, wanted)
    return float(2.0 ** (levels[-1][0] / LEVEL_BINS_PER_DOUBLING))


def forget(weights: Sequence[float], factor: float) -> tuple[float, ...]:
    """Every weight times ``factor`` (the memory's decay since the last decision)."""
    return tuple(w * factor for w in weights)


def forget_levels(
    levels: Sequence[tuple[int, float]], factor: float
) -> tuple[tuple[int, float], ...]:
    """The sparse histogram decayed by ``factor``, less bins that no longer count.

    A bin under a millionth of the total is dropped, so a long history of levels
    visited once keeps the state small.
    """
    total = sum(w for _, w in levels) * factor
    return tuple((k, w * factor) for k, w in levels if w * factor > 1e-6 * total)


def late_share(servers: int, load: float, service_s: float, wait_s: float) -> float:
    """The share of requests that wait longer than ``wait_s`` for one of ``servers`` slots.

    Erlang's delay formula (M/M/n): the chance a request waits at all is Erlang C,
    from Erlang B, itself a ratio of Poisson terms (``B = P(X = n) / P(X <= n)`` for
    ``X ~ Poisson(load)``); a request that waits, waits longer than ``wait_s`` with
    chance ``exp(-(n - load) wait_s / service_s)``.

    Args:
        servers: Request slots (``n``).
        load: Requests in service on average (arrival rate x service time).
        service_s: Mean service time, seconds.
        wait_s: The wait a request may have.

    Returns:
        The share, 1 when the slots cannot keep up (``n <= load``).
    """
    if servers <= load:
        return 1.0
    blocked = poisson_pmf(servers, load) / max(poisson_cdf(servers, load), 1e-300)
    waits = servers * blocked / (servers - load * (1.0 - blocked))
    return min(waits * math.exp(-(servers - load) * wait_s / service_s), 1.0)


def slots_for(load: float, service_s: float, wait_s: float, miss: float) -> int:
    """The fewest request slots that keep the share waiting beyond ``wait_s`` within ``miss``.

    ``late_share`` falls as slots are added, so the answer is found by doubling the
    slots above the load, then bisecting: a few dozen evaluations at any load.

    Returns:
        Slots (0 for no load).
    """
    if load <= 0:
        return 0
    low = math.floor(load)  # too few: late_share is 1 at or below the load
    step = 1
    while late_share(low + step, load, service_s, wait_s) > miss:
        low, step = low + step, step * 2
    high = low + step
    while high - low > 1:
        mid = (low + high) // 2
        if late_share(mid, load, service_s, wait_s) > miss:
            low = mid
        else:
            high = mid
    return high


def staffed_replicas(load: float, staffing: tuple[float, float, float], share: float) -> int:
    """Replicas whose slots keep the share of requests waiting beyond the wait within ``1 - share``.

    Args:
        load: Requests in service on average.
        staffing: A pod's slots, the service time and the wait a request may have.
        share: The share of requests that must not wait longer.

    Returns:
        Replicas (``slots_for`` over a pod's slots).
    """
    per_pod, service_s, wait_s = staffing
    return math.ceil(slots_for(load, service_s, wait_s, 1.0 - share) / per_pod - 1e-9)


def lead_share(lead_s: float, wait_s: float) -> float:
    """The share of a burst's load that standing capacity must serve until more comes.

    Capacity asked for at a burst's start serves ``lead_s`` later; until then the
    burst, a load of ``D`` (requests in service it needs), is served by what stands,
    ``c``. Its queue grows at ``D - c``, so a request arriving ``t`` into the lead waits
    ``(D - c) t / c``, the longest at the lead's end: within ``wait_s`` when
    ``c >= D lead / (lead + wait)``. A fluid bound: the floor staffs that load for its
    own scatter (``staffed_replicas``), and the backlog left at the lead's end is the
    reactive need's to serve, as any queue. Where requests may wait long against the
    lead (a diffusion model's minutes of SLO) the floor holds much less than the burst;
    where they may wait seconds, nearly all of it.

    Returns:
        ``lead_s / (lead_s + wait_s)``; 1 without a lead (the burst window alone then
        stands for the time capacity takes).
    """
    if lead_s <= 0:
        return 1.0
    return lead_s / (lead_s + max(wait_s, 0.0))


def floor_replicas(
    weights: Sequence[float],
    share: float,
    level: float | None,
    size: Callable[[float], int],
    cap: float | None = None,
) -> int:
    """Replicas the learned headroom holds: the quantile ratio times the level, at most ``cap``.

    ``cap`` is the demand itself at the same quantile (``level_quantile``): a ratio
    read from a quiet level and applied while demand is still high after a burst
    would otherwise hold a multiple of the highest demand ever seen.

    The floor's demand is already the burst the history calls for, so ``size`` turns
    it into replicas as the policy sizes any load: staffed for that demand's own
    scatter where a pod's slots are known (``staffed_replicas``), else at the
    policy's ``per_replica``.

    Returns:
        The floor, 0 while nothing is recorded or the level is unknown.
    """
    ratio = quantile(weights, share)
    if ratio is None or level is None or level <= 0:
        return 0
    return size(ratio * level if cap is None else min(ratio * level, cap))
