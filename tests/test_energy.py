"""Tests of tpde_lib.energy: energies, gradient-flow identities, the twisted and softmax metrics.

Each identity is checked against an independent computation: the attention class's own Sinkhorn
solver (the energy uses POT), finite differences, Monte Carlo, Gauss-Hermite quadrature, POT's
exact W_2, or a hand-written formula.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.polynomial.hermite_e import hermegauss
from scipy.linalg import sqrtm

from tpde_lib import energy as en
from tpde_lib import gaussian, transport
from tpde_lib.attention import Linear, Sinkhorn, Softmax, Unnormalised
from tpde_lib.measures import Empirical, Gaussian
from tpde_lib.transport import bures_wasserstein, wasserstein

A_SYM = np.array([[0.8, 0.3], [0.3, -0.5]])  # symmetric, indefinite
A_GEN = np.array([[0.7, -0.4], [0.9, 0.2]])  # not symmetric
COV = np.array([[0.6, 0.2], [0.2, 0.3]])
I2 = np.eye(2)


def _primal_value(plan, X, w, A, eps):
    """1/2 (<pi, C> + eps KL(pi | w w^T)) for the cost C_ij = -<A x_i, x_j>, written out."""
    C = -np.einsum("ia,ba,jb->ij", X, A, X)
    pos = plan > 0
    kl = np.sum(plan[pos] * np.log(plan[pos] / np.outer(w, w)[pos]))
    return 0.5 * (np.sum(plan * C) + eps * kl)


def _rk4(field, x, h):
    k1 = field(x)
    k2 = field(x + 0.5 * h * k1)
    k3 = field(x + 0.5 * h * k2)
    k4 = field(x + h * k3)
    return x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def _grid_gaussian(cov, n_side, width=6.0):
    """A centred Gaussian quantised on a square grid (weights = density), as an Empirical."""
    g = np.linspace(-width, width, n_side) * np.sqrt(np.max(np.diag(cov)))
    pts = np.stack(np.meshgrid(*([g] * cov.shape[0])), -1).reshape(-1, cov.shape[0])
    w = np.exp(-0.5 * np.einsum("ni,ij,nj->n", pts, np.linalg.inv(cov), pts))
    keep = w > 1e-14 * w.max()
    return Empirical(pts[keep], w[keep] / w[keep].sum())


# ---------------------------------------------------------------------------------------------
# the entropic self-transport energy F = 1/2 OT_eps(mu, mu)
# ---------------------------------------------------------------------------------------------


def _weighted_cloud(seed):
    """30 points in 2-D with random weights summing to 1, as an Empirical, eps = 0.7, and the
    generator (for further draws)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((30, 2))
    w = rng.uniform(0.5, 1.5, 30)
    w /= w.sum()
    return X, w, Empirical(X, w), 0.7, rng


@pytest.mark.parametrize("A", [A_SYM, A_GEN])
def test_sinkhorn_energy_equals_primal_value_of_attention_plan(A):
    # energy.sinkhorn_energy solves with POT; the attention class has its own log-domain solver
    X, w, mu, eps, _ = _weighted_cloud(0)
    plan = Sinkhorn(A, I2, eps=eps, tol=1e-13).plan(mu)
    # both solvers stop at marginal violation <= 1e-12: value error of that order
    assert en.sinkhorn_energy(mu, A, eps) == pytest.approx(_primal_value(plan, X, w, A, eps), abs=1e-10)


def _pot_stopping_early(monkeypatch, log_u):
    """POT replaced by a solver that reports convergence (err 0) at the scalings ``log_u``."""
    import ot

    def fake(a, b, M, reg, **kwargs):
        return np.outer(a, b), {"err": [0.0], "log_u": log_u, "log_v": np.zeros_like(b)}

    monkeypatch.setattr(ot, "sinkhorn", fake)


def test_sinkhorn_energy_checks_the_returned_plan_not_pots_report(monkeypatch):
    # POT's stopping test runs on its own iterate; the value returned comes from the polished
    # plan, whose marginals are checked again. A solver that reports convergence from a start far
    # from the solution must still give the right value (more polishing sweeps) ...
    X, w, mu, eps, rng = _weighted_cloud(1)
    plan = Sinkhorn(A_GEN, I2, eps=eps, tol=1e-13).plan(mu)
    ref = _primal_value(plan, X, w, A_GEN, eps)
    _pot_stopping_early(monkeypatch, rng.standard_normal(30) * 20.0)
    assert en.sinkhorn_energy(mu, A_GEN, eps) == pytest.approx(ref, abs=1e-10)
    # ... or raise when the polishing budget cannot reach tol, never return that value
    monkeypatch.setattr("tpde_lib.energy._particles._POLISH", 0)
    with pytest.raises(RuntimeError, match="returned plan's marginal violation"):
        en.sinkhorn_energy(mu, A_GEN, eps)


def test_sinkhorn_energy_of_a_dirac_is_half_the_cost():
    # the only coupling of delta_x with itself is delta_(x,x): KL = 0, F = -<Ax, x>/2
    x = np.array([[0.4, -1.1]])
    assert en.sinkhorn_energy(Empirical(x), A_GEN, 0.3) == pytest.approx(
        -0.5 * x[0] @ A_GEN @ x[0], abs=1e-12
    )


def test_sinkhorn_energy_shifts_by_linear_terms_under_translation():
    # the cost of a translated measure differs by separable terms, so the plan is unchanged and
    # F(mu + v) = F(mu) - (v^T A m + m^T A v + v^T A v)/2 with m the mean (derived in chapter 7)
    rng = np.random.default_rng(1)
    mu = Empirical(rng.standard_normal((25, 2)))
    v, m = np.array([0.7, -0.3]), mu.mean()
    shifted = en.sinkhorn_energy(Empirical(mu.points + v), A_GEN, 0.8)
    expected = en.sinkhorn_energy(mu, A_GEN, 0.8) - 0.5 * (v @ A_GEN @ m + m @ A_GEN @ v + v @ A_GEN @ v)
    assert shifted == pytest.approx(expected, abs=1e-10)


@pytest.mark.parametrize("sigma2, a, eps", [(0.5, 1.3, 1.0), (2.0, -0.7, 0.5)])
def test_gaussian_sinkhorn_energy_matches_quantised_gaussian_in_1d(sigma2, a, eps):
    # a 1-D Gaussian quantised on 200 grid points (spacing 0.08 sigma): the trapezoid rule is
    # spectrally accurate for these smooth integrands; observed agreement ~1e-13
    x = np.linspace(-8, 8, 200) * np.sqrt(sigma2)
    w = np.exp(-(x**2) / (2 * sigma2))
    mu = Empirical(x[:, None], w / w.sum())
    assert en.sinkhorn_energy(mu, [[a]], eps) == pytest.approx(
        en.sinkhorn_energy_gaussian(mu.cov(), [[a]], eps), abs=1e-9
    )


def test_gaussian_sinkhorn_energy_matches_quantised_gaussian_in_2d():
    # 2-D grid (about 450 points), plan from the attention class's solver; the closed form is
    # evaluated at the grid's own covariance (quadrature error of the covariance removed)
    mu = _grid_gaussian(COV, 25)
    plan = Sinkhorn(A_SYM, I2, eps=0.7, tol=1e-12).plan(mu)
    value = _primal_value(plan, mu.points, mu.weights, A_SYM, 0.7)
    assert value == pytest.approx(en.sinkhorn_energy_gaussian(mu.cov(), A_SYM, 0.7), abs=1e-9)


@pytest.mark.parametrize("A", [A_SYM, A_GEN])
def test_gaussian_sinkhorn_energy_equals_its_log_det_form(A):
    # the log-det form of the chapter "Gradient flows" (eps = 1), with G from gaussian.sinkhorn_gain;
    # general eps by the scaling OT_eps(A) = eps OT_1(A / eps); also the mean term -a^T A a / 2
    eps, alpha = 0.6, np.array([0.5, -1.0])
    G = gaussian.sinkhorn_gain(A / eps, COV) @ np.linalg.inv(COV)
    logdet = np.linalg.slogdet(COV)[1] - np.linalg.slogdet(COV - G @ COV @ G.T)[1]
    expected = 0.5 * (-np.trace(A @ COV @ G.T) + 0.5 * eps * logdet) - 0.5 * alpha @ A @ alpha
    assert en.sinkhorn_energy_gaussian(COV, A, eps, mean=alpha) == pytest.approx(expected, abs=1e-12)


def _gain(cov, A, eps):
    """G from the one Gaussian Sinkhorn gain (gaussian.sinkhorn_gain returns G Sigma)."""
    return gaussian.sinkhorn_gain(A / eps, cov) @ np.linalg.inv(cov)


@pytest.mark.parametrize("A", [A_SYM, A_GEN])
def test_the_gaussian_sinkhorn_gain_solves_the_fixed_point(A):
    # the slope G of E[y|x] solves G = (Sigma - G Sigma G^T) A / eps (the plan's Schrodinger
    # system on Gaussians), an identity independent of the closed form of sinkhorn_gain
    eps = 0.8
    G = _gain(COV, A, eps)
    assert np.allclose(G, (COV - G @ COV @ G.T) @ A / eps, atol=1e-12)


@pytest.mark.parametrize("A, eps", [(A_SYM, 1.0), (A_GEN, 0.6), (-2 * I2, 1.5)])
def test_gaussian_energy_gradient_matches_finite_differences(A, eps):
    # central differences along symmetric perturbations E_ij: error O(h^2) ~ 1e-10, round-off
    # ~1e-16/h ~ 1e-11, so 1e-8 is a safe tolerance
    h = 1e-5
    grad = en.sinkhorn_energy_gradient_gaussian(COV, A, eps)
    fd = np.empty((2, 2))
    for i in range(2):
        for j in range(2):
            E = np.zeros((2, 2))
            E[i, j] += 0.5
            E[j, i] += 0.5
            fd[i, j] = (
                en.sinkhorn_energy_gaussian(COV + h * E, A, eps)
                - en.sinkhorn_energy_gaussian(COV - h * E, A, eps)
            ) / (2 * h)
    assert np.allclose(grad, fd, atol=1e-8)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), d=st.integers(1, 3), eps=st.floats(0.2, 3.0), symmetric=st.booleans())
def test_gaussian_energy_gradient_matches_finite_differences_for_random_inputs(seed, d, eps, symmetric):
    # random well-conditioned Sigma (eigenvalues in [0.1, 2]) and A (entries in [-2, 2]); the
    # directional derivative along a random symmetric direction by central differences
    # (h = 1e-5: truncation h^2 x third derivative plus round-off, about 1e-9 at these scales)
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((d, d)))[0]
    S = (U * rng.uniform(0.1, 2.0, d)) @ U.T
    A = rng.uniform(-1, 1, (d, d))
    if symmetric:
        A = A + A.T
    D = rng.standard_normal((d, d))
    D = D + D.T
    h = 1e-5
    fd = (en.sinkhorn_energy_gaussian(S + h * D, A, eps) - en.sinkhorn_energy_gaussian(S - h * D, A, eps)) / (
        2 * h
    )
    grad = en.sinkhorn_energy_gradient_gaussian(S, A, eps)
    assert np.sum(grad * D) == pytest.approx(fd, abs=1e-7)
    if symmetric:  # and the Bures-Wasserstein flow is the Sinkhorn ODE with V = A
        _, dcov = gaussian.sinkhorn_rhs(A, A, eps, np.zeros(d), S)
        assert np.allclose(dcov, en.bures_wasserstein_gradient_flow_rhs(S, A, eps), atol=1e-10)


def test_gaussian_energy_gradient_is_minus_half_A_G_for_symmetric_A():
    G = _gain(COV, A_SYM, 0.9)
    assert np.allclose(en.sinkhorn_energy_gradient_gaussian(COV, A_SYM, 0.9), -0.5 * A_SYM @ G, atol=1e-13)


@pytest.mark.parametrize("eps", [1.0, 0.4])
def test_sinkhorn_covariance_ode_is_the_bures_wasserstein_gradient_flow(eps):
    # chapter "Gradient flows": with V = A = A^T the Sinkhorn covariance ODE equals
    # -2(grad F S + S grad F)
    _, dcov = gaussian.sinkhorn_rhs(A_SYM, A_SYM, eps, np.zeros(2), COV)
    assert np.allclose(dcov, en.bures_wasserstein_gradient_flow_rhs(COV, A_SYM, eps), atol=1e-12)


def test_sinkhorn_particle_energy_dissipates_at_the_rate_minus_mean_squared_velocity():
    # dF/dt along the particle flow (RK4 steps of +-h, central difference) against
    # -sum_i w_i |Gamma_i|^2; the difference is O(h^2) ~ 1e-7 (observed 3e-7 at h = 1e-3),
    # the Sinkhorn tolerance 1e-12 contributes 1e-12 / h ~ 1e-9
    rng = np.random.default_rng(2)
    mu, eps, h = Empirical(rng.standard_normal((30, 2))), 0.7, 1e-3
    att = Sinkhorn(A_SYM, A_SYM, eps=eps, tol=1e-12)
    field = lambda x: att.velocity(mu.with_points(x))
    up, down = _rk4(field, mu.points, h), _rk4(field, mu.points, -h)
    rate = (
        en.sinkhorn_energy(mu.with_points(up), A_SYM, eps)
        - en.sinkhorn_energy(mu.with_points(down), A_SYM, eps)
    ) / (2 * h)
    expected = -en.dissipation(mu, field(mu.points))
    assert rate < 0
    assert rate == pytest.approx(expected, rel=1e-5)


def _gaussian_sinkhorn_flow(V, eps):
    """The Gaussian Sinkhorn ODE (A = A_SYM) on the flat state (alpha, Sigma), and its energy."""

    def field(state):
        dm, dc = gaussian.sinkhorn_rhs(A_SYM, V, eps, state[:2], state[2:].reshape(2, 2))
        return np.concatenate([dm, dc.ravel()])

    def energy(state):
        return en.sinkhorn_energy_gaussian(state[2:].reshape(2, 2), A_SYM, eps, mean=state[:2])

    return field, energy


def test_gaussian_sinkhorn_energy_dissipates_at_the_rate_minus_mean_squared_velocity():
    # along the Gaussian ODE (mean and covariance), Gamma(x) = A(alpha + G(x - alpha)) so
    # int |Gamma|^2 = |A alpha|^2 + tr(A G S G^T A); central difference error O(h^2)
    eps, h = 0.8, 1e-4
    alpha = np.array([0.3, -0.6])

    field, energy = _gaussian_sinkhorn_flow(A_SYM, eps)
    state = np.concatenate([alpha, COV.ravel()])
    rate = (energy(_rk4(field, state, h)) - energy(_rk4(field, state, -h))) / (2 * h)
    M = A_SYM @ _gain(COV, A_SYM, eps)
    expected = -(np.sum((A_SYM @ alpha) ** 2) + np.trace(M @ COV @ M.T))
    assert rate == pytest.approx(expected, rel=1e-7)


# ---------------------------------------------------------------------------------------------
# the interaction energy E of unnormalised attention, softmax, mobility
# ---------------------------------------------------------------------------------------------


def test_interaction_energy_matches_the_naive_double_sum(monkeypatch):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((40, 2))
    w = rng.uniform(size=40)
    w /= w.sum()
    naive = 0.5 * sum(w[i] * w[j] * np.exp(X[j] @ A_GEN @ X[i]) for i in range(40) for j in range(40))
    monkeypatch.setattr(en._particles, "_BLOCK_ROWS", 7)  # several row blocks, a ragged last one
    assert en.interaction_energy(Empirical(X, w), A_GEN) == pytest.approx(naive, rel=1e-12)
    Z = en.partition_function(Empirical(X, w), A_GEN)
    assert np.allclose(Z, np.exp(X @ A_GEN.T @ X.T) @ w, rtol=1e-12)


def test_gaussian_interaction_energy_matches_gauss_hermite_quadrature_in_1d():
    # E = 1/2 E[exp(a x y)], x, y iid N(m, s): a 2-D Gauss-Hermite rule with 80 nodes per axis
    # is exact to round-off for this entire integrand at |a| s < 1/2; also the closed form
    # 1/2 (1 - s^2)^(-1/2) exp(-m^2 / (1 + s)) of the chapter for a = -1
    nodes, wts = hermegauss(80)
    wts = wts / wts.sum()
    for s, a, m in [(0.3, -1.0, 0.8), (0.2, 1.5, -0.4)]:
        x = m + np.sqrt(s) * nodes
        quad = 0.5 * wts @ np.exp(a * np.outer(x, x)) @ wts
        assert en.interaction_energy_gaussian([[s]], [[a]], mean=[m]) == pytest.approx(quad, rel=1e-10)
    s, m = 0.3, 0.8
    assert en.interaction_energy_gaussian([[s]], [[-1.0]], mean=[m]) == pytest.approx(
        0.5 * (1 - s**2) ** -0.5 * np.exp(-(m**2) / (1 + s)), rel=1e-12
    )


def test_gaussian_interaction_energy_matches_monte_carlo_in_2d():
    # 400 000 pairs; at ||S^1/2 A S^1/2|| ~ 0.3 the integrand has finite variance, so the
    # sample mean is within 5 standard errors
    rng = np.random.default_rng(4)
    S, alpha = 0.5 * COV, np.array([0.4, -0.3])
    x = rng.multivariate_normal(alpha, S, size=400_000)
    y = rng.multivariate_normal(alpha, S, size=400_000)
    vals = 0.5 * np.exp(np.einsum("ni,ij,nj->n", y, A_GEN, x))
    se = vals.std() / np.sqrt(vals.size)
    assert abs(en.interaction_energy_gaussian(S, A_GEN, mean=alpha) - vals.mean()) < 5 * se


def test_gaussian_interaction_energy_is_infinite_outside_the_domain():
    assert en.interaction_energy_gaussian(np.diag([1.0, 0.2]), -I2) == np.inf
    assert np.isfinite(en.interaction_energy_gaussian(np.diag([0.99, 0.2]), -I2))


def _twisted_setup():
    """A = -B (B SPD), V = -P A with P SPD: mobility -V A^{-1} = P (not the identity)."""
    B = np.array([[1.0, 0.4], [0.4, 0.7]])
    P = np.array([[1.5, -0.5], [-0.5, 0.8]])
    return -B, P @ B, P


def test_mobility_of_unnormalised_attention_is_minus_V_A_inverse():
    A, V, P = _twisted_setup()
    assert np.allclose(en.mobility(Unnormalised(A, V)), P, atol=1e-12)
    assert np.allclose(en.mobility(Softmax(A, V)), P, atol=1e-12)
    assert np.allclose(en.mobility(Sinkhorn(A, V)), -P, atol=1e-12)
    with pytest.raises(ValueError, match="symmetric"):
        en.mobility(Sinkhorn(A_GEN, I2))
    with pytest.raises(NotImplementedError):
        en.mobility(Linear(A, V))


def test_mobility_of_a_non_attention_raises_type_error():
    A, _, _ = _twisted_setup()
    with pytest.raises(TypeError, match="att must be"):
        en.mobility(A)


@pytest.mark.parametrize("variant", ["unnormalised", "softmax"])
def test_interaction_energy_dissipates_at_the_twisted_rate(variant):
    # dE/dt = -int rho <Gamma, P^{-1} Gamma> dmu with rho = 1 (unnormalised) or rho = Z_mu
    # (softmax); central difference of RK4 steps: the O(h^2) error is large here (4.5e-4
    # relative at h = 1e-3, 4.5e-6 at 1e-4: |Gamma| ~ 6), round-off ~1e-16 / h ~ 1e-12
    A, V, P = _twisted_setup()
    rng = np.random.default_rng(5)
    mu, h = Empirical(0.8 * rng.standard_normal((30, 2))), 1e-4
    att = Unnormalised(A, V) if variant == "unnormalised" else Softmax(A, V)
    field = lambda x: att.velocity(mu.with_points(x))
    rate = (
        en.interaction_energy(mu.with_points(_rk4(field, mu.points, h)), A)
        - en.interaction_energy(mu.with_points(_rk4(field, mu.points, -h)), A)
    ) / (2 * h)
    rho = None if variant == "unnormalised" else en.partition_function(mu, A)
    expected = -en.dissipation(mu, field(mu.points), P, rho)
    assert rate == pytest.approx(expected, rel=1e-5)
    # the plain W2 rate int |Gamma|^2 is a different number for this P
    assert abs(rate + en.dissipation(mu, field(mu.points), None, rho)) > 1e-2 * abs(rate)


def test_sinkhorn_gaussian_flow_with_mobility_dissipates_in_the_twisted_bw_metric():
    # V = P A (A symmetric, P SPD): mobility V A^{-1} = P; along the Gaussian ODE (RK4 steps of
    # +-h), dF/dt = -int <Gamma, P^-1 Gamma> dN (error O(h^2) ~ 1e-9) and the twisted BW speed
    # d_P(g_0, g_h)/h equals its square root to O(h) ~ 1e-4 relative
    P = np.array([[1.5, -0.5], [-0.5, 0.8]])
    V, eps, h = P @ A_SYM, 0.7, 1e-4
    alpha = np.array([0.3, -0.2])

    field, energy = _gaussian_sinkhorn_flow(V, eps)
    state = np.concatenate([alpha, COV.ravel()])
    up, down = _rk4(field, state, h), _rk4(field, state, -h)
    rate = (energy(up) - energy(down)) / (2 * h)
    b, M = V @ alpha, V @ _gain(COV, A_SYM, eps)
    Pinv = np.linalg.inv(P)
    diss = b @ Pinv @ b + np.trace(Pinv @ M @ COV @ M.T)
    assert rate == pytest.approx(-diss, rel=1e-7)
    speed = (
        transport.twisted_bures_wasserstein(Gaussian(alpha, COV), Gaussian(up[:2], up[2:].reshape(2, 2)), P)
        / h
    )
    assert speed == pytest.approx(np.sqrt(diss), rel=1e-3)


# ---------------------------------------------------------------------------------------------
# gradient-flow witness: symmetry of the velocity Jacobian
# ---------------------------------------------------------------------------------------------


def test_velocity_jacobian_matches_the_analytic_jacobian_of_linear_attention():
    # Gamma_i = V M A x_i with M = sum_j w_j x_j x_j^T:
    # dGamma_i/dx_j = V [delta_ij M A + w_j ((x_j^T A x_i) I + x_j (A x_i)^T)]
    rng = np.random.default_rng(6)
    n, d = 5, 2
    X = rng.standard_normal((n, d))
    w = np.full(n, 1 / n)
    V = rng.standard_normal((d, d))
    M = (X * w[:, None]).T @ X
    J = np.zeros((n * d, n * d))
    for i in range(n):
        for j in range(n):
            u = A_GEN @ X[i]
            block = w[j] * ((X[j] @ u) * np.eye(d) + np.outer(X[j], u))
            if i == j:
                block = block + M @ A_GEN
            J[i * d : (i + 1) * d, j * d : (j + 1) * d] = V @ block
    # Gamma is cubic in X: central-difference error h^2 |Gamma'''| / 6 ~ 1e-8 at h = 1e-4
    assert np.allclose(en.velocity_jacobian(Linear(A_GEN, V), Empirical(X)), J, atol=1e-7)


def test_softmax_is_not_a_w2_gradient_flow_while_unnormalised_and_sinkhorn_are():
    # V = I, A = -I: mobility P = I for unnormalised, Sinkhorn with V = A = A^T: P = I.
    # The finite-difference error is estimated by comparing steps h and 2h.
    rng = np.random.default_rng(7)
    mu = Empirical(rng.standard_normal((8, 2)))
    cases = {
        "softmax": Softmax(-I2, I2),
        "unnormalised": Unnormalised(-I2, I2),
        "sinkhorn": Sinkhorn(A_SYM, A_SYM, eps=0.7, tol=1e-13),
    }
    defects, fd_errors = {}, {}
    for name, att in cases.items():
        J1 = en.velocity_jacobian(att, mu, 1e-4)
        J2 = en.velocity_jacobian(att, mu, 2e-4)
        defects[name] = en.symmetry_defect(J1, mu.weights)
        fd_errors[name] = np.linalg.norm(J1 - J2) / np.linalg.norm(J1)
    fd = max(fd_errors.values())
    assert fd < 1e-6
    assert defects["softmax"] > 1e4 * fd  # observed ~0.5 vs ~1e-8
    assert defects["unnormalised"] < 10 * fd + 1e-7
    assert defects["sinkhorn"] < 10 * fd + 1e-7


def test_unnormalised_jacobian_is_symmetric_only_with_its_mobility():
    A, V, P = _twisted_setup()
    mu = Empirical(np.random.default_rng(8).standard_normal((6, 2)))
    J = en.velocity_jacobian(Unnormalised(A, V), mu)
    assert en.symmetry_defect(J, mu.weights, P) < 1e-7
    assert en.symmetry_defect(J, mu.weights) > 1e-2


# ---------------------------------------------------------------------------------------------
# twisted metric, Bures-Wasserstein geodesics, non-convexity witnesses
# ---------------------------------------------------------------------------------------------


def test_twisted_wasserstein_is_w2_after_the_change_of_variables():
    rng = np.random.default_rng(9)
    mu, nu = Empirical(rng.standard_normal((12, 2))), Empirical(rng.standard_normal((15, 2)))
    P = np.diag([4.0, 0.25])
    expected = wasserstein(Empirical(mu.points * [0.5, 2.0]), Empirical(nu.points * [0.5, 2.0]))
    assert transport.twisted_wasserstein(mu, nu, P) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="P must be .*positive"):
        transport.twisted_wasserstein(mu, nu, -P)


def test_twisted_bures_wasserstein_in_1d():
    # W2(N(m1, s1), N(m2, s2))^2 = (m1 - m2)^2 + (sqrt s1 - sqrt s2)^2, scaled by 1/p
    g1, g2, p = Gaussian([0.3], [[2.0]]), Gaussian([-0.5], [[0.5]]), 3.0
    expected = np.sqrt(((0.8) ** 2 + (np.sqrt(2.0) - np.sqrt(0.5)) ** 2) / p)
    assert transport.twisted_bures_wasserstein(g1, g2, [[p]]) == pytest.approx(expected, rel=1e-12)


def test_twisted_metric_speed_equals_the_square_root_of_the_dissipation():
    # energy-dissipation equality in d_P: |mu'|_P = sqrt(int <Gamma, P^-1 Gamma>) (first order in h)
    A, V, P = _twisted_setup()
    rng = np.random.default_rng(10)
    mu, h = Empirical(0.8 * rng.standard_normal((20, 2))), 1e-4
    att = Unnormalised(A, V)
    moved = mu.with_points(_rk4(lambda x: att.velocity(mu.with_points(x)), mu.points, h))
    speed = transport.twisted_wasserstein(mu, moved, P) / h
    assert speed == pytest.approx(np.sqrt(en.dissipation(mu, att.velocity(mu), P)), rel=1e-3)


def test_bures_wasserstein_geodesic_has_constant_speed():
    # W2(g_s, g_t) = |t - s| W2(g_0, g_1) along a geodesic (checked with transport.bures_wasserstein)
    g0 = Gaussian([0.0, 1.0], COV)
    g1 = Gaussian([1.0, -0.5], np.array([[0.2, -0.1], [-0.1, 0.9]]))
    means, covs = transport.bures_wasserstein_geodesic(g0, g1, np.array([0.0, 0.3, 0.8, 1.0]))
    assert np.allclose(covs[0], g0.cov) and np.allclose(covs[-1], g1.cov, atol=1e-12)
    total = bures_wasserstein(g0, g1)
    d = bures_wasserstein(Gaussian(means[1], covs[1]), Gaussian(means[2], covs[2]))
    assert d == pytest.approx(0.5 * total, rel=1e-9)


def test_squared_distance_from_the_start_grows_as_s_squared_along_a_geodesic():
    # W2(g_0, g_s)^2 = s^2 W2(g_0, g_1)^2: the energy evaluated along the geodesic is s^2 times a
    # constant, whose second differences are exactly 2 W2^2 (up to round-off)
    g0 = Gaussian([0.5, 0.0], COV)
    g1 = Gaussian([-0.5, 1.0], np.array([[0.3, 0.1], [0.1, 1.2]]))
    s = np.linspace(0, 1, 11)
    dist2 = lambda m, S: bures_wasserstein(g0, Gaussian(m, S)) ** 2
    vals = en.energy_along_geodesic(dist2, g0, g1, s)
    total = bures_wasserstein(g0, g1) ** 2
    assert np.allclose(vals, s**2 * total, atol=1e-10)
    assert np.allclose(en.second_differences(vals, s), 2 * total, atol=1e-6)
    with pytest.raises(ValueError, match="uniformly"):
        en.second_differences(vals, s**2)


def test_interaction_energy_is_not_convex_along_a_translation_geodesic():
    # W2 geodesic translating N(0, 0.2 I) by s v: E(s) = 1/2 det(I - S^2)^(-1/2) exp(-s^2|v|^2/1.2)
    # has second difference < 0 at s = 0; check on the closed form and on particles
    S, v, ds = 0.2 * I2, np.array([1.0, 0.0]), 0.05
    vals = [en.interaction_energy_gaussian(S, -I2, mean=s * v) for s in (-ds, 0.0, ds)]
    second = (vals[0] - 2 * vals[1] + vals[2]) / ds**2
    exact = 0.5 / (1 - 0.04) * (-2 / 1.2)  # d^2/ds^2 at s = 0
    assert second == pytest.approx(exact, rel=1e-2)  # O(ds^2) difference error
    pts = Gaussian([0, 0], S).sample(200, seed=11).points
    part = [en.interaction_energy(Empirical(pts + s * v), -I2) for s in (-ds, 0.0, ds)]
    assert (part[0] - 2 * part[1] + part[2]) / ds**2 < -0.5


def test_bad_arguments_raise_named_errors():
    mu = Empirical(np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"^A must have shape \(2, 2\)"):
        en.sinkhorn_energy(mu, np.eye(3))
    with pytest.raises(ValueError, match="eps"):
        en.sinkhorn_energy_gaussian(COV, A_SYM, eps=0.0)
    with pytest.raises(ValueError, match="cov"):
        en.interaction_energy_gaussian(-COV, A_SYM)
    with pytest.raises(TypeError, match="mu"):
        en.interaction_energy(np.zeros((3, 2)), A_SYM)
    with pytest.raises(ValueError, match="cov0"):
        transport.bures_wasserstein_map(np.zeros((2, 2)), COV)


# ---------------------------------------------------------------------------------------------
# twisted geodesics, the softmax metric, finite-difference witnesses
# ---------------------------------------------------------------------------------------------


def test_twisted_geodesic_is_the_p_half_image_of_the_bw_geodesic_of_the_images():
    # independent construction with scipy's sqrtm: P^(1/2) geodesic(P^(-1/2) g0, P^(-1/2) g1)
    P = np.array([[2.0, 0.3], [0.3, 0.5]])
    R = np.real(sqrtm(P))
    Ri = np.linalg.inv(R)
    g0, g1 = Gaussian([0.1, 0.4], COV), Gaussian([-1.0, 0.2], [[0.9, -0.2], [-0.2, 0.3]])
    s = np.linspace(0, 1, 7)
    means, covs = transport.twisted_bures_wasserstein_geodesic(g0, g1, P, s)
    m_ref, c_ref = transport.bures_wasserstein_geodesic(
        Gaussian(Ri @ g0.mean, Ri @ g0.cov @ Ri), Gaussian(Ri @ g1.mean, Ri @ g1.cov @ Ri), s
    )
    assert np.allclose(means, m_ref @ R.T, atol=1e-12)
    assert np.allclose(covs, R @ c_ref @ R.T, atol=1e-12)
    assert np.allclose(covs[-1], g1.cov, atol=1e-12)


def test_twisted_geodesic_has_constant_d_p_speed_and_a_plain_bw_geodesic_does_not():
    # d_P(g_s, g_t) = |t - s| d_P(g_0, g_1) along a d_P geodesic (round-off ~1e-13 relative);
    # the plain BW geodesic between the same end points is measurably longer in d_P
    P = np.array([[1.5, -0.5], [-0.5, 0.8]])
    g0, g1 = Gaussian([0.0, 0.0], COV), Gaussian([0.8, -0.3], [[0.1, -0.05], [-0.05, 0.6]])
    s = np.linspace(0, 1, 21)
    total = transport.twisted_bures_wasserstein(g0, g1, P)

    def segments(geo):
        gs = [Gaussian(m, S) for m, S in zip(*geo)]
        return np.array([transport.twisted_bures_wasserstein(a, b, P) for a, b in zip(gs, gs[1:])])

    seg = segments(transport.twisted_bures_wasserstein_geodesic(g0, g1, P, s))
    assert np.allclose(seg, total / 20, rtol=1e-10)
    assert segments(transport.bures_wasserstein_geodesic(g0, g1, s)).sum() > total * (1 + 1e-4)
    with pytest.raises(ValueError, match="P must be"):
        transport.twisted_bures_wasserstein_geodesic(g0, g1, -P, s)


def _gauss_hermite_2d(g, n=40):
    """Nodes (m, 2) and weights (m,) of a product Gauss-Hermite rule for the Gaussian g."""
    x, w = hermegauss(n)
    w = w / w.sum()
    X = np.stack(np.meshgrid(x, x), -1).reshape(-1, 2)
    W = np.outer(w, w).ravel()
    return g.mean + X @ np.linalg.cholesky(g.cov).T, W


@pytest.mark.parametrize("weighted", [False, True])
def test_gaussian_metric_matches_gauss_hermite_quadrature(weighted):
    # int rho <u1, P^-1 u2> dN with rho = 1 or Z_mu(x) = int e^{<Ax, y>} dN(y), both integrals
    # (and Z itself) by a 40 x 40 product rule: polynomial times e^{quadratic} with
    # ||S^1/2 A S^1/2|| = 0.3, converged to round-off
    g = Gaussian([0.3, -0.2], [[0.4, 0.1], [0.1, 0.3]])
    A = np.array([[-0.6, 0.35], [0.05, -0.5]])  # not symmetric: A and A^T differ
    P = np.array([[1.5, -0.5], [-0.5, 0.8]])
    rng = np.random.default_rng(12)
    u1 = (rng.standard_normal(2), rng.standard_normal((2, 2)))
    u2 = (rng.standard_normal(2), rng.standard_normal((2, 2)))
    X, W = _gauss_hermite_2d(g)
    Z = np.exp(X @ A.T @ X.T) @ W if weighted else np.ones(len(W))
    f1 = u1[0] + (X - g.mean) @ u1[1].T
    f2 = u2[0] + (X - g.mean) @ u2[1].T
    expected = np.sum(W * Z * np.sum(f1 * np.linalg.solve(P, f2.T).T, axis=1))
    got = en.gaussian_metric(g, u1, u2, P, A if weighted else None)
    assert got == pytest.approx(expected, rel=1e-10)
    with pytest.raises(ValueError, match="not integrable"):
        en.gaussian_metric(Gaussian([0, 0], 3 * I2), u1, u2, P, A)


def test_softmax_is_the_gradient_of_the_energy_for_the_z_weighted_metric():
    # grad_X Phi = -diag(w Z) (x) P^-1 Gamma (eq-gf-softmax-gradient), FD error ~1e-10 relative;
    # the unweighted metric is wrong by O(1)
    B = np.array([[1.0, 0.4], [0.4, 0.7]])
    P = np.array([[1.5, -0.5], [-0.5, 0.8]])
    A, V = -B, P @ B
    rng = np.random.default_rng(13)
    w = rng.uniform(0.5, 1.5, 12)
    mu = Empirical(0.6 * rng.standard_normal((12, 2)), w / w.sum())
    grad = en.configuration_gradient(lambda m: en.interaction_energy(m, A), mu)
    PinvG = np.linalg.solve(P, Softmax(A, V).velocity(mu).T).T
    rho = mu.weights * en.partition_function(mu, A)
    assert np.allclose(grad, -rho[:, None] * PinvG, atol=1e-8 * np.abs(grad).max())
    assert not np.allclose(grad, -mu.weights[:, None] * PinvG, atol=1e-2 * np.abs(grad).max())


def test_configuration_gradient_matches_the_analytic_gradient_of_a_quadratic():
    # Phi(X) = sum_i w_i |x_i|^2 / 2 has gradient w_i x_i; central differences are exact up to
    # round-off for a quadratic
    rng = np.random.default_rng(14)
    mu = Empirical(rng.standard_normal((5, 3)))
    fun = lambda m: 0.5 * np.sum(m.weights * np.sum(m.points**2, axis=1))
    assert np.allclose(en.configuration_gradient(fun, mu), mu.weights[:, None] * mu.points, atol=1e-9)


def test_frobenius_gradient_of_log_det_is_the_inverse():
    # d log det S = tr(S^-1 dS): FD error h^2 |f^(3)| ~ 1e-10
    S = np.array([[0.9, 0.3, 0.0], [0.3, 0.5, 0.1], [0.0, 0.1, 0.7]])
    grad = en.frobenius_gradient(lambda X: np.linalg.slogdet(X)[1], S)
    assert np.allclose(grad, np.linalg.inv(S), atol=1e-8)


def test_geodesic_convexity_search_counts_a_concave_and_a_convex_energy():
    # exact case: W2(g0, g_s)^2 = s^2 W2^2 along a geodesic from g0 is convex (not counted),
    # its negative concave (counted)
    rng = np.random.default_rng(15)
    pairs = []
    for _ in range(5):
        X, Y = rng.standard_normal((2, 2)), rng.standard_normal((2, 2))
        pairs.append((Gaussian([0, 0], X @ X.T + 0.1 * I2), Gaussian([1, 0], Y @ Y.T + 0.1 * I2)))
    g_ref = pairs[0][0]
    res = en.search_geodesic_convexity(
        {
            "+": lambda m, S: bures_wasserstein(g_ref, Gaussian(m, S)) ** 2,
            "-": lambda m, S: -(bures_wasserstein(g_ref, Gaussian(m, S)) ** 2),
        },
        pairs[:1],
    )
    assert res.n_geodesics == 1 and res.n_nonconvex == {"+": 0, "-": 1}
    with pytest.raises(TypeError, match="energies"):
        en.search_geodesic_convexity([], pairs)


def test_dissipation_is_the_weighted_sum_written_out():
    # sum_i w_i rho_i <Gamma_i, P^-1 Gamma_i> with non-uniform weights, as a naive loop
    rng = np.random.default_rng(16)
    w = rng.uniform(0.2, 2.0, 7)
    mu = Empirical(rng.standard_normal((7, 2)), w / w.sum())
    G, rho = rng.standard_normal((7, 2)), rng.uniform(0.5, 2.0, 7)
    P = np.array([[1.5, -0.5], [-0.5, 0.8]])
    Pinv = np.linalg.inv(P)
    expected = sum(mu.weights[i] * rho[i] * G[i] @ Pinv @ G[i] for i in range(7))
    assert en.dissipation(mu, G, P, rho) == pytest.approx(expected, rel=1e-13)


# ---- extreme scales (issue 28) -----------------------------------------------------------------


def _second_order_sinkhorn_energy(X, A):
    """(F_0, F_1): F = F_0 - F_1 / eps + O(eps^-2) as eps -> inf, for uniform weights.

    Derived: the plan is w w^T (1 + h) with h = -Ct / eps to first order, Ct the doubly centred
    cost, so OT_eps = E[C] - E[Ct^2] / (2 eps) + O(|C|^3 / eps^2) and F = OT_eps / 2.
    """
    n = X.shape[0]
    w = np.full(n, 1.0 / n)
    C = -((X @ A.T) @ X.T)
    Ct = C - (C @ w)[:, None] - (w @ C)[None, :] + w @ C @ w
    return 0.5 * (w @ C @ w), 0.25 * (w @ (Ct**2) @ w)


@pytest.mark.parametrize("eps", [1e8, 1e12, 1e16, 1e100, 1e250])
def test_sinkhorn_energy_is_right_at_huge_eps(eps):
    # before: the KL term, rounded at 1e-16 and multiplied by eps, gave 1e-16 eps of error (a
    # value 1e5 times too large at eps = 1e20); the expansion's remainder is O(|C|^3 / eps^2),
    # below 1e-16 relative from eps = 1e8 on, so 1e-13 relative leaves room for round-off only
    rng = np.random.default_rng(3)
    X = rng.standard_normal((25, 2))
    A = np.array([[0.6, 0.1], [0.1, -0.4]])
    F0, F1 = _second_order_sinkhorn_energy(X, A)
    value = en.sinkhorn_energy(Empirical(X), A, eps)
    assert value == pytest.approx(F0 - F1 / eps, rel=1e-13, abs=1e-15 * abs(F0))


def _h_longdouble(sigma):
    s = np.longdouble(sigma) ** 2
    r = np.sqrt(1 + 4 * s)
    return -(r - 1) / 2 + np.log((1 + r) / 2) / 2


@pytest.mark.parametrize("scale", [1e-200, 1.0, 1e100, 1e200, 1e250])
def test_gaussian_sinkhorn_energy_gradient_and_flow_at_extreme_scales(scale):
    # Sigma = scale * I, A = Q diag(a) Q^T: the singular values of Sigma^1/2 A Sigma^1/2 / eps are
    # scale |a_i| / eps, so F = eps/2 sum h(scale |a_i| / eps) and grad F =
    # -(scale / 2 eps) Q diag(a_i^2 phi(scale^2 a_i^2 / eps^2)) Q^T, evaluated in long double
    # (range 1e4932: no overflow); before, Sigma = 1e200 I gave NaN for all three
    eps = 0.7
    Q = np.linalg.qr(np.array([[1.0, 2.0], [-0.5, 1.0]]))[0]
    a = np.array([0.9, -0.3])
    A = (Q * a) @ Q.T
    S = scale * np.eye(2)
    sig = [np.longdouble(scale) * np.longdouble(abs(x)) / np.longdouble(eps) for x in a]
    F_ref = np.longdouble(eps) / 2 * sum(_h_longdouble(x) for x in sig)
    phi = [2 / (1 + np.sqrt(1 + 4 * x**2)) for x in sig]
    g_ref = [
        -(np.longdouble(scale) / (2 * np.longdouble(eps))) * np.longdouble(x) ** 2 * p for x, p in zip(a, phi)
    ]
    grad_ref = (Q * np.array(g_ref, dtype=float)) @ Q.T
    F = en.sinkhorn_energy_gaussian(S, A, eps)
    grad = en.sinkhorn_energy_gradient_gaussian(S, A, eps)
    flow = en.bures_wasserstein_gradient_flow_rhs(S, A, eps)
    assert F == pytest.approx(float(F_ref), rel=1e-13)
    np.testing.assert_allclose(grad, grad_ref, rtol=1e-13, atol=1e-14 * np.abs(grad_ref).max())
    flow_ref = -4.0 * scale * grad_ref  # -2 (grad S + S grad) with S = scale I
    np.testing.assert_allclose(flow, flow_ref, rtol=1e-13, atol=1e-14 * np.abs(flow_ref).max())


def test_gaussian_sinkhorn_energy_scaling_law_for_a_nonsymmetric_A():
    # derived: Sigma^1/2 (A / eps) Sigma^1/2 is unchanged by (Sigma, eps) -> (c Sigma, c eps), so
    # F(c Sigma, A, eps) = c F(Sigma, A, eps / c); both sides at extreme but representable scales
    A = np.array([[0.5, 0.3], [-0.1, -0.3]])
    S = np.array([[1.0, 0.3], [0.3, 0.5]])
    for c in (1e200, 1e-200):
        assert en.sinkhorn_energy_gaussian(c * S, A, 1.0) == pytest.approx(
            c * en.sinkhorn_energy_gaussian(S, A, 1.0 / c), rel=1e-13
        )


def _lse_longdouble(v):
    v = np.asarray(v, dtype=np.longdouble)
    top = v.max()
    return top + np.log(np.sum(np.exp(v - top)))


def test_log_energies_are_finite_where_the_scores_are():
    # |A| = 1.2e308 and tokens of norm ~1: A x_i overflows float64 although every score
    # <A x_i, x_j> is below 1.8e308; before, log Z and log E were inf. Reference: the scores and
    # the log-sum-exps in long double (range 1e4932), relative 1e-15 (the scores' round-off)
    A = 1.2e308 * np.array([[1.0, 1.0], [0.0, 0.0]])
    X = np.array([[0.6, 1.0], [0.5, 0.9], [0.3, 0.2]])
    w = np.array([0.5, 0.3, 0.2])
    mu = Empirical(X, w)
    Xl, Al = X.astype(np.longdouble), A.astype(np.longdouble)
    L = (Xl @ Al.T) @ Xl.T
    logw = np.log(w.astype(np.longdouble))
    lz_ref = np.array([_lse_longdouble(L[i] + logw) for i in range(3)])
    le_ref = np.log(np.longdouble(0.5)) + _lse_longdouble(lz_ref + logw)
    np.testing.assert_allclose(en.partition_function(mu, A, log=True), lz_ref.astype(float), rtol=1e-15)
    assert en.interaction_energy(mu, A, log=True) == pytest.approx(float(le_ref), rel=1e-15)
    # scores beyond the float range: log E is not representable either, say so
    with pytest.raises(FloatingPointError, match="exceed the float range"):
        en.interaction_energy(Empirical(np.array([[1e160, 0.0], [0.0, 1.0]])), np.eye(2), log=True)


def test_stable_gaussian_sinkhorn_formulas_agree_with_the_plain_ones_at_ordinary_scales():
    # the rescaled, singular-value forms against the plain formulas they replaced (eigenvalues
    # of M M^T, phi of M M^T and M^T M, written out here), for random inputs of size ~1:
    # agreement to 1e-13 relative (the plain forms lose ~1e-15 to cancellation in sqrt(1+4s)-1)
    from scipy.linalg import eigh

    def plain(S, A, eps):
        lam, U = eigh(S)
        R = (U * np.sqrt(np.clip(lam, 0, None))) @ U.T
        B = A / eps
        M = R @ B @ R
        s = np.linalg.eigvalsh(M @ M.T)
        r = np.sqrt(1 + 4 * s)
        F = 0.5 * eps * np.sum(-0.5 * (r - 1) + 0.5 * np.log(0.5 * (1 + r)))

        def phi(X):
            mu, W = eigh(X)
            return (W * (2 / (1 + np.sqrt(1 + 4 * np.clip(mu, 0, None))))) @ W.T

        G = -0.25 * eps * (B.T @ R @ phi(M @ M.T) @ R @ B + B @ R @ phi(M.T @ M) @ R @ B.T)
        return F, 0.5 * (G + G.T)

    rng = np.random.default_rng(11)
    for _ in range(20):
        d = int(rng.integers(1, 5))
        Gm = rng.standard_normal((d, d))
        S = Gm @ Gm.T + 0.1 * np.eye(d)
        A = rng.standard_normal((d, d))
        eps = float(rng.uniform(0.2, 5.0))
        F_ref, G_ref = plain(S, A, eps)
        assert en.sinkhorn_energy_gaussian(S, A, eps) == pytest.approx(F_ref, rel=1e-13)
        np.testing.assert_allclose(
            en.sinkhorn_energy_gradient_gaussian(S, A, eps),
            G_ref,
            rtol=1e-13,
            atol=1e-13 * np.abs(G_ref).max(),
        )
