"""Scrape, evaluate, notify: the rule loop ``gpuscale up`` runs in place of Prometheus.

Embedded by default: the exporter's exposition is parsed in process into the
metric store every scrape interval, as Prometheus would scrape it (``job`` and
``instance`` labels added, ``up`` written, and every series missing from a
scrape, or from a failed one, marked stale), then the catalogue is evaluated
every evaluation interval and the alerts due are sent to Alertmanager. With a
real Prometheus the loop skips the scrape and the rules read from it instead
(``evaluate_remote``).
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from gpuscale.alerts.evaluate import RuleEvaluator
from gpuscale.alerts.evaluate_notify import Notifier
from gpuscale.metrics.store import MetricStore

logger = logging.getLogger(__name__)


def ingest_exposition(
    store: MetricStore, text: str, t: float, target: dict[str, str], known: set[str]
) -> int:
    """Write one scrape's exposition text into ``store`` at ``t``, as Prometheus stores it.

    Args:
        store: The metric store.
        text: Prometheus text exposition.
        t: Scrape time, seconds.
        target: Labels of the target (``job``, ``instance``), added to every series.
        known: Series names seen in earlier scrapes; updated. A known name missing now
            gets an empty row, so its series go stale.

    Returns:
        The number of samples written.
    """
    by_name: dict[str, tuple[list[dict[str, str]], list[float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels, values = by_name.setdefault(sample.name, ([], []))
            labels.append({**sample.labels, **target})
            values.append(float(sample.value))
    for name in known - by_name.keys():
        store.ingest(t, name, [], np.zeros(0))
    for name, (labels, values) in by_name.items():
        store.ingest(t, name, labels, np.array(values, dtype=float))
    known.update(by_name)
    return sum(len(v) for _, v in by_name.values())


@dataclass
class RuleLoop:
    """Runs scrapes, evaluations and notifications at their intervals.

    Attributes:
        evaluator: The rules.
        store: Where scrapes go (the evaluator's store when embedded).
        interval_s: Rule evaluation interval, seconds.
        scrape: Returns the exporter's exposition text; None when a real Prometheus scrapes.
        scrape_interval_s: Scrape interval, seconds.
        target: ``job`` and ``instance`` of the scraped exporter.
        notifier: Sends alerts to Alertmanager; None for none.
        lock: Held while the rules' state changes (the API server reads under it).
    """

    evaluator: RuleEvaluator
    store: MetricStore
    interval_s: float
    scrape: Callable[[], str] | None = None
    scrape_interval_s: float = 15.0
    target: dict[str, str] = field(default_factory=dict)
    notifier: Notifier | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    evaluations: int = 0
    _known: set[str] = field(default_factory=set)
    _next_scrape: float = 0.0
    _next_eval: float = 0.0

    def _scrape(self, now: float) -> None:
        assert self.scrape is not None  # noqa: S101 - checked by the caller
        try:
            text = self.scrape()
        except Exception as exc:  # noqa: BLE001 - a failed scrape is up == 0, as in Prometheus
            logger.warning("scrape of %s failed: %s", self.target, exc)
            for name in self._known:
                self.store.ingest(now, name, [], np.zeros(0))
            self.store.ingest(now, "up", [self.target], np.array([0.0]))
            return
        ingest_exposition(self.store, text, now, self.target, self._known)
        self.store.ingest(now, "up", [self.target], np.array([1.0]))

    def tick(self, now: float) -> None:
        """Do what is due at ``now`` (seconds since the epoch)."""
        if self.scrape is not None and now >= self._next_scrape:
            self._next_scrape = now + self.scrape_interval_s
            with self.lock:
                self._scrape(now)
        if now >= self._next_eval:
            self._next_eval = now + self.interval_s
            with self.lock:
                self.evaluator.evaluate(now)
                self.evaluations += 1
                alerts = self.evaluator.active_alerts()
            if self.notifier is not None:
                self.notifier.notify(alerts, now)

    def run(self, stop: threading.Event, clock: Callable[[], float] = time.time) -> None:
        """Tick until ``stop`` is set, sleeping until the next scrape or evaluation."""
        while not stop.is_set():
            self.tick(clock())
            due = min(self._next_eval, self._next_scrape if self.scrape else self._next_eval)
            stop.wait(max(due - clock(), 0.01))
