"""Regression tests: each input below once hung, returned a silent non-finite or wrong number,
was wrongly accepted, or raised a cryptic error (the outside battery of issue 16 and the property
suite of tests/test_properties.py). Each now has a clear error naming its argument, or the
correct value from an independent computation (stated per test).
"""

import math
import time

import numpy as np
import pytest

import tpde_lib as tp
from tpde_lib.particles import depth

I2 = np.eye(2)
X = np.random.default_rng(0).standard_normal((6, 2))
MU = tp.Empirical(X)
E = tp.Empirical


# ---------------------------------------------------------------- transport: cancellation, scale
@pytest.mark.parametrize("p", [1, 2, 3])
def test_wasserstein_between_1e8_and_1e8_plus_1_is_exactly_one(p):
    # was 0.0: the cost matrix was formed as |x|^2 + |y|^2 - 2xy, which cancels every digit
    assert tp.wasserstein(E([[1e8]]), E([[1e8 + 1]]), p=p) == 1.0


def test_conditional_wasserstein_does_not_cancel_at_1e8():
    # fibre s = 0.5 holds two tokens per side; the only move is 1e8 -> 1e8 + 1 with mass 1/2:
    # W_2^2 = 1/2 * 1^2 (was 0)
    mu = E([[1e8], [0.0]], positions=[0.5, 0.5])
    nu = E([[1e8 + 1], [0.0]], positions=[0.5, 0.5])
    assert tp.conditional_wasserstein(mu, nu) == pytest.approx(math.sqrt(0.5), rel=1e-12)


@pytest.mark.parametrize("a, b", [(1e300, -1e300), (1e-300, 3e-300)])
def test_wasserstein_of_two_diracs_is_their_distance_at_any_scale(a, b):
    # two Diracs: W_p = |a - b| for every p (was inf at 1e300, 0 at 1e-300)
    for p in (1, 2, 7):
        assert tp.wasserstein(E([[a]]), E([[b]]), p=p) == pytest.approx(abs(a - b), rel=1e-12)
    assert tp.wasserstein(E([[a]]), E([[b]]), method="sliced") == pytest.approx(abs(a - b), rel=1e-12)


@pytest.mark.parametrize("dist, p", [(1e-3, 200), (1e3, 200), (5.0, 1e6)])
def test_wasserstein_at_large_p_neither_underflows_nor_overflows(dist, p):
    # two Diracs at distance `dist`: W_p = dist (was 0 for 1e-3 and inf for 1e3 at p = 200)
    assert tp.wasserstein(E([[0.0]]), E([[dist]]), p=p) == pytest.approx(dist, rel=1e-12)


def test_wasserstein_at_p_1000_finds_the_matching_below_the_largest_distance():
    # {0, 10} -> {1, 11}: the matching moves each token by 1, so W_p = 1 for all p; at p = 1000
    # the costs (1/11)^1000 underflow in units of the largest distance (was 0.0)
    assert tp.wasserstein(E([[0.0], [10.0]]), E([[1.0], [11.0]]), p=1000) == pytest.approx(1.0, rel=1e-12)


def test_wasserstein_beyond_the_resolution_of_the_network_simplex():
    # found by tests/test_properties.py: in units of the largest distance (2) the costs of the
    # optimal matching are 2^-100, below the simplex's ~1e-15 resolution, which then returned
    # the cost 3/5 instead of 1/5. Sorted matching: gaps (1, 0, 0, 0, 0), so W_100 = (1/5)^(1/100)
    mu, nu = E([[0.0], [0.0], [0.0], [0.0], [1.0]]), E([[0.0], [0.0], [0.0], [1.0], [-1.0]])
    assert tp.wasserstein(mu, nu, p=100) == pytest.approx(0.2 ** (1 / 100), rel=1e-12)


def test_sliced_wasserstein_at_p_1000_does_not_underflow():
    # found by tests/test_properties.py: the 1-D term, in units of the extent (3), underflowed to
    # 0. d = 1, sorted gaps (0, 0, 0, 0, 1): W_1000 = (1/5)^(1/1000)
    mu, nu = E([[0.0]] * 4 + [[2.0]]), E([[0.0]] * 4 + [[3.0]])
    assert tp.wasserstein(mu, nu, p=1000, method="sliced") == pytest.approx(0.2**1e-3, rel=1e-12)


def test_wasserstein_between_nearby_clouds_is_the_identity_matching():
    # stability experiments compare two clouds a tiny perturbation apart. 300 Gaussian points
    # and the same points moved by 1e-7: the identity matching is optimal (the perturbation is
    # far below the gaps between points; at zero perturbation it is the unique optimum), so
    # W_2 = sqrt(mean |move|^2). In units of the largest distance (~8) the optimal costs are
    # ~1e-16, at the simplex's resolution: the cost-matrix computation of main erred by 7.5e-4
    # relative; rescaled to the best cost found it is exact to round-off
    rng = np.random.default_rng(1)
    x, move = rng.standard_normal((300, 2)), 1e-7 * rng.standard_normal((300, 2))
    want = np.sqrt(np.mean(np.sum(move**2, axis=1)))
    assert tp.wasserstein(E(x), E(x + move)) == pytest.approx(want, rel=1e-9)


def test_wasserstein_at_p_1e6_with_two_distances():
    # {0, 10} -> {2, 11}: matching distances 2 and 1 (the crossed matching, 11 and 8, costs more),
    # W_p^p = (2^p + 1) / 2, so W_p = 2 (1/2 + 2^-p/2)^(1/p) (POT reported "infeasible")
    p = 1e6
    want = 2.0 * 0.5 ** (1 / p)
    assert tp.wasserstein(E([[0.0], [10.0]]), E([[2.0], [11.0]]), p=p) == pytest.approx(want, rel=1e-12)


def test_bures_wasserstein_at_extreme_scales():
    # one-dimensional Gaussians: W_2^2 = (m1 - m2)^2 + (s1 - s2)^2 with s the standard deviations
    g = tp.Gaussian
    assert tp.bures_wasserstein(g([1e200], [[0.0]]), g([-1e200], [[0.0]])) == pytest.approx(2e200)
    assert tp.bures_wasserstein(g([0.0], [[1e300]]), g([0.0], [[4e300]])) == pytest.approx(1e150)
    assert tp.bures_wasserstein(g([0.0], [[1e-300]]), g([0.0], [[4e-300]])) == pytest.approx(1e-150)


# ---------------------------------------------------------------- measures: moments at any scale
def test_covariance_that_overflows_float64_raises_instead_of_inf():
    # the variance of {1e200, -1e200} is 1e400: not representable (was inf, silently)
    with pytest.raises(FloatingPointError, match="cov"):
        E([[1e200], [-1e200]]).cov()


def test_moments_near_the_largest_float_are_computed_scaled():
    # variance of {1e100, -1e100} is 1e200; mean of {1.7e308, 1.7e308} is 1.7e308 (was NaN)
    assert E([[1e100], [-1e100]]).cov()[0, 0] == pytest.approx(1e200, rel=1e-12)
    assert E([[1.7e308], [1.7e308]]).mean()[0] == 1.7e308
    # weights 0.9, 0.1 at +-1.6e154: mean 1.28e154, variance 0.9 * 0.32^2 + 0.1 * 2.88^2 = 0.9216
    # (times 1e308); the uncentred-then-centred intermediate overflowed before
    mu = E([[1.6e154], [-1.6e154]], weights=[0.9, 0.1])
    assert mu.cov()[0, 0] == pytest.approx(0.9216e308, rel=1e-9)


@pytest.mark.parametrize(
    "points, error",
    [
        (np.ones((2, 2), bool), TypeError),
        ([["1.0", "2.0"]], TypeError),
        ([[1 + 1j, 0.0]], TypeError),
        (np.array([[object()]]), TypeError),
        (None, TypeError),
        (np.zeros((3, 0)), ValueError),
    ],
)
def test_empirical_rejects_non_real_or_empty_points(points, error):
    with pytest.raises(error, match="points"):
        E(points)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(weights=[True, False]), "weights"),
        (dict(weights=[0.5 + 0j, 0.5]), "weights"),
        (dict(positions=[False, True]), "positions"),
        (dict(positions=[0j, 1.0]), "positions"),
    ],
)
def test_empirical_rejects_bool_and_complex_weights_and_positions(kwargs, name):
    with pytest.raises(TypeError, match=name):
        E(X[:2], **kwargs)


def test_gaussian_rejects_bool_and_string_parameters():
    with pytest.raises(TypeError, match="mean"):
        tp.Gaussian([True, False], I2)
    with pytest.raises(TypeError, match="cov"):
        tp.Gaussian([0.0, 0.0], [["1", "0"], ["0", "1"]])


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        (dict(n=2.0), TypeError, "n"),
        (dict(n=True), TypeError, "n"),
        (dict(n=5, seed=-1), ValueError, "seed"),
        (dict(n=5, seed=1.5), TypeError, "seed"),
        (dict(n=5, seed="a"), TypeError, "seed"),
        (dict(n=5, seed=True), TypeError, "seed"),
    ],
)
def test_gaussian_sample_validates_n_and_seed(kwargs, error, name):
    with pytest.raises(error, match=f"^{name} must"):
        tp.Gaussian([0.0, 0.0], I2).sample(**kwargs)


def test_from_empirical_names_its_argument():
    with pytest.raises(TypeError, match="mu must be an Empirical"):
        tp.Gaussian.from_empirical(X)


# ---------------------------------------------------------------- simulate: caps, overflow, validation
def test_long_horizon_is_refused_by_the_step_cap_before_any_step():
    # [0, 1e6] at the default RK4 step 0.05 is 2e7 steps (ran silently for minutes before)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"max_steps=100000: pass max_steps=20000000"):
        tp.simulate(tp.Softmax(0 * I2, -I2), MU, [0, 1e6])
    assert time.perf_counter() - start < 1.0  # refused up front, not after running


@pytest.mark.parametrize("kwargs", [dict(), dict(method="euler", h=1.0)])
def test_horizon_1e18_does_not_overflow_the_step_count(kwargs):
    # the int64 step count wrapped around and the initial points were returned as the result
    with pytest.raises(ValueError, match="max_steps"):
        tp.simulate(tp.Softmax(0 * I2, -I2), MU, [0, 1e18], **kwargs)
    assert depth([0.0, 1e18], 1.0) == 10**18


def test_adaptive_integration_counts_its_steps():
    # a stiff problem: the explicit pair needs ~1e10 steps; the cap stops it with a clear message
    with pytest.raises(ValueError, match="max_steps=200"):
        tp.simulate(tp.Softmax(0 * I2, -1e7 * I2), MU, [0, 1e3], method="adaptive", max_steps=200)


def test_max_steps_allows_exactly_the_steps_it_names():
    # 20 Euler steps of 0.05: allowed with max_steps=20, refused with 19
    att = tp.Softmax(I2, -I2)
    assert tp.simulate(att, MU, [0, 1], method="euler", h=0.05, max_steps=20).points.shape == (2, 6, 2)
    with pytest.raises(ValueError, match="needs 20 steps"):
        tp.simulate(att, MU, [0, 1], method="euler", h=0.05, max_steps=19)


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        (dict(rtol=-1), ValueError, "rtol"),
        (dict(method="euler", atol=np.nan), ValueError, "atol"),
        (dict(ivp_method="foo"), ValueError, "ivp_method"),
        (dict(method="adaptive", h=-1), ValueError, "h"),
        (dict(h="0.1"), TypeError, "h"),
        (dict(h=True), TypeError, "h"),
        (dict(method="adaptive", rtol="1e-6"), TypeError, "rtol"),
        (dict(max_steps=0), ValueError, "max_steps"),
        (dict(max_steps=10.0), TypeError, "max_steps"),
        (dict(max_steps=True), TypeError, "max_steps"),
    ],
)
def test_simulate_validates_arguments_the_method_ignores(kwargs, error, name):
    with pytest.raises(error, match=f"^{name} must"):
        tp.simulate(tp.Softmax(I2, -I2), MU, [0, 1], **kwargs)


@pytest.mark.parametrize(
    "times, error",
    [
        ([False, True], TypeError),
        (["0", "1"], TypeError),
        ([0, 1j], TypeError),
        ([-1e308, 1e308], ValueError),
    ],
)
def test_simulate_rejects_bool_string_complex_and_overflowing_times(times, error):
    with pytest.raises(error, match="times"):
        tp.simulate(tp.Softmax(I2, -I2), MU, times)


class _ReaderBug(Exception):
    pass


@pytest.mark.parametrize("method", ["rk4", "euler", "adaptive"])
def test_an_exception_from_the_readers_attention_propagates_unchanged(method):
    err = _ReaderBug("reader bug")

    class Raises:
        def velocity(self, mu, t=0.0):
            raise err

    with pytest.raises(_ReaderBug) as info:
        tp.simulate(Raises(), MU, [0, 1], method=method)
    assert info.value is err


@pytest.mark.parametrize("method", ["rk4", "adaptive"])
def test_a_readers_field_of_wrong_shape_or_nan_is_named(method):
    class WrongShape:
        def velocity(self, mu, t=0.0):
            return np.zeros((mu.n, mu.d + 1))

    class NaN:
        def velocity(self, mu, t=0.0):
            return np.full(mu.points.shape, np.nan)

    with pytest.raises(ValueError, match=r"^att.velocity must return an array of shape \(6, 2\) at t=0, "):
        tp.simulate(WrongShape(), MU, [0, 1], method=method)
    with pytest.raises(FloatingPointError, match=r"^att.velocity returned NaN or infinite values at t=0$"):
        tp.simulate(NaN(), MU, [0, 1], method=method)


# ---------------------------------------------------------------- Trajectory
def test_trajectory_validates_its_fields():
    with pytest.raises(TypeError, match="times must be an array of real numbers"):
        tp.Trajectory("a", "b", "c")
    with pytest.raises(ValueError, match=r"points must have shape \(2, n, d\)"):
        tp.Trajectory(np.arange(2.0), np.zeros((3, 4, 2)), np.full(4, 0.25))
    with pytest.raises(ValueError, match="weights"):
        tp.Trajectory(np.arange(3.0), np.zeros((3, 4, 2)), np.full(3, 1 / 3))
    with pytest.raises(ValueError, match="blowup_time"):
        tp.Trajectory(np.arange(3.0), np.zeros((3, 4, 2)), np.full(4, 0.25), None, np.nan)


def test_trajectory_measure_names_a_bad_index_and_the_range():
    traj = tp.simulate(tp.Softmax(I2, -I2), MU, [0.0, 0.5, 1.0])
    with pytest.raises(IndexError, match=r"k=99 is out of range.*\[-3, 2\]"):
        traj.measure(99)
    with pytest.raises(IndexError, match=r"k=-4"):
        traj.measure(-4)
    for k in (1.5, True):
        with pytest.raises(TypeError, match="k must be an integer"):
            traj.measure(k)
    assert np.array_equal(traj.measure(-1).points, traj.points[2])


# ---------------------------------------------------------------- transport arguments
@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        (dict(p="2"), TypeError, "p"),
        (dict(p=True), TypeError, "p"),
        (dict(p=2j), TypeError, "p"),
        (dict(p=np.inf), ValueError, "p"),
        (dict(method=None), ValueError, "method"),
        (dict(method="sliced", n_projections=2.0), TypeError, "n_projections"),
        (dict(method="sliced", n_projections=True), TypeError, "n_projections"),
        (dict(n_projections=-3), ValueError, "n_projections"),
        (dict(method="sliced", seed=-1), ValueError, "seed"),
        (dict(method="sliced", seed=1.5), TypeError, "seed"),
        (dict(seed="x"), TypeError, "seed"),
    ],
)
def test_wasserstein_validates_every_argument(kwargs, error, name):
    with pytest.raises(error, match=f"^{name} must"):
        tp.wasserstein(MU, MU, **kwargs)


# ---------------------------------------------------------------- parameters of the variants
@pytest.mark.parametrize(
    "A, error",
    [
        ([["1", "0"], ["0", "1"]], TypeError),
        (I2 + 0j, TypeError),
        (np.eye(2, dtype=bool), TypeError),
        (lambda t: I2 + 0j, TypeError),
        (lambda t: np.eye(3), ValueError),
    ],
)
def test_attention_matrices_must_be_real_numeric(A, error):
    with pytest.raises(error, match=r"^A(\(t=0\))? must|to match A,"):
        tp.Softmax(A, I2)


def test_attention_of_dimension_zero_is_rejected():
    with pytest.raises(ValueError, match="A must have length >= 1"):
        tp.Softmax(np.zeros((0, 0)), np.zeros((0, 0)))


# ---- found by the battery in the modules of the attention/Gaussian/energy refactor ------------
def test_sinkhorn_energy_with_a_vanishing_eps_raises_at_once():
    import tpde_lib.energy as en

    mu = tp.Empirical(np.random.default_rng(0).normal(size=(20, 2)))
    with pytest.raises(RuntimeError, match="not finite"):
        en.sinkhorn_energy(mu, np.eye(2), eps=1e-310)
    with pytest.raises(TypeError, match="max_iter"):
        en.sinkhorn_energy(mu, np.eye(2), max_iter=2.5)


def test_interaction_energy_overflow_is_named_and_log_is_a_flag():
    import tpde_lib.energy as en

    mu = tp.Empirical(np.random.default_rng(0).normal(size=(20, 2)))
    with pytest.raises(FloatingPointError, match="log=True"):
        en.interaction_energy(mu, 1e300 * np.eye(2))
    assert np.isfinite(en.interaction_energy(mu, 1e3 * np.eye(2), log=True))
    with pytest.raises(TypeError, match="log"):
        en.interaction_energy(mu, np.eye(2), log="no")


def test_counts_are_ints_in_the_official_masked_and_stability_modules():
    from tpde_lib.masked import sink_positions
    from tpde_lib.stability import stability_bound

    with pytest.raises(TypeError, match="max_iter"):
        tp.projected_euler(lambda S: -S, np.eye(2), 0.1, max_iter=True)
    with pytest.raises(TypeError, match=r"^n must be an integer >= 2 \(an int, not a float\)"):
        sink_positions(2.0, 0.5)
    with pytest.raises(TypeError, match="n_grid"):
        stability_bound(tp.Softmax(np.eye(2), np.eye(2)), 1.0, 1.0, n_grid=2.0)


def test_a_stiff_gaussian_ode_stops_at_its_step_cap():
    att = tp.Softmax(np.zeros((2, 2)), -1e7 * np.eye(2))
    with pytest.raises(RuntimeError, match="max_steps"):
        tp.simulate_gaussian(att, tp.Gaussian([1.0, 0.0], np.eye(2)), [0, 1e3], max_steps=200)


def test_a_mean_overflow_is_reported_near_its_time():
    att = tp.Softmax(-0.5 * np.eye(2), np.eye(2))
    g = tp.Gaussian([0.3, -0.2], [[1.0, 0.3], [0.3, 0.5]])
    with pytest.raises(RuntimeError, match=r"near t=7\d\d"):
        tp.simulate_gaussian(att, g, [0, 1000])
