"""The simulation loop: a trace, a cluster, a policy, one second at a time.

``simulate`` runs the same closed loop as production. Each second the cluster
applies due events (nodes join, pods become Ready or free their GPU), faults
fall due, and the deployment's fluid queue serves that second's demand with the
Ready replicas' capacity; a pod that leaves Ready drains or has its requests
retried (``fluid.FluidQueue``). Every scrape interval the GPU physics advances
over the interval's load and its telemetry, with the serving metrics, is written
into the in-process metric store. Every ``policy.interval_s`` the policy gets an
``Observation`` built only from that store, evaluated ``rule_delay_s`` in the
past, and from the deployment's status, never from the simulator's state; its
decision, clamped to its bounds, becomes ``spec.replicas``. The run ends by
checking that every arrival was counted once (``outcome.check_conservation``).

Costs per simulated second are a few scalar updates; per-GPU work is numpy and
runs once per scrape, so a 24-hour, 100-GPU run takes seconds.
"""

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuscale.errors import ConfigError, check_ranges
from gpuscale.metrics.store import LOOKBACK_S, MetricStore
from gpuscale.scaling.policy import Observation, ScalingPolicy, Series
from gpuscale.sim.cluster import READY, STARTING, TERMINATING, Cluster, ClusterConfig, Pod
from gpuscale.sim.faults import FaultInjector, SimFault
from gpuscale.sim.fluid import FluidQueue, residual_arrival_scv
from gpuscale.sim.latency import LATENCY_EDGES_S, summarise_latency
from gpuscale.sim.outcome import RunResult, Timeline, check_conservation
from gpuscale.sim.series import SeriesWriter
from gpuscale.sim.serving import ServingConfig, relative_speed
from gpuscale.sim.workload import Workload
from gpuscale.telemetry.physics import FleetPhysics, gpu_model

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything a run depends on except the policy.

    Attributes:
        workload: Demand per second.
        cluster: Node pool and pod lifecycle.
        serving: How a replica serves.
        slo_latency_s: A request is within the SLO when its latency is at most this.
        timeout_s: Requests waiting longer are dropped.
        seed: Seeds cold starts, fault targets, GPU variation and identities.
        initial_replicas: Ready replicas at the start (a warmed-up deployment).
        faults: Faults to inject.
        scrape_interval_s: Telemetry sampling period, seconds.
        rule_delay_s: Policies evaluate their signals this far in the past (rule evaluation).
        record_interval_s: Timeline row length, seconds.
    """

    workload: Workload
    cluster: ClusterConfig
    serving: ServingConfig
    slo_latency_s: float
    timeout_s: float
    seed: int = 0
    initial_replicas: int = 1
    faults: tuple[SimFault, ...] = ()
    scrape_interval_s: float = 15.0
    rule_delay_s: float = 15.0
    record_interval_s: float = 10.0

    def __post_init__(self) -> None:
        checks = {
            "slo_latency_s": self.slo_latency_s > 0,
            "timeout_s": self.timeout_s > 0,
            "initial_replicas": 0 <= self.initial_replicas <= self.cluster.max_gpus,
            "scrape_interval_s": self.scrape_interval_s >= 1,
            "rule_delay_s": self.rule_delay_s >= 0,
            "record_interval_s": self.record_interval_s >= 1,
        }
        check_ranges(
            "scenario",
            self,
            checks,
            "times must be positive (intervals >= 1 s) and replicas fit the cluster",
        )


def _merge(results: list[Any]) -> Series:
    """One series from a query's results: itself, or the sum of several at equal times."""
    if len(results) == 1:
        return tuple(results[0].points)
    totals: dict[float, float] = {}
    for res in results:
        for t, v in res.points:
            totals[t] = totals.get(t, 0.0) + v
    return tuple(sorted(totals.items()))


class _Run:
    """One simulation's state; ``simulate`` is its only user."""

    def __init__(self, scenario: Scenario, policy: ScalingPolicy) -> None:
        self.sc, self.policy = scenario, policy
        cfg = scenario.cluster
        seeds = np.random.SeedSequence(scenario.seed).spawn(3)
        spares = sum(f.kind == "gpu-lost" and f.duration_s is not None for f in scenario.faults)
        self.cluster = Cluster(cfg, seed=int(seeds[0].generate_state(1)[0]), spare_gpus=spares)
        model = gpu_model(cfg.gpu_model)
        self.physics = FleetPhysics(
            [model] * self.cluster.n_devices, seed=int(seeds[1].generate_state(1)[0])
        )
        windows = [s.window for s in (*policy.signals.values(), *policy.pod_signals.values())]
        retention = (
            policy.history_s + max(windows, default=0.0) + scenario.rule_delay_s + LOOKBACK_S
        )
        self.store = MetricStore(retention_s=retention + 4 * scenario.scrape_interval_s)
        self.writer = SeriesWriter(self.store, self.cluster, model.name, scenario.seed)
        serving = scenario.serving
        self.queue = FluidQueue(
            timeout_s=scenario.timeout_s,
            service_scv=serving.service_scv,
            arrival_scv=residual_arrival_scv(scenario.workload),
        )
        self.faults = FaultInjector(scenario.faults, int(seeds[2].generate_state(1)[0]))
        self.model_speed = relative_speed(cfg.gpu_model, serving.reference_model)
        self.slots = serving.slots_per_replica
        self.state: dict[str, Any] = {}
        self._names: tuple[int, set[str]] = (-1, set())
        self.scale_events = 0
        self._cap_version = -1
        self._cap_dirty = True
        self.ready: list[Pod] = []
        self.servers, self.capacity, self.n_held = 0, 0.0, 0
        self._shares = self._ready_speed = np.zeros(0)
        self._ready_devs = np.zeros(0, dtype=np.int64)
        self._ready_slots = np.zeros(0, dtype=np.int64)
        self._ready_uids = np.zeros(0, dtype=np.int64)
        self._loading = (np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))
        self._stopping = np.zeros(0, dtype=np.int64)
        self._busy_acc = 0.0  # busy fraction-seconds of each Ready GPU since the last flush
        self._done_acc = 0.0
        self._load = np.zeros(self.cluster.n_devices)
        self._drain_dev: dict[int, int] = {}  # pod uid -> device, of each pod drained

    # ----------------------------------------------------------------- capacity
    def _flush(self) -> None:
        if self._ready_devs.size:
            self._load[self._ready_devs] += self._busy_acc
            self.writer.add_completions(
                self._ready_slots, self._ready_uids, self._shares, self._done_acc
            )
        self._busy_acc = self._done_acc = 0.0

    def _sync_pods(self, t: int) -> None:
        """A deleted pod drains its share of the requests in service; a failed one's retry.

        A terminating pod with nothing (left) to drain frees its GPU at once.
        """
        c, q = self.cluster, self.queue
        per_server = q.busy / self.servers if self.servers else 0.0
        ready = self._ready_uids.tolist(), self._ready_speed.tolist(), self._ready_devs.tolist()
        for uid, speed, dev in zip(*ready, strict=True):
            pod = c.pods.get(uid)
            if pod is not None and pod.state == READY:
                continue
            serving = per_server * self.slots if speed > 0 else 0.0
            if pod is not None and pod.state == TERMINATING:
                if q.start_drain(uid, serving, speed / self.slots):
                    self._drain_dev[uid] = dev
            else:
                q.interrupt(t, serving)
        for uid in list(q.drains):
            pod = c.pods.get(uid)
            if pod is None or pod.state != TERMINATING:
                q.stop_drain(t, uid)
        for uid in [p.uid for p in c.pods.values() if p.state == TERMINATING]:
            if uid not in q.drains:
                c.release(uid, float(t))

    def _refresh_capacity(self, t: int) -> None:
        self._flush()
        c = self.cluster
        if c.version != self._cap_version:
            self._sync_pods(t)
        self.ready = c.ready_pods()
        self.n_held = c.held_count()
        devs = np.array([c.slot_phys[p.slot] for p in self.ready], dtype=np.int64)
        factor = self.physics.capacity_factor[devs] if devs.size else np.zeros(0)
        speed = np.array([p.speed for p in self.ready]) * factor * self.model_speed
        self._ready_devs = devs
        self._ready_slots = np.array([p.slot for p in self.ready], dtype=np.int64)
        self._ready_uids = np.array([p.uid for p in self.ready], dtype=np.int64)
        loading = [p for p in c.pods.values() if p.state == STARTING]
        self._stopping = np.array(
            [c.slot_phys[p.slot] for p in c.pods.values() if p.state == TERMINATING], dtype=np.int64
        )
        self._loading = (
            np.array([c.slot_phys[p.slot] for p in loading], dtype=np.int64),
            np.array([p.due for p in loading]),
            np.array([p.due - p.created_at for p in loading]),
        )
        total = float(speed.sum())
        self._shares = speed / total if total > 0 else np.zeros(speed.size)
        self._ready_speed = speed
        up = speed > 0
        self.servers = int(up.sum()) * self.slots
        self.capacity = total
        base = self.sc.serving.service_scv
        if up.sum() > 1:  # a mix of speeds widens service times
            s = speed[up]
            mix = float((1.0 / s).sum() * s.sum()) / float(s.size) ** 2
            self.queue.service_scv = (1.0 + base) * mix - 1.0
        else:
            self.queue.service_scv = base
        self._cap_version, self._cap_dirty = c.version, False

    # ----------------------------------------------------------------- telemetry
    def _scrape(self, t: float, dt: float) -> None:
        self._flush()
        serving = self.sc.serving
        load = self._load / dt if dt > 0 else self._load
        per_pod = self.queue.busy / len(self.ready) if self.ready else 0.0
        working = np.zeros(self.cluster.n_devices)
        working[self._stopping] = serving.model_bytes
        working[self._ready_devs] = serving.model_bytes + serving.kv_bytes_per_request * per_pod
        devs, due, span = self._loading  # loading pods: the model fills the GPU as it loads
        with np.errstate(invalid="ignore"):
            done = np.clip(1.0 - (due - t) / np.maximum(span, 1.0), 0.0, 1.0)
        working[devs] = serving.model_bytes * np.nan_to_num(done, nan=0.0)
        self.physics.step(dt, np.clip(load, 0.0, 1.0), working)
        self.physics.drain_xid_events()
        self.writer.write(t, self.physics.fields(), per_pod, self.queue.waiting)
        self._load[:] = 0.0
        self._cap_dirty = True

    # ----------------------------------------------------------------- decisions
    def _observe(self, t: float) -> Observation:
        at = t - self.sc.rule_delay_s
        target = self.cluster.status()
        if self.policy.pod_signals and self._names[0] != self.cluster.version:
            self._names = (self.cluster.version, {p.name for p in target.pods})
        names = self._names[1]
        pod_metrics: dict[str, dict[str, float]] = {}
        for key, sig in self.policy.pod_signals.items():
            values = pod_metrics.setdefault(key, {})
            for res in self.store.instant(sig, at):
                pod = res.labels.get("pod")
                if pod in names and res.points:
                    values[pod] = res.points[-1][1]
        series: dict[str, Series] = {}
        hist = self.policy.history_s
        for key, sig in self.policy.signals.items():
            if hist > 0:
                found = self.store.range(sig, at - hist, at, self.sc.scrape_interval_s)
            else:
                found = self.store.instant(sig, at)
            series[key] = _merge(found) if found else ()
        return Observation(t, target, pod_metrics, series, healthy=at >= 0.0)

    def _decide(self, t: float) -> None:
        obs = self._observe(t)
        decision = self.policy.decide(obs, self.state)
        self.state = dict(decision.state)
        want = min(max(int(decision.replicas), self.policy.min_replicas), self.policy.max_replicas)
        name, before = self.policy.name, self.cluster.desired
        logger.debug("t=%.0f %s: %d -> %d (%s)", t, name, before, want, decision.reason)
        if want != self.cluster.desired:
            self.scale_events += 1
            self.cluster.scale(want, t)

    # ----------------------------------------------------------------- loop
    def execute(self, progress: Callable[[float], None] | None) -> RunResult:
        sc, wl = self.sc, self.sc.workload
        n = wl.duration_s
        arrivals, work = wl.arrivals.tolist(), wl.work_s.tolist()
        self.cluster.start(sc.initial_replicas, 0.0)
        ready_n, held_n, busy, cap = (np.zeros(n) for _ in range(4))
        desired = np.zeros(n)
        next_scrape, last_scrape = 0.0, -sc.scrape_interval_s
        next_decision = 0.0
        tick = max(n // 100, 1)
        queue, cluster = self.queue, self.cluster
        drains, drained = queue.drains, queue.drained
        for t in range(n):
            if t >= cluster.next_event():
                cluster.advance(t)
            if t >= self.faults.next_due():
                self.faults.step(t, cluster, self.physics)
            if t >= next_scrape:
                if self._cap_dirty or cluster.version != self._cap_version:
                    self._refresh_capacity(t)
                self._scrape(float(t), t - last_scrape)
                last_scrape, next_scrape = t, next_scrape + sc.scrape_interval_s
            if t >= next_decision:
                self._decide(float(t))
                next_decision += self.policy.interval_s
            if self._cap_dirty or cluster.version != self._cap_version:
                self._refresh_capacity(t)
            queue.step(t, arrivals[t], work[t], self.servers, self.capacity)
            if self.servers:
                self._busy_acc += queue.busy / self.servers
                self._done_acc += queue.last_departures
            busy[t] = (queue.busy + queue.draining) / self.slots
            for uid, d in drains.items():  # a draining pod's GPU is busy too
                self._load[self._drain_dev[uid]] += d.requests / self.slots
            while drained:  # a drained pod frees its GPU
                cluster.release(drained.pop(0), t + 1.0)
            ready_n[t], held_n[t], cap[t] = len(self.ready), self.n_held, self.capacity
            desired[t] = cluster.desired
            if progress is not None and t % tick == 0:
                progress(t / n)
        if progress is not None:
            progress(1.0)
        return self._result(ready_n, held_n, busy, cap, desired)

    def _result(
        self,
        ready_n: np.ndarray,
        held_n: np.ndarray,
        busy: np.ndarray,
        cap: np.ndarray,
        desired: np.ndarray,
    ) -> RunResult:
        sc, wl = self.sc, self.sc.workload
        n, rec = wl.duration_s, int(sc.record_interval_s)
        rows = max(math.ceil(n / rec), 1)
        in_flight = self.queue.finish()
        summary = summarise_latency(
            self.queue.records,
            slo_s=sc.slo_latency_s,
            timeout_s=sc.timeout_s,
            row_steps=rec,
            n_rows=rows,
            rate_window_s=sc.serving.rate_window_s,
            service_scv=sc.serving.service_scv,
        )
        row = np.arange(n) // rec

        def total(x: np.ndarray) -> np.ndarray:
            return np.bincount(row, weights=x, minlength=rows)[:rows]

        secs = np.maximum(total(np.ones(n)), 1.0)
        arr, wrk = total(wl.arrivals), total(wl.work_s)
        mean_work = wl.mean_service_s() or 1.0
        per_req = np.where(arr > 0, wrk / np.maximum(arr, 1e-12), mean_work)
        alloc = total(held_n)
        last = np.minimum((np.arange(rows) + 1) * rec, n) - 1
        with np.errstate(invalid="ignore", divide="ignore"):
            util = np.where(alloc > 0, total(busy) / alloc, 0.0)
        timeline = Timeline(
            time_s=np.arange(rows, dtype=float) * rec,
            demand_rps=arr / secs,
            capacity_rps=total(cap) / secs / per_req,
            desired_replicas=desired[last].astype(float),
            ready_replicas=total(ready_n) / secs,
            allocated_gpus=alloc / secs,
            gpu_utilization=np.clip(util, 0.0, 1.0),
            p50_latency_s=summary.p50_s,
            p99_latency_s=summary.p99_s,
        )
        result = RunResult(
            policy=self.policy.name,
            timeline=timeline,
            requests=float(wl.arrivals.sum()),
            within_slo=summary.within_slo,
            dropped=self.queue.dropped + summary.dropped,
            latency_edges_s=LATENCY_EDGES_S.copy(),
            latency_counts=summary.counts,
            gpu_seconds=float(held_n.sum()),
            busy_gpu_seconds=float(busy.sum()),
            scale_events=self.scale_events,
            completed_requests=summary.completed,
            in_flight_requests=in_flight,
            retried_requests=self.queue.retried,
        )
        check_conservation(result)
        return result


def simulate(
    scenario: Scenario,
    policy: ScalingPolicy,
    *,
    progress: Callable[[float], None] | None = None,
) -> RunResult:
    """Run ``policy`` on ``scenario``.

    Args:
        scenario: Workload, cluster, serving model, SLO, faults and seed.
        policy: The scaling policy; it sees only the metric store and the deployment status.
        progress: Called with the fraction done (0 to 1) about a hundred times.

    Returns:
        The run's timeline and totals; identical for identical inputs.
    """
    if scenario.workload.duration_s == 0:
        raise ConfigError("scenario.workload is empty: give a trace with at least one second")
    return _Run(scenario, policy).execute(progress)
