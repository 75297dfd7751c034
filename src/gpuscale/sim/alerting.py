"""The alert catalogue inside a simulated run: detection, ALERTS, and time to detect/mitigate.

A fault is only half handled when the fleet's alerts fire; it is handled when
the deployment serves at full strength again. To measure both on the same
closed loop the simulator runs, ``SimAlerting`` evaluates the catalogue
(``alerts.evaluate.RuleEvaluator``) over the run's own metric store at
Prometheus's evaluation interval, so firing alerts land in the store as
``ALERTS`` where the policies' health path reads them, exactly as the
controller reads Prometheus's. For every injected fault it then reports:

* **time to detect**: the first evaluation at which an alert about the faulted
  GPU (its ``UUID``) fires, minus the injection time;
* **time to mitigate**: for a fault that kills or restarts the replica
  (``gpu-lost``, ``ecc-dbe``), when a replica started after the fault is Ready
  (the restarted one or its replacement); for one that leaves it Ready but
  degraded (``thermal``, ``straggler``), when that pod leaves service. None
  when neither happened before the run ended.

The simulated exporter keeps per-pod DCGM series; dcgm-exporter also serves
``DCGM_EXP_XID_ERRORS_COUNT`` (XIDs over its 5-minute window, kept after the
pod is gone), which the catalogue's ``GpuFellOffBus`` reads, so it is written
here from the XIDs the injected faults raise.
"""

import logging
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.config import AlertConfig
from gpuscale.alerts.evaluate import RuleEvaluator, window_s
from gpuscale.metrics.store import MetricStore
from gpuscale.sim.cluster import READY, Cluster
from gpuscale.sim.faults import AppliedFault
from gpuscale.sim.outcome import FaultTiming
from gpuscale.telemetry.physics import XID_DBE, XID_FELL_OFF_BUS

logger = logging.getLogger(__name__)

XID_WINDOW_S = 300.0
"""dcgm-exporter's default XID count window (``--xid-count-window-size`` 300000 ms)."""
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
_XID_OF = {"gpu-lost": XID_FELL_OFF_BUS, "ecc-dbe": XID_DBE}
_REPLACED = frozenset({"gpu-lost", "ecc-dbe"})


@dataclass(slots=True)
class _Tracked:
    applied: AppliedFault
    uuid: str | None
    detect_s: float | None = None
    alert: str | None = None
    mitigate_s: float | None = None


def alert_window_s(config: AlertConfig | None = None) -> float:
    """How far back the default (or ``config``'s) catalogue reads, seconds (``window_s``).

    Returns:
        Seconds.
    """
    return window_s(build_catalogue(config))


class SimAlerting:
    """Evaluates the catalogue over a run's store and times each fault's detection and fix.

    Args:
        store: The run's metric store (it must keep ``window_s`` of history plus the lookback).
        cluster: The simulated cluster (pod and GPU identities).
        uuids: ``UUID`` label of each physical GPU (``SeriesWriter.uuids``).
        model_name: ``modelName`` label of the GPUs.
        interval_s: Rule evaluation interval, seconds.
        collect: dcgm-exporter's collect (interval, offset of the first periodic one),
            seconds: an XID shows in the exporter's count from the first collect after it.
        config: Alert settings (defaults when None).
    """

    def __init__(
        self,
        store: MetricStore,
        cluster: Cluster,
        uuids: Sequence[str],
        model_name: str,
        interval_s: float,
        collect: tuple[float, float] = (30.0, 7.0),
        config: AlertConfig | None = None,
    ) -> None:
        self.store, self.cluster, self.uuids = store, cluster, uuids
        self.collect = collect
        self.model_name, self.interval_s = model_name, interval_s
        self.evaluator = RuleEvaluator(build_catalogue(config), store)
        self.evaluations = 0
        self._next_eval = 0.0
        self._tracked: list[_Tracked] = []
        # (first collect that reports it, XID time, labels) of each XID the faults raised
        self._xids: deque[tuple[float, float, Mapping[str, str]]] = deque()

    def _gpu_labels(self, slot: int, pod: str | None) -> dict[str, str]:
        c = self.cluster
        node, gpu = divmod(slot, c.config.gpus_per_node)
        labels = {
            "gpu": str(gpu),
            "UUID": self.uuids[int(c.slot_phys[slot])],
            "Hostname": c.node_name(node),
            "modelName": self.model_name,
        }
        if pod is not None:
            labels |= {"pod": pod, "namespace": c.config.namespace}
            labels["container"] = c.config.deployment
        return labels

    def _track(self, t: float, applied: Sequence[AppliedFault]) -> None:
        for a in applied[len(self._tracked) :]:
            uuid = self.uuids[int(self.cluster.slot_phys[a.slot])] if a.slot >= 0 else None
            self._tracked.append(_Tracked(a, uuid))
            xid = _XID_OF.get(a.fault.kind)
            if xid is not None and a.slot >= 0:
                labels = {**self._gpu_labels(a.slot, a.pod), "xid": str(xid)}
                self._xids.append((self._collected(a.at_s), a.at_s, labels))

    def _collected(self, at: float) -> float:
        """The first collect at or after ``at`` (one at 0 s, then offset + k x interval)."""
        interval, offset = self.collect
        if at <= 0:
            return 0.0
        return max(offset + interval * math.ceil((at - offset) / interval), offset)

    def step(self, t: float, applied: Sequence[AppliedFault]) -> None:
        """Note newly applied faults and whether any fault is mitigated by now (``t`` seconds)."""
        if len(applied) > len(self._tracked):
            self._track(t, applied)
        pending = [f for f in self._tracked if f.mitigate_s is None and f.applied.pod is not None]
        if not pending:
            return
        ready = [p for p in self.cluster.pods.values() if p.state == READY]
        for f in pending:
            at = f.applied.at_s
            if f.applied.fault.kind in _REPLACED:
                fresh = [p.ready_at for p in ready if p.ready_at is not None and p.ready_at > at]
                if fresh:
                    f.mitigate_s = min(fresh) - at
            elif all(p.name != f.applied.pod for p in ready):
                f.mitigate_s = t - at

    def scrape(self, t: float, applied: Sequence[AppliedFault]) -> None:
        """After a scrape at ``t``: write the XID counts, and evaluate the rules when due."""
        if len(applied) > len(self._tracked):
            self._track(t, applied)
        while self._xids and self._xids[0][1] < t - XID_WINDOW_S:
            self._xids.popleft()
        counts: dict[tuple[tuple[str, str], ...], float] = {}
        for seen, _, labels in self._xids:
            if seen > t:
                continue
            key = tuple(sorted(labels.items()))
            counts[key] = counts.get(key, 0.0) + 1.0
        self.store.ingest(t, XID_COUNT, [dict(k) for k in counts], np.array(list(counts.values())))
        if t + 1e-9 < self._next_eval:
            return
        self._next_eval = t + self.interval_s
        result = self.evaluator.evaluate(t)
        self.evaluations += 1
        waiting = [f for f in self._tracked if f.detect_s is None and f.uuid is not None]
        if not waiting:
            return
        for alerts in result.alerts.values():
            for alert_labels, state, _ in alerts:
                if state != "firing":
                    continue
                found = dict(alert_labels)
                for f in waiting:
                    if f.detect_s is None and found.get("UUID") == f.uuid:
                        f.detect_s, f.alert = t - f.applied.at_s, found.get("alertname")

    def timings(self) -> tuple[FaultTiming, ...]:
        """Per injected fault, in injection order: time to detect and time to mitigate.

        Returns:
            One ``FaultTiming`` per applied fault.
        """
        return tuple(
            FaultTiming(
                f.applied.fault.spec(),
                f.applied.fault.kind,
                f.applied.at_s,
                f.applied.pod,
                f.uuid,
                f.detect_s,
                f.alert,
                f.mitigate_s,
            )
            for f in self._tracked
        )
