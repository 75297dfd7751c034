"""Remediation: a pod on a broken GPU is deleted so that its controller places it on a good one.

Kubernetes keeps a pod Ready while its GPU has fallen off the bus or corrupted
memory; the pod serves errors or nothing until someone deletes it. With
``remediate: true`` on a target, each sync looks for evidence against the GPUs
the target's pods hold, in the series the exporter already writes with
dcgm-exporter's ``pod``/``namespace`` labels:

* ``gpuscale_gpu_up == 0``: the GPU stopped answering (both vendors);
* ``DCGM_EXP_XID_ERRORS_COUNT{xid=...} > 0`` for an XID after which the GPU's work
  is lost or wrong (``REMEDIATE_XIDS``), within the exporter's window
  (``--xid-count-window-size``, 5 min by default): "recent";
* ``DCGM_FI_DEV_XID_ERRORS``, the last XID (in dcgm-exporter's default counters,
  where the count family above is off), when it is one of those XIDs and became
  so within ``XID_RECENT_S``: the GPU's value then differs from (or had none) that
  window ago. Compared per GPU UUID, so the pod that replaces a deleted one on the
  same GPU is not deleted for the same old XID;
* ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0``: a double-bit ECC error since the driver
  loaded;
* a firing health alert of ``gpuscale rules`` (``ALERTS{alertstate="firing"}``, as
  Prometheus writes it, with the pod labels the catalogue keeps): ``GpuFellOffBus``,
  ``GpuEccDoubleBitError``, ``GpuRowRemapFailure``, or ``GpuXidError`` for one of
  those XIDs. The alert carries its own ``for:`` and thresholds, tuned with
  ``gpuscale rules backtest``.

At most one pod per target per sync is deleted, and no Ready one when that would
leave fewer Ready pods than ``minReplicas``: remediation trades a little capacity
for healthy capacity and must not take a service down to do it. A pod that is
not Ready (on a GPU that fell off the bus its container crash-loops) serves
nothing, so deleting it is always allowed: its replacement is the only way back
to the floor. The node is
cordoned only with ``cordon: true``. This module finds and chooses; the
controller acts, records the Event and writes the log line.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from gpuscale.fields.xid import WORK_LOST_XIDS
from gpuscale.metrics.signal import MetricsSource, Signal
from gpuscale.scaling.policy import TargetStatus

GPU_UP = "gpuscale_gpu_up"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
XID_LAST = "DCGM_FI_DEV_XID_ERRORS"
XID_RECENT_S = 300.0
"""How recent a last-XID change must be to count: dcgm-exporter's default XID count window."""
DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ALERTS = "ALERTS"
HEALTH_ALERTS = frozenset({"GpuFellOffBus", "GpuEccDoubleBitError", "GpuRowRemapFailure"})
"""Alerts of the catalogue (``gpuscale.alerts``) after which a GPU's work is lost or wrong."""

SERIES = (GPU_UP, XID_COUNT, XID_LAST, DBE, ALERTS)
"""Every series remediation reads."""

REMEDIATE_XIDS = WORK_LOST_XIDS
"""The XIDs after which the GPU's work is lost or wrong (``gpuscale.fields.xid``)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """Evidence that the GPU a pod holds is unhealthy.

    Attributes:
        pod: The pod holding the GPU.
        gpu: The GPU's UUID (``UUID`` or AMD's ``gpu_uuid`` label; ``?`` when absent).
        node: The exporter's host label (``Hostname``/``hostname``); may be empty.
        kind: ``gpu_down``, ``xid``, ``dbe`` or ``alert`` (the metric's ``evidence`` label).
        evidence: What was seen, for the Event and the log line.
    """

    pod: str
    gpu: str
    node: str
    kind: str
    evidence: str


def _gpu(labels: dict[str, str] | object) -> tuple[str, str]:
    get = labels.get if isinstance(labels, dict) else (lambda _k, d="": d)
    return (
        str(get("UUID", "") or get("gpu_uuid", "") or "?"),
        str(get("Hostname", "") or get("hostname", "")),
    )


def find(source: MetricsSource, namespace: str, at: float) -> list[Finding]:
    """Evidence against the GPUs pods of ``namespace`` hold, at ``at``.

    Args:
        source: The metrics source.
        namespace: The target's namespace (the ``namespace`` label of the GPU series).
        at: Evaluation time, seconds.

    Returns:
        Findings, sorted by pod; a pod may appear more than once.
    """
    ns = {"namespace": namespace}
    found: list[Finding] = []
    for res in source.instant(Signal(GPU_UP, ns), at):
        if res.points and res.points[-1][1] == 0 and res.labels.get("pod"):
            gpu, node = _gpu(dict(res.labels))
            found.append(Finding(res.labels["pod"], gpu, node, "gpu_down", f"{GPU_UP} == 0"))
    for res in source.instant(Signal(XID_COUNT, ns), at):
        xid = res.labels.get("xid", "")
        count = res.points[-1][1] if res.points else 0.0
        if xid.isdigit() and int(xid) in REMEDIATE_XIDS and count > 0 and res.labels.get("pod"):
            gpu, node = _gpu(dict(res.labels))
            window = res.labels.get("window_size_in_ms", "")
            within = f" within {int(window) // 1000} s" if window.isdigit() else ""
            found.append(
                Finding(res.labels["pod"], gpu, node, "xid", f"XID {xid} x{count:g}{within}")
            )
    found.extend(_recent_last_xids(source, ns, at))
    found.extend(_firing_alerts(source, ns, at))
    for res in source.instant(Signal(DBE, ns), at):
        count = res.points[-1][1] if res.points else 0.0
        if count > 0 and res.labels.get("pod"):
            gpu, node = _gpu(dict(res.labels))
            found.append(
                Finding(res.labels["pod"], gpu, node, "dbe", f"{count:g} double-bit ECC errors")
            )
    return sorted(found, key=lambda f: (f.pod, f.kind))


def _recent_last_xids(source: MetricsSource, ns: dict[str, str], at: float) -> list[Finding]:
    """Pods whose GPU's last XID turned fatal within ``XID_RECENT_S`` (per GPU UUID)."""
    before: dict[str, float] = {}
    for res in source.instant(Signal(XID_LAST, ns), at - XID_RECENT_S):
        if res.points:
            before[_gpu(dict(res.labels))[0]] = res.points[-1][1]
    found: list[Finding] = []
    for res in source.instant(Signal(XID_LAST, ns), at):
        value = res.points[-1][1] if res.points else 0.0
        gpu, node = _gpu(dict(res.labels))
        fatal = value.is_integer() and int(value) in REMEDIATE_XIDS
        if fatal and res.labels.get("pod") and before.get(gpu) != value:
            found.append(Finding(res.labels["pod"], gpu, node, "xid", f"last XID {int(value)}"))
    return found


def _firing_alerts(source: MetricsSource, ns: dict[str, str], at: float) -> list[Finding]:
    """Pods named by a firing health alert (``HEALTH_ALERTS``, or a fatal ``GpuXidError``)."""
    found: list[Finding] = []
    for res in source.instant(Signal(ALERTS, {**ns, "alertstate": "firing"}), at):
        name, xid = res.labels.get("alertname", ""), res.labels.get("xid", "")
        fatal_xid = name == "GpuXidError" and xid.isdigit() and int(xid) in REMEDIATE_XIDS
        if (name in HEALTH_ALERTS or fatal_xid) and res.labels.get("pod"):
            gpu, node = _gpu(dict(res.labels))
            what = f"alert {name}" + (f" (XID {xid})" if xid else "")
            found.append(Finding(res.labels["pod"], gpu, node, "alert", what))
    return found


def choose(
    findings: Sequence[Finding], target: TargetStatus, min_replicas: int
) -> tuple[Finding | None, str]:
    """The one pod to delete this sync, if any may be.

    Args:
        findings: Evidence from ``find``.
        target: The target's pods now (terminating pods already excluded).
        min_replicas: The target's lower bound.

    Returns:
        (the finding whose pod to delete, or None; why nothing is deleted when None,
        "" when there was nothing to act on).
    """
    pods = {p.name: p for p in target.pods}
    mine = [f for f in findings if f.pod in pods]
    if not mine:
        return None, ""
    pick = mine[0]
    evidence = "; ".join(f.evidence for f in mine if f.pod == pick.pod)
    pick = Finding(pick.pod, pick.gpu, pick.node, pick.kind, evidence)
    if not pods[pick.pod].ready:
        return pick, ""  # it serves nothing: deleting it costs no capacity, whatever the floor
    left = target.ready - 1
    if left < min_replicas:
        return None, (
            f"pod {pick.pod} on GPU {pick.gpu} is unhealthy ({evidence}) but deleting it would "
            f"leave {left} Ready < minReplicas {min_replicas}"
        )
    return pick, ""
