"""Serving-stack presets end to end: the stack's own series, scraped by a real Prometheus.

A stand-in vLLM ``/metrics`` (``tests.support.vllm``: vLLM's names, types, labels and
buckets) and a stand-in Triton (``tests.support.triton``) -> a real Prometheus scraping
them each second -> GPUScaler targets with ``metrics.servingStack``, read through
gpuscale's ``PrometheusSource``. vLLM: the requests running and waiting read as served,
the TTFT p99 from the buckets equals the quantile worked out here by Prometheus'
documented interpolation, ``hybrid`` sizes its TTFT need from that p99, and ``keda``
scales out when the waiting requests rise.
Triton: the requests executing, by Little's law on its time counters, equal the steady
load served, and the first-response p99 is converted from milliseconds.
"""

import math
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack

import pytest
import yaml

from gpuscale.control.config import GPUScaler
from gpuscale.control.targets import TargetRuntime, runtimes
from gpuscale.metrics.prometheus import PrometheusSource
from gpuscale.scaling.hybrid import HybridConfig
from gpuscale.scaling.observe import observe
from gpuscale.scaling.policy import PodStatus, TargetStatus
from tests.support.servers import Prometheus
from tests.support.triton import FIRST_RESPONSE_BUCKETS_MS, FakeTriton, SteadyLoad
from tests.support.vllm import TTFT_BUCKETS, FakeVllm

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed"),
    pytest.mark.timeout(120),
]

MODEL = 'meta-llama/Llama-3.1-8B-Instruct "chat"'  # a quote, to exercise the escaping
THRESHOLD = 4  # requests per replica
WAITING = 4
TTFT_SLO_S = HybridConfig().ttft_slo_s
STEP_S = 1.0  # the history's resolution (``metrics.stepSeconds``): Prometheus scrapes each second

# ``scrapeIntervalSeconds: 15`` makes the rate window 60 s (four scrapes), which holds
# every observation this test makes; Prometheus itself scrapes each second. The fake's
# series carry no namespace label (in a cluster service discovery adds one), so the
# targets read series without it.
CONFIG = f"""\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {{name: llm, namespace: serving}}
spec:
  targets:
    - scaleTargetRef: {{name: llm}}
      minReplicas: 1
      maxReplicas: 10
      metrics:
        servingStack: vllm
        scrapeIntervalSeconds: 15
        matchers: {{namespace: "", model_name: {MODEL!r}}}
      policy: {{name: keda, threshold: {THRESHOLD}, pollingIntervalSeconds: 1,
                hpaSyncPeriodSeconds: 1}}
    - scaleTargetRef: {{name: llm-hybrid}}
      maxReplicas: 10
      metrics:
        servingStack: vllm
        scrapeIntervalSeconds: 15
        matchers: {{namespace: "", model_name: {MODEL!r}}}
      policy: {{name: hybrid}}
"""

# TTFT observations (seconds, count): 50 in (0.04, 0.06], 40 in (0.25, 0.5], 10 in (2.5, 5].
TTFT_SAMPLES = ((0.05, 50), (0.3, 40), (3.0, 10))


def interpolated_quantile(q: float, bounds: Sequence[float], samples) -> float:
    """Prometheus' ``histogram_quantile`` worked out by hand from raw observations.

    Its documented rule: the rank is ``q`` times the count; the answer lies in the
    first bucket whose cumulative count reaches the rank, interpolated linearly between
    that bucket's lower and upper bounds (the lowest bucket's lower bound is 0).
    """
    total = sum(n for _, n in samples)
    rank = q * total
    below, lower = 0, 0.0
    for upper in bounds:
        inside = sum(n for v, n in samples if lower < v <= upper)
        if below + inside >= rank:
            return lower + (upper - lower) * (rank - below) / inside
        below, lower = below + inside, upper
    raise AssertionError("rank beyond the last finite bucket")


TRITON_LOAD = SteadyLoad(
    executing=3.0,
    queued=2.0,
    completed=5.0,
    # Per second: 6 first responses in (0, 100] ms, 3 in (100, 500], 1 in (2000, 5000].
    first_response_ms=((50.0, 6.0), (300.0, 3.0), (3000.0, 1.0)),
)
TRITON_CONFIG = """\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: triton, namespace: serving}
spec:
  targets:
    - scaleTargetRef: {name: resnet}
      maxReplicas: 10
      metrics:
        servingStack: triton
        scrapeIntervalSeconds: 1
        matchers: {namespace: "", model: resnet}
      policy: {name: keda, threshold: 2, pollingIntervalSeconds: 1, hpaSyncPeriodSeconds: 1}
    - scaleTargetRef: {name: resnet-hybrid}
      maxReplicas: 10
      metrics:
        servingStack: triton
        scrapeIntervalSeconds: 1
        matchers: {namespace: "", model: resnet}
      policy: {name: hybrid}
"""


@pytest.fixture(scope="module")
def stand_ins(
    prometheus_bin, tmp_path_factory
) -> Iterator[tuple[FakeVllm, FakeTriton, Prometheus]]:
    with ExitStack() as stack:
        fake_vllm = FakeVllm(MODEL).start()
        stack.callback(fake_vllm.stop)
        fake_triton = FakeTriton(TRITON_LOAD, "resnet").start()
        stack.callback(fake_triton.stop)
        targets = [f"127.0.0.1:{fake_vllm.port}", f"127.0.0.1:{fake_triton.port}"]
        prom = Prometheus(prometheus_bin, tmp_path_factory.mktemp("prometheus"), targets)
        stack.callback(prom.process.stop)
        yield fake_vllm, fake_triton, prom


def _targets(text: str) -> dict[str, TargetRuntime]:
    doc = GPUScaler.model_validate(yaml.safe_load(text))
    return {rt.ref.name: rt for rt in runtimes([doc])}


def _value(source: PrometheusSource, rt: TargetRuntime, key: str, at: float) -> float:
    (result,) = source.instant(rt.policy.signals[key], at)
    return result.points[-1][1]


def test_vllm_preset_reads_vllm_series_and_keda_scales_out_on_waiting(stand_ins):
    fake, _, prom = stand_ins
    fake.running.set(8)
    fake.waiting.set(0)
    # Two scrapes of the empty histogram first: the rate window then starts from 0.
    prom.wait_for("count_over_time(vllm:time_to_first_token_seconds_count[1m]) >= 2")
    for value, n in TTFT_SAMPLES:
        for _ in range(n):
            fake.ttft.observe(value)
    prom.wait_for("vllm:time_to_first_token_seconds_count == 100")

    targets = _targets(CONFIG)
    keda, hybrid = targets["llm"], targets["llm-hybrid"]
    pods = tuple(PodStatus(f"llm-{i}", True, 0.0, 1.0) for i in range(2))
    with PrometheusSource(prom.url) as source:
        now = time.time()
        assert _value(source, keda, "query_0", now) == 8.0  # running
        assert _value(source, keda, "query_1", now) == 0.0  # waiting
        expected_p99 = interpolated_quantile(0.99, TTFT_BUCKETS, TTFT_SAMPLES)
        assert expected_p99 == pytest.approx(4.75)  # 2.5 + 2.5 x (99 - 90) / 10
        assert math.isclose(_value(source, hybrid, "ttft", now), expected_p99, rel_tol=1e-9)

        status = TargetStatus(2, pods)
        reader = hybrid.policy
        by_ttft = reader.decide(
            observe(source, reader, status, now, step_s=STEP_S), reader.initial_state()
        )
        # hybrid's TTFT need: the healthy Ready replicas times p99 over its SLO (2 s default).
        need = math.ceil(len(pods) * expected_p99 / TTFT_SLO_S)
        assert f"TTFT {expected_p99:.2f} s > {TTFT_SLO_S:g} s -> {need}" in by_ttft.reason
        assert by_ttft.replicas >= need

        policy = keda.policy
        first = policy.decide(
            observe(source, policy, status, now, step_s=STEP_S), policy.initial_state()
        )
        assert first.replicas == 2  # 8 running over 4 per replica

        # Below the HPA's scale-up limit (double, at least 4), so the proposal is the answer.
        fake.waiting.set(WAITING)
        prom.wait_for(f"vllm:num_requests_waiting == {WAITING}")
        later = time.time()
        second = policy.decide(observe(source, policy, status, later, step_s=STEP_S), first.state)
    assert second.replicas == math.ceil((8 + WAITING) / THRESHOLD) == 3


def test_triton_preset_reads_executing_by_littles_law_and_ttft_in_seconds(stand_ins):
    _, _, prom = stand_ins
    # Six samples: the 4 s rate window (four one-second scrapes) is full of the load.
    prom.wait_for("count_over_time(nv_inference_request_duration_us[10s]) >= 6")
    targets = _targets(TRITON_CONFIG)
    keda, hybrid = targets["resnet"], targets["resnet-hybrid"]
    with PrometheusSource(prom.url) as source:
        now = time.time()
        # Prometheus stamps a sample when its scrape starts and the stand-in reads its
        # clock when it answers, later by milliseconds (a tenth of a second at worst on a
        # loaded machine): over samples a second apart that moves the slope by under 10 %.
        executing = _value(source, keda, "query_0", now)
        assert executing == pytest.approx(TRITON_LOAD.executing, rel=0.1)
        assert _value(source, keda, "query_1", now) == TRITON_LOAD.queued
        per_s = TRITON_LOAD.first_response_ms
        expected_ms = interpolated_quantile(0.99, FIRST_RESPONSE_BUCKETS_MS, per_s)
        assert expected_ms == pytest.approx(4700.0)  # 2000 + 3000 x (9.9 - 9) / 1
        ttft = _value(source, hybrid, "ttft", now)
        assert ttft == pytest.approx(expected_ms / 1000.0, rel=1e-6)

        policy = keda.policy
        status = TargetStatus(2, tuple(PodStatus(f"resnet-{i}", True, 0.0, 1.0) for i in range(2)))
        decision = policy.decide(
            observe(source, policy, status, now, step_s=STEP_S), policy.initial_state()
        )
    # (3 executing + 2 queued) over 2 per replica.
    assert decision.replicas == math.ceil((TRITON_LOAD.executing + TRITON_LOAD.queued) / 2)
