"""GPU alerting: the rule catalogue, its Prometheus renderings, and backtests on history.

``catalogue.build_catalogue`` turns settings (``config``) into rule groups:
vendor-neutral recording rules (``neutral``), hardware health alerts,
anomaly rules (``anomaly``) and SLO burn-rate alerts (``slo``).
``render`` writes them for Prometheus or the Prometheus Operator.
``simtest`` and ``backtest`` score them on simulated (``history``) or recorded
history through a real Prometheus (``tsdb``). The package does no I/O at import
and reads only the neutral schema and dcgm-exporter's and AMD's series names.
"""
