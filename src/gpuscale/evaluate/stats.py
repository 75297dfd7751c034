"""Means with confidence intervals over seeds, and a curve's cost at a target attainment.

One seed's result is one draw of cold starts, fault targets and (for
generators) arrivals; a difference smaller than the spread between seeds is no
difference. Every figure the harness reports is therefore a mean over seeds with
a 95 % Student-t interval, and a policy's cost at a target attainment is read off
its cost-against-attainment curve by ``reading_at_target``, which also says
when the curve only bounds that cost.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
"""Coverage of every interval the harness reports."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """A mean over seeds and its confidence interval.

    Attributes:
        mean: The mean of the values.
        low: Lower end of the 95 % interval; None with fewer than two values.
        high: Upper end; None with fewer than two values.
        n: How many values.
    """

    mean: float
    low: float | None
    high: float | None
    n: int

    def interval(self) -> list[float | None]:
        """The interval as ``[low, high]``, as ``results.json`` writes it.

        Returns:
            The two ends (None where unknown).
        """
        return [self.low, self.high]


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """The mean and its Student-t confidence interval.

    Args:
        values: One value per seed (at least one).
        confidence: Coverage of the interval, 0 to 1.

    Returns:
        The estimate; the interval is the mean itself when every value is equal, and
        unknown (None) for one value.

    Raises:
        ValueError: No values.
    """
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("mean_ci needs at least one value")
    mean = float(data.mean())
    if data.size < 2:
        return Estimate(mean, None, None, 1)
    sem = float(data.std(ddof=1)) / math.sqrt(data.size)
    half = float(stats.t.ppf(0.5 + confidence / 2.0, data.size - 1)) * sem
    return Estimate(mean, mean - half, mean + half, int(data.size))


BOOTSTRAP_RESAMPLES = 10_000
"""Resamples of the seeds behind each proportion's interval (``proportion_ci``)."""


def proportion_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """The mean of per-seed proportions and a percentile bootstrap interval over seeds.

    A Student-t interval around an attainment of 0.995 over two seeds can reach past
    100 %; the bootstrap's ends are means of resampled seeds, so they stay within the
    seeds' own range, hence within [0, 1]. The resampling is seeded, so a report is
    reproducible.

    Args:
        values: One proportion (0 to 1) per seed, at least one.
        confidence: Coverage of the interval, 0 to 1.

    Returns:
        The estimate; unknown (None) ends for one value.

    Raises:
        ValueError: No values.
    """
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("proportion_ci needs at least one value")
    mean = float(data.mean())
    if data.size < 2:
        return Estimate(mean, None, None, 1)
    rng = np.random.default_rng(0)
    means = data[rng.integers(0, data.size, (BOOTSTRAP_RESAMPLES, data.size))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Estimate(mean, min(float(low), mean), max(float(high), mean), int(data.size))


def cost_at_target(
    costs: Sequence[float], attainments: Sequence[float], target: float
) -> float | None:
    """The least cost at which a curve reaches ``target`` (``reading_at_target``'s cost).

    Returns:
        The cost; the cheapest point's when that one already reaches the target
        (then only an upper bound); None when no point does.
    """
    return reading_at_target(costs, attainments, target)[0]


UPPER = "upper"
"""``reading_at_target``'s mark of a cost that only bounds the cost at the target from above."""


def reading_at_target(
    costs: Sequence[float], attainments: Sequence[float], target: float
) -> tuple[float | None, str | None]:
    """The least cost at which a curve reaches ``target``, interpolated monotonically.

    The points are sorted by cost and each attainment replaced by the best one at
    that cost or less (a policy that can meet an attainment cheaply can meet it at
    any higher cost), which makes the curve non-decreasing; the cost is read off it
    by linear interpolation between the two points around the target. A curve whose
    cheapest point already exceeds the target does not bracket it: that point's
    cost is all it shows, and the cost at the target may be lower.

    Args:
        costs: Cost of each point (GPU-hours).
        attainments: Attainment of each point, 0 to 1.
        target: The attainment to reach.

    Returns:
        The cost and None when the curve brackets the target; the cheapest point's
        cost and ``UPPER`` when even that point exceeds it; (None, None) when no
        point reaches it.
    """
    _, cost, envelope, j = _crossing(costs, attainments, target)
    if j is None:
        return None, None
    if j == 0:
        return float(cost[0]), (UPPER if envelope[0] > target else None)
    c0, c1, a0, a1 = cost[j - 1], cost[j], envelope[j - 1], envelope[j]
    return float(c0 + (target - a0) / (a1 - a0) * (c1 - c0)), None


def _crossing(
    costs: Sequence[float], attainments: Sequence[float], target: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int | None]:
    """The curve as ``reading_at_target`` reads it.

    Returns:
        (the points' order by cost, their costs in that order, the attainment envelope in
        that order, the first position in it that reaches ``target`` or None).
    """
    order = np.argsort(np.asarray(costs, dtype=np.float64), kind="stable")
    cost = np.asarray(costs, dtype=np.float64)[order]
    envelope = np.maximum.accumulate(np.asarray(attainments, dtype=np.float64)[order])
    reached = np.flatnonzero(envelope >= target)
    return order, cost, envelope, (int(reached[0]) if reached.size else None)


def bracketing_points(
    costs: Sequence[float], attainments: Sequence[float], target: float
) -> tuple[int, int] | None:
    """The two points ``reading_at_target`` interpolates between, cheaper first.

    Returns:
        Their indices into ``costs``; None when the reading is not an interpolation (no
        point reaches the target, or the cheapest already does).
    """
    order, _, _, j = _crossing(costs, attainments, target)
    if not j:
        return None
    return int(order[j - 1]), int(order[j])
