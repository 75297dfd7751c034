"""Where policies get telemetry from: Prometheus over HTTP, or the in-process store."""

from gpuscale.metrics.signal import (
    Aggregation,
    LabelledValue,
    MetricsSource,
    MetricsUnavailable,
    Signal,
)

__all__ = ["Aggregation", "LabelledValue", "MetricsSource", "MetricsUnavailable", "Signal"]
