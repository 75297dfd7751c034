"""Series a policy's observation carries, built for the scaling tests."""

from gpuscale.scaling.policy import Series


def idle(points: Series) -> Series:
    """An empty queue at the same times as ``points``."""
    return tuple((t, 0.0) for t, _ in points)
