"""``metrics.servingStack``: each policy's serving signals compile to the stack's own PromQL.

The expected queries are written out here, from the upstream names the preset documents
(docs/autoscaler.md), so a changed name or a changed query shape fails a test.
"""

import textwrap
from pathlib import Path

import pytest
import yaml

from gpuscale.control import config
from gpuscale.control.config import GPUScaler
from gpuscale.control.targets import TargetRuntime, runtimes
from gpuscale.errors import ConfigError
from gpuscale.metrics.promql import compile_signal

RUNNING = {
    "vllm": 'sum (vllm:num_requests_running{namespace="ml"})',
    "tgi": 'sum (tgi_batch_current_size{namespace="ml"})',
    "triton": 'sum ((rate(nv_inference_request_duration_us{namespace="ml"}[60s]) - '
    'rate(nv_inference_queue_duration_us{namespace="ml"}[60s])) * 1e-06)',
}
WAITING = {
    "vllm": 'sum (vllm:num_requests_waiting{namespace="ml"})',
    "tgi": 'sum (tgi_queue_size{namespace="ml"})',
    "triton": 'sum (nv_inference_pending_request_count{namespace="ml"})',
}
DONE_BY_POD = {
    "vllm": 'sum by (pod) (vllm:request_success_total{namespace="ml"})',
    "tgi": 'sum by (pod) (tgi_request_success{namespace="ml"})',
    "triton": 'sum by (pod) (nv_inference_request_success{namespace="ml"})',
}
TTFT = {
    "vllm": "(histogram_quantile(0.99, sum by (le) "
    '(rate(vllm:time_to_first_token_seconds_bucket{namespace="ml"}[60s])))) >= 0',
    "tgi": None,  # TGI exports no time-to-first-token histogram
    "triton": "(histogram_quantile(0.99, sum by (le) "
    '(rate(nv_inference_first_response_histogram_ms_bucket{namespace="ml"}[60s]))) * 0.001) >= 0',
}
IN_FLIGHT, QUEUED = "gpuscale_serving_requests_in_flight", "gpuscale_serving_queue_requests"
STACKS = ("vllm", "tgi", "triton")


def target(stack: str, policy: str, metrics: str = "") -> TargetRuntime:
    text = f"""\
        apiVersion: gpuscale.io/v1alpha1
        kind: GPUScaler
        metadata: {{name: a, namespace: ml}}
        spec:
          targets:
            - scaleTargetRef: {{name: llm}}
              maxReplicas: 8
              metrics: {{servingStack: {stack}{metrics}}}
              policy: {policy}
        """
    doc = GPUScaler.model_validate(yaml.safe_load(textwrap.dedent(text)))
    (rt,) = runtimes([doc])
    return rt


def queries(rt: TargetRuntime) -> dict[str, str]:
    return {k: compile_signal(s) for k, s in rt.policy.signals.items()}


@pytest.mark.parametrize("stack", STACKS)
def test_keda_query_is_the_stacks_running_plus_waiting(stack):
    assert queries(target(stack, "{name: keda, threshold: 5}")) == {
        "query_0": RUNNING[stack],
        "query_1": WAITING[stack],
    }


@pytest.mark.parametrize("stack", STACKS)
def test_predictive_demand_reads_the_stack(stack):
    assert queries(target(stack, "{name: predictive}")) == {
        IN_FLIGHT: RUNNING[stack],
        QUEUED: WAITING[stack],
    }


@pytest.mark.parametrize("stack", STACKS)
def test_kpa_reads_the_stack_over_its_one_second_scrapes(stack):
    rt = target(stack, "{name: kpa}", ", scrapeIntervalSeconds: 1")
    # Four scrapes of one second: Triton's busy-time rate is over 4 s.
    running = RUNNING[stack].replace("[60s]", "[4s]")
    assert queries(rt) == {"concurrency": running, "queue": WAITING[stack]}


@pytest.mark.parametrize("stack", STACKS)
def test_hybrid_reads_demand_ttft_and_completions_from_the_stack(stack):
    rt = target(stack, "{name: hybrid}")
    expected = {IN_FLIGHT: RUNNING[stack], QUEUED: WAITING[stack]}
    if TTFT[stack] is not None:
        expected["ttft"] = TTFT[stack]
    assert queries(rt) == expected
    assert compile_signal(rt.policy.pod_signals["done"]) == DONE_BY_POD[stack]
    # No request in the window is no TTFT reading, not a hold.
    assert "ttft" not in rt.policy.signals or rt.policy.signals["ttft"].optional


def test_the_quantile_follows_latency_quantile_and_the_window_the_scrape_interval():
    rt = target("vllm", "{name: hybrid}", ", latencyQuantile: 0.95, scrapeIntervalSeconds: 30")
    assert queries(rt)["ttft"] == (
        "(histogram_quantile(0.95, sum by (le) "
        '(rate(vllm:time_to_first_token_seconds_bucket{namespace="ml"}[120s])))) >= 0'
    )


def test_the_targets_matchers_reach_the_quantile_escaped():
    rt = target("vllm", "{name: hybrid}", ', matchers: {model_name: "a\\"b"}')
    assert 'model_name="a\\"b",namespace="ml"' in queries(rt)["ttft"]


def test_an_explicit_signal_wins_over_the_stack():
    override = f", signals: {{{QUEUED}: {{metric: my_queue, aggregation: max}}}}"
    rt = target("vllm", "{name: predictive}", override)
    assert queries(rt) == {IN_FLIGHT: RUNNING["vllm"], QUEUED: "max (my_queue)"}


def test_hybrid_keeps_a_ttft_series_it_names_itself():
    rt = target("vllm", "{name: hybrid, ttftMetric: llm:ttft_p95:seconds}")
    assert queries(rt)["ttft"] == 'max (llm:ttft_p95:seconds{namespace="ml"})'


def test_without_a_stack_the_policy_reads_gpuscale_series():
    text = (
        "apiVersion: gpuscale.io/v1alpha1\nkind: GPUScaler\nmetadata: {name: a, namespace: ml}\n"
        "spec: {targets: [{scaleTargetRef: {name: llm}, maxReplicas: 8, "
        "policy: {name: keda, threshold: 5}}]}"
    )
    doc = GPUScaler.model_validate(yaml.safe_load(text))
    (rt,) = runtimes([doc])
    assert queries(rt) == {
        "query_0": f'sum ({IN_FLIGHT}{{namespace="ml"}})',
        "query_1": f'sum ({QUEUED}{{namespace="ml"}})',
    }


@pytest.mark.parametrize(
    ("metrics", "key", "problem"),
    [
        ("{servingStack: sglang}", "metrics.servingStack", "'vllm', 'tgi' or 'triton'"),
        ("{servingStack: vllm, latencyQuantile: 1}", "metrics.latencyQuantile", "less than 1"),
    ],
)
def test_a_bad_stack_or_quantile_is_one_line_naming_the_key(tmp_path: Path, metrics, key, problem):
    path = tmp_path / "scaler.yaml"
    path.write_text(
        "apiVersion: gpuscale.io/v1alpha1\nkind: GPUScaler\nmetadata: {name: a}\nspec:\n"
        "  targets:\n    - scaleTargetRef: {name: llm}\n      maxReplicas: 8\n"
        f"      metrics: {metrics}\n      policy: {{name: keda, threshold: 5}}\n"
    )
    with pytest.raises(ConfigError) as info:
        config.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}:8 spec.targets[0].{key}: ")
    assert problem in message
    assert "\n" not in message


def test_a_target_told_its_attainment_takes_the_servers_concurrency_as_a_pods_slots():
    rt = target("vllm", "{name: hybrid, targetAttainment: 0.99, podConcurrency: 256}")
    config = rt.policy.inner.config
    assert (config.target_attainment, config.pod_concurrency) == (0.99, 256)
