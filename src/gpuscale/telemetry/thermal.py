"""The thermal limit of simulated GPUs: how long a hot card holds its slowdown temperature.

``FleetPhysics`` solves the die temperature exactly over a step,
``dT/dt = (T_eq - T) / tau`` with ``T_eq = ambient + extra + R * P``. Once ``T``
reaches the slowdown temperature the driver lowers the clock so that ``T_eq``
equals it, and DCGM_FI_DEV_THERMAL_VIOLATION counts the time from the crossing.
This module holds that limit on its own because it is the one part of a step
that needs the crossing time inside the step, and so the most arithmetic.
"""

import math
from dataclasses import dataclass

import numpy as np


class Decay:
    """``exp(-dt / tau)`` per GPU, cached for the last step length (steps repeat)."""

    def __init__(self, tau_s: np.ndarray) -> None:
        self._tau, self._dt, self._v = tau_s, math.nan, np.ones_like(tau_s)

    def __call__(self, dt: float) -> np.ndarray:
        """The decay over ``dt`` seconds.

        Returns:
            One factor per GPU, 0 to 1.
        """
        if self._dt != dt:
            self._dt, self._v = dt, np.exp(-dt / self._tau)
        return self._v


@dataclass(frozen=True, slots=True)
class ThermalModel:
    """Per-GPU constants of the thermal limit (arrays of one value per GPU).

    Attributes:
        slowdown_c: Die temperature where throttling starts.
        r_c_per_w: Steady-state die rise over inlet air per watt.
        tau_s: First-order time constant of the die temperature.
        idle_w: Board power with no kernels running.
        head_w: Dynamic power range, TDP minus idle.
        floor: Lowest clock share (the idle clock over the boost clock).
    """

    slowdown_c: np.ndarray
    r_c_per_w: np.ndarray
    tau_s: np.ndarray
    idle_w: np.ndarray
    head_w: np.ndarray
    floor: np.ndarray


@dataclass(frozen=True, slots=True)
class Throttle:
    """The thermal limit over one step.

    Attributes:
        throttled: Which GPUs held their slowdown temperature for part of the step.
        held_s: Seconds each was held there.
        clock: Clock share per GPU at the end of the step.
        power_w: Power while held.
        end_c: Die temperature at the end of the step, for the throttled GPUs.
    """

    throttled: np.ndarray
    held_s: np.ndarray
    clock: np.ndarray
    power_w: np.ndarray
    end_c: np.ndarray


def throttle(
    m: ThermalModel,
    dt: float,
    demand: np.ndarray,
    c_free: np.ndarray,
    limit_w: np.ndarray,
    t_amb: np.ndarray,
    t0: np.ndarray,
    hot: np.ndarray,
    t_eq_free: np.ndarray,
    t_end_free: np.ndarray,
) -> Throttle:
    """Which GPUs throttle over a step of ``dt`` seconds, for how long, at what clock.

    Args:
        m: The thermal constants.
        dt: Step length, seconds.
        demand: Dynamic power demand per GPU, a share of ``head_w`` at full clock.
        c_free: Clock share the power limit (and any clock cap) allows.
        limit_w: Power limit per GPU, W.
        t_amb: Inlet temperature plus any cooling fault's rise, C.
        t0: Die temperature at the start of the step, C.
        hot: GPUs whose unthrottled equilibrium is past slowdown.
        t_eq_free: Unthrottled equilibrium temperature, C.
        t_end_free: Unthrottled temperature at the end of the step, C.

    Returns:
        The throttle state of every GPU.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # The clock share whose power holds the die at slowdown.
        p_hold = (m.slowdown_c - t_amb) / m.r_c_per_w
        c_th = np.cbrt((p_hold - m.idle_w) / (m.head_w * demand))
        # NaN (0/0) is 1; infinities clip to the bounds, as nan_to_num's largest floats would.
        c_th = np.clip(np.where(np.isnan(c_th), 1.0, c_th), m.floor, c_free)
        p_held = np.minimum(m.idle_w + m.head_w * demand * c_th**3, limit_w)
        t_eq_held = t_amb + m.r_c_per_w * p_held
        already = t0 >= m.slowdown_c
        crosses = hot & ~already & (t_end_free >= m.slowdown_c)
        to_cross = m.tau_s * np.log((t_eq_free - t0) / (t_eq_free - m.slowdown_c))
    t_cross = np.clip(np.where(crosses, to_cross, np.where(already, 0.0, dt)), 0.0, dt)
    throttled = hot & (already | crosses)
    held = np.where(throttled, dt - t_cross, 0.0)
    t_from = np.where(already, t0, m.slowdown_c)
    end = t_eq_held + (t_from - t_eq_held) * np.exp(-held / m.tau_s)
    return Throttle(throttled, held, np.where(throttled, c_th, c_free), p_held, end)
