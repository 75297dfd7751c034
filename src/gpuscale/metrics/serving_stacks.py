"""Serving-stack presets: the series vLLM, TGI and Triton export, in place of gpuscale's own.

Policies read demand from gpuscale's serving series (``gpuscale_serving_requests_in_flight``,
``gpuscale_serving_queue_requests``, ``gpuscale_serving_requests_total``), which the
simulator writes and no serving stack exports. A target that names its stack
(``metrics.servingStack``) reads the stack's own series under the same keys instead, so
the policy is unchanged: a gauge or counter replaces the name and keeps the signal's
matchers, aggregation and window; a latency histogram becomes a raw PromQL quantile,
``histogram_quantile(q, sum by (le) (rate(NAME_bucket{scope}[w])))``, carrying the
target's matchers.

Every name, type, label and default bucket below was checked against upstream source:

* vLLM (V1 engine, the 0.9 series): ``vllm/v1/metrics/loggers.py`` in
  vllm-project/vllm (``PrometheusStatLogger``), commit 005a810. Gauges, counters and
  histograms carry ``model_name`` and ``engine``; ``vllm:request_success`` adds
  ``finished_reason`` and, as a prometheus_client Counter, is exposed with ``_total``.
  ``vllm:gpu_cache_usage_perc`` is deprecated there in favour of
  ``vllm:kv_cache_usage_perc`` (both are served in that series; later releases drop
  the old name by default). Later releases also serve
  ``vllm:inter_token_latency_seconds``; the preset reads the TPOT name checked here.
* TGI 3.3.7: ``router/src/server.rs`` (the ``metrics::`` calls and the
  ``PrometheusBuilder`` buckets) and ``backends/v3/src/queue.rs``, ``backend.rs`` in
  huggingface/text-generation-inference. Series carry no labels; counters keep their
  names without ``_total`` (metrics-exporter-prometheus 0.15); every ``*_duration``
  histogram has 35 buckets, 0.0001 s times 1.5 to the 1st to 35th power. TGI exports no
  time-to-first-token histogram.
* Triton 2.73 (``docs/user_guide/metrics.md`` in triton-inference-server/server):
  series carry ``model`` and ``version``; latencies are cumulative microsecond counters;
  the one histogram, ``nv_inference_first_response_histogram_ms``, is in milliseconds
  and served only with ``--metrics-config histogram_latencies=true``. Triton has no
  gauge of requests executing, so the preset reads it by Little's law: the growth rate
  of the summed request time less that of the queue time is the mean number executing.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Literal

from gpuscale.metrics.promql import duration, quote
from gpuscale.metrics.signal import Signal

IN_FLIGHT = "gpuscale_serving_requests_in_flight"
"""gpuscale's requests in service (gauge); the simulator writes it, policies default to it."""
QUEUED = "gpuscale_serving_queue_requests"
"""gpuscale's requests waiting for a slot (gauge)."""
COMPLETED = "gpuscale_serving_requests_total"
"""gpuscale's requests completed (counter)."""

StackName = Literal["vllm", "tgi", "triton"]


@dataclass(frozen=True, slots=True)
class Series:
    """A series read under the stack's name as the policy's own would be read.

    A gauge, or a counter the policy reads as a running total (completions).

    Attributes:
        name: The name as the stack serves it.
    """

    name: str


@dataclass(frozen=True, slots=True)
class Histogram:
    """A latency histogram, read as a quantile over a rate window.

    Attributes:
        name: Family name, without ``_bucket``.
        buckets: The stack's default upper bounds, in the histogram's own unit.
        to_seconds: Factor from the histogram's unit to seconds (Triton's ms: 0.001).
    """

    name: str
    buckets: tuple[float, ...]
    to_seconds: float = 1.0


@dataclass(frozen=True, slots=True)
class BusyTime:
    """Requests executing, by Little's law on cumulative time counters.

    The rate of a counter of summed request time is the mean number of requests
    inside over the window; less the queue's, the number executing.

    Attributes:
        total: Counter of the summed time requests spent in the server.
        queued: Counter of the summed time they spent queued.
        to_seconds: Factor from the counters' unit to seconds.
    """

    total: str
    queued: str
    to_seconds: float


Reading = Series | Histogram | BusyTime


@dataclass(frozen=True, slots=True)
class ServingStack:
    """What one serving stack exports for each quantity gpuscale's policies read.

    Attributes:
        name: The value of ``metrics.servingStack``.
        checked_against: The upstream version the names were checked against.
        model_label: The label naming the served model, empty where there is none.
        running: Requests being served now (replaces ``IN_FLIGHT``).
        waiting: Requests queued (replaces ``QUEUED``).
        completed: Requests completed, a counter (replaces ``COMPLETED``).
        kv_cache: KV-cache use, a ratio from 0 to 1; None where not exported.
        ttft: Time-to-first-token histogram; None where not exported.
        tpot: Time-per-output-token histogram; None where not exported.
        e2e: End-to-end request latency histogram; None where not exported.
    """

    name: StackName
    checked_against: str
    model_label: str
    running: Series | BusyTime
    waiting: Series
    completed: Series
    kv_cache: Series | None
    ttft: Histogram | None
    tpot: Histogram | None
    e2e: Histogram | None

    def histograms(self) -> tuple[Histogram, ...]:
        """The latency histograms the stack exports.

        Returns:
            TTFT, TPOT and end-to-end latency, those present, in that order.
        """
        return tuple(h for h in (self.ttft, self.tpot, self.e2e) if h is not None)

    def readings(self) -> Mapping[str, Reading]:
        """Each quantity by gpuscale's key for it: its own series names and the histograms'.

        Returns:
            {gpuscale series or histogram family name: how the stack serves it}.
        """
        out: dict[str, Reading] = {
            IN_FLIGHT: self.running,
            QUEUED: self.waiting,
            COMPLETED: self.completed,
        }
        out.update({h.name: h for h in self.histograms()})
        return MappingProxyType(out)


_VLLM_REQUEST_LATENCY = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0),
    *(40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)
VLLM_TTFT = Histogram(
    "vllm:time_to_first_token_seconds",
    (
        *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0),
        *(2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
    ),
)
"""vLLM's TTFT histogram; the alert catalogue's default TTFT SLO counts its buckets too."""
VLLM = ServingStack(
    name="vllm",
    checked_against="vLLM 0.9 (V1 engine)",
    model_label="model_name",
    running=Series("vllm:num_requests_running"),
    waiting=Series("vllm:num_requests_waiting"),
    completed=Series("vllm:request_success_total"),
    kv_cache=Series("vllm:kv_cache_usage_perc"),
    ttft=VLLM_TTFT,
    tpot=Histogram(
        "vllm:time_per_output_token_seconds",
        (
            *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0),
            *(2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0),
        ),
    ),
    e2e=Histogram("vllm:e2e_request_latency_seconds", _VLLM_REQUEST_LATENCY),
)

TGI_DURATION_BUCKETS = tuple(0.0001 * 1.5**k for k in range(1, 36))
"""TGI's buckets of every ``*_duration`` histogram: 0.0001 s x 1.5^k, k = 1..35."""
TGI = ServingStack(
    name="tgi",
    checked_against="TGI 3.3.7",
    model_label="",
    running=Series("tgi_batch_current_size"),
    waiting=Series("tgi_queue_size"),
    completed=Series("tgi_request_success"),
    kv_cache=None,
    ttft=None,
    tpot=Histogram("tgi_request_mean_time_per_token_duration", TGI_DURATION_BUCKETS),
    e2e=Histogram("tgi_request_duration", TGI_DURATION_BUCKETS),
)

TRITON = ServingStack(
    name="triton",
    checked_against="Triton Inference Server 2.73",
    model_label="model",
    running=BusyTime("nv_inference_request_duration_us", "nv_inference_queue_duration_us", 1e-6),
    waiting=Series("nv_inference_pending_request_count"),
    completed=Series("nv_inference_request_success"),
    kv_cache=None,
    ttft=Histogram(
        "nv_inference_first_response_histogram_ms", (100.0, 500.0, 2000.0, 5000.0), 0.001
    ),
    tpot=None,
    e2e=None,
)

STACKS: Mapping[str, ServingStack] = MappingProxyType({s.name: s for s in (VLLM, TGI, TRITON)})
"""The presets, by ``metrics.servingStack`` value."""


def _selector(name: str, matchers: Mapping[str, str]) -> str:
    parts = ",".join(f"{k}={quote(matchers[k])}" for k in sorted(matchers))
    return f"{name}{{{parts}}}"


def _grouping(by: Sequence[str]) -> str:
    return ", ".join(by)


def quantile_query(
    histogram: Histogram,
    matchers: Mapping[str, str],
    quantile: float,
    window_s: float,
    by: Sequence[str] = (),
) -> str:
    """PromQL for a quantile of a histogram over the scoped series, in seconds.

    An empty window (no request observed) gives NaN in PromQL; the ``>= 0`` filter
    drops it, so the reading is no series rather than a non-finite value.

    Args:
        histogram: The family.
        matchers: Label equality matchers of the target's scope.
        quantile: E.g. 0.99 for p99.
        window_s: The ``rate`` window, seconds.
        by: Labels kept apart (e.g. ``pod``); none for one workload-wide quantile.

    Returns:
        ``histogram_quantile(q, sum by (le) (rate(NAME_bucket{...}[w])))`` (times the
        factor to seconds where the histogram is not in seconds), ``>= 0``.

    Raises:
        ValueError: A quantile outside (0, 1), or a bad window.
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be between 0 and 1, got {quantile}")
    rate = f"rate({_selector(histogram.name + '_bucket', matchers)}[{duration(window_s)}])"
    expr = f"histogram_quantile({quantile:g}, sum by ({_grouping(('le', *by))}) ({rate}))"
    if histogram.to_seconds != 1.0:
        expr = f"{expr} * {histogram.to_seconds:g}"
    return f"({expr}) >= 0"


def busy_query(busy: BusyTime, matchers: Mapping[str, str], window_s: float) -> str:
    """PromQL for the mean number of requests executing over the window (Little's law).

    Returns:
        ``(rate(TOTAL{...}[w]) - rate(QUEUED{...}[w])) * factor``, one result per series.
    """
    w = duration(window_s)
    total = f"rate({_selector(busy.total, matchers)}[{w}])"
    queued = f"rate({_selector(busy.queued, matchers)}[{w}])"
    return f"({total} - {queued}) * {busy.to_seconds:g}"


def substitute(stack: ServingStack, signal: Signal, *, quantile: float, window_s: float) -> Signal:
    """The stack's reading of what ``signal`` reads, scoped as ``signal`` is.

    A raw query, or a series the stack has no reading for, is returned unchanged.

    Args:
        stack: The serving stack.
        signal: A policy's signal, its target's matchers already added.
        quantile: The quantile a histogram is read at (the SLO's percentile).
        window_s: The ``rate`` window of histograms and counters, seconds.

    Returns:
        A signal reading the stack's series: a gauge or counter under its name with
        the signal's matchers, aggregation, window and optionality; a histogram as a
        raw quantile query (optional: no request in the window is no reading); busy
        time as a raw query aggregated as the signal is.
    """
    if signal.query:
        return signal
    reading = stack.readings().get(signal.metric)
    if reading is None:
        return signal
    if isinstance(reading, Series):
        return replace(signal, metric=reading.name)
    if isinstance(reading, Histogram):
        query = quantile_query(reading, signal.matchers, quantile, window_s, signal.by)
        return Signal(f"{reading.name}_bucket", query=query, optional=True)
    inner = busy_query(reading, signal.matchers, window_s)
    agg = signal.aggregation
    if agg != "none":
        by = f" by ({_grouping(signal.by)})" if signal.by else ""
        inner = f"{agg}{by} ({inner})"
    return Signal(reading.total, query=inner, optional=signal.optional)
