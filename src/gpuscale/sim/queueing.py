"""Closed-form queueing results the fluid serving model is built from.

The simulator cannot afford a Python object per request on a 24-hour trace, so it
models a deployment's queue with the M/G/k results collected here: Erlang C (the
probability that a request waits), the stationary number in system, and the
latency distribution of a request that waits an exponential time and is then
served for a time fitted to its mean and variability (``service_phases``).
Everything is vectorised over numpy arrays, and nothing here needs scipy: the
normal tail is Numerical Recipes' Chebyshev fit of ``erfc`` and the Poisson CDF
uses the Wilson-Hilferty cube-root transform, which agrees with the exact Erlang
recursion to 1e-4 relative for k > 64 (checked in tests/unit/sim/test_serving.py).
"""

import math
from dataclasses import dataclass

import numpy as np

from gpuscale.sim.workload import FloatArray

EXACT_ERLANG_MAX_K = 64
"""Up to this many servers Erlang C uses the exact recursion; above, Wilson-Hilferty."""

RHO_GRID: FloatArray = np.concatenate(
    [np.linspace(0.0, 0.9, 91), 1.0 - np.geomspace(0.1, 1e-4, 121)[1:]]
)
"""Utilisations the stationary tables are tabulated at, dense towards saturation."""

RHO_MAX = float(RHO_GRID[-1])


def erfc(x: FloatArray) -> FloatArray:
    """Complementary error function, fractional error below 1.2e-7 everywhere.

    Returns:
        erfc(x), dimensionless.
    """
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))  # fmt: skip
    ans = t * np.exp(poly)
    return np.where(x >= 0.0, ans, 2.0 - ans)


def _log_factorial(k: FloatArray) -> FloatArray:
    """ln(k!) by Stirling's series; exact to 1e-10 for k >= 10, the only range used."""
    k = np.maximum(k, 1.0)
    return (
        k * np.log(k)
        - k
        + 0.5 * np.log(2.0 * np.pi * k)
        + 1.0 / (12.0 * k)
        - 1.0 / (360.0 * k**3)
        + 1.0 / (1260.0 * k**5)
    )


def _erlang_b_large(k: FloatArray, a: FloatArray) -> FloatArray:
    """Erlang B as Poisson pmf(k)/cdf(k), the cdf by Wilson-Hilferty (k >= 10)."""
    nu = 2.0 * (k + 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (np.cbrt(2.0 * a / nu) - (1.0 - 2.0 / (9.0 * nu))) / np.sqrt(2.0 / (9.0 * nu))
        cdf = 0.5 * erfc(z / math.sqrt(2.0))
        log_pmf = k * np.log(a) - a - _log_factorial(k)
        b = np.exp(log_pmf) / cdf
    return np.clip(np.nan_to_num(b, nan=0.0), 0.0, 1.0)


def erlang_c(k: FloatArray | float, a: FloatArray | float) -> FloatArray:
    """Probability that an arriving request waits in an M/M/k queue (Erlang C).

    Args:
        k: Servers (>= 1), scalar or array.
        a: Offered load in servers (arrival rate times mean service time).

    Returns:
        P(wait > 0), 0 to 1; 1 where ``a >= k``.
    """
    k_arr, a_arr = np.broadcast_arrays(np.asarray(k, dtype=float), np.asarray(a, dtype=float))
    k_arr = np.maximum(np.round(k_arr), 1.0)
    b = np.zeros(k_arr.shape)
    small = k_arr <= EXACT_ERLANG_MAX_K
    if small.any():
        ks, as_ = k_arr[small], a_arr[small]
        bs = np.ones(ks.shape)
        for n in range(1, int(ks.max()) + 1):
            step = as_ * bs / (n + as_ * bs)
            bs = np.where(n <= ks, step, bs)
        b[small] = bs
    if (~small).any():
        b[~small] = _erlang_b_large(k_arr[~small], a_arr[~small])
    rho = a_arr / k_arr
    with np.errstate(divide="ignore", invalid="ignore"):
        c = b / (1.0 - rho * (1.0 - b))
    return np.where(rho < 1.0, np.clip(np.nan_to_num(c, nan=1.0), 0.0, 1.0), 1.0)


@dataclass(frozen=True, slots=True)
class StationaryTable:
    """M/M/k stationary quantities of one server count over ``RHO_GRID``.

    Attributes:
        k: Servers.
        busy: Mean busy servers, ``k * rho``.
        queue: Mean waiting requests for exponential service (multiply by the
            Allen-Cunneen factor ``(1 + cs2) / 2`` for other service distributions).
        wait_probability: Erlang C.
    """

    k: int
    busy: FloatArray
    queue: FloatArray
    wait_probability: FloatArray

    @classmethod
    def build(cls, k: int) -> "StationaryTable":
        """Tabulate an M/M/k queue with ``k`` servers.

        Returns:
            The table.
        """
        a = RHO_GRID * k
        c = erlang_c(float(k), a)
        queue = c * RHO_GRID / (1.0 - RHO_GRID)
        return cls(k, a, queue, c)


_TABLES: dict[int, StationaryTable] = {}


def stationary_table(k: int) -> StationaryTable:
    """The cached stationary table for ``k`` servers.

    Returns:
        The table, built on first use.
    """
    table = _TABLES.get(k)
    if table is None:
        table = _TABLES[k] = StationaryTable.build(k)
    return table


def latency_cdf(
    x: FloatArray, delay: FloatArray, p_wait: FloatArray, theta: FloatArray, service: FloatArray
) -> FloatArray:
    """CDF of ``delay + W + S`` with W ~ {0 w.p. 1 - p_wait, Exp(theta)} and S ~ Exp(service).

    All arguments broadcast together; ``theta`` may be inf (then W never resolves).

    Returns:
        P(latency <= x), 0 to 1.
    """
    tau = np.maximum(x - delay, 0.0)
    m = np.maximum(service, 1e-12)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        es = np.exp(-tau / m)
        service_only = 1.0 - es
        th = np.where(np.isfinite(theta), np.maximum(theta, 1e-12), 1e300)
        close = np.abs(th - m) <= 1e-6 * m
        et = np.exp(-tau / th)
        hypo = 1.0 - (th * et - m * es) / (th - m)
        hypo = np.where(close, 1.0 - es * (1.0 + tau / m), hypo)
        hypo = np.where(np.isfinite(theta), hypo, 0.0)
    out = (1.0 - p_wait) * service_only + p_wait * hypo
    return np.clip(np.nan_to_num(out, nan=0.0), 0.0, 1.0)


def service_phases(scv: float) -> tuple[float, tuple[tuple[float, float], ...]]:
    """A two-moment fit of a service time with mean 1 and squared coefficient ``scv``.

    Below 1 it is a fixed part plus an exponential (a shifted exponential); above 1
    a balanced-means mixture of two exponentials (hyperexponential); at 1 exactly
    exponential. Both keep the latency CDF in closed form.

    Returns:
        ``(shift, ((weight, mean), ...))`` for a unit mean; scale both by the mean.
    """
    if scv <= 1.0:
        r = math.sqrt(max(scv, 0.0))
        return 1.0 - r, ((1.0, r),)
    p = 0.5 * (1.0 + math.sqrt((scv - 1.0) / (scv + 1.0)))
    return 0.0, ((p, 0.5 / p), (1.0 - p, 0.5 / (1.0 - p)))


def shaped_latency_cdf(
    x: FloatArray,
    delay: FloatArray,
    p_wait: FloatArray,
    theta: FloatArray,
    service: FloatArray,
    scv: float = 1.0,
) -> FloatArray:
    """``latency_cdf`` with the service time shaped by ``service_phases(scv)``.

    Returns:
        P(latency <= x), 0 to 1.
    """
    shift, phases = service_phases(scv)
    total = np.zeros(np.broadcast(x, delay, p_wait, theta, service).shape)
    for weight, mean in phases:
        total = total + weight * latency_cdf(
            x, delay + shift * service, p_wait, theta, mean * service
        )
    return total


def stationary_attainment(
    k: FloatArray, rate: FloatArray, service_s: FloatArray, slo_s: float, cs2: float = 1.0
) -> FloatArray:
    """Share of requests within ``slo_s`` in a stationary M/G/k queue (Allen-Cunneen wait).

    Args:
        k: Servers.
        rate: Arrival rate, requests per second.
        service_s: Mean service time on one server, seconds.
        slo_s: Latency objective, seconds.
        cs2: Squared coefficient of variation of service times.

    Returns:
        P(latency <= slo_s), 0 to 1; 0 where the queue is unstable.
    """
    k, rate, service_s = np.broadcast_arrays(
        np.asarray(k, float), np.asarray(rate, float), np.asarray(service_s, float)
    )
    a = rate * service_s
    c = erlang_c(k, a)
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = 0.5 * (1.0 + cs2) * service_s / (k - a)
    stable = a < k
    theta = np.where(stable, theta, np.inf)
    out = shaped_latency_cdf(np.asarray(slo_s), np.zeros_like(a), c, theta, service_s, cs2)
    return np.where(stable, out, 0.0)
