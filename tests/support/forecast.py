"""Feeding a forecaster as a policy does, for the forecast tests."""

from collections.abc import Iterable

from gpuscale.scaling import forecast as fc


def feed(cfg: fc.ForecastConfig, values: Iterable[float]) -> tuple[fc.ForecastState, float]:
    """One point per bucket, decision by decision, as a policy feeds its forecaster.

    Returns:
        (the state, the time of the last point).
    """
    state, t = fc.ForecastState(), 0.0
    for k, v in enumerate(values):
        t = k * cfg.bucket_s
        state = fc.update(state, ((t, float(v)),), t, cfg)
    return state, t
