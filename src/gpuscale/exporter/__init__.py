"""The telemetry exporter: GPU snapshots served on /metrics in dcgm-exporter's dialect."""
