"""Empirical and Gaussian measures: validation, moments, sampling."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tpde_lib import Empirical, Gaussian


def test_default_weights_are_uniform_and_moments_match_numpy():
    X = np.random.default_rng(0).normal(size=(50, 3))
    mu = Empirical(X)
    assert np.allclose(mu.weights, 1 / 50)
    assert np.allclose(mu.mean(), X.mean(axis=0))
    assert np.allclose(mu.cov(), np.cov(X.T, bias=True))


@settings(max_examples=30, deadline=None)
@given(arrays(float, (7, 2), elements=st.floats(-5, 5)), arrays(float, 7, elements=st.floats(0.01, 1)))
def test_weighted_moments_equal_duplicated_uniform_sample(X, raw):
    # integer weights k_i / sum k: the same as repeating token i k_i times with uniform weights
    k = np.ceil(raw * 4).astype(int)
    mu = Empirical(X, weights=k / k.sum())
    rep = Empirical(np.repeat(X, k, axis=0))
    assert np.allclose(mu.mean(), rep.mean())
    assert np.allclose(mu.cov(), rep.cov(), atol=1e-10)


def test_measures_are_immutable_values():
    mu = Empirical(np.zeros((3, 2)))
    with pytest.raises(ValueError):
        mu.points[0, 0] = 1.0
    nu = mu.with_points(np.ones((3, 2)))
    assert np.all(mu.points == 0) and np.all(nu.points == 1)


#: the one message of a wrong mass (tpde_lib._checks.as_weights), up to what was got
_WEIGHTS = r"^weights must be non-negative masses summing to 1 \(within 1e-09\), "


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(points=np.zeros(3)), "points"),
        (dict(points=np.zeros((0, 2))), "points"),
        (dict(points=[[0.0, np.nan]]), "points"),
        (dict(points=np.zeros((2, 2)), weights=[0.5, 0.6]), _WEIGHTS + "got masses summing to 1.1$"),
        (dict(points=np.zeros((2, 2)), weights=[1.5, -0.5]), _WEIGHTS + "got a negative mass -0.5$"),
        (dict(points=np.zeros((2, 2)), weights=[1.0]), "weights"),
        (dict(points=np.zeros((2, 2)), positions=[0.0, 1.5]), "positions must lie in"),
        (dict(points=np.zeros((2, 2)), positions=[0.0]), "positions"),
        (dict(points=np.zeros((2, 2)), positions=[0.0, np.inf]), "positions"),
    ],
)
def test_empirical_rejects_bad_input_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Empirical(**kwargs)


def test_empirical_rejects_non_numeric_points():
    with pytest.raises(TypeError, match="points"):
        Empirical([["a", "b"]])


@pytest.mark.parametrize(
    "mean, cov, match",
    [
        ([0.0, 0.0], [[1.0, 0.5], [0.0, 1.0]], "symmetric"),
        ([0.0, 0.0], [[1.0, 2.0], [2.0, 1.0]], "positive semi-definite"),
        ([0.0, 0.0, 0.0], np.eye(2), "cov must have shape"),
        ([0.0, 0.0], np.eye(3)[:2], "cov"),
        ([0.0, np.nan], np.eye(2), "mean"),
        ([[0.0, 0.0]], np.eye(2), "mean"),
    ],
)
def test_gaussian_rejects_bad_input_naming_the_argument(mean, cov, match):
    with pytest.raises(ValueError, match=match):
        Gaussian(mean, cov)


def test_gaussian_accepts_degenerate_covariance_and_samples_on_its_range():
    u = np.array([1.0, 2.0]) / np.sqrt(5)
    g = Gaussian([1.0, -1.0], 3.0 * np.outer(u, u))  # rank one
    mu = g.sample(200, seed=1)
    centred = mu.points - g.mean
    # every sample lies on the line alpha + R u (up to round-off)
    assert np.abs(centred @ np.array([-u[1], u[0]])).max() < 1e-12


def test_gaussian_sample_is_reproducible_and_matches_moments():
    g = Gaussian([1.0, 2.0], [[2.0, 0.6], [0.6, 0.5]])
    a, b = g.sample(20000, seed=3), g.sample(20000, seed=3)
    assert np.array_equal(a.points, b.points)
    # sampling error of the mean is sqrt(diag Sigma / n) ~ 0.01: 6 standard errors
    se = np.sqrt(np.diag(g.cov) / 20000)
    assert np.all(np.abs(a.mean() - g.mean) < 6 * se)
    # covariance entries: standard error ~ sqrt((S_ii S_jj + S_ij^2) / n) <= 0.015
    assert np.abs(a.cov() - g.cov).max() < 6 * 0.015


def test_sample_carries_positions_and_rejects_bad_n():
    g = Gaussian([0.0], [[1.0]])
    s = np.linspace(0, 1, 5)
    assert np.array_equal(g.sample(5, positions=s).positions, s)
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        g.sample(0)


def test_from_empirical_matches_moments():
    mu = Gaussian([0.0, 1.0], np.diag([1.0, 4.0])).sample(100, seed=0)
    g = Gaussian.from_empirical(mu)
    assert np.allclose(g.mean, mu.mean()) and np.allclose(g.cov, mu.cov())


def test_measures_copy_the_callers_arrays():
    X = np.zeros((3, 2))
    mu = Empirical(X)
    X[0, 0] = 5.0  # the caller's array stays writable and the measure does not change
    assert mu.points[0, 0] == 0.0
    S = np.eye(2)
    g = Gaussian(np.zeros(2), S)
    S[0, 0] = 9.0
    assert g.cov[0, 0] == 1.0
