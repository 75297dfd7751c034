"""The main knob of each policy, and which values of it a sweep tries.

One operating point says little: a policy that spends more GPUs meets more of
the SLO. Sweeping each policy's main knob (static replicas, HPA's target, KEDA's
threshold, KPA's target concurrency) traces its cost-against-attainment curve,
and the curves are compared at one attainment. A ``Knob`` names the config field
and the rule that picks the values; ``evaluate.policies`` attaches one to each
policy. This module is plain Python (no numpy), as ``evaluate.policies`` is.
"""

import math
from dataclasses import dataclass

EXTEND_FACTOR = 1.4
"""Geometric step of a sweep's extension beyond its range end (``Knob.beyond``): the
ratio of the relative ranges' ends (1.4 x the fair value), so one step reaches as far
past the end as the top of the range lies above the fair value."""


@dataclass(frozen=True, slots=True)
class Knob:
    """A config field a sweep varies, and the range it covers.

    Attributes:
        field: Name of the field of the policy's config.
        unit: Its unit, as the report prints it.
        low: Lowest value: a multiple of the fair value when ``relative``, else the value.
        high: Highest value, likewise.
        relative: Whether ``low`` and ``high`` multiply the fair value.
        integer: Whether the field takes whole numbers (at least 1).
        cheap_up: Whether a higher value spends fewer GPU-hours (a higher target
            per replica does; more static replicas do not).
        minimum: The least value the field accepts, absolute (exclusive when 0).
        maximum: The greatest value the field accepts, absolute (a utilisation
            target cannot exceed 100 %, an SM-active ratio 1).
    """

    field: str
    unit: str
    low: float
    high: float
    relative: bool = True
    integer: bool = False
    cheap_up: bool = True
    minimum: float = 0.0
    maximum: float = math.inf

    def __post_init__(self) -> None:
        if not (0 < self.low <= self.high and math.isfinite(self.high)):
            raise ValueError(
                f"knob {self.field}: need 0 < low <= high, got {self.low}, {self.high}"
            )
        if not (0 <= self.minimum < self.maximum):
            raise ValueError(
                f"knob {self.field}: need 0 <= minimum < maximum, got "
                f"{self.minimum}, {self.maximum}"
            )
        if not self.relative and not (self.minimum <= self.low and self.high <= self.maximum):
            raise ValueError(
                f"knob {self.field}: range {self.low} to {self.high} leaves the valid "
                f"{self.minimum} to {self.maximum}"
            )

    def valid(self, value: float) -> bool:
        """Whether the field accepts ``value`` (within the limits, whole if integer).

        Returns:
            True when valid.
        """
        if self.integer and (value != round(value) or value < 1):
            return False
        above = value > self.minimum or (value == self.minimum and self.minimum > 0)
        return above and value <= self.maximum and math.isfinite(value)

    def beyond(self, end: float, *, cheaper: bool) -> float | None:
        """The next value past a sweep's ``end``, one geometric step further out.

        Args:
            end: The sweep's last value in that direction.
            cheaper: Step towards fewer GPU-hours (else towards more).

        Returns:
            ``end`` times or over ``EXTEND_FACTOR`` (an integer knob moves at least
            one), clamped to the field's limits; None when ``end`` is at the limit.
        """
        up = cheaper == self.cheap_up
        nxt = end * EXTEND_FACTOR if up else end / EXTEND_FACTOR
        if self.integer:
            nxt = max(float(round(nxt)), end + 1) if up else min(float(round(nxt)), end - 1)
        nxt = min(nxt, self.maximum) if up else max(nxt, self.minimum)
        if nxt == end or not self.valid(nxt):
            return None
        return nxt if self.integer else round(nxt, 9)

    def values(self, fair: float, count: int) -> tuple[float, ...]:
        """The values a sweep of ``count`` points tries, with the fair value among them.

        The ``count`` points are evenly spaced from ``low`` to ``high`` (times
        ``fair`` when relative); integer knobs are rounded and repeats dropped, so
        fewer may come back.

        Args:
            fair: The value the policy's fair rule chose.
            count: Points to spread over the range; 0 gives the fair value alone.

        Returns:
            Sorted distinct values, the fair value included.
        """
        scale = fair if self.relative else 1.0
        spread = []
        for i in range(count):
            share = i / (count - 1) if count > 1 else 0.5
            spread.append(scale * (self.low + (self.high - self.low) * share))
        if self.integer:
            return tuple(sorted({max(1, round(p)) for p in [fair, *spread]}))
        # The fair value stays exact (the sweep finds its runs by it); the others are rounded.
        others = {round(p, 9) for p in spread if not math.isclose(p, fair, rel_tol=1e-9)}
        return tuple(sorted({fair, *others}))
