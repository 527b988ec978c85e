"""Tests of tpde_lib.clustering (ranks, Lyapunov functions, outcomes, general V) and psd_cone."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpde_lib as tp
from tpde_lib import clustering as cl
from tpde_lib import psd_cone as pc

finite = st.floats(-10, 10, allow_nan=False)


# ---------------------------------------------------------------- cone geometry


@given(st.lists(finite, min_size=3, max_size=3))
@settings(max_examples=50, deadline=None)
def test_from_3d_inverts_to_3d(x):
    X = np.array(x)
    np.testing.assert_allclose(pc.to_3d(pc.from_3d(X)), X, atol=1e-12)
    S = pc.from_3d(X)
    np.testing.assert_allclose(pc.from_3d(pc.to_3d(S)), S, atol=1e-12)


@given(st.floats(0.01, 5), st.floats(0, 2 * np.pi))
@settings(max_examples=50, deadline=None)
def test_rank_one_matrices_lie_on_the_cone_boundary(r, angle):
    # rank one: S = r p p^T; boundary z = sqrt(x^2 + y^2), and the disk image is on the unit circle
    p = np.array([np.cos(angle), np.sin(angle)])
    X = pc.to_3d(r * np.outer(p, p))
    assert abs(X[2] - np.hypot(X[0], X[1])) < 1e-12 * max(1, r)
    assert abs(np.linalg.norm(pc.to_disk(r * np.outer(p, p))) - 1) < 1e-12


def test_cone_coordinates_give_the_eigenvalues():
    # eigenvalues of S are (z +- sqrt(x^2+y^2))/2 (independent: eigvalsh)
    rng = np.random.default_rng(0)
    G = rng.standard_normal((50, 2, 2))
    S = G @ G.transpose(0, 2, 1)
    X = pc.to_3d(S)
    rad = np.hypot(X[:, 0], X[:, 1])
    lam = np.linalg.eigvalsh(S)
    np.testing.assert_allclose(lam[:, 0], (X[:, 2] - rad) / 2, atol=1e-12)
    np.testing.assert_allclose(lam[:, 1], (X[:, 2] + rad) / 2, atol=1e-12)


def test_init_grid_is_the_trace_one_grid_strictly_inside_the_disk():
    grid = pc.init_grid(12, 12, (-1, 1, -1, 1))
    # independent count with a plain double loop in the official order (u slow, w fast)
    expected = [(u, w) for u in np.linspace(-1, 1, 12) for w in np.linspace(-1, 1, 12) if 1 - u**2 > w**2]
    assert grid.shape == (len(expected), 2, 2)
    X = pc.to_3d(grid)
    np.testing.assert_allclose(X[:, :2], np.array(expected), atol=1e-14)
    np.testing.assert_allclose(np.trace(grid, axis1=1, axis2=2), 1.0, atol=1e-14)
    assert np.linalg.eigvalsh(grid)[:, 0].min() > 0
    assert pc.init_grid(10, 10).shape == (100, 2, 2)  # default [-0.5,0.5]^2: all inside


def test_bad_inputs_raise_naming_the_argument():
    with pytest.raises(ValueError, match="n_u"):
        pc.init_grid(0, 3)
    with pytest.raises(ValueError, match="S must"):
        pc.to_3d(np.eye(3))
    with pytest.raises(ValueError, match="A \\+ A\\^T"):
        cl.predicted_limit_rank(np.eye(2))
    with pytest.raises(ValueError, match="kind"):
        cl.random_value_matrices(np.random.default_rng(0), 2, 2, "orthogonal")
    with pytest.raises(ValueError, match="real positive"):
        cl.lyapunov_matrix(-np.eye(2))


def test_numerical_rank_matches_matrix_rank():
    rng = np.random.default_rng(1)
    mats = []
    for r in range(5):
        U = rng.standard_normal((4, r))
        mats.append(U @ U.T + 1e-9 * np.eye(4))
    mats = np.array(mats)
    got = cl.numerical_rank(mats, tol=1e-6)
    want = [np.linalg.matrix_rank(M, tol=1e-6, hermitian=True) for M in mats]
    np.testing.assert_array_equal(got, want)


def test_predicted_limit_rank_matches_the_closed_form_limit():
    # Sigma_t = (Sigma_0^{-1} - t(A + A^T))^{-1} at a huge time; rank counted by matrix_rank
    rng = np.random.default_rng(2)
    for d in (3, 4, 5):
        for _ in range(10):
            k = rng.integers(1, d)
            Q = rng.standard_normal((k, d))
            A = -Q.T @ Q / np.sqrt(d) + 0.3 * (lambda W: W - W.T)(rng.standard_normal((d, d)))
            G = rng.standard_normal((d, d))
            S0 = G @ G.T + 0.1 * np.eye(d)
            S_inf = np.linalg.inv(np.linalg.inv(S0) - 1e9 * (A + A.T))
            want = np.linalg.matrix_rank(S_inf, tol=1e-6 * np.abs(S_inf).max(), hermitian=True)
            assert cl.predicted_limit_rank(A) == want == d - k


def test_lyapunov_is_nonincreasing_along_rk4_for_spd_V():
    # d/dt tr(V^{-1} Sigma) = tr(Sigma (A + A^T) Sigma) <= 0; RK4 with h = 1e-3 (error ~1e-12)
    rng = np.random.default_rng(3)
    d = 3
    Q = rng.standard_normal((2, d))
    A = -Q.T @ Q / np.sqrt(d)
    B = rng.standard_normal((d, d))
    V = B.T @ B + 0.1 * np.eye(d)
    G = rng.standard_normal((d, d))
    S = G @ G.T

    def f(S):
        X = V @ S @ A @ S
        return X + X.T

    L = [cl.lyapunov(S, V)]
    h = 1e-3
    for _ in range(2000):
        k1 = f(S)
        k2 = f(S + h / 2 * k1)
        k3 = f(S + h / 2 * k2)
        k4 = f(S + h * k3)
        S = S + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        L.append(cl.lyapunov(S, V))
    assert np.all(np.diff(L) <= 1e-12)
    assert L[-1] < L[0]


def test_phase_classification_matches_the_closed_form_for_V_identity():
    # V = I: blow-up iff A + A^T has a positive eigenvalue, at t* = 1/lambda_max(S0^1/2 (A+A^T)
    # S0^1/2); otherwise the limit has rank d - rank(A + A^T) ({eq}`eq-clustering-identity`). Computed here
    # independently from the eigenvalues of the 2x2 matrices.
    a = np.array([-0.8, -0.3, 0.0, 0.4])
    S0 = np.array([[0.6, 0.1], [0.1, 0.4]])
    pd = cl.phase_diagram(
        a, a, np.eye(2), S0, theta=0.3, skew=0.2, horizon=1e4, n_times=2, rtol=1e-9, atol=1e-12
    )
    R = np.array([[np.cos(0.3), -np.sin(0.3)], [np.sin(0.3), np.cos(0.3)]])
    w, U = np.linalg.eigh(S0)
    root = U @ np.diag(np.sqrt(w)) @ U.T
    for i, a2 in enumerate(a):
        for j, a1 in enumerate(a):
            sym = 2 * R @ np.diag([a1, a2]) @ R.T  # the skew part cancels in A + A^T
            top = np.linalg.eigvalsh(root @ sym @ root)[-1]
            if max(a1, a2) > 0:
                assert pd.outcome[i, j] == cl.BLOWS_UP
                # blow-up detection error O(rho/t*) ~ 1e-6 (gaussian.py); 1e-4 leaves margin
                assert abs(pd.blowup_time[i, j] * top - 1) < 1e-4
            else:
                assert pd.outcome[i, j] == cl.CONVERGES
                assert pd.rank[i, j] == 2 - int(a1 != 0) - int(a2 != 0)


def test_classify_outcome_on_known_trajectories():
    # hand-built trajectories on t in [0, 100]: exponential growth, decay to a rank-one limit,
    # decay to zero, and a member reported as blowing up (its later times marked invalid)
    t = np.linspace(0, 100, 51)
    e1 = np.array([[1.0, 0], [0, 0]])
    grow = np.exp(0.1 * t)[:, None, None] * np.eye(2)
    to_line = e1 + (1 / (1 + t))[:, None, None] * np.eye(2)
    to_zero = (1 / (1 + t))[:, None, None] * np.eye(2)
    blow = 1 / (1 - t / 200)[:, None, None] * np.eye(2)
    valid = np.ones((4, 51), bool)
    valid[3, 30:] = False
    outcome, rank = cl.classify_outcome(
        np.stack([grow, to_line, to_zero, blow]), [np.inf, np.inf, np.inf, 60.0], valid, rank_tol=2e-2
    )
    np.testing.assert_array_equal(outcome, [cl.GROWS, cl.CONVERGES, cl.CONVERGES, cl.BLOWS_UP])
    np.testing.assert_array_equal(rank, [-1, 1, 0, -1])
    # a member the solver stopped at its growth cap ("growth_limit", with only an extrapolated
    # time) grows; it is not a detected blow-up
    outcome, _ = cl.classify_outcome(
        np.stack([grow, to_line, to_zero, blow]),
        [80.0, np.inf, np.inf, 60.0],
        valid,
        rank_tol=2e-2,
        status=["growth_limit", "ok", "ok", "blowup"],
    )
    np.testing.assert_array_equal(outcome, [cl.GROWS, cl.CONVERGES, cl.CONVERGES, cl.BLOWS_UP])


# ---------------------------------------------------------------- general V


def _rk4(A, V, S, h, n):
    """Plain RK4 for Sigma' = V S A S + (.)^T (independent of the library's integrators)."""

    def f(S):
        X = V @ S @ A @ S
        return X + X.T

    out = [S]
    for _ in range(n):
        k1 = f(S)
        k2 = f(S + h / 2 * k1)
        k3 = f(S + h / 2 * k2)
        k4 = f(S + h * k3)
        S = S + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        out.append(S)
    return np.array(out)


def test_general_lyapunov_matrix_decreases_for_diagonalisable_V_with_positive_eigenvalues():
    # V = R D R^{-1} non-symmetric, A + A^T <= 0: tr(M^{-1} S) with M = R D R^T never increases,
    # while the symmetric-V formula tr(V^{-1} S) (the plausible wrong generalisation) does.
    rng = np.random.default_rng(7)
    d = 2
    R = np.array([[1.0, 3.0], [0.0, 1.0]])
    V = R @ np.diag([1.0, 0.2]) @ np.linalg.inv(R)
    Q = rng.standard_normal((1, d))
    W = rng.standard_normal((d, d))
    A = -Q.T @ Q + 2.0 * (W - W.T)
    S = _rk4(A, V, np.eye(d), 1e-3, 5000)
    M = cl.lyapunov_matrix(V)
    # M = R D R^T for some eigenvector matrix R: SPD with V M = M V^T (V self-adjoint for M^-1)
    assert np.linalg.eigvalsh(M)[0] > 0
    np.testing.assert_allclose(V @ M, (V @ M).T, atol=1e-12)
    L = cl.lyapunov(S, M)
    assert np.diff(L).max() <= 1e-12 * L[0]  # RK4 error ~1e-13 per step here
    wrong = np.trace(np.linalg.solve(V, S), axis1=1, axis2=2)
    assert np.diff(wrong).max() > 1e-6  # tr(V^{-1} S) is no Lyapunov function here


def test_lyapunov_matrix_is_V_for_symmetric_V():
    B = np.random.default_rng(8).standard_normal((3, 3))
    V = B @ B.T + 0.1 * np.eye(3)
    np.testing.assert_allclose(cl.lyapunov_matrix(V), V, rtol=1e-10)


def test_congruence_maps_solutions_to_solutions():
    # P S_t P^T solves the ODE of (P^-T A P^-1, P V P^-1): compared on plain RK4 runs. The
    # plausible wrong transformation V -> P V P^T fails.
    rng = np.random.default_rng(9)
    A, V, P = (rng.standard_normal((2, 2)) for _ in range(3))
    S = _rk4(A, V, np.eye(2), 1e-3, 300)
    A2, V2 = cl.congruence(A, V, P)
    S2 = _rk4(A2, V2, P @ P.T, 1e-3, 300)
    np.testing.assert_allclose(S2, P @ S @ P.T, rtol=1e-9, atol=1e-9)
    wrong = _rk4(A2, P @ V @ P.T, P @ P.T, 1e-3, 300)
    assert np.abs(wrong - P @ S @ P.T).max() > 1e-2


def test_blowup_time_lower_bound_holds_and_is_sharp():
    # sharp case: A = a I, V = I, S0 = s I gives s_t = s / (1 - 2 a s t), t* = 1/(2 a s)
    a, s = 0.7, 1.3
    bound = cl.blowup_time_lower_bound(a * np.eye(2), np.eye(2), s * np.eye(2))
    assert abs(bound - 1 / (2 * a * s)) < 1e-15
    rng = np.random.default_rng(10)
    V = cl.random_value_matrices(rng, 60, 2, "general")
    A = rng.standard_normal((60, 2, 2))
    sv = cl.blowup_survey(A, V, np.eye(2), horizon=20.0, max_growth=1e4)
    hit = sv.blows_up
    assert hit.sum() > 10
    lb = cl.blowup_time_lower_bound(A, V, np.eye(2))
    assert np.all(sv.blowup_time[hit] >= lb[hit] * (1 - 1e-6))  # detection error ~1e-6
    # the sharp case measured by the solver
    sharp = cl.blowup_survey(a * np.eye(2)[None], np.eye(2)[None], s * np.eye(2), horizon=5.0)
    assert abs(sharp.blowup_time[0] * 2 * a * s - 1) < 1e-5


def test_sign_condition_pairs_satisfy_it_and_are_normalised():
    rng = np.random.default_rng(11)
    V = cl.random_value_matrices(rng, 50, 3, "spd")
    A = cl.pairs_with_sign_condition(rng, V)
    np.testing.assert_allclose(np.linalg.norm(A, 2, axis=(1, 2)), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(V, 2, axis=(1, 2)), 1.0, rtol=1e-12)
    assert np.linalg.eigvalsh(V @ A + np.swapaxes(V @ A, 1, 2))[:, -1].max() < 0
    assert np.all(np.linalg.eigvalsh(V)[:, 0] > 0)


def test_spd_counterexamples_blow_up_and_violate_the_true_condition():
    # every SPD counterexample must have lambda_max(A + A^T) > 0 (else the Lyapunov function
    # tr(V^{-1} S) would forbid blow-up); its blow-up time agrees with scipy's Radau
    ce = cl.sign_condition_counterexamples("spd", d=2, margin=0.05, seed=0, n_candidates=60, horizon=100.0)
    assert ce.hits.size >= 1
    assert np.all(ce.survey.va_max <= -0.05)
    assert np.all(ce.survey.sym_max[ce.hits] > 0)
    A, V, t_star = ce.example(0)
    tr = tp.simulate_gaussian(
        tp.Softmax(A, V),
        tp.Gaussian(np.zeros(2), np.eye(2)),
        [0.0, 2 * t_star],
        method="Radau",
        rtol=1e-10,
        atol=1e-12,
    )
    assert tr.status == "blowup" and abs(tr.blowup_time / t_star - 1) < 1e-4


def test_ensemble_survey_with_identity_V_matches_the_closed_form():
    # V = I: blow-up before the horizon iff the closed-form t* is below it, at that time
    from tpde_lib.gaussian import softmax_blowup_time

    for start in ("identity", "random"):
        sv = cl.ensemble_survey("identity", start, n=30, seed=1, horizon=20.0)
        t_cf = softmax_blowup_time(sv.cov0, sv.A)
        np.testing.assert_array_equal(sv.blows_up, t_cf < 20.0)
        assert np.abs(sv.blowup_time[sv.blows_up] / t_cf[sv.blows_up] - 1).max() < 1e-4
        np.testing.assert_allclose(np.trace(sv.cov0, axis1=1, axis2=2), 2.0, rtol=1e-12)


def test_stiff_members_are_finished_by_the_stiff_solver():
    # a pair whose covariance grows large without blowing up (found in the SPD ensemble): the
    # batch hands it to LSODA; the fate must agree with a direct Radau run
    rng = np.random.default_rng(5)
    V = cl.random_value_matrices(rng, 40, 2, "spd")
    A = rng.standard_normal((40, 2, 2))
    A /= np.linalg.norm(A, 2, axis=(1, 2))[:, None, None]
    sv = cl.blowup_survey(A, V, np.eye(2), horizon=50.0, rtol=1e-6, atol=1e-9)
    for b in range(0, 40, 7):
        tr = tp.simulate_gaussian(
            tp.Softmax(A[b], V[b]),
            tp.Gaussian(np.zeros(2), np.eye(2)),
            [0.0, 50.0],
            method="Radau",
            rtol=1e-8,
            atol=1e-10,
        )
        assert (tr.status == "blowup") == sv.blows_up[b]


def test_survey_members_stopped_by_the_growth_cap_are_not_blowups():
    # moved from chapter 6b (engineering, not mathematics): 13 general pairs, rerun with the
    # growth cap lowered to 1e3, so that members which blow up slowly are stopped by it
    rng = np.random.default_rng(1)
    A, V = rng.standard_normal((2, 80, 2, 2))
    members = [0, 1, 2, 3, 4, 5, 6, 7, 9, 24, 65, 66, 68]  # five the lowered cap stops
    A, V = A[members], V[members]
    full = cl.blowup_survey(A, V, np.eye(2), horizon=50.0)
    low = cl.blowup_survey(A, V, np.eye(2), horizon=50.0, max_growth=1e3)
    capped = low.status == "growth_limit"
    # the lowered cap stops members (with a finite estimated time) that the uncapped run sees
    # blow up; none of them counts as a blow-up
    assert capped.sum() >= 3 and np.isfinite(low.blowup_time[capped]).all()
    assert full.blows_up[capped].all() and not (full.status == "growth_limit").any()
    assert not low.blows_up[capped].any()
    # the blow-ups of the capped run are those of the uncapped run, at the same times
    # (blow-up detection ~1e-6 relative)
    both = low.blows_up
    np.testing.assert_array_equal(both, full.blows_up & ~capped)
    assert np.abs(low.blowup_time[both] / full.blowup_time[both] - 1).max() < 1e-5


def test_spd_V_with_positive_definite_symmetric_part_blows_up_before_the_lyapunov_bound():
    # derived: L = tr(V^-1 S) satisfies L' >= c L^2, c = lambda_min(A + A^T) lambda_min(V)^2 / d,
    # so t* <= 1 / (c L0); every draw must blow up, before that time
    rng = np.random.default_rng(14)
    n, d = 40, 2
    V = cl.random_value_matrices(rng, n, d, "spd")
    G = rng.standard_normal((n, d, d))
    W = rng.standard_normal((n, d, d))
    A = G @ np.swapaxes(G, 1, 2) / d + 0.1 * np.eye(d) + (W - np.swapaxes(W, 1, 2))
    S0 = cl.random_value_matrices(rng, n, d, "spd")
    c = np.linalg.eigvalsh(A + np.swapaxes(A, 1, 2))[:, 0] * np.linalg.eigvalsh(V)[:, 0] ** 2 / d
    t_max = 1.0 / (c * cl.lyapunov(S0, V))
    sv = cl.blowup_survey(A, V, S0, horizon=float(1.5 * t_max.max()))
    assert sv.blows_up.all()
    assert np.all(sv.blowup_time <= t_max * (1 + 1e-6))
    assert np.all(sv.blowup_time >= cl.blowup_time_lower_bound(A, V, S0) * (1 - 1e-6))


# ---- input policy and the stiff re-solve (issue 28) -------------------------------------------


def test_survey_resolves_members_the_batch_left_with_max_steps_or_step_underflow(monkeypatch):
    # the batched solver may end a stiff member with "max_steps" or "step_underflow": the survey
    # must re-solve it with the stiff method, as it does "growth_limit" members; we make the batch
    # report those statuses for two members and compare with direct LSODA runs
    import dataclasses

    from tpde_lib.clustering import _general_v

    real = _general_v.simulate_gaussian_batch

    def flaky_batch(*args, **kwargs):
        out = real(*args, **kwargs)
        status = np.asarray(out.status, dtype=object).copy()
        tstar = np.asarray(out.blowup_time, float).copy()
        status[[0, 2]] = ["max_steps", "step_underflow"]
        tstar[[0, 2]] = np.inf
        return dataclasses.replace(out, status=status, blowup_time=tstar)

    monkeypatch.setattr(_general_v, "simulate_gaussian_batch", flaky_batch)
    A = np.stack([np.eye(2), -np.eye(2), np.diag([1.0, -1.0])])
    V = np.stack([np.eye(2)] * 3)
    sv = cl.blowup_survey(A, V, np.eye(2), horizon=2.0)
    assert sv.status.tolist() == ["blowup", "ok", "blowup"]
    for b in (0, 2):  # Sigma' = 2 Sigma^2 on the positive direction: t* = 1/2
        direct = tp.simulate_gaussian(
            tp.Softmax(A[b], V[b]),
            tp.Gaussian(np.zeros(2), np.eye(2)),
            [0.0, 2.0],
            method="LSODA",
            rtol=1e-8,
            atol=1e-10,
        )
        assert sv.blowup_time[b] == pytest.approx(direct.blowup_time, rel=1e-12)
        assert sv.blowup_time[b] == pytest.approx(0.5, rel=1e-3)


def test_clustering_helpers_reject_singular_jordan_and_indefinite_inputs():
    I2 = np.eye(2)
    sing = np.array([[1.0, 1.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="V must be invertible"):
        cl.lyapunov(I2, sing)  # was numpy's bare "Singular matrix"
    with pytest.raises(ValueError, match="V must be diagonalisable"):
        cl.lyapunov_matrix(np.array([[1.0, 1.0], [0.0, 1.0]]))  # Jordan block: was singular M
    with pytest.raises(ValueError, match="P must be invertible"):
        cl.congruence(I2, I2, sing)
    with pytest.raises(ValueError, match="V must be invertible"):
        cl.pairs_with_sign_condition(np.random.default_rng(0), sing[None])
    with pytest.raises(ValueError, match="cov0 must hold symmetric positive semi-definite"):
        cl.blowup_time_lower_bound(I2, I2, -I2)  # was a negative time bound, -0.5
    # a vanishing covariance never blows up: the bound is inf, not a division warning
    assert cl.blowup_time_lower_bound(I2, I2, 0 * I2) == np.inf
    cov = np.broadcast_to(I2, (2, 3, 2, 2))
    with pytest.raises(ValueError, match="blowup_time must hold times >= 0 or inf"):
        cl.classify_outcome(cov, [np.nan, np.inf])  # a NaN time was counted as no blow-up
    with pytest.raises(ValueError, match="blowup_time"):
        cl.classify_outcome(cov, [-1.0, np.inf])
    with pytest.raises(TypeError, match="valid must be a bool array"):
        cl.classify_outcome(cov, [np.inf, np.inf], valid=np.ones((2, 3)))
    with pytest.raises(ValueError, match="status must hold"):
        cl.classify_outcome(cov, [np.inf, np.inf], status=["ok", "fine"])
    with pytest.raises(ValueError, match="stiff_method must be one of"):
        cl.blowup_survey(I2[None], I2[None], I2, stiff_method="RK45")
    with pytest.raises(ValueError, match=r"cov0\[0\] must be positive semi-definite"):
        cl.blowup_survey(I2[None], I2[None], -I2)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        cl.random_value_matrices(0, 3, 2, "spd")
