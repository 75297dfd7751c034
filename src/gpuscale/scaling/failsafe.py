"""Fail-safe: the decision step holds when the data cannot be trusted, and stays in bounds.

A policy fed a missing series, a stale one or a NaN would compute a count from
nothing, and the count it computes from "no load" is the smallest one: the
workload would be scaled in exactly when the autoscaler is blind. So before a
policy sees an ``Observation`` the decision step (``scaling.step``), in the
simulator as live, asks here whether the data is fit to act on:

* ``missing``: a workload signal answered no series, or a per-pod signal answered
  none for any Ready pod (per-pod gaps for some pods are the policy's to judge,
  as an HPA does); a signal marked ``optional`` (an alert that is not firing is
  absent by design) is not judged;
* ``nan``: a value is NaN or infinite (Prometheus answers ``NaN`` for 0/0 and
  ``+Inf`` for x/0);
* ``stale``: the newest raw sample of a signal is older than the bound
  (``metrics.staleAfterSeconds``) at the evaluation time; and, for a decision that
  would scale in, the newest sample of any Ready pod's series of any signal is
  (``check_fresh_pods``): a scale-in counts every Ready pod's load, so a view in
  which some pods went quiet would undercount it;
* ``unavailable``: the source did not answer (``MetricsUnavailable``, judged by
  the caller, ``unavailable``).

Every reason that names a signal names its key, its metric and the PromQL that
reads it, so the operator can run the query the controller ran.

Holding keeps the current replicas (within [min, max]) and the policy's old
state. Whatever the policy says, ``bound`` keeps the result in [min, max] and
within the target's step bounds for one sync.
"""

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from gpuscale.metrics.promql import compile_signal
from gpuscale.metrics.signal import MetricsSource, MetricsUnavailable, NewestByLabel, Signal
from gpuscale.scaling.policy import Observation

MISSING = "missing"
NAN = "nan"
STALE = "stale"
UNAVAILABLE = "unavailable"
REASONS = (MISSING, NAN, STALE, UNAVAILABLE)
"""Every reason to hold, as the ``reason`` label of the hold counter."""


@dataclass(frozen=True, slots=True)
class Problem:
    """Why the data is not fit to act on.

    Attributes:
        reason: One of ``REASONS``.
        detail: Which signal and what was seen, for the log line and the Event.
    """

    reason: str
    detail: str

    def __str__(self) -> str:
        if self.reason == UNAVAILABLE:
            return f"metrics unavailable: {self.detail}"
        return f"{self.reason}: {self.detail}"


def unavailable(exc: MetricsUnavailable) -> Problem:
    """The hold for a source that did not answer: its cause's word first, then its message.

    Returns:
        E.g. ``metrics unavailable: connect: http://p:9090/api/v1/query: cannot connect (...)``.
    """
    return Problem(UNAVAILABLE, f"{exc.reason}: {exc}")


def check_values(
    observation: Observation, signals: Mapping[str, Signal], pod_signals: Mapping[str, Signal]
) -> Problem | None:
    """Find a missing signal or a non-finite value in an observation.

    Args:
        observation: What the policy would see.
        signals: The workload signals it declares, by key.
        pod_signals: The per-pod signals it declares, by key.

    Returns:
        The first problem found, or None when every value is usable.
    """
    finite = _finite_by_sums(observation)
    for key, sig in signals.items():
        points = observation.series.get(key, ())
        if not points:
            if sig.optional:
                continue
            return Problem(MISSING, f"{_named(key, sig)}: no series")
        if id(points) in finite:
            continue
        column = [v for _, v in points]
        if math.isfinite(sum(column)):  # a sum is finite only if every addend is
            continue
        bad = next((v for v in column if not math.isfinite(v)), None)
        if bad is not None:
            return Problem(NAN, f"{key} = {bad}")
    if not pod_signals:
        return None
    ready = {p.name for p in observation.target.pods if p.ready}
    for key in pod_signals:
        values = observation.pod_metrics.get(key, {})
        if not math.isfinite(sum(values.values())):  # else every value is finite
            for pod, v in values.items():
                if not math.isfinite(v):
                    return Problem(NAN, f"{key}{{pod={pod!r}}} = {v}")
        if ready and ready.isdisjoint(values) and not pod_signals[key].optional:
            named = _named(key, pod_signals[key])
            return Problem(MISSING, f"{named}: no sample for any of {len(ready)} Ready pods")
    return None


def _finite_by_sums(observation: Observation) -> set[int]:
    """The ids of the series whose every value is finite, as their source's sums show.

    A sum of floats is finite only if every addend is (an infinity or a NaN carries
    into it), so one finite total per time clears the series added into it; a total
    that is not finite (an overflow too) clears nothing, and those series are read
    value by value.

    Returns:
        ``id`` of each series of ``observation.sums`` so cleared.
    """
    finite: set[int] = set()
    for summed in observation.sums.values():
        if math.isfinite(sum(summed.values)):
            finite.update(map(id, summed.of))
    return finite


def check_fresh(
    source: MetricsSource, signals: Mapping[str, Signal], at: float, stale_after_s: float
) -> Problem | None:
    """Find a signal whose newest raw sample is older than ``stale_after_s`` at ``at``.

    Args:
        source: Where the signals are read (asked for ``newest``).
        signals: Every signal the policy reads, by key.
        at: Evaluation time, seconds.
        stale_after_s: The freshness bound, seconds.

    Returns:
        The first stale signal, or None when all are fresh (a signal with no sample
        at all is ``check_values``' to report).
    """
    for key, sig in signals.items():
        newest = source.newest(sig, at)
        if newest is not None and at - newest > stale_after_s:
            return Problem(STALE, f"{_named(key, sig)}: newest sample {at - newest:.0f} s old")
    return None


def check_fresh_pods(
    source: NewestByLabel,
    signals: Mapping[str, Signal],
    at: float,
    stale_after_s: float,
    ready: Collection[str],
) -> Problem | None:
    """Find Ready pods whose series of a signal are stale while other pods' are fresh.

    Only series with a ``pod`` label are judged (a deployment-wide queue has none).

    Args:
        source: Where the signals are read (asked for ``newest_by``).
        signals: Every signal the policy reads, by key.
        at: Evaluation time, seconds.
        stale_after_s: The freshness bound, seconds.
        ready: Names of the Ready pods the decision counts.

    Returns:
        The first signal with stale Ready pods (at most five named), or None.
    """
    for key, sig in signals.items():
        newest = source.newest_by(sig, at, "pod")
        stale = sorted(p for p in ready if p in newest and at - newest[p] > stale_after_s)
        if stale:
            shown = ", ".join(stale[:5]) + (f" and {len(stale) - 5} more" if len(stale) > 5 else "")
            return Problem(
                STALE,
                f"{_named(key, sig)}: series of Ready pods {shown} older than "
                f"{stale_after_s:g} s; not scaling in on a partial view",
            )
    return None


def _named(key: str, signal: Signal) -> str:
    """A signal as a hold reason names it: its key, its metric and the PromQL it is read by.

    An operator reading the hold pastes the query into Prometheus to see what the
    controller saw; a part equal to the one before it is left out.
    """
    try:
        query = compile_signal(signal)
    except ValueError:  # not PromQL: the in-process store reads it; the metric says enough
        query = signal.metric
    if key == signal.metric:
        return key if query == key else f"{key} (query {query})"
    if query == signal.metric:
        return f"{key} (metric {signal.metric})"
    return f"{key} (metric {signal.metric}, query {query})"


def bound(
    current: int,
    wanted: int,
    min_replicas: int,
    max_replicas: int,
    *,
    up_step: int | None = None,
    down_step: int | None = None,
) -> tuple[int, str]:
    """Keep a wanted count within one sync's step bounds and then within [min, max].

    The bounds come last, so a count outside them (a target created at 0, a lowered
    ``maxReplicas``) is brought inside in one sync.

    Args:
        current: Replicas now (``spec.replicas``).
        wanted: What the policy (or the hold) asks for.
        min_replicas: Lower bound.
        max_replicas: Upper bound.
        up_step: Most replicas added in one sync; None for no limit.
        down_step: Most replicas removed in one sync; None for no limit.

    Returns:
        (replicas, what limited it, or "" when nothing did).
    """
    replicas, why = wanted, ""
    if up_step is not None and replicas > current + up_step:
        replicas, why = current + up_step, f"step limited to +{up_step}"
    if down_step is not None and replicas < current - down_step:
        replicas, why = current - down_step, f"step limited to -{down_step}"
    if replicas < min_replicas:
        replicas, why = min_replicas, f"raised to minReplicas {min_replicas}"
    if replicas > max_replicas:
        replicas, why = max_replicas, f"capped at maxReplicas {max_replicas}"
    return replicas, why


def hold(current: int, min_replicas: int, max_replicas: int) -> int:
    """The count held while the data is unfit: the current one, never scaled in below it.

    Returns:
        ``current`` within [min, max] (a lowered ``maxReplicas`` still applies).
    """
    return max(min_replicas, min(current, max_replicas))
