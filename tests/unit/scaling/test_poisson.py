"""The straggler test's Poisson tail, in the standard library, against scipy's."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import pdtr

from gpuscale.scaling.poisson import poisson_cdf


@given(
    k=st.integers(min_value=0, max_value=200_000),
    mean=st.floats(min_value=1e-6, max_value=1e6, allow_nan=False),
)
def test_poisson_cdf_matches_scipy(k, mean):
    ours, theirs = poisson_cdf(k, mean), float(pdtr(k, mean))
    # Both are doubles from sums of a few hundred terms: agreement to 1e-9 relative
    # (or absolute below 1e-290, where scipy's own result is subnormal).
    assert math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-290)


@pytest.mark.parametrize(
    ("k", "mean", "expected"),
    [
        (0, 2.0, math.exp(-2.0)),  # P(X=0) = e^-mean
        (1, 2.0, 3 * math.exp(-2.0)),  # e^-2 (1 + 2)
        (-1, 2.0, 0.0),
        (5, 0.0, 1.0),  # no events expected: any count is at most certain
    ],
)
def test_poisson_cdf_closed_forms(k, mean, expected):
    assert poisson_cdf(k, mean) == pytest.approx(expected, rel=1e-12)
