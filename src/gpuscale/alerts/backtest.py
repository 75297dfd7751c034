"""Backtest the alert catalogue on history with known faults: what fired, when, and rightly?

Each alert expression is asked of a real Prometheus over the history
(``tsdb.HistoryPrometheus``), and ``for:`` is applied here the way Prometheus
applies it: an alert fires at the first evaluation at least ``for:`` after the
expression started returning its series, and stops when the series goes.
Every firing episode is then judged against the labelled faults: true when a
fault on the same GPU (or host, for host-level alerts) began at or before it
and its effects had not yet faded, false otherwise. For each rule the report
gives episodes, true and false positives, the faults of the kinds it is meant
to catch, how many it caught, and its detection delays, from the fault's start
and from its observable onset (where the history knows it). Because ``for:`` is
applied here, a sweep over ``for:`` costs no extra query; a threshold sweep
renders the catalogue once per value and queries each variant.
"""

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gpuscale.alerts.model import AlertRule, RuleGroup, alerts_of
from gpuscale.alerts.tsdb import Series

DETECTS: dict[str, tuple[str, ...]] = {
    "gpu-lost": ("GpuFellOffBus",),
    "xid": ("GpuXidError",),
    "ecc-dbe": ("GpuEccDoubleBitError",),
    "row-remap": ("GpuRowRemapFailure",),
    "thermal": (
        "GpuThermalThrottling",
        "GpuTemperatureHigh",
        "GpuTemperatureAnomaly",
        "GpuTemperatureRisingFast",
    ),
    "straggler": ("GpuStraggler",),
    "power-cap": ("GpuPowerCapped",),
    "memory-full": ("GpuMemoryNearFull",),
    "idle-allocated": ("GpuIdleWhileAllocated",),
    "stale": ("GpuMetricsStale",),
    "exporter-down": ("GpuExporterDown",),
}
"""The alerts meant to catch each fault kind; their recall is counted on those faults."""
GRACE_S = 900.0
"""After a fault ends, its effects (a counter's window, a cooling card) count as its own
for this long: the longest default window of a rule that reads them (10m) plus 5m."""


@dataclass(frozen=True, slots=True)
class LabelledFault:
    """A fault whose place and time are known.

    Attributes:
        host: ``Hostname`` of the GPU.
        gpu: GPU index (the ``gpu`` label); empty for a fault of the whole host.
        kind: Fault kind (``telemetry.faults``).
        start_s: When it began, seconds since the epoch.
        end_s: When it ended; None when it lasts to the end of the history.
        onsets: ``(alert, time)``: when the series first showed what that alert
            watches, where it is later than ``start_s``.
    """

    host: str
    gpu: str
    kind: str
    start_s: float
    end_s: float | None = None
    onsets: tuple[tuple[str, float], ...] = ()

    def onset(self, alert: str) -> float:
        """When ``alert`` could first see this fault, seconds since the epoch.

        Returns:
            The onset noted for ``alert``, else the fault's start.
        """
        return dict(self.onsets).get(alert, self.start_s)


@dataclass(frozen=True, slots=True)
class Episode:
    """One alert firing without a break: ``start_s`` (after ``for:``) to ``end_s``."""

    alert: str
    labels: tuple[tuple[str, str], ...]
    start_s: float
    end_s: float

    @property
    def place(self) -> tuple[str, str | None]:
        """``(Hostname, gpu)``; gpu is None for a host-level alert.

        A host-level alert on a scrape (``up``) names the host by its ``instance``,
        ``host:port``.
        """
        d = dict(self.labels)
        return d.get("Hostname", d.get("instance", "").rpartition(":")[0]), d.get("gpu")


def episodes(alert: str, series: Iterable[Series], for_s: float, step_s: float) -> list[Episode]:
    """Firing episodes of one alert from its expression's range-query result.

    Args:
        alert: Alert name.
        series: The expression's series at each step.
        for_s: The ``for:`` duration, seconds.
        step_s: Evaluation step of the query, seconds.

    Returns:
        Episodes in time order: each run of consecutive steps with the series
        present fires from the first step at least ``for_s`` after the run began.
    """
    out = []
    for labels, points in series:
        run: list[float] = []
        for t, _ in [*points, (float("inf"), 0.0)]:
            if run and t - run[-1] > 1.5 * step_s:
                fired = next((x for x in run if x - run[0] >= for_s), None)
                if fired is not None:
                    out.append(Episode(alert, labels, fired, run[-1]))
                run = []
            run.append(t)
    return sorted(out, key=lambda e: (e.start_s, e.labels))


@dataclass(slots=True)
class RuleScore:
    """How one alert did on one history.

    Attributes:
        alert: Alert name.
        for_s: The ``for:`` it was scored with, seconds.
        fired: Firing episodes.
        true_positives: Episodes during a fault's effects on the same GPU or host.
        false_positives: Episodes with no fault there.
        faults: Faults of the kinds this alert is meant to catch.
        detected: Those of them it caught.
        delays_s: Detection delay of each caught fault from its start, seconds.
        onset_delays_s: The same delays from the fault's observable onset.
        false_hosts: Hosts with a false episode.
    """

    alert: str
    for_s: float
    fired: int = 0
    true_positives: int = 0
    false_positives: int = 0
    faults: int = 0
    detected: int = 0
    delays_s: list[float] = field(default_factory=list)
    onset_delays_s: list[float] = field(default_factory=list)
    false_hosts: set[str] = field(default_factory=set)

    @property
    def recall(self) -> float | None:
        """Share of its faults it caught; None when it had none to catch."""
        return self.detected / self.faults if self.faults else None

    @property
    def median_delay_s(self) -> float | None:
        """Median detection delay, seconds; None when it caught nothing."""
        return statistics.median(self.delays_s) if self.delays_s else None

    @property
    def median_onset_delay_s(self) -> float | None:
        """Median detection delay from the observable onset, seconds; None when none caught."""
        return statistics.median(self.onset_delays_s) if self.onset_delays_s else None


def _covers(fault: LabelledFault, ep: Episode, end_s: float) -> bool:
    host, gpu = ep.place
    if host != fault.host or (gpu is not None and gpu != fault.gpu):
        return False
    until = (fault.end_s if fault.end_s is not None else end_s) + GRACE_S
    return fault.start_s <= ep.start_s <= until


def score(
    alert: str,
    found: Sequence[Episode],
    faults: Sequence[LabelledFault],
    end_s: float,
    for_s: float,
) -> RuleScore:
    """Judge one alert's episodes against the faults.

    Args:
        alert: Alert name.
        found: Its episodes.
        faults: Every labelled fault of the history.
        end_s: End of the history (a fault with no end lasts until then).
        for_s: The ``for:`` applied, for the report.

    Returns:
        The score.
    """
    s = RuleScore(alert, for_s, fired=len(found))
    for ep in found:
        if any(_covers(f, ep, end_s) for f in faults):
            s.true_positives += 1
        else:
            s.false_positives += 1
            s.false_hosts.add(ep.place[0])
    for fault in faults:
        if alert not in DETECTS.get(fault.kind, ()):
            continue
        s.faults += 1
        starts = [ep.start_s for ep in found if _covers(fault, ep, end_s)]
        if starts:
            s.detected += 1
            s.delays_s.append(min(starts) - fault.start_s)
            s.onset_delays_s.append(min(starts) - fault.onset(alert))
    return s


Query = Callable[[str], list[Series]]
"""Evaluates an expression over the whole history at the step."""


def backtest(
    groups: Sequence[RuleGroup],
    query: Query,
    faults: Sequence[LabelledFault],
    end_s: float,
    step_s: float,
    for_values: Sequence[float] | None = None,
) -> list[RuleScore]:
    """Score every alert of ``groups`` on the history ``query`` reads.

    Args:
        groups: The catalogue.
        query: Range query over the history.
        faults: The labelled faults.
        end_s: End of the history.
        step_s: Evaluation step, seconds.
        for_values: ``for:`` durations to score each alert with (seconds); None
            scores each with its own ``for:`` only.

    Returns:
        One score per alert and ``for:`` value, in catalogue order.
    """
    by_name: dict[str, list[AlertRule]] = defaultdict(list)
    for rule in alerts_of(groups):
        by_name[rule.alert].append(rule)
    out = []
    for name, rules in by_name.items():
        results = [(rule, query(rule.expr)) for rule in rules]
        values = for_values if for_values is not None else [float(rules[0].for_s)]
        for for_s in values:
            found = [ep for _, res in results for ep in episodes(name, res, for_s, step_s)]
            out.append(score(name, found, faults, end_s, for_s))
    return out
