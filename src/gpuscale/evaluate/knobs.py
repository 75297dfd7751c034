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
    """

    field: str
    unit: str
    low: float
    high: float
    relative: bool = True
    integer: bool = False

    def __post_init__(self) -> None:
        if not (0 < self.low <= self.high and math.isfinite(self.high)):
            raise ValueError(
                f"knob {self.field}: need 0 < low <= high, got {self.low}, {self.high}"
            )

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
