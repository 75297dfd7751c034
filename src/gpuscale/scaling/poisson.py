"""The Poisson lower tail, in the standard library: the straggler test's one statistic.

``scaling.health`` calls a pod a straggler only when so few completions are
improbable at its peers' rate; that is ``P(X <= k)`` for a Poisson count. It is
computed here with ``math`` alone, so the controller needs no scipy.
"""

import math

_NEGLIGIBLE = 1e-17
"""A term below this share of the running sum no longer changes a double."""


def poisson_cdf(k: int, mean: float) -> float:
    """P(X <= k) for X ~ Poisson(mean), in the standard library.

    The terms are summed from ``k`` away from the mode, where they fall
    geometrically, so the sum stops after a few terms past the first that no
    longer counts. The tail on the far side of the mode from ``k`` is the one
    summed, so the result keeps its precision where it is small.

    Args:
        k: Events seen (below 0 gives 0).
        mean: Expected events (0 or less gives 1).

    Returns:
        The probability, from 0 to 1.
    """
    if k < 0:
        return 0.0
    if mean <= 0:
        return 1.0
    if k < mean:  # below the mode: terms fall as i falls
        i, term = k, poisson_pmf(k, mean)
        total = term
        while i > 0 and term > total * _NEGLIGIBLE:
            term *= i / mean
            i -= 1
            total += term
        return min(total, 1.0)
    i, term = k + 1, poisson_pmf(k + 1, mean)  # above the mode: terms fall as i rises
    total = term
    while term > total * _NEGLIGIBLE:
        i += 1
        term *= mean / i
        total += term
    return max(1.0 - total, 0.0)


def poisson_pmf(i: int, mean: float) -> float:
    """P(X = i) for X ~ Poisson(mean > 0), in logarithms so a large ``i`` cannot overflow."""
    return math.exp(-mean + i * math.log(mean) - math.lgamma(i + 1))
