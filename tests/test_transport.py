"""Tests of tpde_lib.transport: W_p, Bures–Wasserstein, conditional W_p.

Every distance is compared with an independent computation: a linear program solved by scipy,
the 1-D quantile formula, closed forms for Gaussians, POT's own Bures–Wasserstein function, or the
joint-space OT problem with a penalty for moving the position.
"""

import numpy as np
import ot
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from tpde_lib.measures import Empirical, Gaussian
from tpde_lib.transport import bures_wasserstein, conditional_wasserstein, wasserstein


def _random_spd(rng, d):
    G = rng.standard_normal((d, d))
    return G @ G.T + 0.1 * np.eye(d)


def _lp_cost(C, a, b, allowed=None):
    """min <pi, C> over couplings of (a, b) (optionally pi = 0 off ``allowed``), by scipy's HiGHS."""
    n, m = C.shape
    A_eq = np.vstack([np.kron(np.eye(n), np.ones(m)), np.kron(np.ones(n), np.eye(m))])
    bounds = [(0, None if allowed is None or allowed.ravel()[k] else 0) for k in range(n * m)]
    res = linprog(C.ravel(), A_eq=A_eq, b_eq=np.concatenate([a, b]), bounds=bounds, method="highs")
    assert res.status == 0
    return res.fun


def _pairwise_cost(x, y, p):
    """|x_i - y_j|^p by broadcasting (independent of the library's ot.dist route)."""
    return np.linalg.norm(x[:, None, :] - y[None, :, :], axis=-1) ** p


# ---------------------------------------------------------------- Bures–Wasserstein


def test_bures_wasserstein_matches_pot():
    rng = np.random.default_rng(0)
    for d in (1, 2, 3, 5):
        m1, m2 = rng.standard_normal(d), rng.standard_normal(d)
        S1, S2 = _random_spd(rng, d), _random_spd(rng, d)
        ours = bures_wasserstein(Gaussian(m1, S1), Gaussian(m2, S2))
        theirs = float(ot.gaussian.bures_wasserstein_distance(m1, m2, S1, S2))
        # two implementations of the same closed form: agreement to round-off
        assert ours == pytest.approx(theirs, rel=1e-8)


def test_bures_wasserstein_commuting_covariances_closed_form():
    # same eigenbasis U: W_2^2 = |m1 - m2|^2 + sum_i (sqrt(a_i) - sqrt(b_i))^2
    rng = np.random.default_rng(1)
    U, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    a, b = rng.uniform(0.1, 3, 4), rng.uniform(0.1, 3, 4)
    m1, m2 = rng.standard_normal(4), rng.standard_normal(4)
    g1, g2 = Gaussian(m1, U @ np.diag(a) @ U.T), Gaussian(m2, U @ np.diag(b) @ U.T)
    expected = np.sqrt(np.sum((m1 - m2) ** 2) + np.sum((np.sqrt(a) - np.sqrt(b)) ** 2))
    assert bures_wasserstein(g1, g2) == pytest.approx(expected, rel=1e-10)


def test_bures_wasserstein_of_orthogonal_degenerate_gaussians_is_sqrt2():
    # N(0, e1 e1^T) and N(0, e2 e2^T): every coupling of X e1 and Y e2 costs E X^2 + E Y^2 = 2
    g1 = Gaussian(np.zeros(2), np.diag([1.0, 0.0]))
    g2 = Gaussian(np.zeros(2), np.diag([0.0, 1.0]))
    assert bures_wasserstein(g1, g2) == pytest.approx(np.sqrt(2), rel=1e-12)


def test_bures_wasserstein_is_a_symmetric_distance_zero_on_the_diagonal():
    rng = np.random.default_rng(2)
    g1 = Gaussian(rng.standard_normal(3), _random_spd(rng, 3))
    g2 = Gaussian(rng.standard_normal(3), _random_spd(rng, 3))
    assert bures_wasserstein(g1, g2) == pytest.approx(bures_wasserstein(g2, g1), rel=1e-9)
    # sqrt of round-off in the trace: zero to ~1e-7 absolute
    assert bures_wasserstein(g1, g1) < 1e-6


def test_bures_wasserstein_close_to_exact_w2_of_large_samples():
    g1 = Gaussian([0.0, 0.0], [[1.0, 0.6], [0.6, 1.0]])
    g2 = Gaussian([1.0, -0.5], [[2.0, -0.3], [-0.3, 0.5]])
    n = 1500
    sample = wasserstein(g1.sample(n, seed=3), g2.sample(n, seed=4))
    exact = bures_wasserstein(g1, g2)
    # triangle inequality: |W(mu_n, nu_n) - W(mu, nu)| <= W(mu_n, mu) + W(nu_n, nu); in d = 2 the
    # empirical W_2 error of n = 1500 Gaussian samples is about 0.05-0.1 each, so 0.25 is loose
    # but still fails for a wrong formula (e.g. dropping the cross term changes W by ~0.8)
    assert abs(sample - exact) < 0.25, (sample, exact)


def test_bures_wasserstein_rejects_bad_arguments():
    g = Gaussian(np.zeros(2), np.eye(2))
    with pytest.raises(TypeError, match="g2"):
        bures_wasserstein(g, np.eye(2))
    with pytest.raises(ValueError, match="g2"):
        bures_wasserstein(g, Gaussian(np.zeros(3), np.eye(3)))


# ---------------------------------------------------------------- W_p


@pytest.mark.parametrize("p", [1, 1.5, 2, 3])
def test_exact_wasserstein_matches_linear_program(p):
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((6, 2)), rng.standard_normal((5, 2)) + 0.5
    a, b = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(5))
    expected = _lp_cost(_pairwise_cost(x, y, p), a, b) ** (1 / p)
    got = wasserstein(Empirical(x, a), Empirical(y, b), p=p)
    # two exact LP solvers: agreement to solver tolerance
    assert got == pytest.approx(expected, rel=1e-7)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_exact_wasserstein_in_1d_is_the_sorted_matching(p):
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal(200), rng.exponential(size=200)
    expected = np.mean(np.abs(np.sort(x) - np.sort(y)) ** p) ** (1 / p)
    got = wasserstein(Empirical(x[:, None]), Empirical(y[:, None]), p=p)
    assert got == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("p", [1, 2, 4])
def test_wasserstein_of_a_translation_is_its_length(p):
    # W_p >= W_1 >= |mean difference| = |v|, and translating every point costs exactly |v|
    rng = np.random.default_rng(7)
    x, v = rng.uniform(-1, 1, (80, 3)), np.array([0.3, -0.2, 0.1])
    assert wasserstein(Empirical(x), Empirical(x + v), p=p) == pytest.approx(np.linalg.norm(v), rel=1e-9)


def test_sliced_wasserstein_is_a_lower_bound_of_exact():
    rng = np.random.default_rng(8)
    for trial in range(5):
        mu = Empirical(rng.uniform(-1, 1, (150, 2)))
        nu = Empirical(0.7 * rng.standard_normal((170, 2)) + [0.3, 0.0])
        exact = wasserstein(mu, nu)
        sliced = wasserstein(mu, nu, method="sliced", seed=trial)
        # every projected W_p^p is <= W_p^p (projection is 1-Lipschitz): no tolerance beyond
        # round-off; the approximation error here (0.3-0.5 relative) is why it is a lower bound
        assert sliced <= exact * (1 + 1e-12)
        assert 0.3 * exact < sliced, (sliced, exact)


def test_sliced_wasserstein_equals_exact_in_one_dimension():
    rng = np.random.default_rng(9)
    mu, nu = Empirical(rng.standard_normal((60, 1))), Empirical(rng.uniform(size=(40, 1)))
    assert wasserstein(mu, nu, method="sliced", n_projections=3) == pytest.approx(
        wasserstein(mu, nu), rel=1e-9
    )


def test_sliced_wasserstein_of_a_translation_in_2d_is_length_over_sqrt2():
    # SW_2^2 = mean_l <theta_l, v>^2 -> |v|^2 / 2; the variance of <theta, v>^2 is |v|^4 / 8, so
    # with L = 4000 directions the relative MC error of SW_2^2 is ~ 0.35 / sqrt(4000) / 0.5 = 1.1%
    x, v = np.random.default_rng(10).uniform(-1, 1, (50, 2)), np.array([1.0, 0.5])
    sliced = wasserstein(Empirical(x), Empirical(x + v), method="sliced", n_projections=4000)
    assert sliced**2 == pytest.approx(np.sum(v**2) / 2, rel=0.05)


def test_wasserstein_rejects_bad_arguments():
    mu = Empirical(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="^nu must live in the same dimension as mu"):
        wasserstein(mu, Empirical(np.zeros((3, 3))))
    with pytest.raises(ValueError, match="p must"):
        wasserstein(mu, mu, p=0.5)
    with pytest.raises(ValueError, match="method"):
        wasserstein(mu, mu, method="entropic")
    with pytest.raises(TypeError, match="^mu must be an Empirical measure"):
        wasserstein(np.zeros((3, 2)), mu)
    with pytest.raises(ValueError, match="n_projections"):
        wasserstein(mu, mu, method="sliced", n_projections=0)


# ---------------------------------------------------------------- conditional W_p


def _fibred_pair(rng, sizes_mu, sizes_nu, masses, d=2):
    """Two measures with the same position marginal: fibre k at s_k carries mass masses[k]."""
    s = np.linspace(0, 1, len(masses))
    parts = []
    for sizes in (sizes_mu, sizes_nu):
        pts, w, pos = [], [], []
        for k, (size, mass) in enumerate(zip(sizes, masses)):
            pts.append(rng.standard_normal((size, d)) + k)
            w.append(mass * rng.dirichlet(np.ones(size)))
            pos.append(np.full(size, s[k]))
        w = np.concatenate(w)
        parts.append(Empirical(np.vstack(pts), w / w.sum(), np.concatenate(pos)))
    return parts


@pytest.mark.parametrize("p", [1, 2])
def test_conditional_wasserstein_matches_position_preserving_linear_program(p):
    rng = np.random.default_rng(11)
    mu, nu = _fibred_pair(rng, [3, 1, 4], [2, 1, 3], [0.5, 0.2, 0.3])
    C = _pairwise_cost(mu.points, nu.points, p)
    same_s = mu.positions[:, None] == nu.positions[None, :]
    expected = _lp_cost(C, mu.weights, nu.weights, allowed=same_s) ** (1 / p)
    assert conditional_wasserstein(mu, nu, p=p) == pytest.approx(expected, rel=1e-7)


def test_conditional_wasserstein_matches_joint_ot_with_a_penalty_for_moving_s():
    # W_p on R^d x [0, 1] with a cost that forbids moving s (penalty 1e6 >> any transport cost)
    rng = np.random.default_rng(12)
    mu, nu = _fibred_pair(rng, [5, 2, 1, 6], [4, 3, 1, 5], [0.1, 0.4, 0.25, 0.25])
    C = _pairwise_cost(mu.points, nu.points, 2)
    C = C + 1e6 * (mu.positions[:, None] != nu.positions[None, :])
    expected = np.sqrt(ot.emd2(mu.weights, nu.weights, C))
    assert conditional_wasserstein(mu, nu) == pytest.approx(expected, rel=1e-8)


def test_conditional_wasserstein_on_a_single_fibre_is_plain_wasserstein():
    rng = np.random.default_rng(13)
    x, y = rng.standard_normal((7, 3)), rng.standard_normal((9, 3))
    mu, nu = Empirical(x, positions=np.zeros(7)), Empirical(y, positions=np.zeros(9))
    assert conditional_wasserstein(mu, nu, p=3) == pytest.approx(wasserstein(mu, nu, p=3), rel=1e-10)


def test_conditional_wasserstein_with_one_token_per_position_is_the_matching_cost():
    # masked tokens at distinct positions i/n: the only admissible coupling is i <-> i
    rng = np.random.default_rng(14)
    n = 40
    x, y, s = rng.standard_normal((n, 2)), rng.standard_normal((n, 2)), np.arange(n) / (n - 1)
    expected = np.sqrt(np.mean(np.sum((x - y) ** 2, axis=1)))
    got = conditional_wasserstein(Empirical(x, positions=s), Empirical(y, positions=s))
    assert got == pytest.approx(expected, rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.lists(st.integers(1, 4), min_size=1, max_size=4))
def test_conditional_wasserstein_is_at_least_plain_wasserstein(seed, sizes):
    # fewer admissible couplings, higher minimum: W_cond >= W_p of the R^d marginals
    rng = np.random.default_rng(seed)
    masses = rng.dirichlet(np.ones(len(sizes)))
    mu, nu = _fibred_pair(rng, sizes, sizes[::-1], masses)
    assert conditional_wasserstein(mu, nu) >= wasserstein(mu, nu) * (1 - 1e-9)
    assert conditional_wasserstein(mu, nu) == pytest.approx(conditional_wasserstein(nu, mu), rel=1e-8)


def test_conditional_wasserstein_rejects_different_position_marginals():
    x = np.zeros((2, 2))
    mu = Empirical(x, positions=[0.0, 1.0])
    with pytest.raises(ValueError, match="position marginal"):
        conditional_wasserstein(mu, Empirical(x, positions=[0.0, 0.5]))
    with pytest.raises(ValueError, match="position marginal"):
        conditional_wasserstein(mu, Empirical(x, weights=[0.7, 0.3], positions=[0.0, 1.0]))
    with pytest.raises(ValueError, match="positions"):
        conditional_wasserstein(mu, Empirical(x))


@pytest.mark.parametrize("gap", [1e-200, 1e200, 5e-324, 1.0])
@pytest.mark.parametrize("p", [1, 2, 3.5, np.inf])
def test_coupled_wasserstein_at_the_extremes_of_floating_point(gap, p):
    """Every value moved by ``gap``: the distance is ``gap`` for every p (0 for 1e-200 and NaN
    for 1e200 before the values were scaled)."""
    from tpde_lib.transport import coupled_wasserstein

    s = np.linspace(0, 1, 4)
    mu = Empirical(np.zeros((4, 2)), positions=s)
    nu = Empirical(np.tile([gap, 0.0], (4, 1)), positions=s)
    assert coupled_wasserstein(mu, nu, p) == pytest.approx(gap, rel=1e-15)


def test_coupled_wasserstein_beyond_float64_is_an_error():
    from tpde_lib.transport import coupled_wasserstein

    s = np.linspace(0, 1, 3)
    mu = Empirical(np.full((3, 1), -1.5e308), positions=s)
    nu = Empirical(np.full((3, 1), 1.5e308), positions=s)
    with pytest.raises(ValueError, match="exceeds float64"):
        coupled_wasserstein(mu, nu)
