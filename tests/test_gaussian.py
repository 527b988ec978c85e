"""Tests of the Gaussian solvers, blow-up detection and closed forms.

Independent references: the closed forms of the appendix "Derivations" (written here directly
from the formulas, with inverses, not through the library's stable forms), the matrix
exponential for Sinkhorn's mean, an implicit 1-D Sinkhorn solution, a particle simulation with
the attention's own velocity field, and a plain per-member transcription of the authors' Euler loop.
"""

import numpy as np
import pytest
import scipy.linalg

from tpde_lib.attention import Linear, Sigmoid, Sinkhorn, Softmax, Unnormalised
from tpde_lib.gaussian import (
    GaussianBatch,
    GaussianTrajectory,
    covariance_rhs,
    scalar_closed_form,
    simulate_gaussian,
    simulate_gaussian_batch,
    softmax_blowup_time,
    softmax_identity_V_closed_form,
    softmax_limit_cov,
)
from tpde_lib.measures import Gaussian
from tpde_lib.official import projected_euler
from tpde_lib.particles import simulate


def _spd(rng, d, eps=0.1):
    G = rng.standard_normal((d, d))
    return G @ G.T / d + eps * np.eye(d)


def _riccati_inverse_form(cov0, A, t):
    """Sigma_t = (Sigma_0^{-1} - t (A + A^T))^{-1}, literally; Sigma_0 invertible."""
    return np.linalg.inv(np.linalg.inv(cov0) - t * (A + A.T))


def _blowup_time_direct(cov0, A):
    """t* from the generalised eigenproblem (A + A^T) u = lambda Sigma_0^{-1} u (scipy.linalg.eigh)."""
    lam = scipy.linalg.eigh(A + A.T, np.linalg.inv(cov0), eigvals_only=True)
    return 1.0 / lam.max() if lam.max() > 0 else np.inf


# ---------------------------------------------------------------------------------------------
# closed forms
# ---------------------------------------------------------------------------------------------
def test_closed_forms_agree_with_the_literal_inverse_formulas():
    rng = np.random.default_rng(0)
    for _ in range(20):
        d = rng.integers(2, 5)
        A = rng.standard_normal((d, d))
        S0 = _spd(rng, d)
        t_star = _blowup_time_direct(S0, A)
        assert np.isclose(softmax_blowup_time(S0, A), t_star, rtol=1e-10)
        # V = v I: time rescaled by v
        assert np.isclose(softmax_blowup_time(S0, A, v=2.0), t_star / 2, rtol=1e-10)
        ts = np.linspace(0, 0.9 * min(t_star, 5.0), 7)
        cf = softmax_identity_V_closed_form(S0, A, ts)
        ref = np.stack([_riccati_inverse_form(S0, A, t) for t in ts])
        assert np.allclose(cf, ref, rtol=1e-8, atol=1e-10)


def test_blowup_time_is_batched_and_infinite_without_positive_directions():
    rng = np.random.default_rng(1)
    S0 = np.stack([_spd(rng, 3) for _ in range(4)])
    Q = rng.standard_normal((2, 3))
    A = -Q.T @ Q
    assert np.all(np.isinf(softmax_blowup_time(S0, A)))
    # negative v turns a negative definite A + A^T into a blow-up
    direct = [_blowup_time_direct(S, -A) for S in S0]
    assert np.allclose(softmax_blowup_time(S0, A, v=-1.0), direct, rtol=1e-10)


def test_limit_covariance_equals_woodbury_and_has_rank_d_minus_rank_U():
    # Sigma_inf = S0 - S0 U (U^T S0 U)^{-1} U^T S0 with -(A + A^T) = U U^T
    rng = np.random.default_rng(2)
    for d in (3, 4, 5):
        Q = rng.standard_normal((d // 2, d))
        A = -Q.T @ Q / np.sqrt(d)
        S0 = _spd(rng, d)
        U = Q.T * np.sqrt(2 / np.sqrt(d))  # U U^T = 2 Q^T Q / sqrt(d) = -(A + A^T)
        ref = S0 - S0 @ U @ np.linalg.solve(U.T @ S0 @ U, U.T @ S0)
        lim = softmax_limit_cov(S0, A)
        assert np.allclose(lim, ref, atol=1e-10)
        assert np.linalg.matrix_rank(lim, tol=1e-8) == d - d // 2


def test_scalar_closed_form_solves_the_scalar_ode():
    # sigma' = 2 v a sigma^2, checked by central finite differences
    s0, a, v = 0.7, 0.4, -1.3
    ts = np.linspace(0.1, 3, 9)
    eps = 1e-5
    deriv = (scalar_closed_form(s0, a, v, ts + eps) - scalar_closed_form(s0, a, v, ts - eps)) / (2 * eps)
    assert np.allclose(deriv, 2 * v * a * scalar_closed_form(s0, a, v, ts) ** 2, rtol=1e-7)
    with pytest.raises(ValueError, match="blow-up time"):
        scalar_closed_form(1.0, 1.0, 1.0, [0.0, 0.5])


# ---------------------------------------------------------------------------------------------
# single solver
# ---------------------------------------------------------------------------------------------
def test_solver_matches_the_identity_V_closed_form_before_blowup_and_after_convergence():
    rng = np.random.default_rng(3)
    d = 3
    for A in (rng.standard_normal((d, d)), -np.eye(d) + 0.3 * rng.standard_normal((d, d))):
        S0 = _spd(rng, d)
        t_star = _blowup_time_direct(S0, A)
        ts = np.linspace(0, min(0.95 * t_star, 20.0), 15)
        tr = simulate_gaussian(Softmax(A, np.eye(d)), Gaussian(np.zeros(d), S0), ts)
        ref = np.stack([_riccati_inverse_form(S0, A, t) for t in ts])
        # rtol 1e-9 per step; the flow amplifies errors by at most the growth of Sigma (< 20x)
        assert np.allclose(tr.cov, ref, rtol=1e-6, atol=1e-9)
        assert tr.blowup_time is None and np.array_equal(tr.times, ts)


def test_solver_matches_the_scalar_closed_form_with_a_scalar_value():
    s0, a, v = 0.5, 0.8, 0.6
    ts = np.linspace(0, 0.9 / (2 * v * a * s0), 11)
    tr = simulate_gaussian(Softmax([[a]], [[v]]), Gaussian([0.0], [[s0]]), ts)
    assert np.allclose(tr.cov[:, 0, 0], scalar_closed_form(s0, a, v, ts), rtol=1e-7)


def test_blowup_time_is_accurate_to_1e_minus_3_on_50_random_cases():
    # softmax, V = I: t* = 1 / lambda_max(S0^{1/2} (A + A^T) S0^{1/2}); the
    # detection extrapolates t* ~ t + q/q' from q = 1e6 q0 (module docstring): error ~1e-6.
    rng = np.random.default_rng(4)
    errs = []
    for _ in range(50):
        d = int(rng.integers(1, 5))
        A = rng.standard_normal((d, d))
        S0 = _spd(rng, d)
        t_star = _blowup_time_direct(S0, A)
        if not np.isfinite(t_star):
            A = A + (abs(np.linalg.eigvalsh(A + A.T).min()) + 0.5) * np.eye(d)
            t_star = _blowup_time_direct(S0, A)
        tr = simulate_gaussian(
            Softmax(A, np.eye(d)), Gaussian(rng.standard_normal(d), S0), np.linspace(0, 2 * t_star, 5)
        )
        assert tr.status == "blowup"
        errs.append(abs(tr.blowup_time - t_star) / t_star)
        assert np.all(tr.times < tr.blowup_time)
        assert np.all(np.isfinite(tr.cov)) and np.all(np.isfinite(tr.mean))
    assert max(errs) < 1e-3, max(errs)


def test_sinkhorn_mean_is_the_matrix_exponential_and_growth_is_not_a_blowup():
    # alpha_t = e^{tV} alpha_0 exactly; with A + A^T > 0 and V = I the covariance
    # grows exponentially, crossing the 1e6 growth thresholds without being a blow-up.
    A = np.array([[1.0, 0.3], [-0.2, 0.8]])
    V = np.array([[0.3, 0.5], [-0.4, 0.2]])
    alpha0 = np.array([1.0, -2.0])
    g0 = Gaussian(alpha0, [[0.5, 0.1], [0.1, 0.3]])
    ts = np.linspace(0, 10, 11)
    tr = simulate_gaussian(Sinkhorn(A, V), g0, ts)
    ref = np.stack([scipy.linalg.expm(t * V) @ alpha0 for t in ts])
    assert np.allclose(tr.mean, ref, rtol=1e-7, atol=1e-9)
    tr2 = simulate_gaussian(Sinkhorn(A, np.eye(2)), g0, np.linspace(0, 12, 13), max_growth=1e30)
    assert tr2.blowup_time is None and len(tr2) == 13
    assert np.trace(tr2.cov[-1]) > 1e6 * np.trace(g0.cov)


def test_one_dimensional_sinkhorn_follows_its_implicit_solution():
    # sigma' = (v/a)(sqrt(1 + 4 a^2 sigma^2) - 1) integrates to
    # 2 v t = F(2 a sigma_t) - F(2 a sigma_0), F(s) = asinh(s) - (1 + sqrt(1 + s^2)) / s.
    a, v, s0, eps = 1.5, 0.7, 0.2, 2.0
    ts = np.linspace(0, 15, 16)
    tr = simulate_gaussian(Sinkhorn([[a]], [[v]], eps=eps), Gaussian([0.0], [[s0]]), ts, max_growth=1e30)
    ae = a / eps
    F = lambda s: np.arcsinh(s) - (1 + np.sqrt(1 + s * s)) / s
    t_impl = (F(2 * ae * tr.cov[:, 0, 0]) - F(2 * ae * s0)) / (2 * v)
    assert tr.blowup_time is None and tr.cov[-1, 0, 0] > 1e6 * s0
    assert np.allclose(t_impl, ts, rtol=1e-6, atol=1e-6)


def test_linear_with_zero_mean_gives_the_softmax_covariance_ode():
    rng = np.random.default_rng(5)
    A = -np.eye(3) + 0.4 * rng.standard_normal((3, 3))
    V = _spd(rng, 3)
    g0 = Gaussian(np.zeros(3), _spd(rng, 3))
    ts = np.linspace(0, 5, 6)
    sm = simulate_gaussian(Softmax(A, V), g0, ts)
    lin = simulate_gaussian(Linear(A, V), g0, ts)
    assert np.allclose(lin.cov, sm.cov, rtol=1e-7, atol=1e-10)


def test_time_dependent_parameters_follow_the_rescaled_closed_form():
    # A(t) = (1 + cos t / 2) A0, V = I: (Sigma^{-1})' = -(1 + cos t / 2)(A0 + A0^T), so Sigma_t
    # is the closed form at the rescaled time t + sin(t) / 2.
    rng = np.random.default_rng(6)
    A0 = -np.eye(2) + 0.5 * rng.standard_normal((2, 2))
    S0 = _spd(rng, 2)
    ts = np.linspace(0, 6, 13)
    att = Softmax(lambda t: (1 + 0.5 * np.cos(t)) * A0, np.eye(2))
    tr = simulate_gaussian(att, Gaussian([0.3, 0.1], S0), ts)
    ref = np.stack([_riccati_inverse_form(S0, A0, t + 0.5 * np.sin(t)) for t in ts])
    assert np.allclose(tr.cov, ref, rtol=1e-7, atol=1e-10)
    gb = simulate_gaussian_batch(att, np.stack([S0, 2 * S0]), ts)
    assert np.allclose(gb.cov[0], ref, rtol=1e-7, atol=1e-10)


def test_particles_sampled_from_a_gaussian_follow_the_moment_ode():
    # n particles from N(alpha0, Sigma0), moved by the particle simulator (RK4, h = 0.1, error
    # ~h^4 ~ 1e-4). Compared with the ODE started from the sample's own moments,
    # the gap comes only from the sample's non-Gaussian higher moments, O(n^{-1/2}) relative:
    # tolerance 2 sqrt(2/n) max|Sigma_T| (covariance) and 2 sqrt(2/n) max(|alpha_T|, |Sigma_T|^{1/2})
    # (mean), about 0.04 here (observed ~5e-3 over seeds).
    n, T, h = 1000, 1.0, 0.1
    A = np.array([[-0.6, 0.5], [-0.3, 0.4]])
    V = np.array([[0.8, 0.4], [-0.3, 1.0]])
    att = Softmax(A, V)
    mu = Gaussian([0.5, -0.3], [[0.6, 0.2], [0.2, 0.4]]).sample(n, seed=7)
    emp = simulate(att, mu, [0.0, T], method="rk4", h=h).measure(-1)
    tr = simulate_gaussian(att, Gaussian(mu.mean(), mu.cov()), [0.0, T])
    tol_c = 2 * np.sqrt(2 / n) * np.abs(tr.cov[-1]).max()
    tol_m = 2 * np.sqrt(2 / n) * max(np.abs(tr.mean[-1]).max(), np.sqrt(np.abs(tr.cov[-1]).max()))
    assert np.abs(emp.cov() - tr.cov[-1]).max() < tol_c
    assert np.abs(emp.mean() - tr.mean[-1]).max() < tol_m


def test_rank_is_preserved_at_finite_times():
    # a rank-one Sigma0 stays rank one (flow maps are affine and invertible)
    rng = np.random.default_rng(8)
    u = rng.standard_normal(3)
    S0 = np.outer(u, u)
    att = Softmax(-np.eye(3) + 0.3 * rng.standard_normal((3, 3)), _spd(rng, 3))
    tr = simulate_gaussian(att, Gaussian(np.zeros(3), S0), np.linspace(0, 5, 6))
    lam = np.linalg.eigvalsh(tr.cov)
    # the null eigenvalues stay at the integration-error level (rtol 1e-9 over ~100 steps)
    assert np.all(lam[:, -1] > 1e-3) and np.all(np.abs(lam[:, :2]) < 1e-7 * lam[:, -1:])


def test_non_gaussian_variants_raise_not_implemented_naming_the_variant():
    A, V = np.eye(2), np.eye(2)
    g0 = Gaussian(np.zeros(2), np.eye(2))
    for att, word in (
        (Sigmoid(A, V), "Sigmoid"),
        (Unnormalised(A, V), "nnormalised"),
        (Softmax(A, V, causal=True), "causal"),
    ):
        with pytest.raises(NotImplementedError, match=word):
            simulate_gaussian(att, g0, [0, 1])
        with pytest.raises(NotImplementedError, match=word):
            simulate_gaussian_batch(att, np.eye(2)[None], [0, 1])


def test_bad_inputs_raise_clear_errors():
    att = Softmax(np.eye(2), np.eye(2))
    g0 = Gaussian(np.zeros(2), np.eye(2))
    with pytest.raises(TypeError, match="g0"):
        simulate_gaussian(att, (np.zeros(2), np.eye(2)), [0, 1])
    with pytest.raises(ValueError, match="dimension"):
        simulate_gaussian(att, Gaussian(np.zeros(3), np.eye(3)), [0, 1])
    with pytest.raises(ValueError, match="times"):
        simulate_gaussian(att, g0, [0, 1, 1])
    with pytest.raises(ValueError, match="method"):
        simulate_gaussian(att, g0, [0, 1], method="Euler")
    with pytest.raises(ValueError, match="cov0"):
        simulate_gaussian_batch(att, np.array([[[1.0, 0], [0, -1]]]), [0, 1])
    # a batch of different variants is solved member by member: same results as one by one
    lin = Linear(-np.eye(2), np.eye(2))
    mixed = simulate_gaussian_batch([att, lin], np.stack([0.5 * np.eye(2)] * 2), [0, 0.5])
    for b, a in enumerate([att, lin]):
        one = simulate_gaussian(a, Gaussian(np.zeros(2), 0.5 * np.eye(2)), [0, 0.5])
        assert np.allclose(mixed.cov[b], one.cov, atol=1e-8)
    with pytest.raises(ValueError, match="mean0"):
        simulate_gaussian_batch(att, np.eye(2)[None], [0, 1], mean0=np.zeros(3))
    with pytest.raises(ValueError, match="blow-up time"):
        softmax_identity_V_closed_form(np.eye(2), np.eye(2), [0.0, 1.0])
    with pytest.raises(ValueError, match="negative semi-definite"):
        softmax_limit_cov(np.eye(2), np.eye(2))
    with pytest.raises(ValueError, match="^h must be a finite positive number"):
        projected_euler(covariance_rhs(att), np.eye(2), h=0.0)


# ---------------------------------------------------------------------------------------------
# batch solver
# ---------------------------------------------------------------------------------------------
def test_batch_solver_equals_the_single_solver_per_member_with_blowups():
    rng = np.random.default_rng(9)
    d, B = 3, 12
    atts = [Softmax(rng.standard_normal((d, d)) * (0.3 if b % 2 else 1.0), _spd(rng, d)) for b in range(B)]
    cov0 = np.stack([_spd(rng, d) for _ in range(B)])
    mean0 = rng.standard_normal((B, d))
    ts = np.linspace(0, 8, 17)
    # max_growth 1e5: member 4 has a stiff near-blow-up (growth_limit) that is slow to follow
    gb = simulate_gaussian_batch(atts, cov0, ts, mean0=mean0, max_growth=1e5)
    assert isinstance(gb, GaussianBatch) and gb.cov.shape == (B, ts.size, d, d)
    assert np.all(np.isfinite(gb.cov)) and np.all(np.isfinite(gb.mean))
    n_blow = 0
    for b in range(B):
        tr = simulate_gaussian(atts[b], Gaussian(mean0[b], cov0[b]), ts, method="RK45", max_growth=1e5)
        assert gb.status[b] == tr.status
        assert isinstance(tr, GaussianTrajectory)
        k = len(tr)
        assert gb.valid[b].sum() == k and np.all(gb.valid[b, :k])
        # both use local rtol 1e-9; the global errors grow with the number of steps and the
        # exponential growth of the mean (up to e^12 here): 1e-5 relative is a safe bound
        scale = np.abs(tr.cov).max()
        assert np.allclose(gb.cov[b, :k], tr.cov, rtol=1e-5, atol=1e-6 * scale)
        assert np.allclose(gb.mean[b, :k], tr.mean, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(tr.mean).max()))
        if tr.blowup_time is None:
            assert gb.blowup_time[b] == np.inf
        else:
            n_blow += 1
            if tr.status == "blowup":  # accurate t* (growth_limit times are mere estimates)
                assert abs(gb.blowup_time[b] - tr.blowup_time) < 1e-5 * tr.blowup_time
            assert np.all(gb.cov[b, k:] == gb.cov[b, k]) and not gb.valid[b, k:].any()  # frozen
    assert 0 < n_blow < B  # the case mixes blow-ups and global solutions


def test_batch_blowup_times_match_the_closed_form_and_convergence_matches_the_limit():
    rng = np.random.default_rng(10)
    d, B = 3, 40
    A = rng.standard_normal((d, d))
    cov0 = np.stack([_spd(rng, d) for _ in range(B)])
    t_star = np.array([_blowup_time_direct(S, A) for S in cov0])
    gb = simulate_gaussian_batch(Softmax(A, np.eye(d)), cov0, [0.0, 1.5 * t_star.max()])
    assert np.all(np.abs(gb.blowup_time - t_star) < 1e-3 * t_star)
    assert not gb.valid[:, -1].any()
    # convergence: A + A^T <= 0 of rank 1, limit of rank d - 1; ||Sigma_t - Sigma_inf|| <=
    # ||Sigma0|| / (t p_min) with p_min the smallest positive eigenvalue of -S0^{1/2}(A+A^T)S0^{1/2}
    q = rng.standard_normal(d)
    An = -np.outer(q, q)
    t_end = 1e4
    gb2 = simulate_gaussian_batch(Softmax(An, np.eye(d)), cov0, [0.0, 1.0, t_end])
    lim = softmax_limit_cov(cov0, An)
    for b in range(B):
        R = scipy.linalg.sqrtm(cov0[b]).real
        p = np.linalg.eigvalsh(-R @ (An + An.T) @ R).max()
        bound = np.linalg.norm(cov0[b], 2) / (t_end * p)
        assert np.abs(gb2.cov[b, -1] - lim[b]).max() <= bound
    assert np.all(np.isinf(gb2.blowup_time)) and gb2.valid.all()


# ---------------------------------------------------------------------------------------------
# projected Euler (authors' scheme)
# ---------------------------------------------------------------------------------------------
def _authors_loop(rhs, S, h, tol_low, tol_high, max_iter):
    """Plain per-member transcription of the published ``evolution`` loop."""
    path = []
    status = "max_iter"
    for _ in range(max_iter):
        path.append(S.copy())
        r = rhs(S)
        nr = np.linalg.norm(r)
        S = S + h * r
        lam, U = np.linalg.eigh(S)
        lam[lam < 0] = 1e-14
        S = U @ np.diag(lam) @ U.T
        if nr < tol_low:
            status = "converged"
            break
        if np.trace(S) > tol_high:
            status = "diverged"
            break
    return np.array(path), status, S


def test_projected_euler_reproduces_the_published_loop_member_by_member():
    rng = np.random.default_rng(11)
    A_conv = np.array([[-1.0, 0.2], [0.1, -0.6]])
    A_div = np.array([[0.8, 0.1], [0.0, 0.5]])
    atts = [Softmax(A_conv, np.eye(2)), Softmax(A_div, np.eye(2)), Softmax(A_conv, np.eye(2))]
    cov0 = np.stack([_spd(rng, 2) for _ in range(3)])
    rhs = covariance_rhs(atts)
    res = projected_euler(rhs, cov0, h=0.05, tol_low=1e-3, tol_high=1e3, max_iter=3000)
    for b, att in enumerate(atts):
        one = lambda S, att=att: att.gaussian_rhs(np.zeros(2), S)[1]
        path, status, last = _authors_loop(one, cov0[b].copy(), 0.05, 1e-3, 1e3, 3000)
        assert res.status[b] == status
        assert res.paths[b].shape == path.shape and res.n_steps[b] == len(path)
        assert np.allclose(res.paths[b], path, rtol=1e-12, atol=1e-14)
        assert np.allclose(res.last[b], last, rtol=1e-12, atol=1e-14)
    assert list(res.status) == ["converged", "diverged", "converged"]
    short = projected_euler(rhs, cov0, h=0.05, tol_low=1e-3, max_iter=5, record_every=2)
    assert list(short.status) == ["max_iter"] * 3 and [len(p) for p in short.paths] == [3, 3, 3]


def test_ellipse_points_lie_on_the_n_std_level_set_of_the_marginal():
    from tpde_lib.viz.ellipses import ellipse_points

    rng = np.random.default_rng(12)
    S = _spd(rng, 3)
    m = rng.standard_normal(3)
    pts = ellipse_points(m, S, n_std=1.5, n=50, dims=(0, 2))
    C = S[np.ix_([0, 2], [0, 2])]
    r = pts - m[[0, 2]]
    assert np.allclose(np.einsum("ni,ij,nj->n", r, np.linalg.inv(C), r), 1.5**2)
    # degenerate covariance: a segment along the range
    seg = ellipse_points([0.0, 0.0], [[1.0, 1.0], [1.0, 1.0]], n_std=1.0)
    assert np.allclose(seg[:, 0], seg[:, 1]) and np.abs(seg).max() <= np.sqrt(2) + 1e-12


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: softmax_blowup_time(np.eye(2), np.eye(2), v=np.nan), "v must be finite"),
        (lambda: scalar_closed_form(1.0, np.nan, 1.0, [0.5]), "a must be finite"),
        (lambda: projected_euler(lambda S: -S, np.array([[1.0, 5.0], [-3.0, 1.0]]), 0.1), "symmetric"),
    ],
)
def test_closed_forms_and_euler_reject_nan_and_non_symmetric_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------------------------------------
# an ensemble with a stiff member; a reader's closure checked where its results come back
# ---------------------------------------------------------------------------------------------
def _random_v_members():
    """Members 2, 0, 5 of issue 31's ensemble (d = 3, V = I + 0.3 randn / sqrt(d), A standard
    normal of unit norm, Sigma_0 = I): member 2 converges, member 0 blows up, member 5 grows
    stiffly (20 000 steps reach only t = 2.3 of 50)."""
    d = 3
    rng = np.random.default_rng(0)
    V = np.eye(d) + 0.3 * rng.standard_normal((100, d, d)) / np.sqrt(d)
    A = rng.standard_normal((100, d, d))
    A /= np.linalg.norm(A, 2, axis=(1, 2))[:, None, None]
    return [Softmax(A[b], V[b]) for b in (2, 0, 5)]


def test_a_stiff_member_spends_its_own_step_budget_and_the_others_finish():
    atts, d = _random_v_members(), 3
    ts = [0.0, 25.0, 50.0]
    # the old solver raised RuntimeError (max_steps) for the whole batch here
    with pytest.warns(RuntimeWarning, match=r"1 of 3 members .* 2 \(max_steps, t="):
        gb = simulate_gaussian_batch(atts, np.stack([np.eye(d)] * 3), ts, max_steps=500)
    assert gb.status.tolist() == ["ok", "blowup", "max_steps"]
    assert np.isfinite(gb.cov).all() and np.isfinite(gb.mean).all()
    assert gb.valid[0].all() and not gb.valid[2, 1:].any() and gb.blowup_time[2] == np.inf
    assert gb.t_end[0] == 50.0 and 0 < gb.t_end[2] < 25.0 and gb.t_end[1] < gb.blowup_time[1]
    for b in (0, 1):  # the finished and the blown-up members are those of the single solver
        one = simulate_gaussian(atts[b], Gaussian(np.zeros(d), np.eye(d)), ts, method="RK45")
        k = len(one)
        assert np.allclose(gb.cov[b, :k], one.cov, rtol=1e-7, atol=1e-9)
    assert abs(gb.blowup_time[1] - one.blowup_time) < 1e-5 * one.blowup_time  # as above


class _ReaderClosure(Softmax):
    """A reader's variant: softmax's field, its own gaussian_rhs (no batched closure), whose
    covariance derivative is replaced by ``bad(dcov)`` (by ``bad(dcov, t)`` with ``timed``)."""

    def __init__(self, bad, timed=False):
        super().__init__(-np.eye(2), np.eye(2))
        self.bad, self.timed = bad, timed

    def field(self, points, weights, positions, t):
        return Softmax.field(self, points, weights, positions, t)

    def gaussian_rhs(self, mean, cov, t=0.0):
        m, c = self.check_gaussian(mean, cov, t)
        X = c @ self.A(t) @ c
        return -m - c @ m, self.bad(X + X.T, t) if self.timed else self.bad(X + X.T)


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (
            lambda dc: np.diag(dc),
            ValueError,
            r" the covariance derivative of shape \(2, 2\), got shape \(2,\)$",
        ),
        (lambda dc: 0.5, ValueError, r" the covariance derivative of shape \(2, 2\), got shape \(\)$"),
        (lambda dc: dc[:1], ValueError, r" the covariance derivative of shape \(2, 2\), got shape \(1, 2\)$"),
        (lambda dc: dc + 1e-3j, TypeError, r" of real numbers of shape \(2, 2\), got dtype complex128$"),
        (lambda dc: dc * np.nan, ValueError, "non-finite values .* initial state"),
        (lambda dc: "x", TypeError, r" of real numbers of shape \(2, 2\), got str$"),
    ],
)
def test_a_readers_gaussian_rhs_is_checked_by_both_solvers(bad, error, match):
    att = _ReaderClosure(bad)
    with pytest.raises(error, match=r"_ReaderClosure\.gaussian_rhs.*" + match):
        simulate_gaussian(att, Gaussian(np.zeros(2), np.eye(2)), [0.0, 1.0])
    with pytest.raises(error, match=r"_ReaderClosure\.gaussian_rhs.*" + match):
        simulate_gaussian_batch([att, att], np.stack([np.eye(2)] * 2), [0.0, 1.0])


def test_a_readers_closure_that_fails_later_is_reported_with_its_time():
    # finite at t = 0, NaN from t = 0.5 on: the single solver names gaussian_rhs and the time,
    # the batch ends that member (step underflow) and finishes the other
    att = _ReaderClosure(lambda dc: dc)
    late = _ReaderClosure(lambda dc, t: dc * (np.nan if t > 0.5 else 1.0), timed=True)
    g0 = Gaussian(np.zeros(2), np.eye(2))
    with pytest.raises(
        RuntimeError,
        match=r"gaussian_rhs returned non-finite values at finite "
        r"states from t=0\.5",
    ):
        simulate_gaussian(late, g0, [0.0, 1.0])
    with pytest.warns(RuntimeWarning, match="step_underflow"):
        gb = simulate_gaussian_batch([late, att], np.stack([np.eye(2)] * 2), [0.0, 0.25, 1.0])
    assert gb.status.tolist() == ["step_underflow", "ok"]
    assert 0.5 - 1e-9 < gb.t_end[0] <= 0.5 and gb.valid[0].tolist() == [True, True, False]
    assert np.isfinite(gb.cov).all()


@pytest.mark.parametrize(
    "max_step, error", [(np.nan, ValueError), (0.0, ValueError), (-1.0, ValueError), ("1", TypeError)]
)
def test_max_step_must_be_positive_or_inf(max_step, error):
    att, g0 = Softmax(-np.eye(2), np.eye(2)), Gaussian(np.zeros(2), np.eye(2))
    with pytest.raises(error, match="max_step"):
        simulate_gaussian(att, g0, [0.0, 1.0], max_step=max_step)
    assert len(simulate_gaussian(att, g0, [0.0, 1.0], max_step=np.inf)) == 2
