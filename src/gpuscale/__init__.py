"""gpuscale: GPU fleet telemetry in dcgm-exporter's dialect, and autoscaling driven by it."""

__version__ = "0.1.0"
