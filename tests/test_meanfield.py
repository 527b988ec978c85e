"""Tests of tpde_lib.meanfield: samplers, quadratures, the exact Gaussian flow and rate fits."""

import numpy as np
import pytest
from scipy import special, stats
from scipy.linalg import expm

from tpde_lib.attention import Softmax
from tpde_lib.gaussian import simulate_gaussian
from tpde_lib.meanfield import (
    RateFit,
    coupling_distance,
    fit_rate,
    gaussian_affine_flow,
    moment_errors,
    step_order,
    sunflower,
    uniform_disk,
)
from tpde_lib.measures import Empirical, Gaussian
from tpde_lib.transport import wasserstein


# ------------------------------------------------------------------------------------------
# uniform_disk and sunflower
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("radius", [1.0, 2.5])
def test_uniform_disk_moments_match_the_closed_form(radius):
    n = 200_000
    x = uniform_disk(n, radius=radius, seed=3)
    assert x.shape == (n, 2)
    assert np.linalg.norm(x, axis=1).max() <= radius
    # |x|^2 / R^2 is uniform on [0, 1]: mean 1/2, variance 1/12; E x1^2 = R^2/4, E x1 x2 = 0.
    # Each tolerance is 4 standard errors of the Monte-Carlo mean (sd / sqrt(n)).
    r2 = np.sum(x**2, axis=1) / radius**2
    assert abs(r2.mean() - 0.5) <= 4 * np.sqrt(1 / 12 / n)
    assert np.all(np.abs(x.mean(axis=0)) <= 4 * (radius / 2) / np.sqrt(n))  # sd of x1 is R/2
    # sd of x1^2 / R^2: E x1^4 / R^4 - 1/16 = 1/8 - 1/16 = 1/16
    assert abs(np.mean(x[:, 0] ** 2) / radius**2 - 0.25) <= 4 * 0.25 / np.sqrt(n)
    # sd of x1 x2 / R^2: E x1^2 x2^2 / R^4 = 1/24
    assert abs(np.mean(x[:, 0] * x[:, 1]) / radius**2) <= 4 * np.sqrt(1 / 24 / n)


def test_uniform_disk_radial_and_angular_laws():
    # P(|x| <= r) = r^2 (area fraction) and uniform angles: Kolmogorov-Smirnov, fixed seed
    x = uniform_disk(20_000, seed=5)
    assert stats.kstest(np.sum(x**2, axis=1), "uniform").pvalue > 1e-3
    angle = (np.arctan2(x[:, 1], x[:, 0]) + np.pi) / (2 * np.pi)
    assert stats.kstest(angle, "uniform").pvalue > 1e-3


def test_uniform_disk_is_deterministic_given_the_seed():
    np.testing.assert_array_equal(uniform_disk(50, seed=1), uniform_disk(50, seed=1))
    assert not np.allclose(uniform_disk(50, seed=1), uniform_disk(50, seed=2))


def test_sunflower_integrates_smooth_functions_at_rate_one_over_n():
    # E e^{x1} for the uniform unit disk = 2 I_1(1) (Bessel); E x1^4 = 1/8
    exact = {"exp": 2 * special.iv(1, 1.0), "x1^4": 1 / 8}
    f = {"exp": lambda x: np.exp(x[:, 0]), "x1^4": lambda x: x[:, 0] ** 4}
    for key in f:
        err = {n: abs(f[key](sunflower(n)).mean() - exact[key]) for n in (500, 4000)}
        # measured errors are below 1/n, far below Monte Carlo's sd/sqrt(n) (~0.02 at n = 500)
        assert err[500] < 1 / 500 and err[4000] < 1 / 4000, (key, err)


def test_sunflower_points_fill_the_disk_with_equal_area():
    x = sunflower(1000, radius=2.0)
    r = np.linalg.norm(x, axis=1)
    assert x.shape == (1000, 2) and r.max() <= 2.0
    # the fraction of points inside radius rho is rho^2 / R^2 to within one point
    for rho in (0.5, 1.0, 1.7):
        assert abs(np.mean(r <= rho) - rho**2 / 4) <= 1 / 1000 + 1e-12


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (2.5, TypeError), (True, TypeError)])
def test_samplers_reject_bad_counts(bad, exc):
    with pytest.raises(exc, match="n must"):
        uniform_disk(bad)
    with pytest.raises(exc, match="n must"):
        sunflower(bad)


def test_samplers_reject_a_non_positive_radius():
    with pytest.raises(ValueError, match="radius"):
        uniform_disk(10, radius=0.0)
    with pytest.raises(ValueError, match="radius"):
        sunflower(10, radius=-1.0)


# ------------------------------------------------------------------------------------------
# gaussian_affine_flow
# ------------------------------------------------------------------------------------------
def test_affine_flow_of_a_constant_field_is_the_matrix_exponential():
    # field x -> M x + b independent of the measure: Phi_t = e^{tM}, c_t = M^{-1}(e^{tM} - I) b
    M = np.array([[0.3, -1.0], [0.7, -0.2]])
    b = np.array([0.5, -0.25])
    times = np.array([0.0, 0.4, 1.3])
    flow = gaussian_affine_flow(lambda m, c, t: (M, b), Gaussian([1.0, 0.0], np.eye(2)), times)
    for k, t in enumerate(times):
        E = expm(t * M)
        np.testing.assert_allclose(flow.Phi[k], E, atol=1e-10)
        np.testing.assert_allclose(flow.c[k], np.linalg.solve(M, (E - np.eye(2)) @ b), atol=1e-10)
    x = np.random.default_rng(0).standard_normal((5, 2))
    np.testing.assert_allclose(flow.apply(x, 2), x @ expm(1.3 * M).T + flow.c[2], atol=1e-10)


def test_affine_flow_pushes_the_initial_gaussian_onto_the_library_closure():
    # softmax: Gamma(x) = V(alpha + Sigma A x), so M = V Sigma A, b = V alpha. The moments must
    # match simulate_gaussian (the library's own closure, separate code) and the push-forward
    # identities alpha_t = Phi alpha_0 + c, Sigma_t = Phi Sigma_0 Phi^T must hold.
    A = np.array([[1.0, 0.5], [-0.5, 1.0]])
    V = np.array([[0.4, -0.8], [0.8, 0.4]])
    g0 = Gaussian([0.3, -0.1], [[0.2, 0.05], [0.05, 0.1]])
    times = np.linspace(0, 1, 5)
    flow = gaussian_affine_flow(lambda m, c, t: (V @ c @ A, V @ m), g0, times)
    ref = simulate_gaussian(Softmax(A, V), g0, times, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(flow.mean, ref.mean, atol=1e-9)
    np.testing.assert_allclose(flow.cov, ref.cov, atol=1e-9)
    for k in range(times.size):
        np.testing.assert_allclose(flow.Phi[k] @ g0.mean + flow.c[k], flow.mean[k], atol=1e-9)
        np.testing.assert_allclose(flow.Phi[k] @ g0.cov @ flow.Phi[k].T, flow.cov[k], atol=1e-9)
    # the plausible transposition error M = V Sigma A^T is far from the closure
    wrong = gaussian_affine_flow(lambda m, c, t: (V @ c @ A.T, V @ m), g0, times)
    assert np.abs(wrong.cov[-1] - ref.cov[-1]).max() > 1e-2


def test_affine_flow_reports_blow_up_with_its_time():
    # scalar Riccati Sigma' = 2 Sigma^2 from Sigma_0 = 1 blows up at t = 1/2: the solver stops
    # there (0.5 to the message's digits), not at another of the times asked for
    with pytest.raises(FloatingPointError, match=r"did not reach t=1 \(stopped at t=0\.5:"):
        times = np.linspace(0, 1, 11)
        gaussian_affine_flow(lambda m, c, t: (c, np.zeros(1)), Gaussian([0.0], [[1.0]]), times)


def test_affine_flow_rejects_bad_inputs():
    g0 = Gaussian([0.0, 0.0], np.eye(2))
    with pytest.raises(TypeError, match="affine"):
        gaussian_affine_flow(np.eye(2), g0, [0.0, 1.0])
    with pytest.raises(TypeError, match="g0"):
        gaussian_affine_flow(lambda m, c, t: (c, m), np.eye(2), [0.0, 1.0])
    with pytest.raises(ValueError, match=r"affine must return M of shape \(2, 2\)"):
        gaussian_affine_flow(lambda m, c, t: (np.eye(3), m), g0, [0.0, 1.0])
    flow = gaussian_affine_flow(lambda m, c, t: (-c, m), g0, [0.0, 1.0])
    with pytest.raises(ValueError, match="points"):
        flow.apply(np.zeros((4, 3)))


# ------------------------------------------------------------------------------------------
# coupling_distance and moment_errors
# ------------------------------------------------------------------------------------------
def test_coupling_distance_bounds_the_exact_wasserstein_distance():
    rng = np.random.default_rng(1)
    for _ in range(5):
        x, y = rng.standard_normal((40, 2)), rng.standard_normal((40, 2))
        w = rng.uniform(0.5, 1.5, 40)
        w /= w.sum()
        exact = wasserstein(Empirical(x, w), Empirical(y, w))  # POT's network simplex
        assert exact <= coupling_distance(x, y, w) + 1e-12
        # unrelated clouds: the label coupling is far from optimal
        assert exact < 0.9 * coupling_distance(x, y, w)


def test_coupling_distance_is_exact_for_a_translation():
    x = np.random.default_rng(2).standard_normal((30, 3))
    v = np.array([0.3, -0.4, 1.2])
    assert coupling_distance(x, x + v) == pytest.approx(np.linalg.norm(v), rel=1e-12)
    assert wasserstein(Empirical(x), Empirical(x + v)) == pytest.approx(np.linalg.norm(v), rel=1e-6)


def test_moment_errors_against_numpy():
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((50, 2)), rng.standard_normal((50, 2)) + 0.2
    dm, dc = moment_errors(x, y)
    assert dm == pytest.approx(np.linalg.norm(x.mean(0) - y.mean(0)), rel=1e-12)
    ref = np.cov(x.T, bias=True) - np.cov(y.T, bias=True)
    assert dc == pytest.approx(np.abs(np.linalg.eigvalsh(ref)).max(), rel=1e-10)


def test_distances_reject_mismatched_clouds():
    with pytest.raises(ValueError, match="y must have shape"):
        coupling_distance(np.zeros((3, 2)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="weights"):
        moment_errors(np.zeros((3, 2)), np.zeros((3, 2)), [0.5, 0.5, 0.5])


# ------------------------------------------------------------------------------------------
# fit_rate
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("slope, C", [(-0.5, 0.3), (1.0, 2.0), (-1.7, 5.0)])
def test_fit_rate_recovers_an_exact_power_law(slope, C):
    x = np.array([100.0, 300.0, 1000.0, 3000.0, 10_000.0])
    fit = fit_rate(x, C * x**slope)
    assert isinstance(fit, RateFit)
    assert fit.slope == pytest.approx(slope, abs=1e-12)
    assert fit.prefactor == pytest.approx(C, rel=1e-10)
    assert fit.stderr < 1e-12 and fit.contains(slope)


def test_fit_rate_standard_error_matches_scipy_linregress():
    rng = np.random.default_rng(4)
    x = np.repeat([10.0, 30.0, 100.0, 300.0], 3)
    y = 2.0 * x**-0.5 * np.exp(0.2 * rng.standard_normal(x.size))
    fit = fit_rate(x, y, level=0.9)
    ref = stats.linregress(np.log(x), np.log(y))
    assert fit.slope == pytest.approx(ref.slope, rel=1e-12)
    assert fit.stderr == pytest.approx(ref.stderr, rel=1e-10)
    half = stats.t.ppf(0.95, x.size - 2) * ref.stderr
    assert fit.ci == pytest.approx((ref.slope - half, ref.slope + half), rel=1e-10)
    assert fit.n_points == 12 and fit.level == 0.9


def test_fit_rate_seed_columns_equal_repeated_abscissae():
    rng = np.random.default_rng(5)
    x = np.array([1.0, 2.0, 4.0, 8.0])
    y = np.exp(rng.standard_normal((4, 3)))
    a, b = fit_rate(x, y), fit_rate(np.repeat(x, 3), y.ravel())
    assert a.slope == pytest.approx(b.slope, rel=1e-13) and a.stderr == pytest.approx(b.stderr)


def test_fit_rate_interval_covers_the_true_slope_at_its_level():
    # Monte Carlo coverage of the 95% interval over 2000 noisy fits: the binomial sd of the
    # empirical coverage is sqrt(0.95 * 0.05 / 2000) = 0.005, the tolerance 0.02 is 4 sd.
    rng = np.random.default_rng(6)
    x = np.repeat([100.0, 300.0, 1000.0, 3000.0], 3)
    hits = 0
    for _ in range(2000):
        y = 0.5 * x**-0.5 * np.exp(0.3 * rng.standard_normal(x.size))
        hits += fit_rate(x, y).contains(-0.5)
    assert abs(hits / 2000 - 0.95) <= 0.02, hits


def test_fit_rate_with_two_points_has_an_infinite_interval():
    fit = fit_rate([1.0, 10.0], [1.0, 0.1])
    assert fit.slope == pytest.approx(-1.0) and fit.stderr == np.inf and fit.contains(5.0)


@pytest.mark.parametrize(
    "x, y",
    [
        ([1.0, 2.0], [1.0, 0.0]),
        ([1.0, -2.0], [1.0, 1.0]),
        ([1.0, 1.0], [1.0, 2.0]),
        ([1.0, 2.0, 3.0], [1.0, 2.0]),
    ],
)
def test_fit_rate_rejects_bad_data(x, y):
    with pytest.raises(ValueError):
        fit_rate(x, y)


def test_fit_rate_rejects_a_bad_level():
    with pytest.raises(ValueError, match="level"):
        fit_rate([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], level=1.0)


# ------------------------------------------------------------------------------------------
# step_order
# ------------------------------------------------------------------------------------------
def _small_cloud():
    rng = np.random.default_rng(7)
    A = rng.standard_normal((2, 2))
    V = rng.standard_normal((2, 2)) / 2
    return Softmax(A, V), Empirical(rng.standard_normal((10, 2)))


def test_step_order_of_euler_is_one():
    att, mu = _small_cloud()
    res = step_order(att, mu, [0.1, 0.05, 0.025, 0.0125], method="euler", norm="max")
    # first order, bent slightly by the O(h^2) term
    assert 0.8 <= res.order <= 1.2, res.fit
    assert res.errors.shape == (4,) and np.all(np.diff(res.errors) < 0)


def test_step_order_of_rk4_is_four():
    att, mu = _small_cloud()
    # errors ~1e-5..1e-7, far above the ~1e-12 error of the adaptive reference
    res = step_order(att, mu, [0.2, 0.1, 0.05], method="rk4")
    assert 3.5 <= res.order <= 4.5, res.fit


def test_step_order_errors_match_a_direct_computation():
    from tpde_lib.particles import simulate

    att, mu = _small_cloud()
    res = step_order(att, mu, [0.25, 0.125], T=0.5, method="euler", reference_h=0.01)
    ref = simulate(att, mu, [0.0, 0.5], method="rk4", h=0.01).points[-1]
    x = mu.points.copy()
    for k in range(2):  # two residual layers of step 0.25
        x = x + 0.25 * att.velocity(Empirical(x), t=0.25 * k)
    assert res.errors[0] == pytest.approx(np.sqrt(np.mean(np.sum((x - ref) ** 2, axis=1))), rel=1e-10)


def test_step_order_rejects_bad_arguments():
    att, mu = _small_cloud()
    with pytest.raises(ValueError, match="method"):
        step_order(att, mu, [0.1, 0.05], method="adaptive")
    with pytest.raises(ValueError, match="norm"):
        step_order(att, mu, [0.1, 0.05], norm="l1")
    with pytest.raises(TypeError, match="mu0"):
        step_order(att, mu.points, [0.1, 0.05])
