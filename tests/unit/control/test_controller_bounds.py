"""Whatever the data says, a sync keeps replicas in [min, max], within the step bounds, and
never scales in while holding (hypothesis over the real loop, double and store)."""

import itertools
import math
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale.control.config import load
from gpuscale.control.controller import Controller
from gpuscale.control.kubecall import RetryPolicy
from gpuscale.control.kubernetes import KubeActuator
from gpuscale.control.seams import Settings
from gpuscale.control.targets import runtimes
from gpuscale.metrics.store import MetricStore
from tests.support.kubeapi import KubeApiDouble, ManualClock

FAST = RetryPolicy(attempts=2, base_s=0.01, max_s=0.02, total_s=2.0, timeout_s=5.0)
COUNTER = itertools.count()
values = st.one_of(
    st.floats(0, 300),
    st.just(math.inf),
    st.just(math.nan),  # NaN: the sample is absent
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    current=st.integers(0, 12),
    lo=st.integers(1, 5),
    span=st.integers(0, 6),
    up=st.one_of(st.none(), st.integers(1, 3)),
    down=st.one_of(st.none(), st.integers(1, 3)),
    utils=st.lists(values, min_size=0, max_size=12),
)
def test_sync_keeps_bounds_and_steps(tmp_path_factory, current, lo, span, up, down, utils):
    hi = lo + span
    name = f"w{next(COUNTER)}"
    tmp: Path = tmp_path_factory.mktemp(name)
    clock = ManualClock()
    with KubeApiDouble(clock=clock) as api:
        api.create_deployment(name, replicas=current)
        steps = (f"  maxScaleUpStep: {up}\n" if up else "") + (
            f"  maxScaleDownStep: {down}\n" if down else ""
        )
        (tmp / "c.yaml").write_text(
            "apiVersion: gpuscale.io/v1alpha1\nkind: GPUScaler\n"
            "metadata: {name: p, namespace: default}\nspec:\n  targets:\n"
            f"  - scaleTargetRef: {{name: {name}}}\n    minReplicas: {lo}\n"
            f"    maxReplicas: {hi}\n"
            + "".join("  " + line + "\n" for line in steps.splitlines())
            + "    policy: {name: hpa, targetAverageValue: 50}\n"
        )
        store = MetricStore()
        pods = [p["metadata"]["name"] for p in api.pods()]
        if pods and utils:
            vals = [utils[i % len(utils)] for i in range(len(pods))]
            labels = [{"pod": p, "namespace": "default"} for p in pods]
            store.ingest(clock() - 1, "DCGM_FI_DEV_GPU_UTIL", labels, np.array(vals))
        act = KubeActuator.connect(
            str(api.write_kubeconfig(tmp / "kc")), retry=FAST, sleep=lambda _s: None, clock=clock
        )
        ctl = Controller(
            runtimes(load(tmp / "c.yaml")), store, act, settings=Settings(workers=1), clock=clock
        )
        [out] = ctl.sync()
        act.close()
    assert out.error is None, out.reason
    assert lo <= out.replicas <= hi
    if lo <= current <= hi:
        if up is not None:
            assert out.replicas - current <= up
        if down is not None:
            assert current - out.replicas <= down
        if out.held is not None:
            assert out.replicas == current  # a hold never scales in (nor out)
