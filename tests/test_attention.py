"""Tests of the attention velocity fields against independent computations.

The oracle for every variant is a direct per-token double loop over queries and keys written from
the formulas of the chapter "The Transformer PDE" (no vectorisation, no blocking, no
stabilisation beyond what the small test scores need). Float64 sums of a few dozen terms of size
O(1) agree to ~1e-13, so ``rtol=1e-10`` leaves room for reordering only.
"""

import math

import numpy as np
import ot
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpde_lib.attention._kernels as kernels_mod
from tpde_lib.attention import (
    L2,
    Linear,
    MultiHead,
    Sigmoid,
    Sinkhorn,
    Softmax,
    Unnormalised,
    sinkhorn_potentials,
)
from tpde_lib.measures import Empirical

RTOL = 1e-10  # reordering of float64 sums of O(1) terms (see module docstring)


def _problem(n=30, d=3, seed=0, weighted=True):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    w = rng.random(n) + 0.1 if weighted else np.ones(n)
    w /= w.sum()
    s = np.sort(rng.random(n))
    s[0] = 0.0
    A = rng.standard_normal((d, d)) / math.sqrt(d)
    V = rng.standard_normal((d, d)) / math.sqrt(d)
    return X, w, s, A, V


def _loop_field(kernel, V, X, w, s=None, normalise=True):
    """Oracle: Gamma(x_i) = V sum_j w_j k(x_i, x_j) x_j [/ sum_j w_j k(x_i, x_j)], per token.

    With positions ``s``, token i only sees tokens j with s_j <= s_i (masked attention).
    """
    n, d = X.shape
    out = np.zeros((n, d))
    for i in range(n):
        num, den = np.zeros(d), 0.0
        for j in range(n):
            if s is not None and s[j] > s[i]:
                continue
            k = kernel(X[i], X[j])
            num += w[j] * k * X[j]
            den += w[j] * k
        out[i] = V @ (num / den if normalise else num)
    return out


def _variants(A, V, d, causal=False, seed=1):
    """(attention, kernel, normalised) triples for every kernel-based variant."""
    rng = np.random.default_rng(seed)
    Q, K = rng.standard_normal((2, d)), rng.standard_normal((2, d))
    tau, bias = 0.7, -0.5
    return {
        "softmax": (Softmax(A, V, causal=causal), lambda x, y: np.exp(y @ A @ x), True),
        "L2": (
            L2(Q, K, V, tau=tau, causal=causal),
            lambda x, y: np.exp(-np.sum((Q @ x - K @ y) ** 2) / tau),
            True,
        ),
        "sigmoid": (
            Sigmoid(A, V, bias=bias, causal=causal),
            lambda x, y: 1.0 / (1.0 + np.exp(-(y @ A @ x + bias))),
            False,
        ),
        "linear": (Linear(A, V, causal=causal), lambda x, y: y @ A @ x, False),
        "unnormalised": (Unnormalised(A, V, causal=causal), lambda x, y: np.exp(y @ A @ x), False),
    }


VARIANTS = ["softmax", "L2", "sigmoid", "linear", "unnormalised"]


# ---------------------------------------------------------------------------------------------
# every variant against the per-token loop
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
def test_velocity_matches_per_token_loop(name, causal):
    X, w, s, A, V = _problem()
    att, kernel, normalise = _variants(A, V, X.shape[1], causal)[name]
    mu = Empirical(X, w, s)
    got = att.velocity(mu)
    want = _loop_field(kernel, V, X, w, s if causal else None, normalise)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-12)


@pytest.mark.parametrize("name", VARIANTS)
def test_velocity_blocked_rows_match_loop(name, monkeypatch):
    # blocks of 7 rows of 30 tokens: several blocks and a partial last one
    X, w, s, A, V = _problem()
    monkeypatch.setattr(kernels_mod, "_BLOCK_ENTRIES", 7 * X.shape[0])
    att, kernel, normalise = _variants(A, V, X.shape[1], causal=True)[name]
    got = att.velocity(Empirical(X, w, s))
    np.testing.assert_allclose(got, _loop_field(kernel, V, X, w, s, normalise), rtol=RTOL, atol=1e-12)


def test_from_qk_uses_scaled_query_key_product():
    rng = np.random.default_rng(2)
    d, k = 4, 2
    X = rng.standard_normal((25, d))
    Q, K, V = rng.standard_normal((k, d)), rng.standard_normal((k, d)), rng.standard_normal((d, d))
    w = np.full(25, 1 / 25)
    want = _loop_field(lambda x, y: np.exp((Q @ x) @ (K @ y) / math.sqrt(k)), V, X, w)
    np.testing.assert_allclose(Softmax.from_qk(Q, K, V).velocity(Empirical(X)), want, rtol=RTOL)


def test_time_dependent_parameters_match_loop_at_that_time():
    X, w, _, A, V = _problem()
    t = 0.7
    A_t = lambda t: np.cos(t) * A + t * np.eye(3)
    V_t = lambda t: V * (1 + t)
    got = Softmax(A_t, V_t).velocity(Empirical(X, w), t=t)
    want = _loop_field(lambda x, y: np.exp(y @ A_t(t) @ x), V_t(t), X, w)
    np.testing.assert_allclose(got, want, rtol=RTOL)
    # from_qk with callables: A(t) = K(t)^T Q(t) / sqrt(k)
    Q = lambda t: np.eye(3)[:2] * (1 + t)
    K = lambda t: np.ones((2, 3)) * t
    got = Softmax.from_qk(Q, K, V).velocity(Empirical(X, w), t=t)
    want = _loop_field(lambda x, y: np.exp((Q(t) @ x) @ (K(t) @ y) / math.sqrt(2)), V, X, w)
    np.testing.assert_allclose(got, want, rtol=RTOL)


@pytest.mark.parametrize("causal", [False, True])
def test_multihead_equals_sum_of_head_loops(causal):
    # three softmax heads (one engine call for all, their queries stacked) and a linear head
    X, w, s, A, V = _problem()
    rng = np.random.default_rng(3)
    A2, V2 = rng.standard_normal((3, 3)) / 2, rng.standard_normal((3, 3))
    A3, V3 = rng.standard_normal((3, 3)) / 2, rng.standard_normal((3, 3))
    mh = MultiHead(
        [Softmax(A, V, causal), Softmax(A2, V2, causal), Linear(A3, V3, causal), Softmax(A3, V3, causal)]
    )
    pos = s if causal else None
    want = (
        _loop_field(lambda x, y: np.exp(y @ A @ x), V, X, w, pos)
        + _loop_field(lambda x, y: np.exp(y @ A2 @ x), V2, X, w, pos)
        + _loop_field(lambda x, y: y @ A3 @ x, V3, X, w, pos, normalise=False)
        + _loop_field(lambda x, y: np.exp(y @ A3 @ x), V3, X, w, pos)
    )
    np.testing.assert_allclose(mh.velocity(Empirical(X, w, positions=pos)), want, rtol=RTOL)


def test_multihead_batches_softmax_heads_but_not_their_subclasses():
    # heads of time-dependent parameters go through the batched call at their time t; a
    # subclass of Softmax keeps its own field
    X, w, _, A, V = _problem(seed=5)

    class Doubled(Softmax):
        def field(self, points, weights, positions, t):
            return 2.0 * super().field(points, weights, positions, t)

    mu, t = Empirical(X, w), 0.7
    heads = [Softmax(lambda t: A * (1 + t), V), Softmax(A.T, lambda t: V * t), Doubled(A, V)]
    want = (
        Softmax(A * 1.7, V).velocity(mu) + Softmax(A.T, V * t).velocity(mu) + 2.0 * Softmax(A, V).velocity(mu)
    )
    np.testing.assert_allclose(MultiHead(heads).velocity(mu, t=t), want, rtol=1e-13)


def test_softmax_with_large_scores_selects_the_best_key():
    # beta -> infinity: softmax tends to the argmax key; naive exponentials would overflow
    rng = np.random.default_rng(4)
    X = rng.standard_normal((40, 2))
    A, V = np.eye(2), np.eye(2)
    got = Softmax(1e4 * A, V).velocity(Empirical(X))
    best = np.argmax(X @ X.T, axis=1)  # argmax_j <x_i, x_j>, unique for Gaussian draws
    np.testing.assert_allclose(got, X[best], atol=1e-12)


@pytest.mark.parametrize("n", [40, 400])  # the dense path and the blocked one
def test_a_huge_value_matrix_scales_the_field_without_overflow(n):
    # scores up to ~ 150 take no shift in the blocked engine, so its sums reach ~ e^150: the
    # average must be formed before V = 1e300 I multiplies it (the field is 1e300 x that of
    # V = I, finite)
    rng = np.random.default_rng(9)
    X = rng.standard_normal((n, 2))
    A = 150.0 / np.abs(X).max() ** 2 / 2.0 * np.eye(2)
    mu = Empirical(X)
    assert np.abs(X @ A @ X.T).max() > 50.0
    want = Softmax(A, np.eye(2)).velocity(mu)
    np.testing.assert_allclose(Softmax(A, 1e300 * np.eye(2)).velocity(mu), 1e300 * want, rtol=1e-13)


def test_zero_weight_tokens_do_not_act_on_others():
    X, w, _, A, V = _problem()
    w = w.copy()
    w[:5] = 0.0
    w /= w.sum()
    for name, (att, _, _) in _variants(A, V, 3).items():
        full = att.velocity(Empirical(X, w))
        rest = att.velocity(Empirical(X[5:], w[5:] / w[5:].sum()))
        np.testing.assert_allclose(full[5:], rest, rtol=1e-12, err_msg=name)


# ---------------------------------------------------------------------------------------------
# symmetries
# ---------------------------------------------------------------------------------------------


def _all_attentions(A, V, d):
    atts = {k: v[0] for k, v in _variants(A, V, d).items()}
    atts["sinkhorn"] = Sinkhorn(A, V, eps=1.0, tol=1e-11)
    atts["multihead"] = MultiHead([Softmax(A, V), Softmax(-A, V.T)])
    return atts


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 12), seed=st.integers(0, 2**16))
def test_velocity_is_permutation_equivariant(n, seed):
    X, w, _, A, V = _problem(n=n, seed=seed)
    perm = np.random.default_rng(seed).permutation(n)
    for name, att in _all_attentions(A, V, 3).items():
        v = att.velocity(Empirical(X, w))
        vp = att.velocity(Empirical(X[perm], w[perm]))
        # Sinkhorn: both solutions within tol=1e-11 of the same plan
        np.testing.assert_allclose(vp, v[perm], rtol=1e-8, atol=1e-9, err_msg=name)


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 10), seed=st.integers(0, 2**16))
def test_duplicating_every_token_with_half_weights_leaves_velocity_unchanged(n, seed):
    # same measure mu^n, twice as many particles
    X, w, _, A, V = _problem(n=n, seed=seed)
    for name, att in _all_attentions(A, V, 3).items():
        v = att.velocity(Empirical(X, w))
        v2 = att.velocity(Empirical(np.vstack([X, X]), np.concatenate([w, w]) / 2))
        np.testing.assert_allclose(v2[:n], v, rtol=1e-8, atol=1e-9, err_msg=name)
        np.testing.assert_allclose(v2[n:], v, rtol=1e-8, atol=1e-9, err_msg=name)


# ---------------------------------------------------------------------------------------------
# masked (causal) attention
# ---------------------------------------------------------------------------------------------


def test_causal_token_at_position_zero_sees_only_its_fibre():
    X, w, s, A, V = _problem()
    s = s.copy()
    s[:4] = 0.0  # an atom of 4 tokens at s = 0
    fib = slice(0, 4)
    mu = Empirical(X, w, s)
    # softmax on the s = 0 fibre alone, with its weights renormalised (the field is normalised)
    got = Softmax(A, V, causal=True).velocity(mu)[fib]
    alone = _loop_field(lambda x, y: np.exp(y @ A @ x), V, X[fib], w[fib] / w[fib].sum())
    np.testing.assert_allclose(got, alone, rtol=RTOL)
    # moving every later token changes nothing at s = 0
    Y = X.copy()
    Y[4:] += 10.0
    for name, (att, _, _) in _variants(A, V, 3, causal=True).items():
        a = att.velocity(mu)[fib]
        b = att.velocity(Empirical(Y, w, s))[fib]
        np.testing.assert_allclose(a, b, rtol=1e-13, err_msg=name)


def test_causal_last_token_equals_full_attention():
    X, w, s, A, V = _problem()
    mu = Empirical(X, w, s)  # s sorted, the last token has the largest position
    for name, (att, _, _) in _variants(A, V, 3, causal=True).items():
        full = _variants(A, V, 3)[name][0].velocity(mu)
        np.testing.assert_allclose(att.velocity(mu)[-1], full[-1], rtol=1e-12, atol=1e-13, err_msg=name)


# ---------------------------------------------------------------------------------------------
# Sinkhorn against POT
# ---------------------------------------------------------------------------------------------


def _pot_plan(X, w, A, eps):
    # kernel e^{<Ax,y>/eps} = e^{-C/reg} with cost C_ij = -<A x_i, x_j> and reg = eps
    C = -(X @ A.T @ X.T)
    return ot.sinkhorn(w, w, C, eps, method="sinkhorn_log", stopThr=1e-13, numItermax=100_000)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("eps", [1.0, 0.4])
def test_sinkhorn_matches_pot_log_domain_solver(symmetric, eps):
    X, w, _, A, V = _problem(n=40, seed=5)
    if symmetric:
        A = A + A.T
    sk = Sinkhorn(A, V, eps=eps, tol=1e-12)
    P = _pot_plan(X, w, A, eps)
    want = (P @ X / P.sum(axis=1, keepdims=True)) @ V.T
    # both plans within ~1e-12 of the marginals; conditional means of O(1) points agree ~1e-9
    np.testing.assert_allclose(sk.velocity(Empirical(X, w)), want, atol=1e-9)
    np.testing.assert_allclose(sk.plan(Empirical(X, w)), P, atol=1e-11)


@pytest.mark.parametrize("symmetric", [True, False])
def test_sinkhorn_plan_has_both_marginals(symmetric):
    X, w, _, A, V = _problem(n=40, seed=6)
    if symmetric:
        A = 0.5 * (A + A.T)
    sk = Sinkhorn(A, V, eps=0.5, tol=1e-10)
    P = sk.plan(Empirical(X, w))
    assert np.all(P >= 0)
    # the L1 violation is below tol by construction of the stopping rule
    assert np.abs(P.sum(axis=1) - w).sum() <= 1e-10
    assert np.abs(P.sum(axis=0) - w).sum() <= 1e-10
    assert sk.last_error <= 1e-10


def test_sinkhorn_single_row_normalisation_is_softmax():
    X, w, _, A, V = _problem(seed=7)
    eps = 0.5
    sk = Sinkhorn(A, V, eps=eps, max_iter=0, strict=False)
    with pytest.warns(RuntimeWarning, match="marginal violation"):
        got = sk.velocity(Empirical(X, w))
    want = _loop_field(lambda x, y: np.exp(y @ A @ x / eps), V, X, w)
    np.testing.assert_allclose(got, want, rtol=RTOL)


def test_sinkhorn_not_converged_raises_with_achieved_error():
    X, w, _, A, V = _problem(seed=8)
    with pytest.raises(RuntimeError, match=r"marginal violation [0-9.e+-]+ > tol"):
        Sinkhorn(A, V, eps=0.2, max_iter=2).velocity(Empirical(X, w))


def test_sinkhorn_warm_start_reuses_potentials():
    X, w, _, A, V = _problem(n=40, seed=9)
    sk = Sinkhorn(A, V, eps=0.5, tol=1e-10)
    v1 = sk.velocity(Empirical(X, w))
    cold = sk.last_iterations
    X2 = X + 1e-3 * np.sin(X)  # the next time step of a simulation
    v2 = sk.velocity(Empirical(X2, w))
    warm = sk.last_iterations
    fresh = Sinkhorn(A, V, eps=0.5, tol=1e-10).velocity(Empirical(X2, w))
    assert warm < cold
    np.testing.assert_allclose(v2, fresh, atol=1e-8)
    assert not np.allclose(v1, v2)


@pytest.mark.parametrize("symmetric", [True, False])
def test_sinkhorn_with_small_eps_matches_pot(symmetric):
    # |scores| / eps up to ~230: the potentials must be handled in the log domain
    X, w, _, A, V = _problem(n=30, seed=10)
    A = -np.eye(3) if symmetric else A
    eps = 0.03
    P_pot = _pot_plan(X, w, A, eps)
    sk = Sinkhorn(A, V, eps=eps, tol=1e-10)
    got = sk.velocity(Empirical(X, w))
    want = (P_pot @ X / P_pot.sum(axis=1, keepdims=True)) @ V.T
    np.testing.assert_allclose(got, want, atol=1e-8)


def test_sinkhorn_plan_for_positive_scores_at_small_eps_has_both_marginals():
    # A = I at eps = 0.03: POT's log solver needs > 20,000 iterations; the symmetric update few
    X, w, _, _, V = _problem(n=30, seed=10)
    sk = Sinkhorn(np.eye(3), V, eps=0.03, tol=1e-10)
    P = sk.plan(Empirical(X, w))
    assert np.abs(P.sum(axis=1) - w).sum() <= 1e-10
    assert np.abs(P.sum(axis=0) - w).sum() <= 1e-10
    assert sk.last_iterations < 100


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------


def test_bad_parameters_raise_naming_the_argument():
    A, V = np.eye(3), np.eye(3)
    with pytest.raises(ValueError, match="A must be a square"):
        Softmax(np.ones((2, 3)), V)
    with pytest.raises(ValueError, match="V must have shape"):
        Softmax(A, np.eye(2))
    with pytest.raises(ValueError, match="Q and K"):
        L2(np.ones((2, 3)), np.ones((1, 3)), V)
    with pytest.raises(ValueError, match="V must have shape"):
        L2(np.ones((2, 3)), np.ones((2, 3)), np.eye(2))
    with pytest.raises(ValueError, match="Q and K"):
        Softmax.from_qk(np.ones((2, 3)), np.ones((2, 4)), V)
    with pytest.raises(ValueError, match="tau"):
        L2(np.ones((2, 3)), np.ones((2, 3)), V, tau=0.0)
    with pytest.raises(ValueError, match="eps"):
        Sinkhorn(A, V, eps=-1.0)
    with pytest.raises(ValueError, match="causal"):
        Sinkhorn(A, V, causal=True)
    with pytest.raises(ValueError, match="heads"):
        MultiHead([])
    with pytest.raises(ValueError, match="causal"):
        MultiHead([Softmax(A, V), Softmax(A, V, causal=True)])
    with pytest.raises(TypeError, match=r"heads\[0\]"):
        MultiHead([np.eye(2)])
    with pytest.raises(ValueError, match="same dimension"):
        MultiHead([Softmax(A, V), L2(np.eye(2), np.eye(2), np.eye(2))])
    with pytest.raises(ValueError, match="A contains NaN"):
        Softmax(np.full((3, 3), np.nan), V)
    with pytest.raises(ValueError, match="A must be a square"):
        Softmax(lambda t: np.ones((3, 4)), V)
    # a time-dependent parameter that changes shape is caught at the time it does
    att = Softmax(lambda t: np.eye(3) if t < 1 else np.eye(2), V)
    with pytest.raises(ValueError, match=r"A\(t=2\) must have shape \(3, 3\)"):
        att.velocity(Empirical(np.zeros((2, 3))), t=2.0)


def test_bad_measures_raise_naming_the_argument():
    mu = Empirical(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="mu has dimension 2"):
        Softmax(np.eye(3), np.eye(3)).velocity(mu)
    with pytest.raises(ValueError, match="mu has dimension 2"):
        Sinkhorn(np.eye(3), np.eye(3)).velocity(mu)
    with pytest.raises(ValueError, match="positions"):
        Softmax(np.eye(2), np.eye(2), causal=True).velocity(mu)
    with pytest.raises(TypeError, match="mu must be an Empirical"):
        Softmax(np.eye(2), np.eye(2)).velocity([[0.0, 1.0]])
    sk = Sinkhorn(np.eye(2), np.eye(2))
    sk.max_tokens = 3
    with pytest.raises(ValueError, match="at most 3 tokens"):
        sk.velocity(mu)


def test_overflowing_unnormalised_field_reports_time():
    X = np.array([[30.0, 0.0], [-1.0, 0.0]])
    with pytest.raises(FloatingPointError, match="t=2.5"):
        Unnormalised(np.eye(2), np.eye(2)).velocity(Empirical(X), t=2.5)


@pytest.mark.parametrize(
    "att, name",
    [
        (Sigmoid(np.eye(2), np.eye(2)), "Sigmoid"),
        (Unnormalised(np.eye(2), np.eye(2)), "unnormalised"),
        (Softmax(np.eye(2), np.eye(2), causal=True), "causal"),
    ],
)
def test_gaussian_rhs_unavailable_variants_say_so(att, name):
    with pytest.raises(NotImplementedError, match=f"(?i){name}"):
        att.gaussian_rhs(np.zeros(2), np.eye(2))


# ---------------------------------------------------------------------------------------------
# Gaussian closures (delegated to tpde_lib.gaussian; checked here against closed forms derived from
# the affine field Gamma(x) = b + M x: alpha' = b + M alpha, Sigma' = M Sigma + Sigma M^T,
# appendix eq-closure)
# ---------------------------------------------------------------------------------------------


def _gaussian_problem(d=3, seed=11):
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((d, d))
    cov = B @ B.T / d + 0.1 * np.eye(d)
    return rng.standard_normal(d), cov, rng.standard_normal((d, d)) / d, rng.standard_normal((d, d))


def _affine_rhs(b, M, mean, cov):
    return b + M @ mean, M @ cov + cov @ M.T


def test_softmax_and_multihead_gaussian_rhs_match_exponential_tilt_closed_form():
    # tilt of N(alpha, Sigma) by e^{<Ax, y>} has mean alpha + Sigma A x
    mean, cov, A, V = _gaussian_problem()
    t = 0.3
    A_t = lambda t: A * (1 + t)
    dm, dc = Softmax(A_t, V).gaussian_rhs(mean, cov, t=t)
    want = _affine_rhs(V @ mean, V @ cov @ A_t(t), mean, cov)
    np.testing.assert_allclose(dm, want[0], rtol=1e-12)
    np.testing.assert_allclose(dc, want[1], rtol=1e-12)
    dm2, dc2 = MultiHead([Softmax(A_t, V), Softmax(-A, V.T)]).gaussian_rhs(mean, cov, t=t)
    other = _affine_rhs(V.T @ mean, -V.T @ cov @ A, mean, cov)
    np.testing.assert_allclose(dm2, want[0] + other[0], rtol=1e-12)
    np.testing.assert_allclose(dc2, want[1] + other[1], rtol=1e-12)


def test_linear_gaussian_rhs_matches_second_moment_closed_form():
    # Gamma(x) = V (Sigma + alpha alpha^T) A x
    mean, cov, A, V = _gaussian_problem(seed=12)
    dm, dc = Linear(A, V).gaussian_rhs(mean, cov)
    want = _affine_rhs(np.zeros(3), V @ (cov + np.outer(mean, mean)) @ A, mean, cov)
    np.testing.assert_allclose(dm, want[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dc, want[1], rtol=1e-12)


def test_l2_gaussian_rhs_matches_gaussian_product_closed_form():
    # e^{-|Qx-Ky|^2/tau} N(alpha, Sigma)(y) in y: precision Sigma^-1 + 2 K^T K / tau, so the
    # conditional mean is (I + 2 Sigma K^T K / tau)^-1 (alpha + 2 Sigma K^T Q x / tau) (derived here)
    mean, cov, _, V = _gaussian_problem(seed=13)
    rng = np.random.default_rng(13)
    Q, K, tau = rng.standard_normal((2, 3)), rng.standard_normal((2, 3)), 0.7
    R = np.linalg.inv(np.eye(3) + 2 * cov @ K.T @ K / tau)
    want = _affine_rhs(V @ R @ mean, V @ R @ (2 * cov @ K.T @ Q / tau), mean, cov)
    dm, dc = L2(Q, K, V, tau=tau).gaussian_rhs(mean, cov)
    np.testing.assert_allclose(dm, want[0], rtol=1e-10)
    np.testing.assert_allclose(dc, want[1], rtol=1e-10)


def test_sinkhorn_gaussian_mean_moves_by_v_alone():
    # alpha_t = e^{tV} alpha_0 exactly: alpha' = V alpha
    mean, cov, A, V = _gaussian_problem(seed=14)
    dm, dc = Sinkhorn(A + A.T, V, eps=0.5).gaussian_rhs(mean, cov)
    np.testing.assert_allclose(dm, V @ mean, rtol=1e-10)
    assert dc.shape == (3, 3) and np.all(np.isfinite(dc))


def test_gaussian_rhs_checks_shapes():
    with pytest.raises(ValueError, match="cov must have shape"):
        Softmax(np.eye(2), np.eye(2)).gaussian_rhs(np.zeros(2), np.eye(3))
    with pytest.raises(ValueError, match="mean must have shape"):
        Linear(np.eye(2), np.eye(2)).gaussian_rhs(np.zeros(3), np.eye(2))


def test_gaussian_rhs_rejects_a_non_symmetric_covariance():
    att = Softmax(np.eye(2), np.eye(2))
    with pytest.raises(ValueError, match="cov must be symmetric"):
        att.gaussian_rhs(np.zeros(2), [[1.0, 5.0], [-3.0, 1.0]])


# ---------------------------------------------------------------------------------------------
# time-dependent parameters are checked at every t where they come back; docstring examples;
# what importing the attention package loads
# ---------------------------------------------------------------------------------------------


def _at_half(good, bad):
    """A callable parameter valid at t = 0 (where the constructor probes it), bad at t = 0.5."""
    return lambda t: good if t == 0 else bad


_I2 = np.eye(2)


@pytest.mark.parametrize(
    "make,name,bad,error,match",
    [
        (lambda p: Softmax(p, _I2), "A", np.eye(3), ValueError, r"shape \(2, 2\), got \(3, 3\)"),
        (lambda p: Softmax(_I2, p), "V", np.full((2, 2), np.nan), ValueError, "NaN or infinite"),
        (lambda p: Sigmoid(p, _I2), "A", 1.0, ValueError, r"got shape \(\)"),  # a scalar
        (lambda p: Unnormalised(_I2, p), "V", _I2 + 1j, TypeError, "complex"),
        (lambda p: Linear(p, _I2), "A", np.ones((1, 2)), ValueError, r"got \(1, 2\)"),  # one row
        (lambda p: L2(p, _I2, _I2), "Q", _I2 > 0, TypeError, "bool"),
        (lambda p: Softmax.from_qk(_I2, p, _I2), "K", "I", TypeError, "real numbers"),
        (lambda p: Sinkhorn(_I2, p), "V", np.eye(3), ValueError, "shape"),
    ],
)
def test_a_bad_time_dependent_parameter_is_named_with_its_time(make, name, bad, error, match):
    att = make(_at_half(_I2, bad))
    X = np.random.default_rng(0).standard_normal((20, 2))
    with pytest.raises(error, match=match) as info:
        att.velocity(Empirical(X), t=0.5)
    assert f"{name}(t=0.5)" in str(info.value)


@pytest.mark.parametrize(
    "module",
    ["attention._base", "attention._bilinear", "attention._kernels", "attention._sinkhorn", "attention"],
)
def test_docstring_examples(module):
    import doctest
    import importlib

    mod = importlib.import_module(f"tpde_lib.{module}")
    res = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.attempted > 0 and res.failed == 0


def test_importing_attention_loads_no_plotting_statistics_or_transport_module(tmp_path):
    # the attention package on its own (tpde_lib's __init__, which other modules extend, stubbed
    # out): no scipy.stats, matplotlib.pyplot or POT at import time
    import pathlib
    import subprocess
    import sys

    import tpde_lib

    root = pathlib.Path(tpde_lib.__file__).parent
    code = (
        "import sys, types\n"
        f"pkg = types.ModuleType('tpde_lib'); pkg.__path__ = [{str(root)!r}]\n"
        "sys.modules['tpde_lib'] = pkg\n"
        "import tpde_lib.attention as a\n"
        "assert a.Softmax and a.kernel_sums\n"
        "print(sorted(m for m in ('scipy.stats', 'matplotlib.pyplot', 'ot') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"max_iter": 10.0}, TypeError, "max_iter"),
        ({"max_iter": -1}, ValueError, "max_iter"),
        ({"tol": 0.0}, ValueError, "tol"),
        ({"tol": "1e-9"}, TypeError, "tol"),
        ({"omega0": 2.5}, ValueError, "omega0"),
        ({"omega0": 0.5}, ValueError, "omega0"),
        ({"g0": np.zeros(4)}, ValueError, "g0"),
        ({"g0": np.full(3, np.nan)}, ValueError, "g0"),
        ({"weights": np.array([0.5, 0.5, 0.0])}, ValueError, "weights"),
        ({"A": np.eye(3)}, ValueError, "A"),
        ({"points": np.zeros(3)}, ValueError, "points"),
    ],
)
def test_sinkhorn_potentials_checks_its_arguments(kwargs, error, match):
    from tpde_lib import sinkhorn_potentials

    args = {
        "points": np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]),
        "weights": np.full(3, 1 / 3),
        "A": np.eye(2),
    }
    args.update(kwargs)
    with pytest.raises(error, match=match):
        sinkhorn_potentials(**args)


@pytest.mark.parametrize("symmetric", [True, False])
def test_sinkhorn_reports_the_violation_of_the_plan_it_returns_when_out_of_iterations(symmetric):
    # a spread cloud and a few passes: the run stops on max_iter, far from convergence. The
    # reported error must be the L1 column violation of the returned plan (f, g), computed here
    # independently; it is at most 2 (two probability vectors). It was exp(g - T g) - 1 summed,
    # up to 1e168 on chapter 1's panel.
    from scipy.special import logsumexp

    from tpde_lib import sinkhorn_potentials

    rng = np.random.default_rng(3)
    x = 6.0 * rng.standard_normal((60, 2))
    w = rng.uniform(0.5, 1.5, 60)
    w /= w.sum()
    A = np.array([[1.0, 0.3], [0.3, 0.8]]) if symmetric else np.array([[1.0, 0.9], [-0.4, 0.8]])
    f, g, log = sinkhorn_potentials(x, w, A, eps=0.5, tol=1e-12, max_iter=3)
    assert not log["converged"]
    L = x @ A.T @ x.T / 0.5  # L_ij = <A x_i, x_j> / eps
    logP = L + f[:, None] + g[None, :] + np.log(w)[:, None] + np.log(w)[None, :]
    rows = np.exp(logsumexp(logP, axis=1))
    cols = np.exp(logsumexp(logP, axis=0))
    assert np.allclose(rows, w, rtol=1e-10, atol=0)
    violation = np.abs(cols - w).sum()
    assert 0 < log["err"] <= 2 and log["err"] == pytest.approx(violation, rel=1e-8)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("scale", [40.0, 1e3])
def test_sinkhorn_reports_convergence_only_when_the_returned_plan_meets_tol(symmetric, scale):
    # a warm start far from the solution (the issue: one reported convergence while missing the
    # marginals by 6e-5). Whenever the log says converged, both marginals of the returned plan,
    # recomputed here in the log domain, are within tol (L1); and the reported err is theirs.
    from scipy.special import logsumexp

    from tpde_lib import sinkhorn_potentials

    rng = np.random.default_rng(7)
    x = 1.5 * rng.standard_normal((40, 2))
    w = np.full(40, 1 / 40)
    A = np.array([[0.8, 0.6], [-0.2, 0.5]])
    A = 0.5 * (A + A.T) if symmetric else A
    tol = 1e-9
    for seed in range(4):
        g0 = scale * np.random.default_rng(seed).standard_normal(40)
        f, g, log = sinkhorn_potentials(x, w, A, eps=0.5, tol=tol, g0=g0)
        logP = x @ A.T @ x.T / 0.5 + f[:, None] + g[None, :] + np.log(w)[:, None] + np.log(w)[None, :]
        rows = np.abs(np.exp(logsumexp(logP, axis=1)) - w).sum()
        cols = np.abs(np.exp(logsumexp(logP, axis=0)) - w).sum()
        assert log["converged"], log
        assert max(rows, cols) <= tol * (1 + 1e-6) + 1e-15, (rows, cols, log)
        # (the recomputation's round-off: logits of size |f| + |g| in double precision)
        roundoff = float(np.abs(f).max() + np.abs(g).max()) * np.finfo(float).eps
        assert log["err"] == pytest.approx(max(rows, cols), rel=1e-3, abs=max(1e-14, roundoff))


def test_the_predicted_warm_start_is_exact_to_first_order_and_falls_back_to_the_latest():
    """Sinkhorn's warm start: the affine combination of the last potentials whose supports best
    match the new one. Potentials affine in the positions are predicted exactly, up to the gauge
    (a constant); a degenerate or wild fit gives the latest potential."""
    from tpde_lib.attention._sinkhorn import _HISTORY_COEF, _predicted

    rng = np.random.default_rng(12)
    m, d = 30, 2
    J, g0 = rng.standard_normal((m, m * d)), rng.standard_normal(m)

    def potential(Y, gauge):
        return g0 + J @ Y.ravel() + gauge

    Y1 = rng.standard_normal((m, d))
    others = [Y1 + 0.1 * rng.standard_normal((m, d)) for _ in range(3)]
    history = [(Y, potential(Y, gauge)) for Y, gauge in zip(others, (1.0, -2.0, 0.5))]
    history.append((Y1, potential(Y1, 3.0)))
    Y = Y1 + 0.3 * (others[0] - Y1) - 0.7 * (others[2] - Y1)  # in the span of the moves
    gap = _predicted(history, Y) - potential(Y, 0.0)
    assert np.ptp(gap) < 1e-11  # a constant: the gauge
    assert np.ptp(history[-1][1] - potential(Y, 0.0)) > 1e-2  # the latest alone is not
    # one pair: the latest; identical supports (no move to fit): the latest
    assert np.array_equal(_predicted(history[-1:], Y), history[-1][1])
    same = [(Y1, potential(Y1, 1.0)), (Y1, potential(Y1, 2.0))]
    assert np.array_equal(_predicted(same, Y), same[-1][1])
    # a fit needing a weight above the cap (extrapolating far): the latest
    far = Y1 + 2.0 * _HISTORY_COEF * (others[0] - Y1)
    assert np.array_equal(_predicted(history, far), history[-1][1])


def _clustered(seed, n=300, k=5, scale=2.0, spread=0.05):
    rng = np.random.default_rng(seed)
    centres = scale * rng.standard_normal((k, 2))
    return centres[rng.integers(0, k, n)] + spread * rng.standard_normal((n, 2))


def test_a_warm_start_that_stalls_falls_back_to_the_fresh_solve():
    """Issue 41: one instance on a clustered cloud of 300 tokens and then on another stalled at
    a violation of 1e-5 after 10 000 passes (the first cloud's Newton factors steered the second
    solve wrong) where a fresh instance converges in about 300. Now the warm solve is followed
    by a cold one, whose result is the fresh instance's, bitwise."""
    A, I = np.array([[1.0, 0.2], [0.0, 1.0]]), np.eye(2)
    sk = Sinkhorn(A, I, eps=0.4)
    sk.velocity(_clustered(0))
    second = _clustered(1)
    v = sk.velocity(second)
    assert sk.last_log["converged"] and sk.last_log["warm_fallback"]
    fresh = Sinkhorn(A, I, eps=0.4)
    assert np.array_equal(v, fresh.velocity(second))
    assert not fresh.last_log["warm_fallback"]
    # the history that predicted badly is forgotten: the next start is the latest potential
    assert len(sk.warm_start["history"]) == 1


@pytest.mark.parametrize(
    "g0",
    [np.full(30, 1e300), np.full(30, 1e12), np.full(30, -1e300), np.where(np.arange(30) % 2, 1e300, -1e300)],
    ids=["1e300", "offset-1e12", "-1e300", "alternating-1e300"],
)
@pytest.mark.parametrize("symmetric", [True, False])
def test_absurd_warm_starts_give_potentials_whose_plan_has_the_marginals(g0, symmetric):
    """The plan is computed here from the returned potentials, independently of the solver: a
    constant offset of 1e12 in g0 had become an offset of f and g whose round-off (1e-16 x 1e12)
    left the plan 6e-5 off its marginals while the solver reported convergence; 1e300 gave
    potentials of +-1e300 whose plan missed by 2e5."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((30, 2))
    w = rng.uniform(0.5, 1.5, 30)  # not uniform: a plan that forgot the scores misses them
    w /= w.sum()
    A = np.eye(2) if symmetric else np.array([[1.0, 0.2], [0.0, 1.0]])
    f, g, log = sinkhorn_potentials(x, w, A, g0=g0)
    assert log["converged"]
    assert np.abs(f).max() < 100 and np.abs(g).max() < 100  # a sane gauge
    P = np.exp(x @ A.T @ x.T + f[:, None] + g[None, :]) * np.outer(w, w)
    assert np.abs(P.sum(axis=0) - w).sum() < 2e-9
    assert np.abs(P.sum(axis=1) - w).sum() < 2e-9


def test_a_warm_start_beyond_float64_once_centred_is_refused():
    x = np.random.default_rng(0).standard_normal((4, 2))
    g0 = np.array([1.7e308, 1.7e308, 1.7e308, -1.7e308])  # centred: -2.55e308
    with pytest.raises(ValueError, match="g0"):
        sinkhorn_potentials(x, np.full(4, 0.25), np.eye(2), g0=g0)
