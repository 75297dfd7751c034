"""One step, two loops: the controller, fed what the simulator's step sees, acts as it does.

Each policy runs in the simulator on a faulted scenario (a GPU falls off the bus with
its pod left stuck on it, a double-bit ECC error, and the metrics source down for two
minutes), with remediation on. In lockstep, before each of the simulator's decisions,
the live controller (``Controller.sync`` with the real ``KubeActuator``) runs against the
Kubernetes API double, which mirrors the simulated deployment at that instant (its
replicas and every pod, Ready or not, with their times), on the same metric data read
through the base ``MetricsSource`` protocol as Prometheus is read (no shortcuts of the
in-process store), at the same clock. Then the two sequences of what was done are
compared: every ``/scale`` write, every pod deletion and every hold, decision by
decision.
"""

import contextlib
import dataclasses
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from unittest import mock

import numpy as np
import pytest

from gpuscale.control.config import load
from gpuscale.control.controller import Controller
from gpuscale.control.seams import Settings
from gpuscale.control.targets import runtimes
from gpuscale.metrics.signal import NewestByLabel
from gpuscale.scaling import step as step_module
from gpuscale.sim import engine
from gpuscale.sim.cluster import ClusterConfig, ColdStart
from gpuscale.sim.engine import simulate
from gpuscale.sim.serving import ServingConfig
from gpuscale.sim.workload import Workload
from gpuscale.telemetry.faults import parse_fault
from tests.support.kubeapi import KubeApiDouble

GROUP, VERSION, KIND, PLURAL = "replay.gpuscale.test", "v1", "Inference", "inferences"
NAME, NS, LABEL = "inference", "default", "app=inference"

POLICIES = {
    "hpa": "{name: hpa, targetAverageValue: 60}",
    "hpa-behavior": (
        "{name: hpa, targetAverageValue: 60, behavior: {scaleDown: {stabilizationWindowSeconds: 60,"
        " policies: [{type: Percent, value: 50, periodSeconds: 30}]}}}"
    ),
    "keda": "{name: keda, threshold: 0.7, pollingIntervalSeconds: 15}",
    "kpa": "{name: kpa, target: 0.7}",
    "predictive": "{name: predictive, perReplica: 0.7}",
    "hybrid": "{name: hybrid, perReplica: 0.7}",
}


def gpuscaler(policy: str, *, remediate: bool, kpa: bool) -> str:
    scrape = ", scrapeIntervalSeconds: 1" if kpa else ""
    return textwrap.dedent(
        f"""\
        apiVersion: gpuscale.io/v1alpha1
        kind: GPUScaler
        metadata: {{name: replay, namespace: {NS}}}
        spec:
          targets:
          - scaleTargetRef: {{apiVersion: {GROUP}/{VERSION}, kind: {KIND}, name: {NAME}}}
            minReplicas: 1
            maxReplicas: 12
            remediate: {str(remediate).lower()}
            metrics: {{staleAfterSeconds: 60{scrape}}}
            policy: {policy}
        """
    )


def demand(duration: int) -> Workload:
    """A rise, a plateau and a fall: every policy scales out and back in."""
    t = np.arange(duration, dtype=float)
    rate = 1.0 + 5.0 * np.clip(np.minimum(t / 400.0, (duration - t) / 400.0), 0.0, 1.0)
    arrivals = np.random.default_rng(7).poisson(rate).astype(float)
    return Workload("replay", arrivals, arrivals * 1.0)


def scenario(duration: int, *, kpa: bool) -> engine.Scenario:
    faults = (
        parse_fault("gpu-lost@500:replica=0", "simulator"),
        parse_fault("ecc-dbe@700:replica=1", "simulator"),
        parse_fault("metrics-down@900:duration=120", "simulator"),
    )
    return engine.Scenario(
        workload=demand(duration),
        cluster=ClusterConfig(
            gpus_per_node=4,
            initial_nodes=2,
            max_nodes=4,
            cold_start=ColdStart.fixed(45.0),
            namespace=NS,
            deployment=NAME,
            lost_gpu_pod="stuck",
        ),
        serving=ServingConfig(),
        slo_latency_s=5.0,
        timeout_s=60.0,
        initial_replicas=2,
        faults=faults,
        remediate=not kpa,
        queue_model="fluid",
    )


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def mirror(api: KubeApiDouble, status) -> None:
    """Make the double's workload exactly the simulated deployment's status."""
    pods_res = api.store.resource("v1", "pods")
    with api.store.lock:
        obj = api.store.objects[(f"{GROUP}/{VERSION}", PLURAL, NS, NAME)]
        obj["spec"]["replicas"] = status.desired
        obj["status"] = {"replicas": len(status.pods), "selector": LABEL}
        want = {p.name: p for p in status.pods}
        for key in [k for k in api.store.objects if k[:3] == ("v1", "pods", NS)]:
            if key[3] not in want:
                del api.store.objects[key]
        for p in status.pods:
            cond = {"type": "Ready", "status": "True" if p.ready else "False"}
            if p.ready and p.ready_at is not None:
                cond["lastTransitionTime"] = stamp(p.ready_at)
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": p.name,
                    "namespace": NS,
                    "labels": {"app": NAME},
                    "creationTimestamp": stamp(p.created_at),
                },
                "spec": {"containers": [{"name": "serve", "image": "serve:1"}]},
                "status": {"conditions": [cond]},
            }
            key = ("v1", "pods", NS, p.name)
            if key not in api.store.objects:
                api.store.create(pods_res, NS, body)
            stored = api.store.objects[key]
            stored["metadata"]["creationTimestamp"] = body["metadata"]["creationTimestamp"]
            stored["metadata"].pop("deletionTimestamp", None)
            stored["status"] = body["status"]


class PlainView:
    """The sim's source through the base protocol only, as Prometheus is read."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def instant(self, signal, at):
        return self.inner.instant(signal, at)

    def range(self, signal, start, end, step):
        return self.inner.range(signal, start, end, step)

    def newest(self, signal, at):
        return self.inner.newest(signal, at)


class DeploymentTotals(PlainView):
    """The ring of one deployment's per-second totals, read as Prometheus would answer the
    controller's scoped query (``sum(metric{namespace="default"})``): the same numbers."""

    def instant(self, signal, at):
        return self.inner.instant(dataclasses.replace(signal, matchers={}), at)

    def range(self, signal, start, end, step):
        return self.inner.range(dataclasses.replace(signal, matchers={}), start, end, step)

    def newest(self, signal, at):
        return self.inner.newest(dataclasses.replace(signal, matchers={}), at)


class PlainViewByPod(PlainView):
    def newest_by(self, signal, at, label):
        return self.inner.newest_by(signal, at, label)


@dataclass
class Trail:
    sim: list[tuple] = field(default_factory=list)
    live: list[tuple] = field(default_factory=list)


@contextlib.contextmanager
def lockstep(api: KubeApiDouble, clock, make_controller, trail: Trail) -> Iterator[None]:
    real = step_module.DecisionStep

    class Lockstep:
        def __init__(self, policy, source, settings, path, *, health_source=None):
            self.real = real(policy, source, settings, path, health_source=health_source)
            if path.source == "direct":
                plain = DeploymentTotals
            elif isinstance(source, NewestByLabel):
                plain = PlainViewByPod
            else:
                plain = PlainView
            self.controller: Controller = make_controller(plain(source))

        def run(self, workload, clock_fn, state):
            t = clock_fn()
            status = workload.cluster.status()
            mirror(api, status)
            clock.t = t
            before = dict(api.requests)
            [out] = self.controller.sync()
            assert out.error is None, out.reason
            deletes = sorted(
                k.rsplit("/", 1)[1]
                for k, n in api.requests.items()
                if k.startswith(f"DELETE /api/v1/namespaces/{NS}/pods/") and n > before.get(k, 0)
            )
            scaled = any(
                k.endswith(f"/{PLURAL}/{NAME}/scale")
                and k.startswith("PUT ")
                and n > before.get(k, 0)
                for k, n in api.requests.items()
            )
            live_replicas = api.store.objects[(f"{GROUP}/{VERSION}", PLURAL, NS, NAME)]["spec"][
                "replicas"
            ]
            trail.live.append((t, out.held, out.replicas, scaled, live_replicas, deletes))
            got = self.real.run(workload, clock_fn, state)
            held = None if got.held is None else got.held.reason
            trail.sim.append(
                (
                    t,
                    held,
                    got.replicas,
                    got.scaled,
                    got.replicas if got.scaled else status.desired,
                    sorted(d.pod for d in got.deleted),
                )
            )
            return got

    with mock.patch.object(engine, "DecisionStep", Lockstep):
        yield


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("name", list(POLICIES))
def test_controller_acts_as_the_simulator_on_the_same_observations(name, tmp_path):
    from gpuscale.control.kubernetes import KubeActuator
    from tests.support.control import FAST

    kpa = name == "kpa"
    duration = 1200 if kpa else 1800
    clock = Clock()
    path = tmp_path / "replay.yaml"
    path.write_text(gpuscaler(POLICIES[name], remediate=not kpa, kpa=kpa))
    [rt] = runtimes(load(path))
    trail = Trail()
    with KubeApiDouble(clock=clock) as api:
        api.register_scalable_kind(GROUP, VERSION, KIND, PLURAL)
        api.create_object(
            f"{GROUP}/{VERSION}",
            PLURAL,
            {"metadata": {"name": NAME}, "spec": {"replicas": 2}, "status": {"selector": LABEL}},
            NS,
        )
        act = KubeActuator.connect(
            str(api.write_kubeconfig(tmp_path / "kubeconfig")),
            retry=FAST,
            sleep=lambda _s: None,
            clock=clock,
        )

        def make_controller(source) -> Controller:
            return Controller(
                runtimes(load(path)),
                source,
                act,
                settings=Settings(sync_period_s=rt.policy.interval_s, workers=1),
                clock=clock,
            )

        try:
            with lockstep(api, clock, make_controller, trail):
                result = simulate(scenario(duration, kpa=kpa), rt.policy.inner)
        finally:
            act.close()
    assert len(trail.sim) == len(trail.live) > 50
    for sim, live in zip(trail.sim, trail.live, strict=True):
        assert live == sim, f"t={sim[0]}: simulator {sim} != controller {live}"
    # The run exercised what it is meant to: holds through the outage, scaling both ways,
    # and (where remediation is on) the stuck pod deleted.
    holds = dict(result.holds)
    assert holds["unavailable"] >= 1
    replicas = [s[2] for s in trail.sim]
    assert max(replicas) > 2
    assert replicas[-1] < max(replicas)
    if not kpa:
        assert result.pods_remediated >= 1
        assert any(s[5] for s in trail.sim)
