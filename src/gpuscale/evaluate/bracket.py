"""Reading a knob sweep's curves at the target, and extending a sweep that misses it.

A policy's cost at the target attainment is read off its cost-against-attainment
curve (``stats.reading_at_target``) on each seed's own curve; the headline is the
mean of those readings and its interval their Student-t interval, one estimator for
both, so the headline always lies inside its interval. Only when some seed's curve
never reaches the target does the headline fall back to the reading on the mean
curve, with no interval. That is a reading only when the curve
brackets the target: when even the cheapest swept point exceeds the target, the
cheapest point's cost is an upper bound, and a fixed relative range (0.6 to 1.4 x
the fair value) leaves some policies there. ``next_value`` says how far past its
range a sweep goes next; ``sweep.run_sweep`` runs that value on the same seeds,
for at most ``MAX_ROUNDS`` rounds, and what is still unbracketed is reported as a
bound (``PolicySummary.gpu_hours_at_target_bound``).

The cheap side is extended while the mean curve or any seed's curve is
unbracketed and still meets the target at the knob's cheap end: the interval comes
from the seeds' readings, and one seed's bound among them would narrow it falsely.
A curve whose knob already crosses the target but whose cost rises again past the
crossing (so its cheapest point still exceeds the target) is not extended further:
more steps only lower its attainment. Its cost may still dip between its cheapest
point and the next swept value towards the cheap end (KEDA's and KPA's curves on the
generators do: set too lean, they spend more), so that gap is refined as a bracketed
reading's is (``refine_value``); what is left is a bound. The expensive side is
extended only while the mean curve never reaches the target and the unlimited fleet
(the ceiling) does: a target no fleet meets is not worth the runs.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuscale.evaluate.knobs import Knob
from gpuscale.evaluate.stats import (
    UPPER,
    Estimate,
    bracketing_points,
    mean_ci,
    reading_at_target,
)

MAX_ROUNDS = 6
"""Extension and refinement rounds per sweep at most (each runs one more knob value
on every seed)."""

REFINE_SHARE = 0.03
"""A bracketed reading is refined while its two points' costs differ by more than this
share of the dearer one."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One run's point on its policy's curve.

    Attributes:
        seed: The run's seed.
        value: The knob's value (None for a policy without a knob).
        cost: GPU-hours.
        attainment: Share of requests within the SLO; None when none arrived.
    """

    seed: int
    value: float | None
    cost: float
    attainment: float | None


@dataclass(frozen=True, slots=True)
class AtTarget:
    """A policy's cost at the target on its mean curve and on each seed's curve.

    Attributes:
        mean: On the mean curve; None when it never reaches the target.
        bound: ``stats.UPPER`` when ``mean`` only bounds the cost from above.
        per_seed: Seed to its own curve's cost (None when it never reaches).
        seeds_bounded: Seeds whose own cost is only an upper bound.
    """

    mean: float | None
    bound: str | None
    per_seed: dict[int, float | None]
    seeds_bounded: int = 0

    def headline(self) -> tuple[Estimate | None, str | None]:
        """The reported cost at the target, with its interval from the same estimator.

        Returns:
            The mean of the seeds' readings with its interval, marked ``stats.UPPER``
            when any seed's reading is only a bound (a mean of upper bounds bounds the
            mean); when some seed never reaches the target, the mean curve's reading
            with no interval (n = 0) and its own mark; (None, None) when neither exists.
        """
        readings = list(self.per_seed.values())
        if readings and all(r is not None for r in readings):
            known = [r for r in readings if r is not None]
            return mean_ci(known), (UPPER if self.seeds_bounded else None)
        if self.mean is None:
            return None, None
        return Estimate(self.mean, None, None, 0), self.bound


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _value_means(samples: Sequence[Sample]) -> list[tuple[float | None, float, float]]:
    """The mean over seeds of each knob value's cost and attainment.

    Returns:
        (knob value, cost, attainment) per knob value whose runs have an attainment.
    """
    by_value: dict[float | None, list[Sample]] = {}
    for s in samples:
        by_value.setdefault(s.value, []).append(s)
    out = []
    for value, runs in by_value.items():
        known = [s.attainment for s in runs if s.attainment is not None]
        if known:
            out.append((value, _mean([s.cost for s in runs]), _mean(known)))
    return out


def mean_curve(samples: Sequence[Sample]) -> list[tuple[float, float]]:
    """The mean over seeds of each knob value's cost and attainment.

    Returns:
        (cost, attainment) per knob value whose runs have an attainment.
    """
    return [(cost, attainment) for _, cost, attainment in _value_means(samples)]


def seed_curves(
    samples: Sequence[Sample], seeds: Sequence[int]
) -> dict[int, list[tuple[float, float]]]:
    """Each seed's own curve.

    Returns:
        Seed to its (cost, attainment) points, those with an attainment.
    """
    return {
        seed: [
            (s.cost, s.attainment) for s in samples if s.seed == seed and s.attainment is not None
        ]
        for seed in seeds
    }


def _read(curve: Sequence[tuple[float, float]], target: float) -> tuple[float | None, str | None]:
    if not curve:
        return None, None
    return reading_at_target([c for c, _ in curve], [a for _, a in curve], target)


def at_target(samples: Sequence[Sample], seeds: Sequence[int], target: float) -> AtTarget:
    """GPU-hours at ``target`` on the mean curve and on each seed's own curve.

    Returns:
        The readings, with whether each is only a bound.
    """
    mean, bound = _read(mean_curve(samples), target)
    per_seed: dict[int, float | None] = {}
    bounded = 0
    for seed, curve in seed_curves(samples, seeds).items():
        per_seed[seed], mark = _read(curve, target)
        bounded += mark == UPPER
    return AtTarget(mean, bound, per_seed, bounded)


def next_value(
    knob: Knob, samples: Sequence[Sample], seeds: Sequence[int], target: float, *, reachable: bool
) -> float | None:
    """The knob value a sweep runs next so that its curves bracket ``target``.

    Args:
        knob: The policy's knob.
        samples: Every run of the policy so far.
        seeds: The sweep's seeds.
        target: The attainment the curves are compared at.
        reachable: Whether the unlimited fleet reaches ``target`` (else the
            expensive side is never extended).

    Returns:
        One geometric step past the cheap end when a curve's cheapest point exceeds
        the target and its attainment at that end still meets it; past the expensive
        end when the mean curve never reaches it and ``reachable``; None when the
        curves bracket the target, or the knob's limit is reached.
    """
    values = [s.value for s in samples if s.value is not None]
    if not values:
        return None
    high, low = max(values), min(values)
    cheap_end = high if knob.cheap_up else low
    if _open_cheap_side(samples, seeds, target, cheap_end):
        return knob.beyond(cheap_end, cheaper=True)
    if reachable and _read(mean_curve(samples), target)[0] is None:
        return knob.beyond(low if knob.cheap_up else high, cheaper=False)
    return refine_value(knob, samples, target)


def refine_value(knob: Knob, samples: Sequence[Sample], target: float) -> float | None:
    """A knob value between two points of the mean curve where its reading may move.

    A curve that falls off a cliff between two swept values (0.9996 to 0.25 within
    one step) is read by a straight line between them, which puts the reading next to
    the dearer point whatever the curve does in between; a curve whose cheapest point
    still exceeds the target, with a dearer point on the knob's cheap side of it, may
    dip below that cost in between. While the two points' costs differ by more than
    ``REFINE_SHARE`` of the dearer one, the value halfway between them (geometric for
    a relative knob) is run on every seed.

    Returns:
        The value, or None when the two points are close enough in cost, when there is
        no such pair (no point reaches the target, or the cheapest is at the knob's
        cheap end), or when the knob has no value left between them.
    """
    points = [(v, c, a) for v, c, a in _value_means(samples) if v is not None]
    pair = _refined_pair(knob, points, target)
    if pair is None:
        return None
    (v0, c0, _), (v1, c1, _) = pair
    if c1 - c0 <= REFINE_SHARE * c1:
        return None
    mid = (v0 + v1) / 2 if knob.integer or v0 * v1 <= 0 else math.sqrt(v0 * v1)
    mid = float(round(mid)) if knob.integer else round(mid, 9)
    if not knob.valid(mid) or any(mid == v for v, _, _ in points):
        return None
    return mid


Point = tuple[float, float, float]
"""A knob value with its mean cost and attainment over the seeds."""


def _refined_pair(knob: Knob, points: Sequence[Point], target: float) -> tuple[Point, Point] | None:
    """The two points ``refine_value`` runs between, cheaper first.

    Returns:
        The two points the reading interpolates between; or, where the cheapest point
        still exceeds the target (a bound), it and the nearest swept value on the
        knob's cheap side of it (dearer, since the other is the cheapest); else None.
    """
    costs, attainments = [c for _, c, _ in points], [a for _, _, a in points]
    pair = bracketing_points(costs, attainments, target)
    if pair is not None:
        return points[pair[0]], points[pair[1]]
    if reading_at_target(costs, attainments, target)[1] != UPPER:
        return None
    cheapest = points[costs.index(min(costs))]  # the point the bound is read at
    value = cheapest[0]
    leaner = [p for p in points if (p[0] > value if knob.cheap_up else p[0] < value)]
    if not leaner:
        return None
    return cheapest, min(leaner, key=lambda p: abs(p[0] - value))


def _open_cheap_side(
    samples: Sequence[Sample], seeds: Sequence[int], target: float, end: float
) -> bool:
    """Whether a curve (the mean or a seed's) is unbracketed yet meets the target at ``end``.

    There a step further may find a cheaper point below the target. A curve already
    below the target at the knob's cheap ``end`` whose cheapest point still exceeds it
    (the cost rising again past the knob's crossing) stays a bound: further steps only
    lower its attainment.
    """
    at_end = [s for s in samples if s.value == end and s.attainment is not None]
    curves = [(mean_curve(samples), [s.attainment for s in at_end if s.attainment is not None])]
    for seed, curve in seed_curves(samples, seeds).items():
        curves.append(
            (curve, [s.attainment for s in at_end if s.seed == seed and s.attainment is not None])
        )
    for curve, end_attainment in curves:
        if not end_attainment or _read(curve, target)[1] != UPPER:
            continue
        if _mean(end_attainment) >= target:
            return True
    return False


def extension_values(
    knobs: Mapping[str, Knob],
    samples: Mapping[str, Sequence[Sample]],
    ceiling: Sequence[float | None],
    seeds: Sequence[int],
    target: float,
) -> dict[str, float]:
    """The knob value each policy's sweep runs next (``next_value``).

    Args:
        knobs: Each swept policy's knob (policies without one, and the searched
            oracle, left out).
        samples: Every run so far, by policy.
        ceiling: The unlimited fleet's attainment on each seed.
        seeds: The sweep's seeds.
        target: The attainment the curves are compared at.

    Returns:
        Policy to its next value, for the policies whose curves need one.
    """
    known = [a for a in ceiling if a is not None]
    reachable = bool(known) and sum(known) / len(known) >= target
    out = {}
    for name, knob in knobs.items():
        value = next_value(knob, samples.get(name, ()), seeds, target, reachable=reachable)
        if value is not None:
            out[name] = value
    return out
