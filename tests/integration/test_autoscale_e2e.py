"""End to end: simulated GPUs -> gpuscale exporter -> real Prometheus -> gpuscale autoscale
(a process) -> the API double. Load rises and replicas follow within two sync periods;
Prometheus stops and replicas hold; it returns and control resumes; a restarted
controller keeps its stabilisation window."""

import shutil
import time
from pathlib import Path

import pytest

from tests.support.autoscale import (
    Autoscaler,
    DoubleKubelet,
    KubeletServer,
    exporter_at,
    restart_prometheus,
    wait_until,
)
from tests.support.control import STATE, saved_state, state_writes
from tests.support.kubeapi import KubeApiDouble
from tests.support.servers import Prometheus, free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed"),
    pytest.mark.timeout(240),
]

SYNC_S = 2.0
# A rise visible in Prometheus at t is acted on by the next sync (at most one period
# later), whose decision may land just after a sync started (a second period); 1 s more
# covers the test's own 0.2 s polling and the controller's queries and PATCH.
REACT_S = 2 * SYNC_S + 1.0
TARGET = "default/Deployment/llm"

CONFIG = """\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: e2e, namespace: default}
spec:
  targets:
    - scaleTargetRef: {name: llm}
      minReplicas: 2
      maxReplicas: 8
      policy:
        name: hpa
        targetAverageValue: 50
        downscaleStabilizationSeconds: %d
      metrics: {staleAfterSeconds: 10, stepSeconds: 1}
"""


class Rig:
    """The chain on this machine; load changes restart the exporter on the same port."""

    def __init__(self, tmp: Path, window_s: int) -> None:
        self.tmp = tmp
        self.controllers: list[Autoscaler] = []
        self.api = KubeApiDouble().start()
        self.kubelet = self.exporter = self.prom = None
        try:
            self.api.create_deployment("llm", replicas=2)
            self.kubeconfig = self.api.write_kubeconfig(tmp / "kubeconfig")
            self.kubelet = KubeletServer(DoubleKubelet(self.api))
            self.port = free_port()
            self.exporter = self.start_exporter(0.2)
            (tmp / "prom").mkdir()
            self.prom = Prometheus("prometheus", tmp / "prom", [f"127.0.0.1:{self.port}"])
            self.config = tmp / "scaler.yaml"
            self.config.write_text(CONFIG % window_s)
        except BaseException:
            self.stop()
            raise

    def start_exporter(self, load: float):
        return exporter_at(
            self.tmp,
            self.port,
            "--source",
            "sim",
            "--gpus",
            "8",
            "--load",
            f"constant:{load}",
            "--kubernetes",
            "--pod-resources-kubelet-socket",
            self.kubelet.socket,
        )

    def set_load(self, load: float) -> None:
        self.exporter.stop()
        self.exporter = self.start_exporter(load)

    def autoscaler(self, name: str = "autoscaler") -> Autoscaler:
        ctl = Autoscaler(
            self.tmp,
            self.config,
            self.kubeconfig,
            self.prom.url,
            "--sync-period",
            str(SYNC_S),
            "--lease-duration",
            "4",
            "--renew-deadline",
            "3",
            "--retry-period",
            "0.5",
            "--lease-namespace",
            STATE.namespace,
            name=name,
        )
        self.controllers.append(ctl)
        return ctl

    def replicas(self) -> int:
        return int(self.api.get("apps/v1", "deployments", "llm", "default")["spec"]["replicas"])

    def avg_util(self) -> float | None:
        found = self.prom.query('avg(DCGM_FI_DEV_GPU_UTIL{namespace="default"})')
        return float(found[0]["value"][1]) if found else None

    def stop(self) -> None:
        for ctl in self.controllers:
            ctl.stop()
        for part in (self.prom.process if self.prom else None, self.exporter, self.kubelet):
            if part is not None:
                part.stop()
        self.api.stop()


@pytest.fixture
def rig(tmp_path):
    made: list[Rig] = []

    def make(window_s: int) -> Rig:
        made.append(Rig(tmp_path, window_s))
        return made[-1]

    yield make
    for r in made:
        r.stop()


def test_load_rise_prometheus_outage_and_return(rig):
    r = rig(0)
    wait_until(lambda: (r.avg_util() or 0) > 0, 30)  # the pods' GPUs are scraped
    ctl = r.autoscaler()
    wait_until(lambda: len([d for d in ctl.decisions(TARGET) if d["held"] is None]) >= 2, 30)
    assert r.replicas() == 2  # 20 % against a 50 % target: minReplicas

    # Steady load: the stored state is not rewritten at every sync while only time
    # moves (the HPA's newest recommendation time): at most once a minute.
    writes, decided = state_writes(r.api), len(ctl.decisions(TARGET))
    time.sleep(30.0)
    syncs = len(ctl.decisions(TARGET)) - decided
    assert syncs >= 10
    assert state_writes(r.api) - writes <= 1
    assert saved_state(r.api, "llm")["policy"] == "hpa"  # in the controller's namespace
    # the workload is written only through /scale: the state needs no patch on it
    workload = "/apis/apps/v1/namespaces/default/deployments/llm"
    assert [w for w in r.api.writes if w[2].split(" ")[1] == workload] == []

    # The load rises: replicas follow within two sync periods of Prometheus seeing it.
    r.set_load(0.9)
    seen = wait_until(lambda: (r.avg_util() or 0) > 50, 30)
    rose = wait_until(lambda: r.replicas() > 2, 30)
    assert rose - seen <= REACT_S
    wait_until(lambda: r.replicas() >= 4, 30)

    # Prometheus stops and the load drops while it is away: the controller is blind and
    # holds; a policy fed "no data" would have scaled in.
    r.prom.process.stop()
    held_at = r.replicas()
    r.set_load(0.2)
    wait_until(lambda: ctl.metric("gpuscale_autoscaler_metrics_healthy", target=TARGET) == 0, 10)
    holds_before = len([d for d in ctl.decisions(TARGET) if d["held"] == "unavailable"])
    wait_until(
        lambda: (
            len([d for d in ctl.decisions(TARGET) if d["held"] == "unavailable"])
            >= holds_before + 3
        ),
        6 * SYNC_S,
    )
    assert r.replicas() == held_at
    errors = ctl.metric(
        "gpuscale_autoscaler_errors_total", reason="metrics_unavailable", target=TARGET
    )
    assert errors is not None
    assert errors >= 3
    assert any(
        e["reason"] == "MetricsUnhealthy"
        for e in r.api.store.list(r.api.store.resource("v1", "events"), "default")
    )

    # Prometheus returns (same port, same data): control resumes and scales in to the low load.
    # Its first answers are the samples from before the outage, older than the 10 s
    # staleness bound: those hold too, until fresh scrapes arrive.
    restart_prometheus(r.prom)
    wait_until(lambda: r.replicas() < held_at, 60)
    resumed = wait_until(lambda: ctl.decisions(TARGET)[-1]["replicas"] < held_at, 10)
    after = [d for d in ctl.decisions(TARGET) if d["ts"] <= resumed][-1]
    assert after["held"] is None
    assert "20.0 vs 50" in after["reason"]
    assert ctl.metric("gpuscale_autoscaler_metrics_healthy", target=TARGET) == 1


def test_restarted_controller_keeps_its_stabilisation_window(rig):
    # The window is long enough that the restarted controller (a new Python process, a few
    # seconds to start on a busy machine) makes its first decisions inside it.
    window = 40
    r = rig(window)
    r.set_load(0.9)
    wait_until(lambda: (r.avg_util() or 0) > 50, 30)
    first = r.autoscaler("first")
    wait_until(lambda: r.replicas() >= 4, 30)
    r.set_load(0.2)
    wait_until(lambda: (r.avg_util() or 100) < 50, 30)

    def low_seen() -> int:
        return len([d for d in first.decisions(TARGET) if "20.0 vs 50" in d["reason"]])

    # The controller sees the low load a few times, so the window's last high
    # recommendation lies well before the restart.
    wait_until(lambda: low_seen() >= 3, 30)
    held = r.replicas()
    first.stop()  # SIGTERM: releases the lease
    recs = saved_state(r.api, "llm")["state"]["recommendations"]
    last_high = max(t for t, n in recs if n >= held)
    restarted_at = time.time()
    second = r.autoscaler("second")
    scaled_in = wait_until(lambda: r.replicas() < held, 90)
    trail = [(round(d["ts"] - last_high, 1), d["replicas"], d["held"]) for d in second.decisions()]
    facts = f"last high at 0, restart at {restarted_at - last_high:.1f}, scaled in at " + (
        f"{scaled_in - last_high:.1f}; second's decisions: {trail}"
    )
    # It held while the saved window lasted, and scaled in when that window ended, not a
    # whole window after its own start (which is when a controller that lost its state
    # would: the HPA seeds a fresh window with the current count).
    assert trail[0][1] == held, facts
    assert scaled_in >= last_high + window - 0.5, facts
    assert scaled_in < restarted_at + window, facts
