"""A ``Signal`` names a quantity to read, independent of where it is stored.

The same Signal is compiled to PromQL for Prometheus and evaluated directly by
the in-process store, so policies are indifferent to which one is behind them.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

Aggregation = Literal["sum", "avg", "max", "min", "count", "none"]


@dataclass(frozen=True, slots=True)
class Signal:
    """A metric, label matchers, an aggregation over series and an optional window.

    Attributes:
        metric: Series name, e.g. ``DCGM_FI_DEV_GPU_UTIL``.
        matchers: Label equality matchers.
        aggregation: How to combine the matching series; ``none`` keeps them apart.
        by: Labels to keep when aggregating.
        window: Seconds to average each series over first (``avg_over_time``); 0 for the latest.
    """

    metric: str
    matchers: Mapping[str, str] = field(default_factory=dict)
    aggregation: Aggregation = "none"
    by: tuple[str, ...] = ()
    window: float = 0.0


@dataclass(frozen=True, slots=True)
class LabelledValue:
    """One result series: its labels and its value (or values over time).

    Attributes:
        labels: Label set of the result.
        points: (time seconds, value) pairs, oldest first.
    """

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


class MetricsSource(Protocol):
    """Reads Signals at an instant or over a range."""

    def instant(self, signal: Signal, at: float) -> list[LabelledValue]:
        """Evaluate a signal at one time; each result has one point."""
        ...

    def range(self, signal: Signal, start: float, end: float, step: float) -> list[LabelledValue]:
        """Evaluate a signal at every ``step`` seconds from ``start`` to ``end``."""
        ...
