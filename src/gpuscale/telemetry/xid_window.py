"""Trailing-window event counts per GPU, as dcgm-exporter's DCGM_EXP_XID_ERRORS_COUNT reports them.

The last-value field DCGM_FI_DEV_XID_ERRORS forgets every error but the
latest; operators alert on "any XID 79 in the last five minutes", which needs
the events themselves kept for a window.
"""

from collections import Counter, deque
from collections.abc import Iterable

from gpuscale.telemetry.base import XidEvent

DEFAULT_WINDOW_MS = 300_000  # dcgm-exporter's --xid-count-window-size default


class XidWindow:
    """XID events per entity over a trailing window.

    Args:
        window_ms: Window length in milliseconds.
    """

    def __init__(self, window_ms: int = DEFAULT_WINDOW_MS) -> None:
        self.window_ms = window_ms
        self._events: deque[tuple[float, str, int]] = deque()

    def add(self, entity_key: str, events: Iterable[XidEvent]) -> None:
        """Record new events for an entity."""
        for event in events:
            self._events.append((event.timestamp, entity_key, event.xid))

    def counts(self, now: float) -> dict[str, Counter[int]]:
        """Events per entity and XID code inside the window ending at ``now``.

        Returns:
            Entity key to a Counter of XID code to number of events.
        """
        horizon = now - self.window_ms / 1000.0
        while self._events and self._events[0][0] < horizon:
            self._events.popleft()
        result: dict[str, Counter[int]] = {}
        for _, key, xid in self._events:
            result.setdefault(key, Counter())[xid] += 1
        return result
