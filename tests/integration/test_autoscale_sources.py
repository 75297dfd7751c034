"""The controller decides the same from the in-process store, a real Prometheus and a real
VictoriaMetrics holding the same samples: the live path changes the source, not the decision."""

import math
import shutil
import statistics
import time
from pathlib import Path

import pytest

from gpuscale.control.config import load
from gpuscale.control.controller import Controller
from gpuscale.control.kubernetes import KubeActuator
from gpuscale.control.seams import Settings
from gpuscale.control.targets import runtimes
from gpuscale.metrics.prometheus import PrometheusSource
from gpuscale.metrics.store import MetricStore
from tests.support.kubeapi import KubeApiDouble, ManualClock
from tests.support.tsdb import (
    Series,
    VictoriaMetrics,
    backfilled_prometheus,
    feed_store,
    prometheus_text,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not all(shutil.which(b) for b in ("prometheus", "promtool", "victoria-metrics")),
        reason="prometheus, promtool or victoria-metrics not installed",
    ),
]

UTIL = "DCGM_FI_DEV_GPU_UTIL"
SM = "DCGM_FI_PROF_SM_ACTIVE"
CONFIG = """\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: same, namespace: default}
spec:
  targets:
    - scaleTargetRef: {name: llm}
      minReplicas: 1
      maxReplicas: 20
      policy: {name: hpa, targetAverageValue: 50}
    - scaleTargetRef: {name: emb}
      minReplicas: 1
      maxReplicas: 20
      policy:
        name: keda
        threshold: 0.5
        querySignal: {metric: DCGM_FI_PROF_SM_ACTIVE, matchers: {container: emb}, aggregation: sum}
        pollingIntervalSeconds: 15
"""


def test_store_prometheus_and_victoriametrics_give_the_same_decisions(tmp_path: Path):
    at = float(int(time.time() // 3600 * 3600 - 3 * 3600))  # backfill: 2 to 3 h back
    clock = ManualClock(at)
    with KubeApiDouble(clock=clock) as api:
        api.create_deployment("llm", replicas=3)
        api.create_deployment("emb", replicas=2)
        series, now_util, now_sm = [], {}, {}
        for i, pod in enumerate(p["metadata"]["name"] for p in api.pods()):
            container = pod.split("-")[0]
            labels = {"namespace": "default", "pod": pod, "container": container, "gpu": str(i)}
            steps = [at - 300 + 15 * k for k in range(21)]
            util = tuple((t, 40.0 + 7.0 * i + (t - at) / 30) for t in steps)
            sm = tuple((t, 0.3 + 0.1 * i) for t in steps)
            series += [Series(UTIL, labels, util), Series(SM, labels, sm)]
            now_util.setdefault(container, []).append(util[-1][1])
            now_sm.setdefault(container, []).append(sm[-1][1])
        store = MetricStore(retention_s=3600)
        feed_store(store, series)
        (tmp_path / "prom").mkdir()
        prom = backfilled_prometheus(tmp_path / "prom", series)
        (tmp_path / "vm").mkdir()
        vm = VictoriaMetrics(
            "victoria-metrics", tmp_path / "vm", ("-search.minStalenessInterval=5m",)
        )
        config = tmp_path / "same.yaml"
        config.write_text(CONFIG)
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kc"))
        try:
            vm.import_prometheus(prometheus_text(series))
            found = {}
            http = [PrometheusSource(prom.url), PrometheusSource(vm.url)]
            for name, source in zip(
                ("store", "prometheus", "victoriametrics"), [store, *http], strict=True
            ):
                act = KubeActuator.connect(kubeconfig, clock=clock)
                ctl = Controller(
                    runtimes(load(config)), source, act,
                    settings=Settings(dry_run=True, workers=1), clock=clock,
                )  # fmt: skip
                found[name] = [
                    (o.target, o.held, o.error, o.replicas, o.inputs) for o in ctl.sync()
                ]
                act.close()
            for src in http:
                src.close()
        finally:
            prom.process.stop()
            vm.stop()

    # What an HPA and KEDA compute from these samples: ratio = usage / target; outside the
    # 10 % tolerance the count is ceil(current * ratio).
    def expected(current: int, ratio: float) -> int:
        return current if abs(ratio - 1) <= 0.1 else math.ceil(current * ratio)

    llm_ratio = statistics.mean(now_util["llm"]) / 50
    emb_ratio = sum(now_sm["emb"]) / (0.5 * 2)
    llm, emb = found["store"]
    assert llm[1:4] == (None, None, expected(3, llm_ratio))
    assert emb[1:4] == (None, None, expected(2, emb_ratio))
    assert (llm[3], emb[3]) != (3, 2)  # the data asks for a change, so a source that
    # answered differently would show
    assert found["prometheus"] == found["store"]
    assert found["victoriametrics"] == found["store"]
