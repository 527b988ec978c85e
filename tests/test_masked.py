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
    masked_lipschitz_constant,
    masked_stability_bound,
    position_marginal,
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
from tpde_lib.transport import conditional_wasserstein

RNG_A = np.array([[0.6, -0.3], [0.4, 0.5]])
RNG_V = np.array([[0.2, -0.7], [0.8, 0.1]])


# ---- independent oracles -------------------------------------------------------------------

def causal_softmax_loop(X, w, s, A, V):
    """Masked softmax field token by token (paper notes §2.8), plain Python over queries."""
    out = np.zeros_like(X)
    for i in range(X.shape[0]):
        keys = [j for j in range(X.shape[0]) if s[j] <= s[i]]
        scores = np.array([X[j] @ A @ X[i] for j in keys])        # <A x_i, x_j> = x_j^T A x_i
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
    at_zero = sum(w_i for s_i, w_i in zip(s, w) if s_i == 0.0)       # loop, not the helper
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
    v = np.array([0.3, -0.4])                        # |v| = 0.5
    nu = shift_prefix(mu, v)
    assert np.array_equal(nu.points[5:], mu.points[5:])
    # closed form: a rigid translation of one fibre of mass m costs |v| m^(1/p)
    assert conditional_wasserstein(mu, nu, p) == pytest.approx(0.5 * 0.1 ** (1 / p), rel=1e-9)


def test_shifting_a_prefix_costs_shift_times_prefix_mass_to_one_over_p():
    mu = with_sink(_tokens(50, 2), 0.1, n_sink=5)
    nu = shift_prefix(mu, [0.0, 0.2], s_max=0.3)
    prefix = sum(w for w, s in zip(mu.weights, mu.positions) if s <= 0.3)
    assert conditional_wasserstein(mu, nu, 2) == pytest.approx(0.2 * np.sqrt(prefix), rel=1e-9)


@pytest.mark.parametrize("kwargs, match", [
    (dict(n=1, sink_mass=0.5), "n must"),
    (dict(n=10, sink_mass=0.0), "sink_mass"),
    (dict(n=10, sink_mass=1.0), "sink_mass"),
    (dict(n=10, sink_mass=0.5, n_sink=10), "n_sink"),
    (dict(n=10, sink_mass=0.5, n_sink=0), "n_sink"),
])
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


@pytest.mark.parametrize("att", [
    Softmax(RNG_A, RNG_V, causal=True),
    MultiHead([Softmax(RNG_A, RNG_V, causal=True), Softmax(-RNG_A.T, 0.5 * RNG_V, causal=True)]),
])
def test_sink_tokens_move_only_under_their_own_fibre(att):
    # paper notes §9 item 18: Gamma(x, 0) depends only on the s = 0 fibre
    mu = with_sink(_tokens(60, 3), 0.2, n_sink=6)
    other = _tokens(60, 4, scale=3.0)
    other[:6] = mu.points[:6]
    nu = mu.with_points(other)
    v_mu, v_nu = att.velocity(mu), att.velocity(nu)
    # the masked entries enter as exact zeros: equal to machine precision (1e-14 relative)
    assert np.max(np.abs(v_mu[:6] - v_nu[:6])) <= 1e-14 * np.max(np.abs(v_mu[:6]))
    assert np.max(np.abs(v_mu[6:] - v_nu[6:])) > 1e-2      # the later tokens do see the change
    # and it equals the unmasked field of the sink fibre alone
    sink_alone = Empirical(mu.points[:6], weights=np.full(6, 1 / 6), positions=np.zeros(6))
    assert np.allclose(v_mu[:6], att.velocity(sink_alone), rtol=1e-12, atol=1e-14)


def test_position_marginal_is_conserved_exactly_by_simulation():
    mu = with_sink(_tokens(50, 5), 0.1, n_sink=5)
    traj = simulate(Softmax(RNG_A, RNG_V, causal=True), mu, np.linspace(0, 1, 5))
    values0, masses0 = position_marginal(mu)
    for k in range(5):
        values, masses = position_marginal(traj.measure(k))
        assert np.array_equal(values, values0) and np.array_equal(masses, masses0)


def test_sink_attention_share_matches_loop_and_untilted_closed_form():
    mu = with_sink(_tokens(40, 9), 0.1, n_sink=4)
    share = sink_attention_share(Softmax(RNG_A, RNG_V, causal=True), mu, block=7)
    X, w, s = mu.points, mu.weights, mu.positions
    for i in range(40):
        e = {j: w[j] * np.exp(X[j] @ RNG_A @ X[i]) for j in range(40) if s[j] <= s[i]}
        assert share[i] == pytest.approx(sum(e[j] for j in e if s[j] == 0) / sum(e.values()),
                                         rel=1e-12)
    # A = 0: no tilt, the share is m({0}) / m([0, s])
    flat = sink_attention_share(Softmax(np.zeros((2, 2)), RNG_V, causal=True), mu)
    prefix_mass = np.array([w[s <= si].sum() for si in s])
    assert np.allclose(flat, 0.1 / prefix_mass, rtol=1e-12)


# ---- constants -----------------------------------------------------------------------------

def test_masked_lipschitz_constant_is_the_unmasked_constant_over_the_sink_mass():
    R, m = 1.3, 0.05
    a = np.linalg.svd(RNG_A, compute_uv=False)[0]      # spectral norms via SVD
    v = np.linalg.svd(RNG_V, compute_uv=False)[0]
    direct = v * (1 + 2 * a * R ** 2) * np.exp(2 * a * R ** 2) / m
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


@pytest.mark.parametrize("m", [0.5, 0.1, 0.01])
def test_masked_lipschitz_bound_is_attained_by_a_sink_shift_at_small_scores(m):
    # A ~ 0: the sink's field is V times the mean of its fibre; shifting that fibre by delta along
    # V's top right singular vector changes the field at s = 0 by ||V|| |delta|, while
    # W_1^cond = m |delta|: the 1/m({0}) of the bound is needed, and then nearly attained
    A, V = 1e-4 * RNG_A, RNG_V
    delta = 0.01 * np.linalg.svd(V)[2][0]
    mu = with_sink(np.random.default_rng(0).uniform(-0.3, 0.3, (20, 2)), m, n_sink=4)
    nu = shift_prefix(mu, delta)
    # Gamma_nu at the sink points of mu: mu's sink points as zero-weight queries inside nu
    probe = Empirical(np.vstack([mu.points[:4], nu.points]), weights=np.r_[np.zeros(4), nu.weights],
                      positions=np.r_[np.zeros(4), nu.positions])
    att = Softmax(A, V, causal=True)
    gap = np.linalg.norm(att.velocity(mu)[:4] - att.velocity(probe)[:4], axis=1).max()
    R = np.linalg.norm(probe.points, axis=1).max()
    bound = masked_lipschitz_constant(A, V, R, m) * conditional_wasserstein(mu, nu, 1)
    # the constant's slack at A -> 0 is (1 + 2|A|R^2) e^{2|A|R^2} - 1 ~ 1e-4: 1 % is ample
    assert 0.99 * bound <= gap <= bound


def test_stability_bound_formula_and_value_at_zero():
    times = np.array([0.0, 0.5, 1.0])
    C = masked_stability_bound(RNG_A, RNG_V, 0.5, times, 0.2)
    a, v = np.linalg.norm(RNG_A, 2), np.linalg.norm(RNG_V, 2)
    R = 0.5 * np.exp(v * times)
    direct = np.exp(times * (v * a * R ** 2 + v * (1 + 2 * a * R ** 2) * np.exp(2 * a * R ** 2) / 0.2))
    assert C[0] == 1.0 and np.allclose(C, direct, rtol=1e-12)
    logC = masked_stability_bound(RNG_A, RNG_V, 0.5, times, 0.2, log=True)
    assert np.allclose(logC, np.log(direct), rtol=1e-12, atol=1e-15)


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


def test_measured_sensitivity_stays_below_the_masked_stability_bound():
    X = np.random.default_rng(7).uniform(-0.35, 0.35, (40, 2))
    mu = with_sink(X, 0.1, n_sink=4)
    nu = shift_prefix(mu, [0.05, 0.0])
    res = sensitivity(Softmax(RNG_A, RNG_V, causal=True), mu, nu, 1.0, p=2, n_times=6)
    R0 = np.linalg.norm(np.vstack([mu.points, nu.points]), axis=1).max()
    C = masked_stability_bound(RNG_A, RNG_V, R0, res.times, 0.1)
    assert np.all(res.ratio <= C)


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
    fb, fc = fit_exponent(x, c * x ** b)
    assert fb == pytest.approx(b, abs=1e-10) and fc == pytest.approx(c, rel=1e-10)
