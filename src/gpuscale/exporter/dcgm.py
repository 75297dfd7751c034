"""NVIDIA families as dcgm-exporter 4.x writes them: names, HELP, TYPE and label order.

dcgm-exporter renders each series from a template: ``gpu``, ``UUID``,
``pci_bus_id``, ``device``, ``modelName``, then ``GPU_I_PROFILE``/``GPU_I_ID``
for a MIG instance, then ``Hostname``, then its *labels* map (label rows of the
counters file and the ``DCGM_EXP_*`` families' own labels) and then its
*attributes* map (pod, namespace, container, XID ``err_code``/``err_msg``),
each map in sorted key order because Go templates range over maps that way.
Dashboards and recording rules do not care about order, but people diffing
scrapes, and tests, do; so this module writes the same order.
"""

from collections import Counter as TallyCounter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric

from gpuscale.exporter.health import HealthJudge
from gpuscale.fields.counters import Counter
from gpuscale.fields.xid import xid_message
from gpuscale.telemetry.base import DeviceSample, GpuInfo

XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
CLOCK_EVENTS_COUNT = "DCGM_EXP_CLOCK_EVENTS_COUNT"
HEALTH_STATUS = "DCGM_EXP_GPU_HEALTH_STATUS"
P2P_STATUS = "DCGM_EXP_P2P_STATUS"
EXP_FAMILIES = frozenset({XID_COUNT, CLOCK_EVENTS_COUNT, HEALTH_STATUS, P2P_STATUS})
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
CLOCK_REASONS_FIELD = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
P2P_PREFIX = P2P_STATUS + ":"
"""Sources report NVLink P2P status to peer GPU ``j`` (static topology) as the attribute
``DCGM_EXP_P2P_STATUS:j`` of ``GpuInfo``, its value the nvmlGpuP2PStatus_t code."""

# DCGM's clock-event reason bits (DCGM_CLOCKS_EVENT_REASON_*) and dcgm-exporter's names.
CLOCK_EVENTS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "clocks_setting",
    0x4: "power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
# nvmlGpuP2PStatus_t / DCGM's link status, as dcgm-exporter names it.
P2P_NAMES = (
    "OK",
    "ChipsetNotSupported",
    "GPUNotSupported",
    "TopologyNotSupported",
    "DisabledByRegKey",
    "NotSupported",
    "Unknown",
)


@dataclass(frozen=True, slots=True)
class LabelStyle:
    """How identity labels are spelled.

    Attributes:
        hostname_label: ``Hostname`` (dcgm-exporter 4.x releases) or ``hostname``
            (upstream's unreleased rename).
        no_hostname: Omit the host label (``-n/--no-hostname``).
        old_namespace: dcgm-exporter 1.x spelling (``-o``): ``uuid``, ``pod_name``,
            ``pod_namespace``, ``container_name``.
        replace_blanks: Blanks in ``modelName`` become dashes (``--replace-blanks-in-model-name``).
    """

    hostname_label: str = "Hostname"
    no_hostname: bool = False
    old_namespace: bool = False
    replace_blanks: bool = False


def pod_keys(style: LabelStyle) -> tuple[str, str, str]:
    """Label names for (pod, namespace, container) in this style."""
    if style.old_namespace:
        return ("pod_name", "pod_namespace", "container_name")
    return ("pod", "namespace", "container")


def _mtype(counter: Counter) -> str:
    """The TYPE written: the row's, with histogram and summary rows untyped (plain samples)."""
    return counter.type if counter.type in ("gauge", "counter") else "unknown"


def identity_labels(info: GpuInfo, hostname: str, style: LabelStyle) -> dict[str, str]:
    """The template's fixed head: gpu, UUID, pci_bus_id, device, modelName, MIG, host."""
    model = "-".join(info.model.split()) if style.replace_blanks else info.model
    labels = {
        "gpu": str(info.index),
        "uuid" if style.old_namespace else "UUID": str(info.uuid),
        "pci_bus_id": info.pci_bus_id,
        "device": info.device,
        "modelName": model,
    }
    if info.mig_profile is not None and info.mig_instance_id is not None:
        labels["GPU_I_PROFILE"] = info.mig_profile
        labels["GPU_I_ID"] = str(info.mig_instance_id)
    if not style.no_hostname and hostname:
        labels[style.hostname_label] = hostname
    return labels


def row_labels(rows: Sequence[Counter], info: GpuInfo) -> dict[str, str]:
    """Values of the counters file's label rows for one entity; blank ones are skipped."""
    known = dict(info.attributes)
    known["DCGM_FI_DRIVER_VERSION"] = info.driver_version
    out = {}
    for row in rows:
        value = known.get(row.field.name)
        if value:
            out[row.name] = value
    return out


def compose(
    head: Mapping[str, str], labels: Mapping[str, str], attrs: Mapping[str, str]
) -> dict[str, str]:
    """Head, then labels sorted by key, then attributes sorted by key, as upstream's template."""
    out = dict(head)
    out.update(sorted(labels.items()))
    out.update(sorted(attrs.items()))
    return out


@dataclass(slots=True)
class Entity:
    """One exported entity in one build: its sample and its label parts."""

    device: DeviceSample
    head: dict[str, str]
    labels: dict[str, str]
    attrs: dict[str, str]
    full: dict[str, str]  # compose(head, labels, attrs), shared by every plain family
    xid_labels: dict[int, dict[str, str]] = field(default_factory=dict)  # by XID code, reused


def _window_family(
    counter: Counter,
    entities: Sequence[Entity],
    counts: Mapping[str, TallyCounter[int]],
    window_ms: int,
    label: str,
    name_of: Callable[[int], str],
) -> Metric:
    """An XID- or clock-event count family: one series per code seen, else one 0 series."""
    family = Metric(counter.name, counter.help, _mtype(counter))
    window = {"window_size_in_ms": str(window_ms)}
    for e in entities:
        seen = counts.get(e.device.info.key)
        if not seen:
            family.add_sample(counter.name, compose(e.head, e.labels | window, e.attrs), 0.0)
            continue
        for code, n in sorted(seen.items()):
            labels = e.labels | window | {label: name_of(code)}
            family.add_sample(counter.name, compose(e.head, labels, e.attrs), float(n))
    return family


@dataclass(frozen=True, slots=True)
class Windows:
    """Trailing-window counts handed to a build.

    Attributes:
        xids: Entity key to XID code to events.
        clock_events: Entity key to clock-event bit to collects that had it.
        xid_window_ms: ``--xid-count-window-size``.
        clock_window_ms: ``--clock-events-count-window-size``.
        now: The snapshot's time, seconds.
    """

    xids: Mapping[str, TallyCounter[int]]
    clock_events: Mapping[str, TallyCounter[int]]
    xid_window_ms: int = 300_000
    clock_window_ms: int = 300_000
    now: float = 0.0


def dcgm_families(
    series: Sequence[Counter],
    entities: Sequence[Entity],
    windows: Windows,
    health: HealthJudge,
) -> Iterable[Metric]:
    """Families for the enabled rows, in the counters file's order.

    Args:
        series: Non-label rows of the counters file.
        entities: The exported NVIDIA entities.
        windows: XID and clock-event counts.
        health: Judges DCGM_EXP_GPU_HEALTH_STATUS from each entity's values.

    Yields:
        One family per row (an empty one is skipped at render time).
    """
    for counter in series:
        name = counter.name
        if counter.field.name == XID_COUNT:
            yield _window_family(counter, entities, windows.xids, windows.xid_window_ms, "xid", str)
        elif counter.field.name == CLOCK_EVENTS_COUNT:
            yield _window_family(
                counter,
                entities,
                windows.clock_events,
                windows.clock_window_ms,
                "clock_event",
                lambda bit: CLOCK_EVENTS.get(bit, f"0x{bit:x}"),
            )
        elif counter.field.name == HEALTH_STATUS:
            family = Metric(name, counter.help, _mtype(counter))
            for e in entities:
                if not e.device.up:
                    continue
                for watch, code, result in health.judge(e.device, windows.now):
                    labels = e.labels | {"health_watch": watch, "health_error_code": code}
                    family.add_sample(name, compose(e.head, labels, e.attrs), float(result))
            yield family
        elif counter.field.name == P2P_STATUS:
            family = Metric(name, counter.help, _mtype(counter))
            for e in entities:
                peers = sorted(
                    (int(k[len(P2P_PREFIX) :]), float(v))
                    for k, v in e.device.info.attributes
                    if k.startswith(P2P_PREFIX)
                )
                for peer, status in peers:
                    link = P2P_NAMES[int(status)] if 0 <= status < len(P2P_NAMES) else "Unknown"
                    labels = e.labels | {"peer_gpu": str(peer), "link_status": link}
                    family.add_sample(name, compose(e.head, labels, e.attrs), status)
            yield family
        elif counter.field.name == XID_FIELD:
            family = Metric(name, counter.help, _mtype(counter))
            for e in entities:
                value = e.device.values.get(XID_FIELD)
                if value is None:
                    continue
                xid = int(value)
                with_xid = e.xid_labels.get(xid)
                if with_xid is None:
                    attrs = e.attrs | {"err_code": str(xid), "err_msg": xid_message(xid)}
                    with_xid = e.xid_labels[xid] = compose(e.head, e.labels, attrs)
                family.add_sample(name, with_xid, value)
            yield family
        else:
            yield _plain_family(counter, entities)


def _plain_family(counter: Counter, entities: Sequence[Entity]) -> Metric:
    family = Metric(counter.name, counter.help, _mtype(counter))
    key, name = counter.field.name, counter.name
    for e in entities:
        value = e.device.values.get(key)
        if value is not None:
            family.add_sample(name, e.full, value)
    return family
