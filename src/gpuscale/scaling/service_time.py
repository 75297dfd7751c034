"""The fleet's mean service time, by Little's law on its pods' completion counters.

``hybrid`` reads it to weigh the queue (``backlog_demand``), to judge a queue's wait
(``last_saturated``) and to turn the arrival rate into load offered; it is an
estimator of its own, kept over the decisions' intervals in the policy's state.
"""

from collections.abc import Mapping, Sequence

from gpuscale.scaling import health
from gpuscale.scaling.health import HealthState
from gpuscale.scaling.policy import Observation, Series

Interval = tuple[float, float, float, float]
"""One decision's interval for the service time: ``(end s, completed, busy seconds,
sampled in service)``."""


def service_time_s(
    observation: Observation,
    in_service: Series,
    health_state: HealthState,
    kept: Sequence[Interval],
    window_s: float,
    min_completions: float,
    completions: Mapping[str, float] | None = None,
) -> tuple[float | None, tuple[Interval, ...]]:
    """The fleet's mean service time by Little's law over its newest intervals.

    Each decision adds what the Ready pods completed since the previous one (their
    counters) and the requests-in-service seconds of that interval (the sampled
    count's mean times its length); the service time is the seconds over the
    completions of the newest intervals in which both the completions and the
    sampled counts add up to ``min_completions``, or of all those within
    ``window_s``. Both are counts whose relative error is about one over their square
    root. One interval is too short for long requests: 20 pods of 40 s finish about
    7 requests in 15 s, and a count of 2 reads the service time 3.5 times too long;
    nor does one sample of 15 requests in service say their mean within a quarter.
    A large fleet of short requests has both in its newest interval, whose service
    time is the current one (an LLM server's grows with its batch).

    Args:
        observation: The pods and their completion counters now.
        in_service: The requests in service as sampled.
        health_state: The previous decision's counters and time (``health.assess``).
        kept: The window's earlier intervals, ``(end, completed, busy seconds, sampled
            in service)``.
        window_s: How far back intervals count.
        min_completions: Completions, and sampled requests in service, that make the
            estimate (``service_completions``).
        completions: ``health.completed`` on ``health_state``, where the caller has it
            (``health.assess_counted``); None: counted here.

    Returns:
        (seconds, or None when no completion falls in the window or no request was
        seen in service; the intervals kept).
    """
    now = float(observation.now)
    intervals = [k for k in kept if k[0] > now - window_s]
    last_at = health_state.at
    if last_at is not None and now > last_at:
        if completions is None:
            completions = health.completed(observation, health_state.pods)
        finished = sum(completions.values())
        seen = [v for t, v in in_service if last_at < t <= now] or [in_service[-1][1]]
        busy = max(sum(seen) / len(seen), 0.0) * (now - last_at)
        intervals.append((now, float(finished), busy, max(sum(seen), 0.0)))
    finished = busy_s = sampled = 0.0
    for _, done_k, busy_k, sampled_k in reversed(intervals):  # newest first, until enough
        finished, busy_s, sampled = finished + done_k, busy_s + busy_k, sampled + sampled_k
        if finished >= min_completions and sampled >= min_completions:
            break
    # Requests that complete between samples, none ever seen in service, say only
    # that the service time is shorter than the scrape interval: no reading, not 0 s
    # (which would divide the wait a queue may have by nothing).
    if finished <= 0 or busy_s <= 0:
        return None, tuple(intervals)
    return busy_s / finished, tuple(intervals)
