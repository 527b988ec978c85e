"""Masked (causal) attention: sink positions, conserved marginal, the s = 0 fibre, constants."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment

from tpde_lib.attention import MultiHead, Softmax
from tpde_lib.masked import (
    fit_exponent,
    hardy_constant,
    linear_sink_response,
    lp_operator_norm,
    masked_lipschitz_constant,
    masked_stability_constant,
    position_marginal,
    prefix_average_matrix,
    prefix_sweep,
    sensitivity,
    shift_prefix,
    sink_attention_share,
    sink_mass,
    sink_mass_sweep,
    sink_positions,
    with_sink,
)
from tpde_lib.measures import Empirical
from tpde_lib.particles import simulate
from tpde_lib.transport import conditional_wasserstein, fibre_distances, sup_fibre_distance

RNG_A = np.array([[0.6, -0.3], [0.4, 0.5]])
RNG_V = np.array([[0.2, -0.7], [0.8, 0.1]])


# ---- independent oracles -------------------------------------------------------------------


def causal_softmax_loop(X, w, s, A, V):
    """Masked softmax field token by token (chapter "Masked attention"), plain Python."""
    out = np.zeros_like(X)
    for i in range(X.shape[0]):
        keys = [j for j in range(X.shape[0]) if s[j] <= s[i]]
        scores = np.array([X[j] @ A @ X[i] for j in keys])  # <A x_i, x_j> = x_j^T A x_i
        e = np.array([w[j] for j in keys]) * np.exp(scores - scores.max())
        out[i] = V @ (sum(e_k * X[j] for e_k, j in zip(e, keys)) / e.sum())
    return out


def rk4_loop(X, w, s, A, V, T, steps):
    """Classical RK4 on the loop field, ``steps`` equal steps."""
    h = T / steps
    for _ in range(steps):
        k1 = causal_softmax_loop(X, w, s, A, V)
        k2 = causal_softmax_loop(X + h / 2 * k1, w, s, A, V)
        k3 = causal_softmax_loop(X + h / 2 * k2, w, s, A, V)
        k4 = causal_softmax_loop(X + h * k3, w, s, A, V)
        X = X + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return X


def cond_wasserstein_by_assignment(X, Y, w, s, p):
    """W_p^cond for fibres of equally weighted tokens: an assignment problem per fibre
    (Birkhoff: the optimal plan between two uniform measures of k atoms is a permutation)."""
    total = 0.0
    for value in np.unique(s):
        sel = np.flatnonzero(s == value)
        C = np.linalg.norm(X[sel][:, None, :] - Y[sel][None, :, :], axis=2) ** p
        r, c = linear_sum_assignment(C)
        total += w[sel].sum() * C[r, c].mean()
    return total ** (1 / p)


def _tokens(n, seed, scale=1.0):
    return scale * np.random.default_rng(seed).standard_normal((n, 2))


# ---- sink positions ------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 60), st.floats(0.001, 0.999), st.data())
def test_sink_positions_put_exactly_sink_mass_at_zero(n, m, data):
    n_sink = data.draw(st.integers(1, n - 1))
    s, w = sink_positions(n, m, n_sink)
    at_zero = sum(w_i for s_i, w_i in zip(s, w) if s_i == 0.0)  # loop, not the helper
    assert at_zero == pytest.approx(m, abs=1e-12)
    assert int(np.sum(s == 0)) == n_sink
    assert w.sum() == pytest.approx(1.0, abs=1e-12)
    rest = s[n_sink:]
    # the other tokens: distinct positions evenly spread over (0, 1], the last at 1
    assert np.all(rest > 0) and rest[-1] == 1.0 and np.allclose(np.diff(rest), 1 / (n - n_sink))


def test_default_sink_gives_uniform_weights_when_mass_times_n_is_integer():
    s, w = sink_positions(200, 0.05)
    assert np.sum(s == 0) == 10
    assert np.allclose(w, 1 / 200, rtol=1e-12)


def test_with_sink_keeps_token_order_and_helpers_agree_with_loops():
    X = _tokens(30, 0)
    mu = with_sink(X, 0.2, n_sink=4)
    assert np.array_equal(mu.points, X)
    assert sink_mass(mu) == pytest.approx(sum(mu.weights[:4]), abs=1e-15)
    values, masses = position_marginal(mu)
    for v, mass in zip(values, masses):
        assert mass == pytest.approx(sum(wi for si, wi in zip(mu.positions, mu.weights) if si == v))


@pytest.mark.parametrize("p", [1, 2, 3])
def test_shifting_the_sink_fibre_costs_shift_times_mass_to_one_over_p(p):
    mu = with_sink(_tokens(40, 1), 0.1, n_sink=5)
    v = np.array([0.3, -0.4])  # |v| = 0.5
    nu = shift_prefix(mu, v)
    assert np.array_equal(nu.points[5:], mu.points[5:])
    # closed form: a rigid translation of one fibre of mass m costs |v| m^(1/p)
    assert conditional_wasserstein(mu, nu, p) == pytest.approx(0.5 * 0.1 ** (1 / p), rel=1e-9)


def test_shifting_a_prefix_costs_shift_times_prefix_mass_to_one_over_p():
    mu = with_sink(_tokens(50, 2), 0.1, n_sink=5)
    nu = shift_prefix(mu, [0.0, 0.2], s_max=0.3)
    prefix = sum(w for w, s in zip(mu.weights, mu.positions) if s <= 0.3)
    assert conditional_wasserstein(mu, nu, 2) == pytest.approx(0.2 * np.sqrt(prefix), rel=1e-9)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n=1, sink_mass=0.5), "n must"),
        (dict(n=10, sink_mass=-0.1), "sink_mass"),
        (dict(n=10, sink_mass=1.0), "sink_mass"),
        (dict(n=10, sink_mass=0.5, n_sink=10), "n_sink"),
        (dict(n=10, sink_mass=0.5, n_sink=0), "n_sink"),
    ],
)
def test_bad_sink_arguments_raise_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sink_positions(**kwargs)


def test_helpers_need_positions():
    with pytest.raises(ValueError, match="positions"):
        sink_mass(Empirical(_tokens(5, 0)))


# ---- the causal field ----------------------------------------------------------------------


def test_causal_softmax_matches_per_token_loop_with_sink_weights():
    mu = with_sink(_tokens(25, 2), 0.3, n_sink=3)
    att = Softmax(RNG_A, RNG_V, causal=True)
    ref = causal_softmax_loop(mu.points, mu.weights, mu.positions, RNG_A, RNG_V)
    assert np.allclose(att.velocity(mu), ref, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize(
    "att",
    [
        Softmax(RNG_A, RNG_V, causal=True),
        MultiHead([Softmax(RNG_A, RNG_V, causal=True), Softmax(-RNG_A.T, 0.5 * RNG_V, causal=True)]),
    ],
)
def test_sink_tokens_move_only_under_their_own_fibre(att):
    # Gamma(x, 0) depends only on the s = 0 fibre (derived in the chapter "Masked attention")
    mu = with_sink(_tokens(60, 3), 0.2, n_sink=6)
    other = _tokens(60, 4, scale=3.0)
    other[:6] = mu.points[:6]
    nu = mu.with_points(other)
    v_mu, v_nu = att.velocity(mu), att.velocity(nu)
    # the masked entries enter as exact zeros: equal to machine precision (1e-14 relative)
    assert np.max(np.abs(v_mu[:6] - v_nu[:6])) <= 1e-14 * np.max(np.abs(v_mu[:6]))
    assert np.max(np.abs(v_mu[6:] - v_nu[6:])) > 1e-2  # the later tokens do see the change
    # and it equals the unmasked field of the sink fibre alone
    sink_alone = Empirical(mu.points[:6], weights=np.full(6, 1 / 6), positions=np.zeros(6))
    assert np.allclose(v_mu[:6], att.velocity(sink_alone), rtol=1e-12, atol=1e-14)


def test_consistency_simulation_keeps_the_position_marginal():
    # consistency check: the simulator never updates positions or weights (holds by construction)
    mu = with_sink(_tokens(50, 5), 0.1, n_sink=5)
    traj = simulate(Softmax(RNG_A, RNG_V, causal=True), mu, np.linspace(0, 1, 5))
    values0, masses0 = position_marginal(mu)
    for k in range(5):
        values, masses = position_marginal(traj.measure(k))
        assert np.array_equal(values, values0) and np.array_equal(masses, masses0)


def test_sink_attention_share_matches_loop_and_untilted_closed_form():
    mu = with_sink(_tokens(40, 9), 0.1, n_sink=4)
    share = sink_attention_share(RNG_A, mu)
    X, w, s = mu.points, mu.weights, mu.positions
    for i in range(40):
        e = {j: w[j] * np.exp(X[j] @ RNG_A @ X[i]) for j in range(40) if s[j] <= s[i]}
        assert share[i] == pytest.approx(sum(e[j] for j in e if s[j] == 0) / sum(e.values()), rel=1e-12)
    # A = 0: no tilt, the share is m({0}) / m([0, s])
    flat = sink_attention_share(np.zeros((2, 2)), mu)
    prefix_mass = np.array([w[s <= si].sum() for si in s])
    assert np.allclose(flat, 0.1 / prefix_mass, rtol=1e-12)


# ---- constants -----------------------------------------------------------------------------


def test_masked_lipschitz_constant_is_the_unmasked_constant_over_the_sink_mass():
    R, m = 1.3, 0.05
    a = np.linalg.svd(RNG_A, compute_uv=False)[0]  # spectral norms via SVD
    v = np.linalg.svd(RNG_V, compute_uv=False)[0]
    direct = v * (1 + 2 * a * R**2) * np.exp(2 * a * R**2) / m
    assert masked_lipschitz_constant(RNG_A, RNG_V, R, m) == pytest.approx(direct, rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_masked_lipschitz_bound_holds_for_random_same_marginal_pairs(seed):
    rng = np.random.default_rng(seed)
    mu = with_sink(rng.uniform(-0.5, 0.5, (30, 2)), 0.1, n_sink=3)
    nu = mu.with_points(rng.uniform(-0.5, 0.5, (30, 2)))
    R = max(np.linalg.norm(mu.points, axis=1).max(), np.linalg.norm(nu.points, axis=1).max())
    # evaluate both fields at the same query (x, s): the tokens of mu, with nu as the measure
    gap = []
    for i in range(30):
        Xq = np.vstack([mu.points[i], nu.points])
        s_q = np.r_[mu.positions[i], nu.positions]
        w_q = np.r_[0.0, nu.weights]
        g_nu = causal_softmax_loop(Xq, w_q, s_q, RNG_A, RNG_V)[0]
        g_mu = causal_softmax_loop(mu.points, mu.weights, mu.positions, RNG_A, RNG_V)[i]
        gap.append(np.linalg.norm(g_mu - g_nu))
    bound = masked_lipschitz_constant(RNG_A, RNG_V, R, 0.1) * conditional_wasserstein(mu, nu, 1)
    assert max(gap) <= bound
    # the sharper prefix form: L_mu(R) times the prefix average of the fibre distances
    values, masses, w1 = fibre_distances(mu, nu, 1)
    prefix = prefix_average_matrix(masses, values) @ w1
    L_mu = masked_lipschitz_constant(RNG_A, RNG_V, R, 0.5, p=np.inf)
    at_token = prefix[np.searchsorted(values, mu.positions)]
    assert np.all(np.array(gap) <= L_mu * at_token)


def _sink_shift(m):
    """Shift the 4 sink tokens (mass m) of a 20-token cloud by delta along V's top right
    singular vector at A ~ 0: (A, V, mu, nu, largest field change at the sink, radius R)."""
    A, V = 1e-4 * RNG_A, RNG_V
    delta = 0.01 * np.linalg.svd(V)[2][0]
    mu = with_sink(np.random.default_rng(0).uniform(-0.3, 0.3, (20, 2)), m, n_sink=4)
    nu = shift_prefix(mu, delta)
    # Gamma_nu at the sink points of mu: mu's sink points as zero-weight queries inside nu
    probe = Empirical(
        np.vstack([mu.points[:4], nu.points]),
        weights=np.r_[np.zeros(4), nu.weights],
        positions=np.r_[np.zeros(4), nu.positions],
    )
    att = Softmax(A, V, causal=True)
    gap = np.linalg.norm(att.velocity(mu)[:4] - att.velocity(probe)[:4], axis=1).max()
    return A, V, mu, nu, gap, np.linalg.norm(probe.points, axis=1).max()


@pytest.mark.parametrize("m", [0.5, 0.1, 0.01])
def test_masked_lipschitz_bound_is_attained_by_a_sink_shift_at_small_scores(m):
    # A ~ 0: the sink's field is V times the mean of its fibre; shifting that fibre by delta along
    # V's top right singular vector changes the field at s = 0 by ||V|| |delta|, while
    # W_1^cond = m |delta|: the 1/m({0}) of the bound is needed, and then nearly attained
    A, V, mu, nu, gap, R = _sink_shift(m)
    bound = masked_lipschitz_constant(A, V, R, m) * conditional_wasserstein(mu, nu, 1)
    # the constant's slack at A -> 0 is (1 + 2|A|R^2) e^{2|A|R^2} - 1 ~ 1e-4: 1 % is ample
    assert 0.99 * bound <= gap <= bound


# ---- sensitivity ---------------------------------------------------------------------------


def test_sensitivity_matches_loop_simulation_and_assignment_distances():
    X = _tokens(12, 6)
    mu = with_sink(X, 0.25, n_sink=3)
    nu = shift_prefix(mu, [0.2, 0.1])
    att = Softmax(RNG_A, RNG_V, causal=True)
    res = sensitivity(att, mu, nu, 1.0, p=(1, 2), n_times=2, method="rk4", h=0.05)
    XT = rk4_loop(mu.points, mu.weights, mu.positions, RNG_A, RNG_V, 1.0, 20)
    YT = rk4_loop(nu.points, nu.weights, nu.positions, RNG_A, RNG_V, 1.0, 20)
    for k, p in enumerate((1, 2)):
        d0 = cond_wasserstein_by_assignment(mu.points, nu.points, mu.weights, mu.positions, p)
        dT = cond_wasserstein_by_assignment(XT, YT, mu.weights, mu.positions, p)
        # same RK4 steps on the same field: agreement to round-off (1e-10 relative)
        assert res.ratio[k, 0] == 1.0
        assert res.ratio[k, -1] == pytest.approx(dT / d0, rel=1e-10)


def test_sink_mass_sweep_matches_separate_sensitivity_runs():
    X = _tokens(30, 8)
    att = Softmax(RNG_A, RNG_V, causal=True)
    shift = np.array([0.1, 0.0])
    sweep = sink_mass_sweep(att, X, [0.3, 0.05], shift, 0.5, n_sink=3, p=2)
    for k, m in enumerate([0.3, 0.05]):
        mu = with_sink(X, m, n_sink=3)
        one = sensitivity(att, mu, shift_prefix(mu, shift), 0.5, p=2, n_times=2)
        assert sweep[k] == pytest.approx(one.ratio[-1], rel=1e-12)


def test_sensitivity_accepts_output_times_and_they_must_start_at_zero():
    mu = with_sink(_tokens(20, 3), 0.2, n_sink=2)
    nu = shift_prefix(mu, [0.1, 0.0])
    att = Softmax(RNG_A, RNG_V, causal=True)
    grid = sensitivity(att, mu, nu, [0.0, 0.25, 0.5], p=1)
    one = sensitivity(att, mu, nu, 0.5, p=1, n_times=3)
    assert np.array_equal(grid.times, one.times) and np.allclose(grid.ratio, one.ratio, rtol=1e-12)
    with pytest.raises(ValueError, match="start at 0"):
        sensitivity(att, mu, nu, [0.1, 0.5])


def test_sensitivity_rejects_identical_measures():
    mu = with_sink(_tokens(10, 0), 0.2, n_sink=2)
    with pytest.raises(ValueError, match="differ"):
        sensitivity(Softmax(RNG_A, RNG_V, causal=True), mu, mu, 1.0)


@pytest.mark.parametrize("b, c", list(itertools.product([-1.0, -0.3, 0.5], [0.2, 3.0])))
def test_fit_exponent_recovers_an_exact_power_law(b, c):
    x = np.array([0.5, 0.2, 0.1, 0.05, 0.02, 0.01])
    fb, fc = fit_exponent(x, c * x**b)
    assert fb == pytest.approx(b, abs=1e-10) and fc == pytest.approx(c, rel=1e-10)


# ---- no atom -------------------------------------------------------------------------------


def test_sink_positions_without_an_atom_discretise_a_density():
    s, w = sink_positions(8, 0.0)
    assert np.array_equal(s, np.arange(1, 9) / 8) and np.allclose(w, 1 / 8, rtol=1e-15)
    with pytest.raises(ValueError, match="n_sink"):
        sink_positions(8, 0.0, n_sink=2)
    with pytest.raises(ValueError, match="sink_mass"):
        sink_positions(8, -0.1)


# ---- fibre distances -----------------------------------------------------------------------


@pytest.mark.parametrize("p", [1, 2])
def test_fibre_distances_match_assignments_and_the_conditional_distance(p):
    X, Y = _tokens(24, 11), _tokens(24, 12)
    mu = with_sink(X, 0.25, n_sink=6)  # a sink fibre of 6 tokens, 18 single ones
    nu = mu.with_points(Y)
    values, masses, dist = fibre_distances(mu, nu, p)
    for v, d in zip(values, dist):
        sel = np.flatnonzero(mu.positions == v)
        C = np.linalg.norm(X[sel][:, None] - Y[sel][None], axis=2) ** p
        r, c = linear_sum_assignment(C)
        assert d == pytest.approx(C[r, c].mean() ** (1 / p), rel=1e-9)
    # the L^p(m) average is W_p^cond (transport's separate implementation)
    assert np.sum(masses * dist**p) ** (1 / p) == pytest.approx(conditional_wasserstein(mu, nu, p), rel=1e-9)
    assert sup_fibre_distance(mu, nu, p) == pytest.approx(dist.max(), rel=1e-15)


def test_fibre_distances_need_the_same_marginal():
    mu = with_sink(_tokens(10, 0), 0.2, n_sink=2)
    nu = with_sink(_tokens(10, 1), 0.3, n_sink=2)
    with pytest.raises(ValueError, match="position marginal"):
        fibre_distances(mu, nu)


# ---- the prefix average --------------------------------------------------------------------


@pytest.mark.parametrize("n_sink", [1, 4])
def test_prefix_average_is_the_causal_field_with_zero_scores(n_sink):
    mu = with_sink(_tokens(30, 13), 0.2, n_sink=n_sink)
    H = prefix_average_matrix(mu.weights, mu.positions)
    ref = causal_softmax_loop(mu.points, mu.weights, mu.positions, np.zeros((2, 2)), RNG_V)
    assert np.allclose((H @ mu.points) @ RNG_V.T, ref, rtol=1e-12, atol=1e-14)
    assert np.allclose(H.sum(axis=1), 1.0, rtol=1e-14)


def _brute_norm(E, m, p, rng):
    """Lower bound of the l^p(m) operator norm over random and basis vectors."""
    U = np.vstack([rng.standard_normal((200, E.shape[0])), np.eye(E.shape[0]), np.sign(E)])

    def norm(u):
        return np.max(np.abs(u), axis=-1) if p == np.inf else (np.abs(u) ** p @ m) ** (1 / p)

    return np.max(norm(U @ E.T) / norm(U))


@pytest.mark.parametrize("p", [1, 2, np.inf])
def test_lp_operator_norm_is_attained_and_not_exceeded(p):
    rng = np.random.default_rng(14)
    m = rng.dirichlet(np.ones(7))
    E = rng.standard_normal((7, 7))
    value = lp_operator_norm(E, m, p)
    low = _brute_norm(E, m, p, rng)
    assert low <= value * (1 + 1e-12)
    if p == 2:  # generalised eigenproblem max u^T E^T D E u / u^T D u (independent)
        from scipy.linalg import eigh

        D = np.diag(m)
        assert value == pytest.approx(np.sqrt(eigh(E.T @ D @ E, D, eigvals_only=True)[-1]), rel=1e-10)
    else:  # attained by a basis vector (p = 1) or a sign vector (p = inf)
        assert low == pytest.approx(value, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(0, 10_000))
def test_hardy_constants_bound_the_prefix_average(k, seed):
    rng = np.random.default_rng(seed)
    m = np.maximum(rng.dirichlet(np.full(k, rng.choice([0.2, 1.0, 5.0]))), 1e-9)
    m /= m.sum()
    H = prefix_average_matrix(m)
    kappa1 = hardy_constant(m, 1)
    assert lp_operator_norm(H, m, 1) == pytest.approx(kappa1, rel=1e-12)
    assert kappa1 <= 1 + np.log(1 / m[0]) + 1e-12
    assert lp_operator_norm(H, m, 2) <= 2.0 + 1e-12
    assert lp_operator_norm(H, m, np.inf) == pytest.approx(1.0, rel=1e-14)
    w = np.abs(rng.standard_normal(k)) ** 3  # p = 3: Hardy's constant 3/2
    assert ((H @ w) ** 3 @ m) ** (1 / 3) <= 1.5 * (w**3 @ m) ** (1 / 3) * (1 + 1e-12)


def test_hardy_constant_values_and_its_growth_without_an_atom():
    assert hardy_constant([0.5, 0.5], 2) == 2.0 and hardy_constant([1.0], np.inf) == 1.0
    assert hardy_constant([0.5, 0.5], 3) == pytest.approx(1.5)
    # n equal masses: the harmonic number, unbounded in n
    for k in (10, 1000):
        assert hardy_constant(np.full(k, 1 / k), 1) == pytest.approx(
            sum(1 / i for i in range(1, k + 1)), rel=1e-12
        )
    with pytest.raises(ValueError, match="^p must be a real number >= 1 or inf"):
        hardy_constant([0.5, 0.5], 0.5)
    with pytest.raises(ValueError, match="p must be 1, 2 or inf"):
        lp_operator_norm(np.eye(2), [0.5, 0.5], 3)


# ---- constants -----------------------------------------------------------------------------


def test_masked_lipschitz_constant_for_each_distance():
    R, m = 1.3, 0.05
    a = np.linalg.svd(RNG_A, compute_uv=False)[0]  # spectral norms via SVD
    v = np.linalg.svd(RNG_V, compute_uv=False)[0]
    L = v * (1 + 2 * a * R**2) * np.exp(2 * a * R**2)
    assert masked_lipschitz_constant(RNG_A, RNG_V, R, m, p=2) == pytest.approx(L / np.sqrt(m), rel=1e-12)
    assert masked_lipschitz_constant(RNG_A, RNG_V, R, 0.0, p=np.inf) == pytest.approx(L, rel=1e-12)
    with pytest.raises(ValueError, match="sink_mass"):
        masked_lipschitz_constant(RNG_A, RNG_V, R, 0.0, p=2)


@pytest.mark.parametrize("p", [1, 2])
def test_pointwise_constant_in_wp_cond_is_attained_by_a_sink_shift(p):
    # A ~ 0: at s = 0 the field moves by ||V|| |delta| while W_p^cond = m^(1/p) |delta|
    m = 0.02
    A, V, mu, nu, gap, R = _sink_shift(m)
    bound = masked_lipschitz_constant(A, V, R, m, p=p) * conditional_wasserstein(mu, nu, p)
    assert 0.99 * bound <= gap <= bound


def test_stability_constant_formula():
    times = np.array([0.0, 0.5, 1.0])
    masses = np.array([0.2, 0.3, 0.5])
    a, v = np.linalg.norm(RNG_A, 2), np.linalg.norm(RNG_V, 2)
    R = 0.5 * np.exp(v * times)
    k1 = 0.2 / 0.2 + 0.3 / 0.5 + 0.5 / 1.0
    for p, kappa in [(1, k1), (2, 2.0), (np.inf, 1.0)]:
        direct = times * (v * a * R**2 + kappa * v * (1 + 2 * a * R**2) * np.exp(2 * a * R**2))
        logC = masked_stability_constant(RNG_A, RNG_V, 0.5, times, masses, p, log=True)
        assert np.allclose(logC, direct, rtol=1e-12, atol=0)


@pytest.mark.parametrize("a", [0.2, 0.02])
def test_stability_constants_bound_the_exact_linear_flow(a):
    # A = 0, V = I: the flow is exp(tH) exactly; C_p(t) = e^{t kappa_p} must bound its norms
    from scipy.linalg import expm

    w = sink_positions(81, a, n_sink=1)[1]
    H = prefix_average_matrix(w)
    times = np.array([0.5, 1.0, 2.0])
    for p in (1, 2, np.inf):
        C = masked_stability_constant(np.zeros((2, 2)), np.eye(2), 1.0, times, w, p)
        exact = np.array([lp_operator_norm(expm(t * H), w, p) for t in times])
        assert np.all(exact <= C * (1 + 1e-12))
        if p == np.inf:  # attained: H is row-stochastic and non-negative
            assert np.allclose(exact, C, rtol=1e-12)


def test_linear_sink_response_is_the_continuum_limit_of_the_discrete_flow():
    from scipy.sparse.linalg import expm_multiply
    from scipy.special import i0

    t, a = 1.5, 0.05
    rho = linear_sink_response(t, a)
    ell = np.log(1 / a)
    assert i0(2 * np.sqrt(t * ell)) < rho < np.exp(t) * i0(2 * np.sqrt(t * ell))
    gaps = []
    for k in (200, 800):
        w = sink_positions(k + 1, a, n_sink=1)[1]
        col = expm_multiply(t * prefix_average_matrix(w), np.r_[1.0, np.zeros(k)])
        gaps.append(abs(w @ col / a / rho - 1))
    # discretisation error O(1/(a k)): four times more tokens, about four times smaller
    assert gaps[1] < 0.01 and 3 < gaps[0] / gaps[1] < 5
    assert linear_sink_response(0.0, a) == 1.0
    assert linear_sink_response(t, 1 - 1e-12) == pytest.approx(np.exp(t), rel=1e-9)


# ---- sweeps with the supremum over fibres --------------------------------------------------


def test_sensitivity_sup_matches_loop_simulation():
    X = _tokens(12, 6)
    mu = with_sink(X, 0.25, n_sink=1)
    nu = shift_prefix(mu, [0.2, 0.1], s_max=0.3)
    att = Softmax(RNG_A, RNG_V, causal=True)
    res = sensitivity(att, mu, nu, 1.0, p=2, n_times=2, method="rk4", h=0.05, sup=True)
    XT = rk4_loop(mu.points, mu.weights, mu.positions, RNG_A, RNG_V, 1.0, 20)
    YT = rk4_loop(nu.points, nu.weights, nu.positions, RNG_A, RNG_V, 1.0, 20)
    d0 = np.linalg.norm(mu.points - nu.points, axis=1).max()  # one token per fibre
    dT = np.linalg.norm(XT - YT, axis=1).max()
    assert res.sup_ratio[-1] == pytest.approx(dT / d0, rel=1e-10)


def test_prefix_sweep_matches_separate_sensitivity_runs():
    mu = with_sink(_tokens(30, 8), 0.0)
    att = Softmax(RNG_A, RNG_V, causal=True)
    shift = np.array([0.1, 0.0])
    cond, sup = prefix_sweep(att, mu, [0.1, 0.5], shift, 0.5, p=(1, 2), sup=True)
    for k, s_max in enumerate([0.1, 0.5]):
        one = sensitivity(att, mu, shift_prefix(mu, shift, s_max=s_max), 0.5, p=(1, 2), n_times=2, sup=True)
        assert np.allclose(cond[:, k], one.ratio[:, -1], rtol=1e-12)
        assert np.allclose(sup[:, k], one.sup_ratio[:, -1], rtol=1e-12)
    with pytest.raises(ValueError, match="moves no token"):
        prefix_sweep(att, mu, [0.001], shift, 0.5)


# ---- input policy of the bounds (issue 28) ---------------------------------------------------


def test_masked_bounds_reject_bad_p_n_terms_and_report_overflow():
    H = prefix_average_matrix([0.3, 0.2, 0.5])
    with pytest.raises(TypeError, match="p must be a real number"):
        lp_operator_norm(H, [0.3, 0.2, 0.5], True)  # was accepted as p = 1
    with pytest.raises(TypeError, match="p must be a real number"):
        hardy_constant([0.3, 0.7], "inf")
    with pytest.raises(TypeError, match="p must be a real number"):
        masked_lipschitz_constant(np.eye(2), np.eye(2), 1.0, 0.1, p="1")
    with pytest.raises(ValueError, match="p must be a real number >= 1"):
        hardy_constant([0.3, 0.7], np.nan)
    with pytest.raises(ValueError, match="n_terms must be an integer >= 1"):
        linear_sink_response(1.0, 0.1, n_terms=0)  # was 0.0
    with pytest.raises(TypeError, match="n_terms"):
        linear_sink_response(1.0, 0.1, n_terms="50")  # was int("50")
    with pytest.raises(ValueError, match="n_terms=10 is too small"):
        linear_sink_response(5.0, 0.1, n_terms=10)  # was a truncated sum, 9% low
    with pytest.raises(FloatingPointError, match="exceeds the float range"):
        linear_sink_response(800.0, 0.1, n_terms=2000)  # was inf
    with pytest.raises(FloatingPointError, match="Lipschitz constant exceeds the float range"):
        masked_lipschitz_constant(np.eye(2), np.eye(2), 30.0, 0.1)  # was inf
    with pytest.raises(FloatingPointError, match="use log=True"):
        masked_stability_constant(0.2 * np.eye(2), np.eye(2), 1.0, [0.0, 2.0], [0.5, 0.5], 1)
    with pytest.raises(FloatingPointError, match="log C_p"):
        masked_stability_constant(np.eye(2), np.eye(2), 1.0, [0.0, 50.0], [0.5, 0.5], 1, log=True)
    with pytest.raises(TypeError, match="log must be True or False"):
        masked_stability_constant(np.eye(2), np.eye(2), 1.0, [0.0, 1.0], [0.5, 0.5], 1, log="no")
