"""The simulation loop: a trace, a cluster, a policy, one second at a time.

``simulate`` runs the same closed loop as production. Each second the cluster
applies due events (nodes join, pods become Ready or free their GPU), faults
fall due, and the deployment's queue serves that second's demand with the
Ready replicas' capacity; a pod that leaves Ready drains or has its requests
retried. The queue is the fluid (``fluid.FluidQueue``) or, where that is cheap
or the fluid inexact, one request at a time (``requests.RequestQueue``), as
``Scenario.queue_model`` and ``queue_model.choose`` decide. Every collect
interval the GPU physics advances over the interval's serving state
(``scrape.Telemetry``); every scrape interval the last collected DCGM fields
and the serving metrics are written into the in-process metric store (the families
the policy's signals query, if any). Every ``policy.interval_s`` the engine runs
the decision step (``scaling.step.DecisionStep``), the same step the live
controller runs: it observes only the policy's signal source and the
deployment's status, never the simulator's state (the metric store for a policy
on the Prometheus path, evaluated its declared ``delay_s`` in the past, or a ring
of per-second serving totals for one on the direct path, Knative's), holds on
unfit data, bounds the policy's answer, deletes the pods it replaces and, with
``Scenario.remediate``, those whose GPU broke, and sets ``spec.replicas``
(``sim.stepping.ClusterWorkload``). The run ends by checking that every arrival
was counted once (``outcome.check_conservation``).

Between two of these events nothing changes the Ready capacity, so while no pod
drains the queue advances over the whole block of seconds in one call
(``FluidQueue.advance``, the same arithmetic as a step per second) and the
per-second timeline is filled by slices; a policy deciding more often than that
(Knative's 2 s) has the queue advanced past its decisions while none changes the
cluster (``_Run._look_ahead``). Per-GPU work is numpy and runs once per collect or
scrape, so a 24-hour, 100-GPU run takes about a second of CPU.
"""

import gc
import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from gpuscale.errors import ConfigError
from gpuscale.metrics.rawquery import check_in_process
from gpuscale.metrics.ring import SecondTotals
from gpuscale.metrics.signal import MetricsSource
from gpuscale.metrics.store import LOOKBACK_S, MetricStore
from gpuscale.scaling.failsafe import REASONS
from gpuscale.scaling.policy import ScalingPolicy
from gpuscale.scaling.remediate import SERIES as REMEDIATION_SERIES
from gpuscale.scaling.remediate import XID_RECENT_S
from gpuscale.scaling.state import PolicyState
from gpuscale.scaling.step import REMEDIATE, DecisionStep, StepSettings, freshness_signals
from gpuscale.sim.alerting import SimAlerting, alert_window_s
from gpuscale.sim.cluster import (
    READY,
    STARTING,
    TERMINATING,
    Cluster,
    Pod,
)
from gpuscale.sim.faults import FaultInjector
from gpuscale.sim.fluid import FluidQueue, QueueMark, residual_arrival_scv, step_each_second
from gpuscale.sim.latency import LATENCY_EDGES_S
from gpuscale.sim.outcome import RunResult, check_conservation
from gpuscale.sim.queue_model import (
    arrivals_per_second,
    arrived_requests,
    build_queue,
)
from gpuscale.sim.scenario import Scenario as Scenario  # re-exported: callers import it here
from gpuscale.sim.scrape import Telemetry
from gpuscale.sim.series import GPU_UP, IN_FLIGHT, QUEUE, SeriesWriter
from gpuscale.sim.serving import relative_speed, replica_slots, service_scv
from gpuscale.sim.stepping import ClusterWorkload, OutageSource, outage_windows
from gpuscale.sim.summary import summarise_run
from gpuscale.sim.timeline import per_second, row_timeline
from gpuscale.telemetry.physics import FleetPhysics, gpu_model

logger = logging.getLogger(__name__)


RING_S = 4096
"""Seconds the direct path's ring keeps at least (a few hundred KiB)."""

LOOK_AHEAD = True
"""Advance the queue past decisions that change nothing (``_Run._look_ahead``); a test
turns it off to show the run is the same without."""


def _first_second(x: float) -> int:
    """The first whole second at or after ``x`` (a large number for inf)."""
    return math.ceil(x) if x < 1e18 else 1 << 62


class _Run:
    """One simulation's state; ``simulate`` is its only user."""

    def __init__(self, scenario: Scenario, policy: ScalingPolicy[Any]) -> None:
        self.sc, self.policy = scenario, policy
        cfg = scenario.cluster
        seeds = np.random.SeedSequence(scenario.seed).spawn(4)
        spares = sum(f.kind == "gpu-lost" and f.duration_s is not None for f in scenario.faults)
        self.gpr = scenario.serving.gpus_per_replica
        self.cluster = Cluster(
            cfg, seed=int(seeds[0].generate_state(1)[0]), spare_gpus=spares, gpus_per_pod=self.gpr
        )
        self.cluster.ranked_scale_in = scenario.placement
        model = gpu_model(cfg.gpu_model)
        self.physics = FleetPhysics(
            [model] * self.cluster.n_devices, seed=int(seeds[1].generate_state(1)[0])
        )
        self.path = policy.signal_path
        windows = [s.window for s in (*policy.signals.values(), *policy.pod_signals.values())]
        retention = policy.history_s + max(windows, default=0.0) + self.path.delay_s + LOOKBACK_S
        alerting = scenario.alerting
        if alerting:  # the rules read further back than the policy may
            retention = max(retention, alert_window_s() + LOOKBACK_S)
        self.store = MetricStore(retention_s=retention + 4 * scenario.scrape_interval_s)
        wanted = {s.metric for s in (*policy.signals.values(), *policy.pod_signals.values())}
        if scenario.remediate:  # what remediation reads (``scaling.remediate``), how far back
            wanted |= {GPU_UP, *REMEDIATION_SERIES}
            retention = max(retention, XID_RECENT_S + LOOKBACK_S)
        metrics: set[str] | None = wanted
        if alerting:
            metrics = None  # every DCGM family: the rules read them
        self.writer = SeriesWriter(self.store, self.cluster, model.name, scenario.seed, metrics)
        self.ring: SecondTotals | None = None
        self.source: MetricsSource = self.store
        if self.path.source == "direct":  # sampled by the controller itself (Knative)
            keep = policy.history_s + self.path.delay_s + 2 * self.path.interval_s
            # Longer than the history read: a window across the ring's end is copied in
            # three pieces, so a ring many windows long keeps most reads to one slice.
            self.ring = SecondTotals((IN_FLIGHT, QUEUE), max(int(keep) + 2, RING_S))
            self.source = self.ring
        serving = scenario.serving
        self._base_scv = service_scv(serving, scenario.workload)  # fixed for the run
        self.faults = FaultInjector(scenario.faults, int(seeds[2].generate_state(1)[0]))
        self.model_speed = relative_speed(cfg.gpu_model, serving.reference_model)
        self.slots = replica_slots(serving, cfg.gpu_model, scenario.workload)
        self.queue = build_queue(
            scenario.queue_model,
            scenario.workload,
            timeout_s=scenario.timeout_s,
            service_scv=self._base_scv,
            arrival_scv=residual_arrival_scv(scenario.workload),
            seed=int(seeds[3].generate_state(1)[0]),
            slots=self.slots,
            speed=self.model_speed,
        )
        self.state: PolicyState = policy.initial_state()
        self.workload = ClusterWorkload(self.cluster)
        self.holds = dict.fromkeys(REASONS, 0)
        self.replaced = self.remediated = 0
        self._cap_version = -1
        self._cap_dirty = True
        self.ready: list[Pod] = []
        self.servers, self.capacity, self.n_held = 0, 0.0, 0
        self._shares = self._ready_speed = np.zeros(0)
        self._ready_seen = -1  # ``cluster.ready_changes`` when the Ready pods' arrays were built
        self._speed_seen = -2  # ``_ready_seen`` when the speeds below were computed
        self._ready_devs = self._ready_gpus = np.zeros(0, dtype=np.int64)
        self._ready_slots = np.zeros(0, dtype=np.int64)
        self._ready_uids = np.zeros(0, dtype=np.int64)
        self._loading = (np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))
        self._stopping = np.zeros(0, dtype=np.int64)
        self._transit_seen = -1  # ``cluster.version`` when the two above were built
        read = alerting or scenario.remediate
        read = read or (self.ring is None and bool(policy.signals or policy.pod_signals))
        tel_args = (self.cluster, self.physics, self.writer, serving, scenario.workload)
        self.tel = Telemetry(*tel_args, self.slots, scraped=read)
        self._drain_dev: dict[int, np.ndarray] = {}  # pod uid -> its devices, of each pod drained
        self._power_w = 0.0  # GPUs of the Ready nodes, at the last collect
        # A look-ahead block's levels (drain, Ready, held, capacity, node GPUs, power, desired)
        self._levels: tuple[float, int, int, float, int, float, int] = (0.0, 0, 0, 0.0, 0, 0.0, 0)
        self.alerting: SimAlerting | None = None
        if alerting:
            args = (self.store, self.cluster, self.writer.uuids, model.name)
            collect = (scenario.collect_interval_s, scenario.collect_offset_s)
            self.alerting = SimAlerting(*args, scenario.alert_interval_s, collect)
        # Remediation reads the GPU series Prometheus holds (the store), whatever path
        # the policy's own signals take; an outage takes both down.
        self.outages: list[OutageSource] = []
        health: MetricsSource = self.store
        down = outage_windows(scenario.faults)
        if down:
            self.outages = [OutageSource(self.source, down)]
            self.source = self.outages[0]
            if self.ring is not None:
                self.outages.append(OutageSource(self.store, down))
            health = self.outages[-1]
        # A raw PromQL signal the in-process store cannot run is refused now, by name.
        check_in_process(freshness_signals(policy), f"policy {policy.name}")
        settings = StepSettings(
            policy.min_replicas,
            policy.max_replicas,
            stale_after_s=scenario.stale_after_s,
            step_s=scenario.scrape_interval_s,
            remediate=scenario.remediate,
            namespace=cfg.namespace,
            placement=scenario.placement,
        )
        self.step = DecisionStep(policy, self.source, settings, self.path, health_source=health)

    # ----------------------------------------------------------------- capacity
    def _flush(self) -> None:
        self.tel.flush(self._ready_gpus, self._ready_slots, self._ready_uids, self._shares)

    def _sync_pods(self, t: int) -> None:
        """A deleted pod drains its share of the requests in service; a failed one's retry.

        A terminating pod with nothing (left) to drain frees its GPU at once.
        """
        c, q = self.cluster, self.queue
        per_server = q.busy / self.servers if self.servers else 0.0
        pods = c.pods
        left: list[tuple[int, float]] = []  # the pods Ready at the last refresh no longer Ready
        gone = c.take_left_ready()  # every pod that left Ready since: only these can be
        if gone and c.ready_changes != self._ready_seen:
            uids, at = self._ready_uids, np.searchsorted(self._ready_uids, gone).tolist()
            for i in sorted(set(at)):  # the Ready pods' order (uids ascend)
                uid = int(uids[i]) if i < uids.size else -1
                if uid in gone and (uid not in pods or pods[uid].state != READY):
                    left.append((uid, float(self._ready_speed[i])))
        for uid, speed in left:
            pod = pods.get(uid)
            serving = per_server * self.slots if speed > 0 else 0.0
            if pod is not None and pod.state == TERMINATING:
                if q.start_drain(uid, serving, speed / self.slots):
                    self._drain_dev[uid] = c.devices([pod])
            else:
                q.interrupt(t, serving)
        for uid in list(q.drains):
            pod = c.pods.get(uid)
            if pod is None or pod.state != TERMINATING:
                q.stop_drain(t, uid)
        # The drains are terminating pods now, so with as many of them as terminating
        # pods there is nothing left to free (the common case: skip the scan).
        if c.terminating_count() > len(q.drains):
            for uid in [
                p.uid for p in pods.values() if p.state == TERMINATING and p.uid not in q.drains
            ]:
                c.release(uid, float(t))

    def _refresh_pods(self) -> None:
        """The Ready pods' devices and the GPUs held, after the cluster changed."""
        c = self.cluster
        self.n_held = c.held_count()
        if c.ready_changes == self._ready_seen:  # the Ready pods' arrays still hold
            return
        ready = [p for p in c.pods.values() if p.state == READY]  # oldest first
        self.ready, self._ready_seen = ready, c.ready_changes
        self._ready_slots = np.array([p.slot for p in ready], dtype=np.int64)
        self._ready_devs = c.slot_phys[self._ready_slots]
        self._ready_gpus = self._ready_devs if self.gpr == 1 else c.devices(ready)
        self._ready_uids = np.array([p.uid for p in ready], dtype=np.int64)

    def _in_transition(self) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Devices of the terminating pods, and of the starting ones with their load progress.

        Only a collect reads them, so they are built then, once per cluster version.
        """
        c = self.cluster
        if self._transit_seen != c.version:
            loading: list[Pod] = []
            stopping: list[Pod] = []
            by_state = {STARTING: loading.append, TERMINATING: stopping.append}
            for p in c.pods.values():  # one pass, each list oldest first
                add = by_state.get(p.state)
                if add is not None:
                    add(p)
            self._stopping = c.devices(stopping)
            due = np.array([p.due for p in loading], dtype=float)
            span = np.array([p.due - p.created_at for p in loading], dtype=float)
            if self.gpr > 1:
                due, span = np.repeat(due, self.gpr), np.repeat(span, self.gpr)
            self._loading = (c.devices(loading), due, span)  # each GPU loads its share
            self._transit_seen = c.version
        return self._stopping, self._loading

    def _refresh_capacity(self, t: int) -> None:
        self._flush()
        c = self.cluster
        if c.version != self._cap_version:  # the pods changed; else only clocks did
            self._sync_pods(t)
            self._refresh_pods()
        if not self._cap_dirty and self._speed_seen == self._ready_seen:
            # Neither the clocks nor the Ready pods moved (pods started, stopped or freed
            # GPUs): the speeds, shares and service SCV computed last still hold.
            self._cap_version = c.version
            return
        self._speed_seen = self._ready_seen
        devs = self._ready_devs
        factor = self.physics.capacity_factor[devs] if devs.size else np.zeros(0)
        speed = factor * self.model_speed
        total = float(np.add.reduce(speed))  # ``sum()``'s reduction, without its wrappers
        self._shares = speed / total if total > 0 else np.zeros(speed.size)
        self._ready_speed = speed
        up = speed > 0
        n_up = int(np.count_nonzero(up))
        self.servers = n_up * self.slots
        self.capacity = total
        base = self._base_scv
        if n_up > 1:  # a mix of speeds widens service times
            s = speed if n_up == speed.size else speed[up]  # all up: the usual case
            s_sum = total if s is speed else float(np.add.reduce(s))  # ``total``: speed's sum
            mix = float(np.add.reduce(1.0 / s) * s_sum) / float(s.size) ** 2
            self.queue.service_scv = (1.0 + base) * mix - 1.0
        else:
            self.queue.service_scv = base
        self._cap_version, self._cap_dirty = c.version, False

    # ----------------------------------------------------------------- telemetry
    def _telemetry(self, t: float, collect: bool, scrape: bool, received: float = 0.0) -> None:
        """dcgm-exporter's collect and/or Prometheus' scrape at ``t`` (``scrape.Telemetry``)."""
        self._flush()
        per_pod = self.queue.busy / len(self.ready) if self.ready else 0.0
        if collect:
            stopping, loading = self._in_transition()
            self.tel.collect(t, self._ready_gpus, stopping, loading, per_pod)
            self._cap_dirty = True  # clocks (capacity) change with the physics
            c, power = self.cluster, self.physics.power_w
            self._power_w = float(np.add.reduce(power[c.slot_phys[c.on_ready_node()]]))
        if scrape:
            self.tel.scrape(t, per_pod, self.queue.waiting, received)

    # ----------------------------------------------------------------- decisions
    def _decide(self, t: float) -> None:
        self.workload.now = t
        for outage in self.outages:
            outage.now = t
        out = self.step.run(self.workload, lambda: t, self.state)
        self.state = out.state
        if out.held is not None:
            self.holds[out.held.reason] += 1
        for d in out.deleted:
            if d.cause == REMEDIATE:
                self.remediated += 1
            else:
                self.replaced += 1
        name, before = self.policy.name, out.status.desired
        logger.debug("t=%.0f %s: %d -> %d (%s)", t, name, before, out.replicas, out.reason)

    def _look_ahead(
        self,
        t: int,
        far: int,
        paths: tuple[FluidQueue, QueueMark, SecondTotals],
        arrivals: np.ndarray,
        work: np.ndarray,
        clocks: tuple[float, float, float, float],
    ) -> tuple[int, list[float], list[float], float, float, int]:
        """Advance the queue from ``t`` past the decisions before ``far``, while none acts.

        Knative's decisions every 2 s would cut the queue's blocks into 2-second pieces.
        Nothing else falls due before ``far``, and a decision that changes nothing in
        the cluster leaves the servers and capacity as they were, so the queue advances
        to ``far`` at once; then each decision before it is made in turn, on the samples
        up to its time, as the loop would make it. The first that changes the cluster
        ends the block at its second: the queue comes back to ``mark`` and advances to
        there, and the loop goes on after that decision (``decided``). The run is the
        same, bit for bit, as with a block per decision.

        Args:
            t: The block's first second.
            far: The block's end if no decision acts (the next scrape, collect, cluster
                event or fault, or the run's end).
            paths: The queue, its state at ``t`` and the controller's samples.
            arrivals: Requests arriving, per second.
            work: Their work, per second.
            clocks: The loop's next controller sample, decision, scrape and collect.

        Returns:
            (the block's end, in service and departures each second of it, the next
            sample and decision times, the second whose decision was made or -1);
            ``_levels`` holds the block's levels from before that decision.
        """
        (queue, mark, ring), cluster, faults = paths, self.cluster, self.faults
        next_sample, next_decision = clocks[:2]  # then the next scrape and collect
        sample_s, every = self.path.interval_s, self.policy.interval_s
        n = self.sc.workload.duration_s
        servers, capacity = self.servers, self.capacity
        waiting: list[float] = []
        b_list, d_list = queue.advance(t, far, arrivals, work, servers, capacity, waiting)
        self._levels = (
            queue.draining,
            len(self.ready),
            self.n_held,
            capacity,
            cluster.ready_node_gpus,
            self._power_w,
            cluster.desired,
        )
        # Else due at the loop's top (a node scan, before ``far``): no idle decision moves it.
        limit = min(cluster.next_event(), cluster.scan_due, faults.next_due(), *clocks[2:])
        cur = t
        while True:
            # The block the loop would run from ``cur``: it ends at the next decision.
            d = min(n, max(_first_second(next_decision), cur + 1), far)
            for s in range(cur + 1, d):  # the controller's samples inside it
                if s >= next_sample:
                    ring.record(s, (b_list[s - 1 - t], waiting[s - 1 - t]))
                    next_sample += sample_s
            if d >= far:
                return far, b_list, d_list, next_sample, next_decision, -1
            if d >= limit:  # the loop's top at ``d`` has more to run: the loop's to run
                break
            if d >= next_sample:
                ring.record(d, (b_list[d - 1 - t], waiting[d - 1 - t]))
                next_sample += sample_s
            version, desired = cluster.version, cluster.desired
            self._decide(float(d))
            next_decision += every
            if cluster.version != version or cluster.desired != desired or self._cap_dirty:
                queue.rewind(mark)  # and advance only to ``d``
                b_list, d_list = queue.advance(t, d, arrivals, work, servers, capacity)
                return d, b_list, d_list, next_sample, next_decision, d
            cur = d
        queue.rewind(mark)
        b_list, d_list = queue.advance(t, d, arrivals, work, servers, capacity)
        return d, b_list, d_list, next_sample, next_decision, -1

    # ----------------------------------------------------------------- loop
    def execute(self, progress: Callable[[float], None] | None) -> RunResult:
        sc, wl = self.sc, self.sc.workload
        n = wl.duration_s
        # float64 arrays: the compiled queue block reads them as they are
        arrivals = np.ascontiguousarray(wl.arrivals, dtype=float)
        work = np.ascontiguousarray(wl.work_s, dtype=float)
        # Requests received before each second (a gateway's counter at a scrape then).
        received = np.concatenate(([0.0], np.cumsum(arrivals)))
        self.cluster.start(sc.initial_replicas, 0.0)
        # Per block: its first second and the levels that hold through it (requests
        # draining, Ready replicas, GPUs held, capacity, node GPUs, power, desired),
        # expanded to seconds at the end; and requests in service at each second's end.
        starts: list[int] = []
        levels: list[tuple[float, int, int, float, int, float, int]] = []
        in_service: list[float] = []
        next_scrape = next_collect = next_sample = next_decision = 0.0
        collect_s, sample_s = sc.collect_interval_s, self.path.interval_s
        ring, tel = self.ring, self.tel
        occupancy, drain_seq = tel.occupancy, tel.drain_seq
        tick = max(n // 100, 1)
        queue, cluster = self.queue, self.cluster
        drains, drained = queue.drains, queue.drained
        advance = getattr(queue, "advance", None)  # a queue without it steps each second
        faults, alerting, every = self.faults, self.alerting, self.policy.interval_s
        # Decisions on the direct path are looked past (``_look_ahead``) on a fluid queue.
        ahead = queue if LOOK_AHEAD and ring is not None and alerting is None else None
        ahead = ahead if isinstance(ahead, FluidQueue) else None
        decided = -1  # a second whose decision ``_look_ahead`` already made
        t = 0
        while t < n:
            if t != decided:  # else nothing fell due but the decision (``_look_ahead`` made it)
                if t >= cluster.next_event() or t >= cluster.scan_due:
                    cluster.advance(t)
                if t >= faults.next_due():
                    faults.step(t, cluster, self.physics)
                if t >= next_scrape or t >= next_collect:
                    if self._cap_dirty or cluster.version != self._cap_version:
                        self._refresh_capacity(t)
                    collect, scrape = t >= next_collect, t >= next_scrape
                    self._telemetry(float(t), collect, scrape, float(received[t]))
                    if collect:  # at 0 s, then at the offset and every interval after it
                        periods = math.floor((t - sc.collect_offset_s) / collect_s) + 1
                        next_collect = sc.collect_offset_s + collect_s * max(periods, 0)
                    if scrape:
                        next_scrape += sc.scrape_interval_s
                        if alerting is not None:
                            alerting.scrape(float(t), faults.applied)
                if ring is not None and t >= next_sample:  # the controller's own 1 s scrape
                    ring.record(t, (queue.busy, queue.waiting))
                    next_sample += sample_s
                if t >= next_decision:
                    self._decide(float(t))
                    next_decision += every
            if self._cap_dirty or cluster.version != self._cap_version:
                self._refresh_capacity(t)
            if alerting is not None:
                alerting.step(float(t), faults.applied)
            # Nothing changes servers or capacity before the next of these falls due (a
            # threshold x falls due at the first whole second >= x), nor while no pod
            # drains, so the queue advances over the block in one call.
            # The controller's own samples (``ring``) fall inside blocks: each is the queue's
            # state at the end of the second before it, which the block reports.
            far = end = t + 1
            if not drains:
                due = min(cluster.next_event(), faults.next_due(), next_scrape, next_collect)
                end = min(n, max(_first_second(min(due, next_decision)), t + 1))
                far = min(n, max(_first_second(due), t + 1)) if ahead else end
            mark = ahead.mark() if ahead is not None and far > end else None
            servers = self.servers
            if mark is not None and ahead is not None and ring is not None:  # look past
                clocks = (next_sample, next_decision, next_scrape, next_collect)
                ran = self._look_ahead(t, far, (ahead, mark, ring), arrivals, work, clocks)
                end, b_list, d_list, next_sample, next_decision, decided = ran
            else:
                waiting: list[float] | None = [] if ring is not None and end > t + 1 else None
                block = (t, end, arrivals, work, servers, self.capacity, waiting)
                b_list, d_list = advance(*block) if advance else step_each_second(queue, *block)
                if waiting is not None and ring is not None:
                    for s in range(t + 1, end):
                        if s >= next_sample:
                            ring.record(s, (b_list[s - 1 - t], waiting[s - 1 - t]))
                            next_sample += sample_s
            drain_busy = queue.draining
            if end == t + 1:  # one second (a short policy interval, a drain): scalars
                b = b_list[0]
                occupancy.append(b / servers if servers else 0.0)
                tel.done += d_list[0]
            else:
                occupancy.extend([b / servers if servers else 0.0 for b in b_list])
                done = tel.done
                for dep in d_list:  # in order, as one addition per second
                    done += dep
                tel.done = done
            in_service.extend(b_list)
            for uid, d in drains.items():  # a draining pod's GPU is busy too
                drain_seq[self._drain_dev[uid]] += d.requests
            while drained:  # a drained pod frees its GPU
                cluster.release(drained.pop(0), end + 0.0)
            starts.append(t)  # node GPUs are billed until a node is removed
            if mark is not None:  # as they were before a decision at ``end`` changed them
                levels.append(self._levels)
            else:
                ready, held, node_gpus = len(self.ready), self.n_held, cluster.ready_node_gpus
                watts, wanted = self._power_w, cluster.desired
                levels.append((drain_busy, ready, held, self.capacity, node_gpus, watts, wanted))
            if progress is not None:
                for s in range(t + (-t) % tick, end, tick):
                    progress(s / n)
            t = end
        if progress is not None:
            progress(1.0)
        drain_n, ready_n, held_n, cap, nodes, power, desired = per_second(starts, levels, n)
        busy = (np.array(in_service) + drain_n) / self.slots * self.gpr  # busy GPUs
        seconds = {"ready": ready_n, "held": held_n, "busy": busy, "capacity": cap}
        seconds |= {"desired": desired, "nodes": nodes, "power": power}
        return self._result(seconds)

    def _result(self, seconds: dict[str, np.ndarray]) -> RunResult:
        sc, wl, queue = self.sc, self.sc.workload, self.queue
        rec = int(sc.record_interval_s)
        rows = max(math.ceil(wl.duration_s / rec), 1)
        in_flight = queue.finish()
        summary = summarise_run(queue.records, sc, self.slots, row_steps=rec, n_rows=rows)
        demand = arrivals_per_second(queue, wl)
        result = RunResult(
            policy=self.policy.name,
            timeline=row_timeline(wl, rec, summary, demand, seconds),
            requests=arrived_requests(queue, wl),
            within_slo=summary.within_slo,
            dropped=queue.dropped + summary.dropped,
            latency_edges_s=LATENCY_EDGES_S.copy(),
            latency_counts=summary.counts,
            gpu_seconds=float(seconds["held"].sum()),
            busy_gpu_seconds=float(seconds["busy"].sum()),
            scale_events=self.workload.scale_events,
            completed_requests=summary.completed,
            in_flight_requests=in_flight,
            retried_requests=queue.retried,
            ttft_within_slo=summary.ttft_within_slo,
            tpot_within_slo=summary.tpot_within_slo,
            node_gpu_seconds=float(seconds["nodes"].sum()),
            fault_timings=self.alerting.timings() if self.alerting is not None else (),
            holds=tuple(self.holds.items()),
            pods_replaced=self.replaced,
            pods_remediated=self.remediated,
        )
        check_conservation(result)
        return result


def simulate(
    scenario: Scenario,
    policy: ScalingPolicy[Any],
    *,
    progress: Callable[[float], None] | None = None,
) -> RunResult:
    """Run ``policy`` on ``scenario``.

    Args:
        scenario: Workload, cluster, serving model, SLO, faults and seed.
        policy: The scaling policy; it sees only the metric store and the deployment status.
        progress: Called with the fraction done (0 to 1) about a hundred times.

    The cyclic garbage collector is paused during the run and restored after: a run
    makes no reference cycles (none are left to collect after one), while the
    collector's passes over its growing records cost about a tenth of its time.

    Returns:
        The run's timeline and totals; identical for identical inputs.
    """
    if scenario.workload.duration_s == 0:
        raise ConfigError("scenario.workload is empty: give a trace with at least one second")
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _Run(scenario, policy).execute(progress)
    finally:
        if collecting:
            gc.enable()
