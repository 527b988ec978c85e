"""Tests of tpde_lib.clustering: experiment settings, cone geometry, ranks, outcomes."""

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpde_lib import clustering as cl

finite = st.floats(-10, 10, allow_nan=False)


# ---------------------------------------------------------------- cone geometry

@given(st.lists(finite, min_size=3, max_size=3))
@settings(max_examples=50, deadline=None)
def test_from_3d_inverts_to_3d(x):
    X = np.array(x)
    np.testing.assert_allclose(cl.to_3d(cl.from_3d(X)), X, atol=1e-12)
    S = cl.from_3d(X)
    np.testing.assert_allclose(cl.from_3d(cl.to_3d(S)), S, atol=1e-12)


@given(st.floats(0.01, 5), st.floats(0, 2 * np.pi))
@settings(max_examples=50, deadline=None)
def test_rank_one_matrices_lie_on_the_cone_boundary(r, angle):
    # rank one: S = r p p^T; boundary z = sqrt(x^2 + y^2), and the disk image is on the unit circle
    p = np.array([np.cos(angle), np.sin(angle)])
    X = cl.to_3d(r * np.outer(p, p))
    assert abs(X[2] - np.hypot(X[0], X[1])) < 1e-12 * max(1, r)
    assert abs(np.linalg.norm(cl.to_disk(r * np.outer(p, p))) - 1) < 1e-12


def test_cone_coordinates_give_the_eigenvalues():
    # eigenvalues of S are (z +- sqrt(x^2+y^2))/2 (independent: eigvalsh)
    rng = np.random.default_rng(0)
    G = rng.standard_normal((50, 2, 2))
    S = G @ G.transpose(0, 2, 1)
    X = cl.to_3d(S)
    rad = np.hypot(X[:, 0], X[:, 1])
    lam = np.linalg.eigvalsh(S)
    np.testing.assert_allclose(lam[:, 0], (X[:, 2] - rad) / 2, atol=1e-12)
    np.testing.assert_allclose(lam[:, 1], (X[:, 2] + rad) / 2, atol=1e-12)


def test_init_grid_is_the_trace_one_grid_strictly_inside_the_disk():
    grid = cl.init_grid(12, 12, (-1, 1, -1, 1))
    # independent count with a plain double loop in the official order (u slow, w fast)
    expected = [(u, w) for u in np.linspace(-1, 1, 12) for w in np.linspace(-1, 1, 12)
                if 1 - u**2 > w**2]
    assert grid.shape == (len(expected), 2, 2)
    X = cl.to_3d(grid)
    np.testing.assert_allclose(X[:, :2], np.array(expected), atol=1e-14)
    np.testing.assert_allclose(np.trace(grid, axis1=1, axis2=2), 1.0, atol=1e-14)
    assert np.linalg.eigvalsh(grid)[:, 0].min() > 0
    assert cl.init_grid(10, 10).shape == (100, 2, 2)  # default [-0.5,0.5]^2: all inside


def test_bad_inputs_raise_naming_the_argument():
    with pytest.raises(ValueError, match="n_u"):
        cl.init_grid(0, 3)
    with pytest.raises(ValueError, match="S must"):
        cl.to_3d(np.eye(3))
    with pytest.raises(ValueError, match="variant"):
        cl.paper_parameters(np.eye(2), np.eye(2), np.eye(2), "cosine")
    with pytest.raises(ValueError, match="A \\+ A\\^T"):
        cl.predicted_limit_rank(np.eye(2))
    with pytest.raises(ValueError, match="name"):
        cl.paper_experiment("E7")


# ---------------------------------------------------------------- ranks

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
    # R4: d/dt tr(V^{-1} Sigma) = tr(Sigma (A + A^T) Sigma) <= 0; RK4 with h = 1e-3 (error ~1e-12)
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


# ---------------------------------------------------------------- the authors' settings

def test_legacy_draws_satisfy_their_defining_properties():
    e1 = cl.paper_experiment("E1")
    A1 = e1.parameters("softmax")["A"]
    assert np.linalg.eigvalsh(A1 + A1.T).max() < 0          # K = -Q: A negative definite
    assert np.linalg.eigvalsh(e1.V).min() > 0 and np.allclose(e1.V, e1.V.T)  # V = B B^T
    assert np.all((e1.Q >= 0) & (e1.Q < 1))                  # rand: uniform on [0, 1)
    e2 = cl.paper_experiment("E2")
    assert np.isclose(np.linalg.norm(e2.Q), 1) and np.allclose(e2.K, -e2.Q)
    assert np.array_equal(e2.V, np.eye(2))
    for name, want in (("E4", "indefinite"), ("E6", "indefinite"), ("E5", "definite")):
        e = cl.paper_experiment(name)
        A = e.K.T @ e.Q
        lam = np.linalg.eigvalsh(A + A.T)
        if want == "indefinite":
            assert lam[0] < 0 < lam[1]
        else:
            assert lam[0] > 0
    e4, e6 = cl.paper_experiment("E4"), cl.paper_experiment("E6")
    assert np.array_equal(e4.Q, e6.Q) and not np.allclose(e4.V, e6.V)  # same seed 36 loop


def test_paper_experiment_leaves_the_global_generator_untouched():
    np.random.seed(123)  # noqa: NPY002 (checking the legacy global state on purpose)
    before = np.random.get_state()[1].copy()  # noqa: NPY002
    cl.paper_experiment("E4")
    cl.histogram_setting("softmax", "random", 3, n_per_dim=2)
    cl.histogram_inits(3, 2)
    assert np.array_equal(np.random.get_state()[1], before)  # noqa: NPY002


def test_rank_one_direction_is_the_projector_onto_q_perp():
    e2 = cl.paper_experiment("E2")
    q = e2.Q[0]
    P = np.eye(2) - np.outer(q, q)  # independent: I - q q^T for unit q
    X = cl.to_3d(P)
    np.testing.assert_allclose(e2.extra["rank_one_direction"], X / np.linalg.norm(X), atol=1e-12)


def test_paper_rhs_matches_the_official_formulas():
    rng = np.random.default_rng(4)
    G = rng.standard_normal((5, 2, 2))
    S = G @ G.transpose(0, 2, 1)
    e = cl.paper_experiment("E6")
    Q, K, V, d = e.Q, e.K, e.V, 2
    A = K.T @ Q / np.sqrt(d)
    # softmax: V S A S + (.)^T written out directly
    want = np.array([V @ s @ A @ s + (V @ s @ A @ s).T for s in S])
    np.testing.assert_allclose(e.rhs("softmax")(S), want, atol=1e-12)
    # L2, code form: 2 V S (I + 2 K^T K S)^{-1} A S + (.)^T
    want = []
    for s in S:
        X = 2 * V @ s @ np.linalg.inv(np.eye(d) + 2 * K.T @ K @ s) @ A @ s
        want.append(X + X.T)
    np.testing.assert_allclose(e.rhs("L2")(S), np.array(want), atol=1e-10)
    # multi-head with H = 1 is softmax
    np.testing.assert_allclose(e.rhs("multihead")(S), e.rhs("softmax")(S), atol=1e-12)


def test_multihead_split_follows_the_code():
    e1 = cl.paper_experiment("E1")
    p = e1.parameters("multihead")  # H = 2, k = 1
    for h in range(2):
        np.testing.assert_allclose(p["As"][h], np.outer(e1.K[h], e1.Q[h]))
        C = np.zeros((2, 2))
        C[h] = e1.V[h]
        np.testing.assert_allclose(p["Vs"][h], C)
    p3 = cl.paper_experiment("E3").parameters("multihead")
    assert np.all(p3["As"][1] == 0)  # head 2 gets empty slices of the one-row Q
    e3 = cl.paper_experiment("E3")
    # Sinkhorn: no 1/sqrt(d); softmax: 1/sqrt(d) with the full d = 2 although Q has one row
    np.testing.assert_allclose(cl.paper_parameters(e3.Q, e3.K, e3.V, "sinkhorn")["A"],
                               e3.K.T @ e3.Q)
    np.testing.assert_allclose(cl.paper_parameters(e3.Q, e3.K, e3.V, "softmax")["A"],
                               e3.K.T @ e3.Q / np.sqrt(2))


def test_histogram_settings_have_the_predicted_structure():
    for d in (3, 4, 5):
        s = cl.histogram_setting("softmax", "random", d)
        assert s.Q.shape == (100, d // 2, d) and np.array_equal(s.K, -s.Q)
        assert np.all(np.linalg.eigvalsh(s.V)[:, 0] > 0)
        A = s.parameters()["A"]
        # A + A^T = -2 Q^T Q / sqrt(d) has rank d // 2: the limit rank for V = I is ceil(d/2)
        assert np.all(cl.predicted_limit_rank(A) == (d + 1) // 2)
    # the same seed-40 Q draws for both variants and both V rows
    assert np.array_equal(cl.histogram_setting("L2", "identity", 4).Q,
                          cl.histogram_setting("softmax", "random", 4).Q)
    assert not np.allclose(cl.histogram_setting("L2", "random", 4).V,
                           cl.histogram_setting("softmax", "random", 4).V)


def test_histogram_rounds_reproduce_the_sequential_protocol():
    # a fake Euler whose convergence depends on the (draw, init) pair; the reference is the
    # official sequential loop written out with plain Python control flow
    setting = cl.histogram_setting("softmax", "identity", 3, n_per_dim=30)
    setting = cl.HistogramSetting(**{**setting.__dict__, "n_max": 45})
    inits = cl.histogram_inits(3, 45)
    A = setting.parameters()["A"]

    def converges(A_i, S0):
        return np.trace(S0) > 2.0 + 0.1 * np.trace(A_i)  # arbitrary but deterministic

    def fake_runner(rhs_for, cov0, euler_settings, max_iter):
        # identify each member's draw through the rhs: rhs(I) = A + A^T for V = I
        eye = np.broadcast_to(np.eye(3), cov0.shape)
        Ai = 0.5 * rhs_for(np.arange(len(cov0)))(eye)
        conv = np.array([converges(a, s) for a, s in zip(Ai, cov0)])
        return SimpleNamespace(last=cov0, status=np.where(conv, "converged", "max_iter"))

    got = cl.paper_histogram_ranks(setting, runner=fake_runner)
    ranks, i, k = [], 0, 0
    for k in range(45):
        if converges(0.5 * (A[i] + A[i].T), inits[k]):
            r = int(np.sum(np.linalg.eigvalsh(inits[k]) > 0.1))
            if r <= 2:
                ranks.append(r)
            i += 1
        if i == 30:
            break
    assert got["ranks"] == ranks
    assert got["processed"] == i
    assert got["attempts"] == k + 1


def test_chunked_euler_equals_one_uninterrupted_run():
    from tpde_lib.gaussian import projected_euler

    e = cl.paper_experiment("E6")  # some members converge, some blow up
    st = cl.EulerSettings(0.02, 1e-3, tol_high=20.0, max_iter=3000)
    inits = e.inits(7, 7)
    ref = projected_euler(e.rhs("softmax"), inits, st.h, tol_low=st.tol_low,
                          tol_high=st.tol_high, max_iter=st.max_iter)
    got = cl.run_paper_euler(lambda idx: e.rhs("softmax"), inits, st, chunk=37)
    assert set(ref.status) >= {"converged", "diverged"}
    np.testing.assert_array_equal(got.status, ref.status)
    np.testing.assert_array_equal(got.n_steps, ref.n_steps)
    for a, b in zip(got.paths, ref.paths):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_phase_classification_matches_the_closed_form_for_V_identity():
    # V = I: blow-up iff A + A^T has a positive eigenvalue, at t* = 1/lambda_max(S0^1/2 (A+A^T)
    # S0^1/2); otherwise the limit has rank d - rank(A + A^T). Computed here
    # independently from the eigenvalues of the 2x2 matrices.
    a = np.array([-0.8, -0.3, 0.0, 0.4])
    S0 = np.array([[0.6, 0.1], [0.1, 0.4]])
    pd = cl.phase_diagram(a, a, np.eye(2), S0, theta=0.3, skew=0.2, horizon=1e4, n_times=2,
                          rtol=1e-9, atol=1e-12)
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
    outcome, rank = cl.classify_outcome(np.stack([grow, to_line, to_zero, blow]),
                                        [np.inf, np.inf, np.inf, 60.0], valid, rank_tol=2e-2)
    np.testing.assert_array_equal(outcome, [cl.GROWS, cl.CONVERGES, cl.CONVERGES, cl.BLOWS_UP])
    np.testing.assert_array_equal(rank, [-1, 1, 0, -1])
    # a member the solver stopped at its growth cap ("growth_limit", with only an extrapolated
    # time) grows; it is not a detected blow-up
    outcome, _ = cl.classify_outcome(np.stack([grow, to_line, to_zero, blow]),
                                     [80.0, np.inf, np.inf, 60.0], valid, rank_tol=2e-2,
                                     status=["growth_limit", "ok", "ok", "blowup"])
    np.testing.assert_array_equal(outcome, [cl.GROWS, cl.CONVERGES, cl.CONVERGES, cl.BLOWS_UP])
