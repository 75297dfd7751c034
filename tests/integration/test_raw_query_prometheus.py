"""Raw PromQL signals on a real Prometheus: rate(), =~ and histogram_quantile, end to end.

One history is backfilled with promtool: request counters of three pods growing
at known rates (two ``llama`` models, one ``mistral``) and a latency histogram
whose buckets grow by fixed counts per scrape. The expected values follow from
PromQL's definitions: ``rate()`` of a counter growing linearly is its slope, and
``histogram_quantile`` interpolates linearly inside the bucket holding the rank.
"""

import math
import time
from collections.abc import Iterator

import pytest

from gpuscale.control.config import load
from gpuscale.control.controller import Controller
from gpuscale.control.kubernetes import KubeActuator
from gpuscale.control.seams import Settings
from gpuscale.control.targets import close_sources, runtimes
from gpuscale.metrics.prometheus import PrometheusSource
from gpuscale.metrics.signal import Signal
from gpuscale.metrics.store import MetricStore
from gpuscale.scaling.catalogue import get
from gpuscale.scaling.keda import KedaConfig
from gpuscale.scaling.step import DecisionStep, StepSettings
from tests.support.control import FAST, replicas
from tests.support.dialects import FollowingPods
from tests.support.kubeapi import KubeApiDouble, ManualClock
from tests.support.tsdb import Series, backfilled_prometheus, history_start

pytestmark = pytest.mark.integration

STEP = 15.0
N = 40  # ten minutes of samples
T0 = history_start(time.time())
END = T0 + STEP * (N - 1)
REQUESTS = "gpuscale_test_requests"
TTFT = "gpuscale_test_ttft_seconds_bucket"
PER_SECOND = {("a", "llama-7b"): 3.0, ("b", "llama-70b"): 6.0, ("c", "mistral"): 1.0}
# Observations per scrape at or below each bound: 10 under 0.1 s, 50 under 0.5 s, ...
BUCKETS = {"0.1": 10.0, "0.5": 50.0, "1": 90.0, "+Inf": 100.0}

LLAMA_RATE = f'sum(rate({REQUESTS}{{model=~"llama-.*"}}[1m]))'
P70 = f"histogram_quantile(0.7, sum by (le) (rate({TTFT}[1m])))"
# The 70th percentile's rank is 70 of 100 per scrape: in the (0.5, 1] bucket (50 to 90).
P70_SECONDS = 0.5 + (1.0 - 0.5) * (70 - 50) / (90 - 50)
REL = 1e-9  # float rounding of the slope over a few samples


def _history() -> list[Series]:
    out = [
        Series(
            REQUESTS,
            {"pod": pod, "model": model},
            tuple((T0 + STEP * k, rate * STEP * k) for k in range(N)),
        )
        for (pod, model), rate in PER_SECOND.items()
    ]
    out += [
        Series(TTFT, {"le": le}, tuple((T0 + STEP * k, per * k) for k in range(N)))
        for le, per in BUCKETS.items()
    ]
    return out


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Iterator[PrometheusSource]:
    prom = backfilled_prometheus(tmp_path_factory.mktemp("rawquery"), _history())
    try:
        with PrometheusSource(prom.url) as src:
            yield src
    finally:
        prom.process.stop()


AT = T0 + STEP * 30 + 7.5  # inside the history, off the sample grid


def test_rate_over_a_regex_selector_is_the_llama_pods_slope(source):
    (result,) = source.instant(Signal("llama", query=LLAMA_RATE), AT)
    assert math.isclose(result.points[0][1], 3.0 + 6.0, rel_tol=REL)
    (series,) = source.range(Signal("llama", query=LLAMA_RATE), AT - 60, AT, STEP)
    assert [t for t, _ in series.points] == [AT - 60 + STEP * i for i in range(5)]
    assert all(math.isclose(v, 9.0, rel_tol=REL) for _, v in series.points)


def test_histogram_quantile_interpolates_in_the_bucket_of_the_rank(source):
    (result,) = source.instant(Signal("ttft_p70", query=P70), AT)
    assert math.isclose(result.points[0][1], P70_SECONDS, rel_tol=REL)


def test_freshness_reads_the_queries_own_selectors_regex_included(source):
    raw = Signal("llama", query=LLAMA_RATE)
    last_sample = T0 + STEP * 30
    assert source.newest(raw, AT) == last_sample
    # Only the pods the =~ matcher selects: mistral's pod c is not read.
    assert source.newest_by(raw, AT, "pod") == {"a": last_sample, "b": last_sample}
    # Two minutes after the last scrape the query still answers (rate looks back),
    # but its series are two minutes old: stale for a 60 s bound.
    assert source.newest(raw, END + 120) == END
    assert source.instant(raw, END + 30)  # the result alone would look fresh
    both = Signal("both", query=f"{LLAMA_RATE} / on() {P70}")
    assert source.newest(both, AT) == last_sample


def test_keda_with_a_raw_query_decides_through_the_step_on_prometheus(source):
    cfg = KedaConfig(threshold=2.0, query_signal=Signal("llama", query=LLAMA_RATE), min_replicas=1)
    policy = get("keda").build(cfg, "keda")
    step = DecisionStep(policy, source, StepSettings(1, 10), policy.signal_path)
    outcome = step.run(FollowingPods(3), lambda: AT, policy.initial_state())
    assert outcome.held is None, outcome.reason
    assert outcome.replicas == math.ceil(9.0 / 2.0)  # ceil(9 requests/s over 2 per replica)
    # Two minutes after the last scrape a 5-minute rate still answers; its series are
    # two minutes old, and the step holds on them (stale after 60 s by default).
    slow = Signal("llama", query=LLAMA_RATE.replace("[1m]", "[5m]"))
    policy = get("keda").build(KedaConfig(threshold=2.0, query_signal=slow, min_replicas=1), "k")
    step = DecisionStep(policy, source, StepSettings(1, 10), policy.signal_path)
    stale = step.run(FollowingPods(3), lambda: END + 120, policy.initial_state())
    assert stale.held is not None
    assert "newest sample 120 s old" in stale.reason
    assert stale.replicas == 3


def test_a_scaledobjects_server_address_is_the_one_its_target_is_read_from(source, tmp_path):
    # The controller's own source is an empty store: only the trigger's server has data.
    scaler = tmp_path / "scaler.yaml"
    scaler.write_text(
        f"""\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {{name: web, namespace: default}}
spec:
  targets:
  - scaleTargetRef: {{name: web}}
    minReplicaCount: 1
    maxReplicaCount: 10
    triggers:
    - type: prometheus
      metadata:
        serverAddress: {source.url}
        query: {LLAMA_RATE}
        threshold: '2'
        queryParameters: dedup=true
"""
    )
    clock = ManualClock(AT)
    with KubeApiDouble(clock=clock) as api:
        api.create_deployment("web", replicas=3)
        act = KubeActuator.connect(
            str(api.write_kubeconfig(tmp_path / "kubeconfig")), retry=FAST, clock=clock
        )
        try:
            targets = runtimes(load(scaler))
            ctl = Controller(
                targets,
                MetricStore(),
                act,
                settings=Settings(sync_period_s=15.0, workers=1),
                clock=clock,
            )
            [out] = ctl.sync()
        finally:
            close_sources(targets)
            act.close()
        assert out.held is None, out.reason
        assert out.replicas == math.ceil(9.0 / 2.0) == replicas(api)
