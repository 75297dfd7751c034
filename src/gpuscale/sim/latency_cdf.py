"""The latency CDFs of the fluid queue's portions, on the histogram's edges.

``latency.summarise_latency`` scores every portion of requests that entered
service; the arithmetic per portion and edge (the CDF's two exponentials, where
they underflow, the per-row quantiles, the mean over a measured distribution)
lives here, apart from the bookkeeping, so each module stays small.
"""

import numpy as np

from gpuscale.sim.workload import FloatArray

LATENCY_EDGES_S: FloatArray = np.concatenate([[0.0], np.geomspace(1e-3, 1e5, 161)])
"""Latency histogram edges: 0, then 20 bins per decade from 1 ms to 1e5 s (tail in the last)."""

UNDERFLOW_X = 750.0
"""``exp(-x)`` is exactly 0 in double precision from x = 745.2 on; this leaves a margin."""


def mean_wait_cdf(
    offset: FloatArray,
    factor: FloatArray,
    points: FloatArray,
    pe: FloatArray,
    theta: FloatArray,
    chunk: int,
) -> FloatArray:
    """Per portion ``i``, the mean over ``points`` of P(W <= offset[i] + factor[i] * point).

    W is 0 with probability ``1 - pe`` and else exponential with mean ``theta``;
    ``points`` are equal-probability values of a distribution.

    Returns:
        One probability per portion.
    """
    out = np.empty(offset.size)
    th = np.where(np.isfinite(theta), np.maximum(theta, 1e-12), np.inf)
    for lo in range(0, offset.size, chunk):
        sl = slice(lo, lo + chunk)
        y = offset[sl, None] + factor[sl, None] * points[None, :]
        with np.errstate(over="ignore", invalid="ignore"):
            tail = pe[sl, None] * np.exp(-np.maximum(y, 0.0) / th[sl, None])
        cdf = np.where(y >= 0.0, 1.0 - tail, 0.0)
        out[sl] = cdf.mean(axis=1)
    return out


def cdf_coefficients(
    pe: FloatArray, theta: FloatArray, m: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Write ``latency_cdf`` as ``1 - a * exp(-tau / m) - b * exp(-tau / theta)``.

    Returns:
        ``a``, ``b``, ``1 / m`` and ``1 / theta`` per portion (``b`` is 0 with no wait).
    """
    m = np.maximum(m, 1e-12)
    th = np.where(np.isfinite(theta), np.maximum(theta, 1e-12), 1e300)
    th = np.where(np.abs(th - m) < 1e-3 * m, m * 1.001, th)  # the formula's removable pole
    wait = pe > 0
    a = np.where(wait, 1.0 - pe - pe * m / (th - m), 1.0)
    b = np.where(wait, pe * th / (th - m), 0.0)
    return a, b, 1.0 / m, np.where(wait, 1.0 / th, 0.0)


def underflow_cut(
    d0: FloatArray, coefficients: list[tuple[FloatArray, FloatArray, FloatArray, FloatArray]]
) -> int:
    """The first ``LATENCY_EDGES_S`` edge from which every portion's CDF is exactly 1.

    From ``tau >= UNDERFLOW_X`` times a portion's largest time constant on, both of
    its exponentials underflow to exactly 0, so ``cdf_on_edges`` gives exactly 1.

    Returns:
        The index of that edge (the edge count when there is none).
    """
    if d0.size == 0:
        return int(LATENCY_EDGES_S.size)
    rates = [inv_m for _, _, inv_m, _ in coefficients]
    rates += [inv_t[inv_t > 0] for _, _, _, inv_t in coefficients]
    slowest = min(float(r.min()) for r in rates if r.size)
    if not slowest > 0.0:
        return int(LATENCY_EDGES_S.size)
    edge = float(d0.max()) + UNDERFLOW_X / slowest
    return int(np.searchsorted(LATENCY_EDGES_S, edge, side="left"))


def cdf_on_edges(
    d0: FloatArray,
    a: FloatArray,
    b: FloatArray,
    inv_m: FloatArray,
    inv_t: FloatArray,
    cut: int | None = None,
    into: FloatArray | None = None,
) -> FloatArray:
    """CDF of each portion's latency at the ``LATENCY_EDGES_S`` edges before ``cut``.

    ``into``, when given, is the array (a view of the right shape) the CDF is written to.
    """
    tau = LATENCY_EDGES_S[None, :cut] - d0[:, None]
    np.maximum(tau, 0.0, out=tau)
    out = np.multiply(tau, -inv_m[:, None], out=into)
    np.exp(out, out=out)
    out *= a[:, None]
    waits = np.flatnonzero(inv_t > 0)
    # The wait term reuses ``tau``'s memory (read for the last time here): the same
    # products and exponentials as ``b * exp(tau * -inv_t)``, without temporaries.
    if waits.size == inv_t.size:  # every portion waits: no gather and scatter
        np.multiply(tau, -inv_t[:, None], out=tau)
        np.exp(tau, out=tau)
        tau *= b[:, None]
        out += tau
    elif waits.size:
        ew = tau[waits]
        ew *= -inv_t[waits, None]
        np.exp(ew, out=ew)
        ew *= b[waits, None]
        out[waits] += ew
    np.subtract(1.0, out, out=out)
    return np.clip(out, 0.0, 1.0, out=out)


def row_quantile(row_cdf: FloatArray, q: float) -> FloatArray:
    """Invert each row's cumulative counts at ``LATENCY_EDGES_S``, log-linear within bins."""
    edges = LATENCY_EDGES_S
    total = row_cdf[:, -1]
    out = np.full(row_cdf.shape[0], np.nan)
    have = total > 0
    if not have.any():
        return out
    frac = row_cdf[have] / total[have, None]
    j = np.clip(np.argmax(frac >= q - 1e-12, axis=1), 1, edges.size - 1)
    rows = np.arange(frac.shape[0])
    f0, f1 = frac[rows, j - 1], frac[rows, j]
    w = np.clip((q - f0) / np.maximum(f1 - f0, 1e-300), 0.0, 1.0)
    x0, x1 = edges[j - 1], edges[j]
    log_interp = np.exp(np.log(np.maximum(x0, 1e-300)) * (1 - w) + np.log(x1) * w)
    out[have] = np.where(x0 > 0, log_interp, x1 * w)
    return out
