"""Per-second deployment totals in a ring, read as a ``MetricsSource``.

Knative's autoscaler does not go through Prometheus: it scrapes every
queue-proxy once a second and keeps the totals in 1 s buckets. A controller on
that path needs a per-second history of a few totals (requests in flight,
requests queued), not per-pod series written every second, so this ring keeps
one float per metric per second for the last ``capacity_s`` seconds and answers
the same ``instant``/``range`` queries as the metric store. Only the summed total
of each metric exists here, so a Signal may aggregate with ``sum`` (or ``none``)
and may not carry matchers or a window.

It also keeps each second's metrics added together (``summed_range``): a policy
that adds its signals point by point (Knative's concurrency: in flight plus
queued) reads them already added, the same floats, instead of adding a window of
points at every decision; ``summed_window`` gives those sums and each metric's
range from one call, as an observation of every kept metric reads them.
"""

import math
from collections.abc import Sequence

from gpuscale.metrics.rawquery import structured
from gpuscale.metrics.signal import LabelledValue, Signal


class SecondTotals:
    """The last ``capacity_s`` one-second samples of a few workload totals.

    Args:
        metrics: Metric names, in the order ``record`` takes their values.
        capacity_s: Seconds of history kept (older samples are overwritten).

    Raises:
        ValueError: No metric, a repeated one, or a capacity below 1 s.
    """

    def __init__(self, metrics: Sequence[str], capacity_s: int) -> None:
        if not metrics or len(set(metrics)) != len(metrics):
            raise ValueError(f"give distinct metric names, got {list(metrics)!r}")
        if capacity_s < 1:
            raise ValueError(f"capacity_s must be >= 1, got {capacity_s}")
        self.metrics = tuple(metrics)
        self.capacity_s = int(capacity_s)
        self._index = {m: i for i, m in enumerate(self.metrics)}
        self._rings = [[0.0] * self.capacity_s for _ in self.metrics]
        # The same samples as (time, value) points, so a range query at 1 s steps over
        # seconds that were all recorded slices points instead of building them.
        self._points: list[list[tuple[float, float]]] = [
            [(0.0, 0.0)] * self.capacity_s for _ in self.metrics
        ]
        # Each second's values added in ``metrics`` order from 0, and its time, for
        # ``summed_range``: the sums ``scaling.baseline.summed_columns`` makes of them.
        self._sums = [0.0] * self.capacity_s
        self._times = [0.0] * self.capacity_s
        self._summed_signals: tuple[Signal, ...] = ()  # last signals ``_summed_span`` checked
        # Each signal's metric is kept or not, by the signal's identity: ``newest`` is asked
        # about the same Signal objects at every decision.
        self._kept: dict[int, tuple[Signal, bool]] = {}
        self._unbroken = 0  # every second from this one to ``_last`` was recorded
        self._first: int | None = None
        self._last = -1

    def record(self, t: int, values: Sequence[float]) -> None:
        """Store the totals sampled at second ``t`` (seconds must not go back).

        Args:
            t: Sample time, whole seconds.
            values: One value per metric, in ``metrics`` order.
        """
        i = t % self.capacity_s
        at = float(t)
        total: float = 0  # from int 0, as sum() and summed_columns add
        if len(values) == 2 == len(self._rings):  # the engine's pair, once a second: unrolled
            a, b = values
            (ring_a, ring_b), (points_a, points_b) = self._rings, self._points
            ring_a[i], ring_b[i], points_a[i], points_b[i] = a, b, (at, a), (at, b)
            total = total + a + b
        else:
            for ring, points, v in zip(self._rings, self._points, values, strict=True):
                ring[i] = v
                points[i] = (at, v)
                total += v
        self._sums[i], self._times[i] = total, at
        if self._first is None:
            self._first = t
        if t > self._last + 1:
            self._unbroken = t
        self._last = t

    def _column(self, signal: Signal) -> int:
        """The index of the signal's metric, or -1 when it is not kept."""
        signal = structured(signal)
        k = self._index.get(signal.metric, -1)
        if k < 0:
            return k
        if signal.matchers or signal.window > 0 or signal.aggregation not in ("sum", "none"):
            raise ValueError(
                f"per-second totals answer only sum({signal.metric}) with no matchers or "
                f"window, got {signal!r}"
            )
        return k

    def _ring(self, signal: Signal) -> list[float]:
        k = self._column(signal)
        return self._rings[k] if k >= 0 else []

    def _oldest(self) -> int:
        first = 0 if self._first is None else self._first
        return max(first, self._last - self.capacity_s + 1)

    def instant(self, signal: Signal, at: float) -> list[LabelledValue]:
        """The newest sample at or before ``at``, as one series with one point.

        Returns:
            One result, or none when the metric is unknown or no sample is that recent.

        Raises:
            ValueError: The signal asks for something other than a plain total.
        """
        ring = self._ring(signal)
        t = min(math.floor(at), self._last)
        if not ring or self._first is None or t < self._oldest():
            return []
        return [LabelledValue({}, ((float(at), ring[t % self.capacity_s]),))]

    def newest(self, signal: Signal, at: float) -> float | None:
        """The second of the newest sample at or before ``at``.

        Returns:
            Seconds, or None when the metric is unknown or no sample is that recent.

        Raises:
            ValueError: The signal has matchers (only unlabelled totals are kept).
        """
        t = min(math.floor(at), self._last)
        hit = self._kept.get(id(signal))
        if hit is None or hit[0] is not signal:
            plain = Signal(signal.metric, signal.matchers, "sum")  # window, aggregation ignored
            if len(self._kept) > 1024:  # signals built per query: keep the cache bounded
                self._kept.clear()
            hit = self._kept[id(signal)] = (signal, bool(self._ring(plain)))
        if not hit[1] or self._first is None or t < self._oldest():
            return None
        return float(t)

    def range(self, signal: Signal, start: float, end: float, step: float) -> list[LabelledValue]:
        """The newest sample at or before each of ``start, start + step, ... <= end``.

        Returns:
            One result with a point per evaluation time that has a sample; none when none has.

        Raises:
            ValueError: The signal asks for something other than a plain total, or ``step`` <= 0.
        """
        if step <= 0:
            raise ValueError(f"step must be > 0, got {step}")
        k = self._column(signal)
        if k < 0 or self._first is None:
            return []
        ring = self._rings[k]
        oldest, cap = self._oldest(), self.capacity_s
        if step == 1.0 and start == math.floor(start):  # the common case: one point a second
            lo = max(int(start), oldest)
            hi = min(math.floor(end), self._last)
            if hi < lo:
                return []
            points = self._seconds(k, lo, hi)
        else:
            n = math.floor((end - start) / step + 1e-9) + 1
            evals = (start + k * step for k in range(max(n, 0)))
            points = tuple(
                (e, ring[min(math.floor(e), self._last) % cap])
                for e in evals
                if min(math.floor(e), self._last) >= oldest
            )
        return [LabelledValue({}, points)] if points else []

    def _seconds(self, k: int, lo: int, hi: int) -> tuple[tuple[float, float], ...]:
        """Metric ``k``'s points at seconds ``lo`` to ``hi`` (kept, ``lo <= hi``)."""
        cap = self.capacity_s
        i, j = lo % cap, hi % cap
        if lo >= self._unbroken:  # each stored point is that second's own sample
            kept = self._points[k]
            return tuple(kept[i : j + 1] if i <= j else kept[i:] + kept[: j + 1])
        ring = self._rings[k]
        values = ring[i : j + 1] if i <= j else ring[i:] + ring[: j + 1]
        return tuple(zip(map(float, range(lo, hi + 1)), values, strict=True))

    def summed_window(
        self, signals: Sequence[Signal], start: float, end: float, step: float
    ) -> tuple[tuple[tuple[tuple[float, float], ...], ...], list[float], list[float]] | None:
        """``range`` of each of ``signals`` and their ``summed_range``, from one call.

        What an observation of every kept metric needs at once: each signal's points
        exactly as ``range`` gives them (empty where ``range`` gives no result), and
        the columns ``summed_range`` gives, without a query per signal.

        Args:
            signals: The signals, in the order they are added.
            start: First evaluation time, seconds.
            end: Last evaluation time, seconds.
            step: Seconds between evaluation times.

        Returns:
            (each signal's points, times in seconds, sums), oldest first; None where
            ``summed_range`` answers None (read ``range`` instead).

        Raises:
            ValueError: A signal asks for something other than a plain total.
        """
        span = self._summed_span(signals, start, end, step)
        if span is None:
            return None
        lo, hi = span
        if hi < lo:
            return tuple([() for _ in signals]), [], []
        cap = self.capacity_s
        i, j = lo % cap, hi % cap
        if i <= j and lo >= self._unbroken:  # the common case: one slice of each list
            cut = slice(i, j + 1)
            points = tuple([tuple(kept[cut]) for kept in self._points])
            return points, self._times[cut], self._sums[cut]
        points = tuple([self._seconds(k, lo, hi) for k in range(len(self.metrics))])
        return (points, *self._summed(lo, hi))

    def summed_range(
        self, signals: Sequence[Signal], start: float, end: float, step: float
    ) -> tuple[list[float], list[float]] | None:
        """``range`` of every kept metric, added point by point, as (times, sums) columns.

        Answers only where that is exactly what ``scaling.baseline.summed_columns``
        makes of the ``range`` results: ``signals`` name every kept metric, in
        ``metrics`` order, and the range is at 1 s steps from a whole second.

        Args:
            signals: The signals to add, in the order they are added.
            start: First evaluation time, seconds.
            end: Last evaluation time, seconds.
            step: Seconds between evaluation times.

        Returns:
            (times in seconds, the metrics' sum at each), oldest first; empty lists when
            no second in the range has a sample; None when the query is not one answered
            here (read ``range`` instead).

        Raises:
            ValueError: A signal asks for something other than a plain total.
        """
        span = self._summed_span(signals, start, end, step)
        if span is None:
            return None
        lo, hi = span
        return ([], []) if hi < lo else self._summed(lo, hi)

    def _summed_span(
        self, signals: Sequence[Signal], start: float, end: float, step: float
    ) -> tuple[int, int] | None:
        """The kept seconds (first, last) of a summed query; None where none is answered.

        Raises:
            ValueError: A signal asks for something other than a plain total.
        """
        if step != 1.0 or start != math.floor(start) or len(signals) != len(self.metrics):
            return None
        if signals != self._summed_signals:  # the same signals as last time are valid
            for n, s in enumerate(signals):
                if self._column(s) != n:  # raises as ``range`` would for what it cannot answer
                    return None
            self._summed_signals = tuple(signals)
        if self._first is None:
            return 0, -1
        return max(int(start), self._oldest()), min(math.floor(end), self._last)

    def _summed(self, lo: int, hi: int) -> tuple[list[float], list[float]]:
        """The times and sums of seconds ``lo`` to ``hi`` (kept, ``lo <= hi``)."""
        cap = self.capacity_s
        i, j = lo % cap, hi % cap
        sums = self._sums[i : j + 1] if i <= j else self._sums[i:] + self._sums[: j + 1]
        if lo >= self._unbroken:  # each slot holds that second's own time
            kept = self._times
            times = kept[i : j + 1] if i <= j else kept[i:] + kept[: j + 1]
        else:
            times = [float(s) for s in range(lo, hi + 1)]
        return times, sums
