"""A ``Signal`` names a quantity to read, independent of where it is stored.

The same Signal is compiled to PromQL for Prometheus and evaluated directly by
the in-process store, so policies are indifferent to which one is behind them.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from gpuscale.errors import TransientError

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
        optional: Having no series is a valid reading (an alert that is not firing, a
            counter some servers do not export): the fail-safe does not hold for it.
        query: A raw PromQL expression read as it is (a KEDA trigger's ``query``, a
            serving stack's histogram quantile); ``metric`` then only names it, and
            ``matchers``, ``aggregation``, ``by`` and ``window`` stay at their defaults.
            Empty for a signal built from its parts.
    """

    metric: str
    matchers: Mapping[str, str] = field(default_factory=dict)
    aggregation: Aggregation = "none"
    by: tuple[str, ...] = ()
    window: float = 0.0
    optional: bool = False
    query: str = ""


@dataclass(frozen=True, slots=True)
class LabelledValue:
    """One result series: its labels and its value (or values over time).

    Attributes:
        labels: Label set of the result.
        points: (time seconds, value) pairs, oldest first.
    """

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


class MetricsUnavailable(TransientError):  # noqa: N818 (the name is the issue-10 interface)
    """A metrics source could not answer: down, too slow, refused us, or answered nonsense.

    The message is one line naming the source and the cause; the controller treats
    this as missing data and holds replicas.

    Args:
        message: What failed, where.
        reason: A short fixed word for the cause (``connect``, ``timeout``, ``http``,
            ``query``, ``response``), for error counters.
    """

    def __init__(self, message: str, reason: str = "unavailable") -> None:
        super().__init__(message)
        self.reason = reason


class MetricsSource(Protocol):
    """Reads Signals at an instant or over a range.

    Implementations raise ``MetricsUnavailable`` when they cannot answer; an empty
    result means the source answered and holds no matching data.
    """

    def instant(self, signal: Signal, at: float) -> list[LabelledValue]:
        """Evaluate a signal at one time; each result has one point."""
        ...

    def range(self, signal: Signal, start: float, end: float, step: float) -> list[LabelledValue]:
        """Evaluate a signal at every ``step`` seconds from ``start`` to ``end``."""
        ...

    def newest(self, signal: Signal, at: float) -> float | None:
        """Time of the newest raw sample among the signal's series at or before ``at``.

        Only samples an instant query at ``at`` would see count (within the 5-minute
        lookback, not stale); the signal's window and aggregation are ignored.

        Returns:
            Seconds, or None when no series of the signal has such a sample.
        """
        ...


# Optional capabilities. A source has one when it can answer the same question
# faster or finer than the base protocol; callers test for it with ``isinstance``
# once, where they are built, and read nothing by name.


@runtime_checkable
class KeyedInstant(Protocol):
    """A source that keys an instant query's values by one label (the in-process store)."""

    def instant_by(self, signal: Signal, at: float, label: str) -> dict[str, float]:
        """``instant``'s values keyed by ``label``, without a result object per series.

        Returns:
            {value of ``label``: the result's value} for each result carrying ``label``:
            a new dict at each call, the caller's to keep.
        """
        ...


SummedPoints = tuple[tuple[tuple[float, float], ...], ...]
"""Each signal's (time, value) points, in the order the signals were given."""


@runtime_checkable
class SummedWindows(Protocol):
    """A source that keeps its totals added per sample (the direct path's ring)."""

    def summed_window(
        self, signals: Sequence[Signal], start: float, end: float, step: float
    ) -> tuple[SummedPoints, list[float], list[float]] | None:
        """``range`` of each signal and their point-by-point sum, from one call.

        Returns:
            (each signal's points, times in seconds, sums), or None where it cannot
            (the caller reads ``range`` instead).
        """
        ...


@runtime_checkable
class NewestByLabel(Protocol):
    """A source that tells how fresh each series of a signal is, keyed by one label."""

    def newest_by(self, signal: Signal, at: float, label: str) -> dict[str, float]:
        """Time of the newest raw sample of the signal's series, per value of ``label``.

        Like ``max by (label) (timestamp(selector))``: only samples an instant query at
        ``at`` would see count; series without the label are left out.

        Returns:
            {value of ``label``: seconds}.
        """
        ...
