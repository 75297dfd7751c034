"""The largest value of any slice of a fixed integer sequence, in constant time.

The hindsight oracle asks, at every decision and for each replica it may want,
for the most replicas its plan needs over a window; the plan is fixed for the
run. A sparse table (level ``k`` holds the maximum of every ``2**k`` values)
answers any such question with two lookups, where a slice of the plan costs a
pass over the window. Levels are built as windows that long are first asked
for, so a run that only looks a few minutes ahead keeps a few levels.
"""

from array import array

import numpy as np


class RangeMax:
    """``max(values[lo:hi])`` for a fixed sequence of integers.

    Args:
        values: The sequence; not empty.

    Raises:
        ValueError: ``values`` is empty.
    """

    def __init__(self, values: np.ndarray) -> None:
        if values.size == 0:
            raise ValueError("RangeMax needs at least one value")
        self.size = int(values.size)
        # array('q') indexes to Python ints cheaply; level k, item i: max(values[i:i + 2**k]).
        self._levels = [array("q", np.asarray(values, dtype=np.int64).tobytes())]

    def _level(self, k: int) -> array:  # type: ignore[type-arg]
        levels = self._levels
        while len(levels) <= k:
            half = 1 << (len(levels) - 1)
            prev = np.frombuffer(levels[-1], dtype=np.int64)
            levels.append(array("q", np.maximum(prev[:-half], prev[half:]).tobytes()))
        return levels[k]

    def max(self, lo: int, hi: int) -> int:
        """The largest of ``values[lo:hi]``.

        Args:
            lo: First index, ``0 <= lo``.
            hi: One past the last index, ``lo < hi <= size``.

        Returns:
            The largest value, as the sequence's integers.
        """
        k = (hi - lo).bit_length() - 1
        level = self._levels[k] if k < len(self._levels) else self._level(k)
        a, b = level[lo], level[hi - (1 << k)]
        return a if a >= b else b
