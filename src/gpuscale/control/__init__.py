"""The live autoscaler: Prometheus in, Kubernetes out (``gpuscale autoscale``)."""
