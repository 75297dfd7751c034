"""A stand-in for a vLLM server's ``/metrics``: vLLM's own families, served over HTTP.

No GPU can run vLLM here, so the tests serve what its ``PrometheusStatLogger`` (vLLM's V1
engine, ``vllm/v1/metrics/loggers.py``, the 0.9 series) registers, written out here from
that source rather than taken from gpuscale, so the preset is checked against an
independent transcription: the same prometheus_client types, names, label names
(``model_name``, ``engine``; ``finished_reason`` on the success counter) and histogram
buckets. The values are set by the test.

It answers every scrape in the Prometheus text format, whatever the ``Accept`` header asks:
prometheus_client's OpenMetrics output with ``escaping=underscores`` (what Prometheus
negotiates) writes ``vllm_`` for ``vllm:`` in sample lines but not in ``# TYPE`` lines
(prometheus/client_python issue 1177), and the tests check vLLM's names as vLLM defines
them; docs/autoscaler.md says what to do where a server's series arrive renamed.
"""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from tests.support.scrape_target import StandIn

LABELS = ("model_name", "engine")

TTFT_BUCKETS = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0),
    *(2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
)
TPOT_BUCKETS = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0),
    *(2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0),
)
REQUEST_LATENCY_BUCKETS = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0),
    *(40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)
FINISHED_REASONS = ("stop", "length", "abort")
"""vLLM's ``FinishReason`` values, as the success counter's label carries them."""


class FakeVllm(StandIn):
    """One vLLM engine's metrics on 127.0.0.1, in its own registry.

    Args:
        model_name: ``--served-model-name``.
        engine: The engine index label.
    """

    def __init__(self, model_name: str, engine: str = "0") -> None:
        self.registry = CollectorRegistry()
        reg, labels = self.registry, (model_name, engine)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=reg)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, LABELS, registry=reg, buckets=buckets)

        self.running = gauge("vllm:num_requests_running", "Requests in batches.").labels(*labels)
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting.").labels(*labels)
        self.gpu_cache = gauge("vllm:gpu_cache_usage_perc", "Deprecated.").labels(*labels)
        self.kv_cache = gauge("vllm:kv_cache_usage_perc", "KV-cache usage.").labels(*labels)
        success = Counter(
            "vllm:request_success",
            "Successful requests.",
            (*LABELS, "finished_reason"),
            registry=reg,
        )
        self.success = {r: success.labels(*labels, r) for r in FINISHED_REASONS}
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS
        ).labels(*labels)
        self.tpot = histogram(
            "vllm:time_per_output_token_seconds", "Time per output token.", TPOT_BUCKETS
        ).labels(*labels)
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds", "End-to-end latency.", REQUEST_LATENCY_BUCKETS
        ).labels(*labels)

    def body(self) -> bytes:
        """The ``/metrics`` body at this moment."""
        return generate_latest(self.registry)
