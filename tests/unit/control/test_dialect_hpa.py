"""An HPA's ``behavior`` pasted from the Kubernetes docs: accepted as it is, decided alike."""

import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from gpuscale.control import config
from gpuscale.errors import ConfigError
from gpuscale.metrics.store import MetricStore
from gpuscale.scaling.baseline import HpaBehavior, RatePolicy, ScalingRules
from gpuscale.scaling.catalogue import get
from gpuscale.scaling.hpa import HpaConfig
from gpuscale.scaling.step import DecisionStep, StepSettings
from tests.support.dialects import FollowingPods

# The "Scaling policies" and "Stabilization window" examples of
# https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/
# (Configurable scaling behavior), fields and values as the page gives them, in one block.
UPSTREAM_BEHAVIOR = """\
behavior:
  scaleDown:
    stabilizationWindowSeconds: 300
    policies:
    - type: Pods
      value: 4
      periodSeconds: 60
    - type: Percent
      value: 10
      periodSeconds: 60
"""

# The same HPA as the simulator builds it: the API server's defaults written out.
GPUSCALE_WAY = HpaConfig(
    metric="DCGM_FI_DEV_GPU_UTIL",
    target_average_value=60.0,
    min_replicas=1,
    max_replicas=40,
    behavior=HpaBehavior(
        scale_up=ScalingRules(
            (RatePolicy("Pods", 4, 15.0), RatePolicy("Percent", 100, 15.0)), "Max", 0.0
        ),
        scale_down=ScalingRules(
            (RatePolicy("Pods", 4, 60.0), RatePolicy("Percent", 10, 60.0)), "Max", 300.0
        ),
    ),
)


def scaler(tmp_path: Path, behavior: str) -> Path:
    block = textwrap.indent(behavior, " " * 8)
    text = f"""\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {{name: llm, namespace: serving}}
spec:
  targets:
    - scaleTargetRef: {{name: llm}}
      minReplicas: 1
      maxReplicas: 40
      policy:
        name: hpa
        metric: DCGM_FI_DEV_GPU_UTIL
        targetAverageValue: 60
{block}"""
    path = tmp_path / "scaler.yaml"
    path.write_text(text)
    return path


def run(hpa: HpaConfig, utilisation: list[float]) -> list[int]:
    """Each sync's replicas when every pod reports the given GPU utilisation (one per 15 s)."""
    store = MetricStore()
    policy = get("hpa").build(hpa, "hpa")
    settings = StepSettings(hpa.min_replicas, hpa.max_replicas, namespace="serving")
    step = DecisionStep(policy, store, settings, policy.signal_path)
    workload, state, out = FollowingPods(20), policy.initial_state(), []
    for i, util in enumerate(utilisation):
        t = 15.0 * (i + 1)
        pods = [{"pod": f"p{n}", "namespace": "serving"} for n in range(workload.desired)]
        store.ingest(t, "DCGM_FI_DEV_GPU_UTIL", pods, np.full(len(pods), util))
        outcome = step.run(workload, lambda t=t: t, state)
        assert outcome.held is None, outcome.reason
        state = outcome.state
        out.append(outcome.replicas)
    return out


def test_the_docs_behavior_is_accepted_unchanged_and_decides_as_the_gpuscale_way(tmp_path):
    target = config.load(scaler(tmp_path, UPSTREAM_BEHAVIOR))[0].spec.targets[0]
    pasted = config.policy_config(target)
    assert pasted == GPUSCALE_WAY  # scaleUp and selectPolicy took the API server's defaults
    # Busy, then idle for 10 minutes, then busy again: up by rate, down after the window.
    load = [90.0] * 8 + [6.0] * 40 + [95.0] * 6
    assert run(pasted, load) == run(GPUSCALE_WAY, load)
    replicas = run(pasted, load)
    # Scale-in starts once the 300 s window has passed and removes at most
    # max(4 pods, 10 %) per 60 s: never more than 4 between syncs a minute apart.
    first_down = next(i for i, r in enumerate(replicas) if i > 8 and r < replicas[i - 1])
    assert first_down == 7 + 300 // 15  # the last busy recommendation (sync 7) has left it
    drops = [replicas[i] - replicas[i + 4] for i in range(first_down, 44)]
    assert max(drops) <= 4
    assert min(replicas) < max(replicas)


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        (
            "behavior: {scaleUp: {policies: [{type: Pods, value: 4, periodSeconds: 1801}]}}",
            "scaleUp.policies[0].periodSeconds: 1801.0 is out of range",
        ),
        (
            "behavior: {scaleDown: {stabilizationWindowSeconds: 3601}}",
            "scaleDown.stabilizationWindowSeconds: 3601.0 is out of range; use 0..3600",
        ),
        (
            "behavior: {scaleUp: {policies: [{type: Pods, value: 0, periodSeconds: 15}]}}",
            "scaleUp.policies[0].value: 0 is out of range",
        ),
        ("behavior: {scaleUp: {policies: []}}", "scaleUp.policies: () is empty"),
        ("behavior: {scaleUp: {selectPolicy: Largest}}", "scaleUp.selectPolicy: input should be"),
        ("behavior: {scaleUp: {tolerance: -0.1}}", "scaleUp.tolerance: -0.1 is out of range"),
    ],
)
def test_the_api_servers_limits_are_refused_in_one_line_naming_the_key(tmp_path, block, problem):
    with pytest.raises(ConfigError) as info:
        config.load(scaler(tmp_path, block + "\n"))
    message = str(info.value)
    assert "\n" not in message
    assert "policy.behavior" in message
    assert problem in message


def test_kind_in_a_rate_policy_is_refused_with_the_hpas_spelling(tmp_path):
    block = "behavior: {scaleDown: {policies: [{kind: Pods, value: 4, periodSeconds: 60}]}}\n"
    with pytest.raises(ConfigError, match=r"policies\[0\]\.kind: unknown key; rename it to type"):
        config.load(scaler(tmp_path, block))


def test_omitted_fields_take_each_directions_own_defaults(tmp_path):
    block = (
        "behavior: {scaleUp: {stabilizationWindowSeconds: 30}, scaleDown: {selectPolicy: Min}}\n"
    )
    cfg = config.policy_config(config.load(scaler(tmp_path, block))[0].spec.targets[0])
    up, down = cfg.behavior.scale_up, cfg.behavior.scale_down
    assert (up.stabilization_window_s, up.select_policy) == (30, "Max")
    assert up.policies == (RatePolicy("Pods", 4, 15.0), RatePolicy("Percent", 100, 15.0))
    assert (down.stabilization_window_s, down.select_policy) == (300.0, "Min")
    assert down.policies == (RatePolicy("Percent", 100, 15.0),)


def test_per_direction_tolerance_widens_only_its_own_side(tmp_path):
    # A 5 % scale-up tolerance; scale-down keeps the cluster-wide 10 %.
    block = "behavior:\n  scaleUp:\n    tolerance: 0.05\n"
    cfg = config.policy_config(config.load(scaler(tmp_path, block))[0].spec.targets[0])
    assert cfg.behavior.tolerances(cfg.tolerance) == (0.1, 0.05)
    # 20 pods at 64.2 % against 60 %: ratio 1.07, outside 5 % but inside 10 %.
    assert run(cfg, [64.2])[0] == 22
    assert run(GPUSCALE_WAY, [64.2])[0] == 20
    assert yaml.safe_load(block)["behavior"]["scaleUp"]["tolerance"] == 0.05
