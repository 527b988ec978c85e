"""Tests of the Gaussian mean/covariance right-hand sides.

Each right-hand side is checked against an independent computation: Monte Carlo estimates of the
attention field under a Gaussian (the field must be affine, b + M x, and the ODE must be
alpha' = b + M alpha, Sigma' = M Sigma + Sigma M^T), a sample-based entropic plan from POT for
Sinkhorn, the official code's formulas, and algebraic identities.
"""

import numpy as np
import ot
import pytest
import scipy.linalg

from tpde_lib.gaussian import (
    l2_rhs,
    linear_rhs,
    multihead_rhs,
    sinkhorn_gain,
    sinkhorn_rhs,
    softmax_rhs,
)

D = 3


def _spd(rng, d, scale=1.0):
    G = rng.standard_normal((d, d))
    return scale * (G @ G.T / d + 0.2 * np.eye(d))


def _mc_field(log_kernel, Y, V, xs):
    """Self-normalised MC estimate of V E_pi[y | x] with weights e^{log_kernel(x, Y)}.

    Returns the field (m, d) at the m query points and its delta-method standard error (m, d):
    se = sqrt(sum_i w_i^2 (Vy_i - Gamma)^2) / sum_i w_i.
    """
    out, se = [], []
    VY = Y @ V.T
    for x in xs:
        lw = log_kernel(x, Y)
        w = np.exp(lw - lw.max())
        g = w @ VY / w.sum()
        out.append(g)
        se.append(np.sqrt((w[:, None] ** 2 * (VY - g) ** 2).sum(0)) / w.sum())
    return np.array(out), np.array(se)


def _affine_from_field(fields, se, s):
    """Recover b, M of an affine field from its values at 0 and s e_i, with error bounds."""
    b = fields[0]
    M = (fields[1:] - fields[0]).T / s
    M_err = (se[1:] + se[0]).T / s
    return b, M, se[0], M_err


def _ode_from_affine(b, M, mean, cov):
    return b + M @ mean, M @ cov + cov @ M.T


def _check_against_mc(rhs_out, b, M, b_err, M_err, mean, cov, nsig=5.0):
    # propagate the MC standard errors of b, M to the ODE right-hand side (triangle inequality):
    # |delta alpha'| <= |delta b| + |delta M| |alpha|, |delta Sigma'| <= 2 |delta M| |Sigma|;
    # nsig = 5 standard errors makes a false failure very unlikely while still detecting any
    # formula error larger than a few percent.
    dm_ref, dc_ref = _ode_from_affine(b, M, mean, cov)
    dm, dc = rhs_out
    dm_tol = nsig * (b_err + M_err @ np.abs(mean))
    dc_tol = nsig * 2 * (M_err @ np.abs(cov)).max()
    assert np.all(np.abs(dm - dm_ref) <= dm_tol), (dm, dm_ref, dm_tol)
    assert np.abs(dc - dc_ref).max() <= dc_tol, (np.abs(dc - dc_ref).max(), dc_tol)


@pytest.fixture(scope="module")
def gaussian_sample():
    rng = np.random.default_rng(0)
    mean = np.array([0.3, -0.5, 0.2])
    cov = _spd(rng, D, 0.5)
    Y = mean + rng.standard_normal((200_000, D)) @ np.linalg.cholesky(cov).T
    return rng, mean, cov, Y


def test_exponential_tilt_mean_is_alpha_plus_sigma_A_x(gaussian_sample):
    # E[e^{<Ax,y>} y] / E[e^{<Ax,y>}] = alpha + Sigma A x under N(alpha, Sigma);
    # tolerance: 5 MC standard errors (delta method for the self-normalised estimator).
    rng, mean, cov, Y = gaussian_sample
    A = 0.4 * rng.standard_normal((D, D))
    xs = rng.standard_normal((4, D))
    est, se = _mc_field(lambda x, Y: Y @ (A @ x), Y, np.eye(D), xs)
    exact = mean + xs @ (cov @ A).T
    assert np.all(np.abs(est - exact) <= 5 * se), np.abs(est - exact) / se


def test_softmax_rhs_is_the_ode_of_the_monte_carlo_affine_field(gaussian_sample):
    rng, mean, cov, Y = gaussian_sample
    A = 0.4 * rng.standard_normal((D, D))
    V = rng.standard_normal((D, D))
    s = 0.5
    xs = np.vstack([np.zeros(D), s * np.eye(D)])
    fields, se = _mc_field(lambda x, Y: Y @ (A @ x), Y, V, xs)
    b, M, b_err, M_err = _affine_from_field(fields, se, s)
    _check_against_mc(softmax_rhs(A, V, mean, cov), b, M, b_err, M_err, mean, cov)


@pytest.mark.parametrize("tau", [1.0, 2.5])
def test_l2_rhs_is_the_ode_of_the_monte_carlo_affine_field(gaussian_sample, tau):
    rng, mean, cov, Y = gaussian_sample
    k = 2
    Q = 0.5 * rng.standard_normal((k, D))
    K = 0.5 * rng.standard_normal((k, D))
    V = rng.standard_normal((D, D))
    s = 0.5
    xs = np.vstack([np.zeros(D), s * np.eye(D)])
    log_kernel = lambda x, Y: -((Q @ x - Y @ K.T) ** 2).sum(1) / tau
    fields, se = _mc_field(log_kernel, Y, V, xs)
    b, M, b_err, M_err = _affine_from_field(fields, se, s)
    _check_against_mc(l2_rhs(Q, K, V, tau, mean, cov), b, M, b_err, M_err, mean, cov)


def test_linear_rhs_is_the_ode_of_the_monte_carlo_field(gaussian_sample):
    rng, mean, cov, Y = gaussian_sample
    A = rng.standard_normal((D, D))
    V = rng.standard_normal((D, D))
    s = 1.0
    VY = Y @ V.T
    fields, se = [], []
    for x in np.vstack([np.zeros(D), s * np.eye(D)]):
        vals = (Y @ (A @ x))[:, None] * VY  # plain MC mean of <Ax,y> V y
        fields.append(vals.mean(0))
        se.append(vals.std(0) / np.sqrt(len(Y)) + 1e-300)
    b, M, b_err, M_err = _affine_from_field(np.array(fields), np.array(se), s)
    _check_against_mc(linear_rhs(A, V, mean, cov), b, M, b_err, M_err, mean, cov)


def test_l2_rhs_matches_the_official_code_formula():
    # rhs_L2 of the official code: 2 V S (I + 2 K^T K S)^{-1} A S + transpose, A = K^T Q / sqrt d,
    # i.e. our tau = 1 with Q / sqrt(d); agreement to round-off.
    rng = np.random.default_rng(3)
    Q, K, V = rng.standard_normal((3, D, D))
    S = _spd(rng, D)
    A = K.T @ Q / np.sqrt(D)
    ref = 2 * V @ S @ np.linalg.inv(np.eye(D) + 2 * K.T @ K @ S) @ A @ S
    ref = ref + ref.T
    got = l2_rhs(Q / np.sqrt(D), K, V, 1.0, np.zeros(D), S)[1]
    assert np.allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_sinkhorn_rhs_matches_the_official_code_formula_for_invertible_A():
    # rhs_sinkhorn of the official code (A^{-T}, Sigma^{-1} through pinv, sqrtm); our form has no
    # inverse, so agreement to round-off checks the algebra G Sigma = 2 Sigma A S (I + D)^{-1} S.
    rng = np.random.default_rng(4)
    A, V = rng.standard_normal((2, D, D))
    S = _spd(rng, D)
    Ss = scipy.linalg.sqrtm(S).real
    prod = Ss @ A.T
    Dm = scipy.linalg.sqrtm(4 * prod @ S @ prod.T + np.eye(D)).real
    C = 0.5 * (Ss @ Dm @ np.linalg.pinv(Ss) - np.eye(D))
    ref = V @ np.linalg.pinv(A.T) @ np.linalg.pinv(S) @ C @ S
    ref = ref + ref.T
    got = sinkhorn_rhs(A, V, 1.0, np.zeros(D), S)[1]
    assert np.allclose(got, ref, rtol=1e-8, atol=1e-10)


def test_sinkhorn_slope_solves_the_fixed_point_and_joint_precision_identities():
    # G = (Sigma - G Sigma G^T) A, and the joint covariance [[S, S G^T], [G S, S]] has inverse
    # upper-right (x, y) block -A^T: independent of how G was computed.
    rng = np.random.default_rng(5)
    A = rng.standard_normal((D, D))
    S = _spd(rng, D)
    GS = sinkhorn_gain(A, S)
    G = np.linalg.solve(S.T, GS.T).T
    assert np.allclose(G, (S - G @ S @ G.T) @ A, atol=1e-10)
    joint = np.block([[S, S @ G.T], [G @ S, S]])
    assert np.allclose(np.linalg.inv(joint)[:D, D:], -A.T, atol=1e-8)  # x-y block


def test_sinkhorn_covariance_field_matches_a_sampled_entropic_plan():
    # Discrete Sinkhorn (POT, log domain) between 1000 samples of N(alpha, Sigma) and themselves,
    # cost -<A x_i, x_j>, regularisation eps; the barycentric projection n (P Y)_i regressed on x_i
    # has slope G. Its error is O(n^{-1/2}) (regression on a sampled plan: about 0.45/sqrt(n)
    # observed over seeds); tolerance 3/sqrt(n) ~ 0.095. The eps=1 slope differs by > 0.2, so the
    # test does detect a wrong temperature.
    rng = np.random.default_rng(6)
    d, n, eps = 2, 1000, 0.5
    A = np.array([[0.4, 0.3], [-0.2, 0.5]])
    S = np.array([[1.0, 0.3], [0.3, 0.6]])
    alpha = np.array([0.5, -1.0])
    X = alpha + rng.standard_normal((n, d)) @ np.linalg.cholesky(S).T
    a = np.full(n, 1.0 / n)
    P = ot.sinkhorn(a, a, -(X @ A.T @ X.T), eps, method="sinkhorn_log", stopThr=1e-9, numItermax=5000)
    bary = n * P @ X
    coef = np.linalg.lstsq(np.c_[np.ones(n), X], bary, rcond=None)[0]
    G_hat = coef[1:].T
    G = sinkhorn_gain(A / eps, S) @ np.linalg.inv(S)
    tol = 3 / np.sqrt(n)
    assert np.abs(G_hat - G).max() < tol
    G_eps1 = sinkhorn_gain(A, S) @ np.linalg.inv(S)
    assert np.abs(G_eps1 - G).max() > 2 * tol
    # the rhs uses exactly this slope: Sigma' = V G Sigma + (.)^T
    V = np.array([[1.0, 0.5], [0.0, -1.0]])
    dc = sinkhorn_rhs(A, V, eps, alpha, S)[1]
    assert np.allclose(dc, V @ G @ S + S @ G.T @ V.T, atol=1e-12)


def test_sinkhorn_reduces_to_softmax_for_small_A():
    # G Sigma = Sigma A Sigma (1 + O(|N|^2)), N = S^{1/2} A S^{1/2}: relative gap ~ 1e-8 at |A|~1e-4
    rng = np.random.default_rng(7)
    A, V = rng.standard_normal((2, D, D))
    A *= 1e-4
    S = _spd(rng, D)
    sk = sinkhorn_rhs(A, V, 1.0, np.zeros(D), S)[1]
    sm = softmax_rhs(A, V, np.zeros(D), S)[1]
    assert np.abs(sk - sm).max() <= 1e-6 * np.abs(sm).max()


def test_sinkhorn_accepts_singular_A_and_singular_Sigma():
    rng = np.random.default_rng(8)
    q = rng.standard_normal(D)
    A = np.outer(q, q)  # rank one
    u = rng.standard_normal((D, 1))
    S = u @ u.T  # rank one
    V = rng.standard_normal((D, D))
    dm, dc = sinkhorn_rhs(A, V, 1.0, np.ones(D), S)
    assert np.all(np.isfinite(dc)) and np.allclose(dc, dc.T)
    # 1-D reduction along u: d/dt of a rank-one Gaussian stays in the span of u and V u
    assert np.all(np.isfinite(sinkhorn_rhs(np.zeros((D, D)), V, 1.0, np.ones(D), S)[1]))
    assert np.allclose(sinkhorn_rhs(np.zeros((D, D)), V, 1.0, np.ones(D), S)[1], 0)


def test_sinkhorn_scalar_case_matches_the_1d_closed_form():
    # sigma' = (v/a)(sqrt(1 + 4 a^2 sigma^2) - 1) in 1-D (eps = 1)
    for a, v, s in [(0.7, 1.3, 0.4), (-1.2, 0.5, 2.0), (2.0, -1.0, 0.1)]:
        got = sinkhorn_rhs(np.array([[a]]), np.array([[v]]), 1.0, np.zeros(1), np.array([[s]]))[1]
        assert np.isclose(got[0, 0], v / a * (np.sqrt(1 + 4 * a * a * s * s) - 1), rtol=1e-12)


def test_multihead_is_the_sum_of_independently_computed_heads():
    # direct formula sum_h (V_h S A_h S + S A_h^T S V_h^T), written out per head
    rng = np.random.default_rng(10)
    As = rng.standard_normal((3, D, D))
    Vs = rng.standard_normal((3, D, D))
    S, m = _spd(rng, D), rng.standard_normal(D)
    dm_ref = sum(Vh @ (m + S @ Ah @ m) for Ah, Vh in zip(As, Vs))
    dc_ref = sum(Vh @ S @ Ah @ S + S @ Ah.T @ S @ Vh.T for Ah, Vh in zip(As, Vs))
    dm, dc = multihead_rhs(list(As), list(Vs), m, S)
    assert np.allclose(dm, dm_ref) and np.allclose(dc, dc_ref)
    with pytest.raises(ValueError, match="As and Vs"):
        multihead_rhs([As[0]], [], m, S)


def test_multihead_with_one_head_follows_the_softmax_ode():
    # moved from chapter "Gaussian solutions" (a consistency check of the composite class):
    # the solver of MultiHead([Softmax(A, V)]) and of Softmax(A, V) give the same trajectory
    import tpde_lib as tp

    rng = np.random.default_rng(12)
    A, V = 0.5 * rng.standard_normal((2, 2, 2))
    g0 = tp.Gaussian([0.3, -0.2], _spd(rng, 2))
    times = np.linspace(0.0, 1.0, 5)
    sm = tp.simulate_gaussian(tp.Softmax(A, V), g0, times)
    mh = tp.simulate_gaussian(tp.MultiHead([tp.Softmax(A, V)]), g0, times)
    assert np.abs(mh.cov - sm.cov).max() < 1e-12
    assert np.abs(mh.mean - sm.mean).max() < 1e-12


def test_linear_with_zero_mean_has_softmax_covariance_ode():
    rng = np.random.default_rng(11)
    A, V = rng.standard_normal((2, D, D))
    S = _spd(rng, D)
    dm, dc = linear_rhs(A, V, np.zeros(D), S)
    assert np.allclose(dc, softmax_rhs(A, V, np.zeros(D), S)[1], rtol=1e-13, atol=1e-14)
    assert np.array_equal(dm, np.zeros(D))


def _batched_inputs(rng, batch, d=D, k=2):
    A = rng.standard_normal(batch + (d, d))
    V = rng.standard_normal(batch + (d, d))
    G = rng.standard_normal(batch + (d, d))
    S = G @ np.swapaxes(G, -1, -2) / d + 0.1 * np.eye(d)
    m = rng.standard_normal(batch + (d,))
    Q = rng.standard_normal(batch + (k, d))
    K = rng.standard_normal(batch + (k, d))
    return A, V, S, m, Q, K


CASES = {
    "softmax": lambda A, V, S, m, Q, K, t: softmax_rhs(A, V, m, S),
    "multihead": lambda A, V, S, m, Q, K, t: multihead_rhs([A, 0.5 * A], [V, -V], m, S),
    "l2": lambda A, V, S, m, Q, K, t: l2_rhs(Q, K, V, t, m, S),
    "sinkhorn": lambda A, V, S, m, Q, K, t: sinkhorn_rhs(A, V, t, m, S),
    "linear": lambda A, V, S, m, Q, K, t: linear_rhs(A, V, m, S),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_batched_rhs_equals_a_loop_of_single_calls(name):
    rng = np.random.default_rng(12)
    batch = (2, 3)
    A, V, S, m, Q, K = _batched_inputs(rng, batch)
    tau = rng.uniform(0.5, 2.0, batch)
    f = CASES[name]
    dm, dc = f(A, V, S, m, Q, K, tau)
    assert dm.shape == batch + (D,) and dc.shape == batch + (D, D)
    for idx in np.ndindex(*batch):
        dmi, dci = f(A[idx], V[idx], S[idx], m[idx], Q[idx], K[idx], float(tau[idx]))
        assert np.allclose(dm[idx], dmi, rtol=1e-11, atol=1e-12)
        assert np.allclose(dc[idx], dci, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_shared_parameters_broadcast_against_a_batch_of_states(name):
    # parameters of shape (d, d) with states of shape (B, d, d): same as repeating the parameters
    rng = np.random.default_rng(13)
    A, V, S, m, Q, K = _batched_inputs(rng, (4,))
    f = CASES[name]
    dm, dc = f(A[0], V[0], S, m, Q[0], K[0], 1.3)
    rep = lambda X: np.broadcast_to(X[0], X.shape)
    dm2, dc2 = f(rep(A), rep(V), S, m, rep(Q), rep(K), np.full(4, 1.3))
    assert np.allclose(dm, dm2, rtol=1e-12, atol=1e-13) and np.allclose(dc, dc2, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name", sorted(CASES))
def test_covariance_rhs_is_exactly_symmetric(name):
    rng = np.random.default_rng(14)
    A, V, S, m, Q, K = _batched_inputs(rng, (5,))
    dc = CASES[name](A, V, S, m, Q, K, 0.7)[1]
    assert np.array_equal(dc, np.swapaxes(dc, -1, -2))
