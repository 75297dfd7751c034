"""GPU alert rules: the catalogue, rendering to Prometheus rule files, evaluation."""
