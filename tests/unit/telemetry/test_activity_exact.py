"""The fast paths of the activity formulas give exactly what the plain formulas give."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gpuscale.telemetry.activity import LLM_PHASES, PROFILED, nan_to, phase_levels

FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)


@settings(max_examples=200, deadline=None)
@given(arrays(np.float64, st.integers(1, 40), elements=FLOATS), st.floats(-2.0, 2.0))
def test_nan_to_is_nan_to_num_bit_for_bit(values, fill):
    expected = np.nan_to_num(values, nan=fill)
    got = nan_to(values, fill)
    assert got.dtype == np.float64
    assert np.array_equal(got.view(np.int64), expected.view(np.int64))


def test_nan_to_returns_finite_float_arrays_as_they_are():
    values = np.array([0.5, 2.0, -1.0])
    assert nan_to(values, 0.0) is values


@settings(max_examples=100, deadline=None)
@given(
    arrays(np.float64, 12, elements=st.floats(-0.5, 1.5) | st.just(np.nan)),
    arrays(np.float64, 12, elements=st.floats(-0.5, 1.5) | st.just(np.nan)),
)
def test_phase_levels_match_the_per_ratio_formula_exactly(fill, share):
    f = np.clip(np.nan_to_num(fill, nan=0.0), 0.0, 1.0)
    p = np.clip(np.nan_to_num(share, nan=0.0), 0.0, 1.0)
    got = phase_levels(LLM_PHASES, fill, share)
    for name in PROFILED:
        (p1, pn), (d1, dn) = getattr(LLM_PHASES.prefill, name), getattr(LLM_PHASES.decode, name)
        expected = p * (p1 + (pn - p1) * f) + (1.0 - p) * (d1 + (dn - d1) * f)
        assert np.array_equal(got[name], expected), name
