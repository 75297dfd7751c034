"""The one step from a metric source and a target's status to a policy's ``Observation``.

A policy is only as good as what it sees, so the simulator and the live
controller must build its view the same way. This function is that way: it
evaluates the policy's ``signals`` (summed over result series, as a history of
``history_s`` when the policy asks for one) and ``pod_signals`` (the latest value
per pod of the target) on any ``MetricsSource``, ``delay_s`` in the past. It does
no I/O itself; the source may be the in-process store, a ring of per-second
samples or Prometheus. ``Observer`` finds once what the source can do beyond the
base protocol (``KeyedInstant``, ``SummedWindows``); the decision step
(``scaling.step``) keeps one per target.
"""

from collections.abc import Sequence
from typing import Any

from gpuscale.metrics.signal import KeyedInstant, LabelledValue, MetricsSource, SummedWindows
from gpuscale.scaling.policy import (
    NO_SUMS,
    Observation,
    ScalingPolicy,
    Series,
    SeriesSum,
    TargetStatus,
)


def merge(results: Sequence[LabelledValue]) -> Series:
    """One series from a query's results: itself, or the sum of several at equal times.

    Returns:
        (time, value) points, oldest first; empty when there are no results.
    """
    if not results:
        return ()
    if len(results) == 1:
        return tuple(results[0].points)
    totals: dict[float, float] = {}
    for res in results:
        for t, v in res.points:
            totals[t] = totals.get(t, 0.0) + v
    return tuple(sorted(totals.items()))


class Observer:
    """Builds one policy's observations from one source, on its signal path.

    Args:
        source: Where the series are read.
        policy: Declares the signals, the per-pod signals and the history it needs.
        delay_s: Signals are evaluated this far in the past (a recording rule's delay).
        step_s: Resolution of the history ranges, seconds (the source's sample period).
    """

    def __init__(
        self,
        source: MetricsSource,
        policy: ScalingPolicy[Any],
        *,
        delay_s: float = 0.0,
        step_s: float = 15.0,
    ) -> None:
        self.source, self.policy = source, policy
        self.delay_s, self.step_s = delay_s, step_s
        # A source that can key an instant query's values by a label (the simulator's
        # store) gives the same values without a result object per pod.
        self._keyed: KeyedInstant | None = source if isinstance(source, KeyedInstant) else None
        # A source that keeps its totals added per sample (the simulator's ring) gives the
        # policy's signals added up, so a policy adding them at each decision need not;
        # and with them each signal's range, from one call instead of a query per signal.
        self._summed: SummedWindows | None = None
        if isinstance(source, SummedWindows) and len(policy.signals) > 1:
            self._summed = source

    def observe(self, target: TargetStatus, now: float) -> Observation:
        """What the policy sees at ``now``: its signals evaluated at ``now - delay_s``.

        Args:
            target: The scale target's status now (its pods name the per-pod values kept).
            now: Decision time, seconds.

        Returns:
            The observation; unhealthy when the evaluation time is before 0 (no data yet).
        """
        source, policy, step_s = self.source, self.policy, self.step_s
        at = now - self.delay_s
        pod_metrics: dict[str, dict[str, float]] = {}
        if policy.pod_signals:
            names = {p.name for p in target.pods}
            keyed = self._keyed
            for key, sig in policy.pod_signals.items():
                if keyed is not None:
                    by_pod = keyed.instant_by(sig, at, "pod")
                    if by_pod.keys() <= names:  # the usual case: no pod outside the target
                        pod_metrics[key] = by_pod  # a new dict of each call: kept, not copied
                    else:
                        pod_metrics[key] = {pod: v for pod, v in by_pod.items() if pod in names}
                    continue
                values = pod_metrics.setdefault(key, {})
                values.update(
                    {
                        pod: res.points[-1][1]
                        for res in source.instant(sig, at)
                        if (pod := res.labels.get("pod")) in names and res.points
                    }
                )
        hist = policy.history_s
        signals = policy.signals
        series: dict[str, Series]
        if self._summed is not None and hist > 0:
            window = self._summed.summed_window(tuple(signals.values()), at - hist, at, step_s)
            if window is not None:
                of, times, totals = window
                series = dict(zip(signals, of, strict=True))
                sums = {tuple(series): SeriesSum(of, times, totals)}
                return Observation(now, target, pod_metrics, series, healthy=at >= 0.0, sums=sums)
        series = {}
        for key, sig in signals.items():
            found = (
                source.range(sig, at - hist, at, step_s) if hist > 0 else source.instant(sig, at)
            )
            series[key] = merge(found)
        return Observation(now, target, pod_metrics, series, healthy=at >= 0.0, sums=NO_SUMS)


def observe(
    source: MetricsSource,
    policy: ScalingPolicy[Any],
    target: TargetStatus,
    now: float,
    *,
    delay_s: float = 0.0,
    step_s: float = 15.0,
) -> Observation:
    """What ``policy`` sees at ``now`` (``Observer.observe``, for a single read).

    Returns:
        The observation.
    """
    return Observer(source, policy, delay_s=delay_s, step_s=step_s).observe(target, now)
