"""Guards on formulas that no chapter exercises: each test fails under a plausible wrong version.

An outside mutation run found three formulas whose wrong versions the chapters cannot see (the
machinery still converges, or the chapters only pass unit-norm tokens): the cluster count's
distances, the Hessian of the Sinkhorn solver's Newton step, and the step budget of the batched
integrator. Each test below compares the code with an independent computation in a case where the
wrong version differs (stated in the test's docstring).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from scipy.special import logsumexp

import tpde_lib as tp
from tpde_lib.attention import _sinkhorn


def test_cluster_count_uses_the_tokens_norms_not_unit_norm():
    """Tokens x and 2x are |x| apart: two clusters at a resolution below |x|.

    The wrong version, distances from 2 - 2<x, y> (unit-norm tokens assumed), puts them at
    distance sqrt(2 - 4|x|^2) (negative square: linked) and counts one cluster."""
    x = np.array([[0.6, 0.8], [1.2, 1.6], [-3.0, 0.0]])  # |x_1| = 1, x_2 = 2 x_1, x_3 far
    direct = np.linalg.norm(x[:, None] - x[None], axis=-1)
    assert direct[0, 1] == 1.0
    assert tp.sphere.count_clusters(x, 0.9) == 3
    assert tp.sphere.count_clusters(x, 1.1) == 2
    # a trajectory of such frames, and tokens scaled away from the sphere
    assert tp.sphere.count_clusters(np.stack([x, 3 * x]), 1.1).tolist() == [2, 3]


def _semi_dual_gradient(Y, w, A, eps, g):
    """Gradient w - c of h(g) = <w, g> + <w, T(g)>, T(g)_i = -LSE_j(<Ay_i, y_j>/eps + g_j + log w_j),
    c the column sums of the plan with exact rows (written here with scipy's logsumexp)."""
    S = (Y @ A.T) @ Y.T / eps
    logits = S + g[None, :] + np.log(w)[None, :]
    T = -logsumexp(logits, axis=1)
    plan = w[:, None] * np.exp(logits + T[:, None])  # rows sum to w_i
    return w - plan.sum(axis=0)


def test_sinkhorn_newton_hessian_is_the_semi_duals():
    """The solver's scaled Hessian D_r - P~^T P~ + s s^T (P~_ij = pi_ij / sqrt(w_i w_j), s =
    sqrt(w)) equals W^{-1/2} (-Hess h) W^{-1/2} + s s^T, Hess h by central finite differences
    of the semi-dual's gradient, at the converged potential of a non-symmetric A.

    The wrong version with P~ P~^T (the product over columns) differs by O(1) entries for a
    non-symmetric plan; the solver would still converge (it falls back to sweeps), only
    slower, so nothing else sees it."""
    rng = np.random.default_rng(3)
    m, eps = 40, 0.5
    Y = rng.standard_normal((m, 2))
    w = rng.uniform(0.5, 1.5, m)
    w /= w.sum()
    A = np.array([[1.0, 0.6], [-0.4, 0.8]])
    _, g, log = tp.sinkhorn_potentials(Y, w, A, eps=eps, tol=1e-13, max_iter=20_000)
    assert log["converged"]
    run = _sinkhorn._Run(Y, w, A, eps, 1e-13, 10)
    run.row_pass(g)  # the row-normalised kernel of (T(g), g) in run.buf
    r = run.buf.T @ w  # column sums / w_j
    lu, piv = run.inverse_hessian(np.ones(m), np.ones(m), r)
    H = np.linalg.inv(scipy.linalg.lu_solve((lu, piv), np.eye(m)))
    step = 1e-5
    hess = np.empty((m, m))
    for k in range(m):
        e = np.zeros(m)
        e[k] = step
        hess[:, k] = (_semi_dual_gradient(Y, w, A, eps, g + e) - _semi_dual_gradient(Y, w, A, eps, g - e)) / (
            2 * step
        )
    sw = np.sqrt(w)
    expected = -hess / np.outer(sw, sw) + np.outer(sw, sw)
    # finite differences: O(step^2) ~ 1e-10 relative; the Levenberg-Marquardt shift is the
    # gradient's norm at the solution (below 1e-12); the wrong product misses by O(1)
    assert np.abs(H - expected).max() <= 1e-6 * np.abs(expected).max(), np.abs(H - expected).max()


def test_batched_integrator_charges_rejected_steps_to_the_budget():
    """n_steps counts every attempted step: 1 + 6 n_steps evaluations of f per member (the
    first derivative, then six stages per attempt, FSAL), counted here by the calls of f.

    A stiff member rejects steps; the wrong version that charges only accepted steps would
    report fewer steps than attempted, and give the stiff member more work than its budget."""
    calls = np.zeros(2, dtype=int)
    rates = np.array([1.0, 400.0])

    def f(t, y, idx):
        np.add.at(calls, idx, 1)
        return -rates[idx][:, None] * (y - np.cos(t)[:, None])

    sol = tp.solve_batch(f, np.ones((2, 1)), [0.0, 2.0], rtol=1e-8, atol=1e-10)
    assert sol.status.tolist() == ["finished", "finished"]
    assert calls.tolist() == (1 + 6 * sol.n_steps).tolist(), (calls, sol.n_steps)
    # the stiff member was rejected at least once: more attempts than a run without rejection
    budget = int(sol.n_steps[1]) - 5
    tight = tp.solve_batch(f, np.ones((2, 1)), [0.0, 2.0], rtol=1e-8, atol=1e-10, max_steps=budget)
    assert tight.status[1] == "max_steps" and tight.n_steps[1] == budget
