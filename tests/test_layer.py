"""Tests of the Transformer layer (attention + feed-forward + normalisation on the sphere).

Oracles: per-token loops of the softmax field and of the tangent projection, a hand-written RK4
with renormalisation, Gauss–Hermite moments of the layer's field (for the closure), the closed
form Sigma_t = e^{tW} Sigma_0 e^{tW^T} of a layer whose attention only moves the mean.
"""

import math

import numpy as np
import pytest
from scipy.linalg import expm

import tpde_lib as tp
from tpde_lib.gaussian import gauss_hermite


def _loop_softmax(A, V, X, w):
    out = np.zeros_like(X)
    for i in range(X.shape[0]):
        k = np.array([w[j] * math.exp(X[j] @ A @ X[i]) for j in range(X.shape[0])])
        out[i] = V @ (k @ X / k.sum())
    return out


def _loop_project(X, v):
    out = np.empty_like(v)
    for i in range(X.shape[0]):
        x = X[i] / np.linalg.norm(X[i])
        out[i] = v[i] - (x @ v[i]) * x
    return out


def _setup(n=9, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = tp.to_sphere(rng.standard_normal((n, d)))
    A = rng.standard_normal((d, d)) / math.sqrt(d)
    V = rng.standard_normal((d, d)) / math.sqrt(d)
    W = rng.standard_normal((d, d)) / math.sqrt(d)
    b = rng.standard_normal(d)
    w = rng.random(n)
    return X, A, V, W, b, w / w.sum()


def test_layer_field_is_attention_plus_feedforward():
    X, A, V, W, b, w = _setup()
    layer = tp.Layer(tp.Softmax(A, V), tp.AffineFeedForward(W, b))
    expected = _loop_softmax(A, V, X, w) + X @ W.T + b
    np.testing.assert_allclose(layer.velocity(tp.Empirical(X, w)), expected, rtol=1e-12, atol=1e-13)


def test_sphere_layer_field_is_the_tangent_part_of_the_sum():
    X, A, V, W, b, w = _setup()
    layer = tp.Layer(tp.Softmax(A, V), tp.AffineFeedForward(W, b), normalisation="sphere")
    v = layer.velocity(tp.Empirical(X, w))
    expected = _loop_project(X, _loop_softmax(A, V, X, w) + X @ W.T + b)
    np.testing.assert_allclose(v, expected, rtol=1e-12, atol=1e-13)
    assert np.abs(np.einsum("ij,ij->i", v, X)).max() < 1e-14  # tangent


def test_general_callable_feedforward_is_added():
    X, A, V, _, _, w = _setup()
    layer = tp.Layer(tp.Softmax(A, V), lambda x, t: np.tanh(x) * (1 + t))
    expected = _loop_softmax(A, V, X, w) + 1.5 * np.tanh(X)
    np.testing.assert_allclose(layer.velocity(tp.Empirical(X, w), t=0.5), expected, rtol=1e-12, atol=1e-13)


def test_simulate_on_the_sphere_matches_a_per_token_rk4_with_renormalisation():
    X, A, V, W, b, w = _setup(n=6)
    layer = tp.Layer(tp.Softmax(A, V), tp.AffineFeedForward(W, b), normalisation="sphere")
    h, steps = 0.05, 40
    traj = tp.simulate(layer, tp.Empirical(X, w), [0.0, h * steps], h=h)

    def f(x):
        return _loop_project(x, _loop_softmax(A, V, x, w) + x @ W.T + b)

    x = X.copy()
    for _ in range(steps):
        k1 = f(x)
        k2 = f(x + 0.5 * h * k1)
        k3 = f(x + 0.5 * h * k2)
        k4 = f(x + h * k3)
        x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(traj.points[-1], x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["euler", "rk4", "adaptive"])
def test_tokens_stay_on_the_sphere_to_round_off(method):
    X, A, V, W, b, w = _setup(n=10)
    layer = tp.Layer(tp.Softmax(3 * A, V), tp.AffineFeedForward(W, b), normalisation="sphere")
    traj = tp.simulate(layer, tp.Empirical(X, w), np.linspace(0, 5, 11), method=method, h=0.01)
    assert np.abs(np.linalg.norm(traj.points, axis=2) - 1).max() <= 4 * np.finfo(float).eps


def test_the_sphere_bounds_what_blows_up_in_rd():
    # A layer whose feed-forward W = 3 I makes every token grow like e^{3t} in R^d: on the
    # sphere the radial part is projected away and the tokens stay unit vectors
    X, A, V, _, _, w = _setup(n=5, d=2)
    ff = tp.AffineFeedForward(3 * np.eye(2))
    free = tp.simulate(tp.Layer(tp.Softmax(A, V), ff), tp.Empirical(X, w), [0.0, 4.0], h=0.01)
    sphere = tp.simulate(tp.Layer(tp.Softmax(A, V), ff, "sphere"), tp.Empirical(X, w), [0.0, 4.0], h=0.01)
    assert np.linalg.norm(free.points[-1], axis=1).min() > 1e4
    assert np.abs(np.linalg.norm(sphere.points[-1], axis=1) - 1).max() < 1e-15


def test_layer_without_normalisation_simulates_bitwise_as_its_attention():
    X, A, V, _, _, w = _setup()
    mu = tp.Empirical(3 * X, w)
    for method in ("euler", "rk4"):
        a = tp.simulate(tp.Softmax(A, V), mu, [0.0, 0.5, 1.0], method=method)
        b = tp.simulate(tp.Layer(tp.Softmax(A, V)), mu, [0.0, 0.5, 1.0], method=method)
        assert np.array_equal(a.points, b.points)


def _moments_rhs(att, g):
    """(alpha', Sigma') from the field on a Gauss–Hermite grid: E v, E[v (x-a)^T] + transpose."""
    mu = gauss_hermite(g)
    v = att.velocity(mu)
    xc = mu.points - g.mean
    m = mu.weights @ v
    c = (v * mu.weights[:, None]).T @ xc
    return m, c + c.T


def test_affine_feedforward_closure_matches_the_fields_moments():
    rng = np.random.default_rng(3)
    d = 2
    A, V, W = (rng.standard_normal((d, d)) / 2 for _ in range(3))
    b = rng.standard_normal(d)
    g = tp.Gaussian([0.3, -0.2], [[0.8, 0.2], [0.2, 0.5]])
    layer = tp.Layer(tp.Softmax(A, V), tp.AffineFeedForward(W, b))
    dm, dc = layer.gaussian_rhs(g.mean, g.cov)
    em, ec = _moments_rhs(layer, g)
    np.testing.assert_allclose(dm, em, rtol=0, atol=1e-11)
    np.testing.assert_allclose(dc, ec, rtol=0, atol=1e-11)
    assert tp.affine_defect(layer, g) < 1e-10


def test_nonlinear_feedforward_breaks_gaussianity_and_has_no_closure():
    g = tp.Gaussian([0.3, -0.2], [[0.8, 0.2], [0.2, 0.5]])
    layer = tp.Layer(tp.Softmax(np.eye(2) / 2, np.eye(2)), lambda x, t: np.tanh(2 * x))
    assert tp.affine_defect(layer, g) > 1e-2
    with pytest.raises(NotImplementedError, match="not an AffineFeedForward"):
        layer.gaussian_rhs(g.mean, g.cov)
    with pytest.raises(NotImplementedError, match="sphere"):
        tp.Layer(tp.Softmax(np.eye(2), np.eye(2)), normalisation="sphere").gaussian_rhs(g.mean, g.cov)


def test_gaussian_layer_keeps_the_rank_sigma_t_is_phi_sigma0_phi_transpose():
    # A = 0: the attention moves the mean only (V alpha), so Sigma_t = e^{tW} Sigma_0 e^{tW^T}
    W = np.array([[0.2, -1.0, 0.0], [1.0, -0.1, 0.3], [0.0, 0.2, -0.4]])
    u = np.array([[1.0, 0.5, 0.0], [0.0, 1.0, -1.0]])
    g0 = tp.Gaussian([0.1, 0.0, -0.2], u.T @ u)  # rank 2
    layer = tp.Layer(tp.Softmax(np.zeros((3, 3)), -np.eye(3)), tp.AffineFeedForward(W, [0.5, 0.0, 0.0]))
    sol = tp.simulate_gaussian(layer, g0, [0.0, 1.0, 2.0])
    for k, t in enumerate([0.0, 1.0, 2.0]):
        phi = expm(t * W)
        np.testing.assert_allclose(sol.cov[k], phi @ g0.cov @ phi.T, rtol=0, atol=1e-7)
        assert np.linalg.matrix_rank(sol.cov[k], tol=1e-6) == 2


def test_layer_errors_name_the_argument():
    att = tp.Softmax(np.eye(2), np.eye(2))
    with pytest.raises(TypeError, match="attention must be"):
        tp.Layer(np.eye(2))
    with pytest.raises(TypeError, match="feedforward must be"):
        tp.Layer(att, np.eye(2))
    with pytest.raises(ValueError, match="feedforward acts on dimension 3"):
        tp.Layer(att, tp.AffineFeedForward(np.eye(3)))
    with pytest.raises(ValueError, match="normalisation"):
        tp.Layer(att, normalisation="layernorm")
    with pytest.raises(ValueError, match="W must be a square"):
        tp.AffineFeedForward(np.ones((2, 3)))
    with pytest.raises(ValueError, match="b must have shape"):
        tp.AffineFeedForward(np.eye(2), [1.0, 2.0, 3.0])
    bad = tp.Layer(att, lambda x, t: x[:, :1])
    with pytest.raises(
        ValueError,
        match=r"^Layer's feedforward must return an array of shape \(2, 2\) at t=0, got shape \(2, 1\)$",
    ):
        bad.velocity(np.eye(2))
    with pytest.raises(ValueError, match="mu0 must lie"):
        tp.simulate(tp.Layer(att, normalisation="sphere"), 2 * np.eye(2), [0.0, 1.0])
    with pytest.raises(ValueError, match="no zero row"):
        tp.to_sphere([[0.0, 0.0]])


def test_batched_closure_agrees_with_gaussian_rhs_member_by_member():
    rng = np.random.default_rng(5)
    A, V, W = (rng.standard_normal((2, 2)) / 2 for _ in range(3))
    layer = tp.Layer(tp.Softmax(A, V), tp.AffineFeedForward(W, rng.standard_normal(2)))
    c = layer.batched_closure()
    mean = rng.standard_normal((3, 2))
    cov = np.array([np.eye(2), [[1.0, 0.2], [0.2, 0.5]], [[2.0, 0.0], [0.0, 0.1]]])
    dm, dc = c.rhs(*c.params(0.0), mean, cov)
    for i in range(3):
        em, ec = layer.gaussian_rhs(mean[i], cov[i])
        np.testing.assert_allclose(dm[i], em, rtol=0, atol=1e-14)
        np.testing.assert_allclose(dc[i], ec, rtol=0, atol=1e-14)


def test_gauss_hermite_particles_under_the_layer_follow_the_gaussian_ode():
    # the flow of a Gaussian is affine, so pushed Gauss-Hermite nodes stay a quadrature of the
    # pushed Gaussian: their weighted moments follow the closure up to quadrature and RK4 error
    A, V = np.array([[0.4, 0.3], [-0.2, 0.5]]), np.array([[0.5, -0.3], [0.4, 0.2]])
    W, b = np.array([[-0.3, 0.8], [-0.5, 0.1]]), np.array([0.2, -0.1])
    layer = tp.Layer(tp.Softmax(A, V), tp.AffineFeedForward(W, b))
    g0 = tp.Gaussian([0.3, -0.2], [[0.6, 0.2], [0.2, 0.4]])
    mu = gauss_hermite(g0, 12)
    traj = tp.simulate(layer, mu, [0.0, 1.0], h=0.02)
    sol = tp.simulate_gaussian(layer, g0, [0.0, 1.0], rtol=1e-11, atol=1e-13)
    x, w = traj.points[-1], mu.weights
    m = w @ x
    c = (x - m).T @ ((x - m) * w[:, None])
    np.testing.assert_allclose(m, sol.mean[-1], rtol=0, atol=1e-9)
    np.testing.assert_allclose(c, sol.cov[-1], rtol=0, atol=1e-9)


# ---------------------------------------------------------------------------------------------
# extremes and wrong inputs (issue 41)
# ---------------------------------------------------------------------------------------------


def test_to_sphere_at_the_extremes_of_floating_point():
    r = math.sqrt(0.5)
    assert np.allclose(tp.to_sphere([[1e200, 1e200]]), [[r, r]], rtol=1e-15)
    assert tp.to_sphere([[1e-200, 0.0]]).tolist() == [[1.0, 0.0]]
    assert tp.to_sphere([[5e-324, 0.0]]).tolist() == [[1.0, 0.0]]  # the smallest subnormal
    with pytest.raises(ValueError, match="NaN"):
        tp.to_sphere([[np.nan, 0.0]])
    with pytest.raises(ValueError, match="zero row"):
        tp.to_sphere([[1.0, 0.0], [0.0, 0.0]])


@pytest.mark.parametrize(
    "bad", [[["1", "0"]], [[1 + 1j, 0.0]], [[True, False]]], ids=["str", "complex", "bool"]
)
def test_to_sphere_and_tangent_projection_take_real_numbers_only(bad):
    with pytest.raises(TypeError, match="points"):
        tp.to_sphere(bad)
    with pytest.raises(TypeError, match="points"):
        tp.tangent_projection(bad, [[1.0, 0.0]])
    with pytest.raises(TypeError, match="vectors"):
        tp.tangent_projection([[1.0, 0.0]], bad)


def test_tangent_projection_refuses_broadcasting_and_zero_points():
    with pytest.raises(ValueError, match=r"vectors must have shape \(1, 2\)"):
        tp.tangent_projection([[1.0, 0.0]], [[1.0, 1.0], [2.0, 2.0]])
    with pytest.raises(ValueError, match="zero row"):
        tp.tangent_projection([[0.0, 0.0]], [[1.0, 1.0]])
    # scaled: points and vectors of 1e200 neither overflow nor lose the tangent part
    out = tp.tangent_projection([[1e200, 0.0]], [[1e200, 3e200]])
    assert out.tolist() == [[0.0, 3e200]]
    assert tp.tangent_projection([[1e-200, 0.0]], [[2.0, 3.0]]).tolist() == [[0.0, 3.0]]


def test_a_feedforward_returning_nan_is_an_error_not_a_blowup():
    att = tp.Softmax(np.eye(2), np.eye(2))
    layer = tp.Layer(att, lambda x, t: np.full_like(x, np.nan))
    with pytest.raises(ValueError, match="feedforward returned NaN"):
        tp.simulate(layer, np.eye(2), [0.0, 1.0], on_blowup="stop")


@pytest.mark.parametrize("ff", [lambda x: x, lambda x, t, s: x, lambda: 0], ids=["one", "three", "none"])
def test_a_feedforward_of_the_wrong_signature_is_a_clear_type_error(ff):
    with pytest.raises(TypeError, match=r"feedforward must be a callable feedforward\(points, t\)"):
        tp.Layer(tp.Softmax(np.eye(2), np.eye(2)), ff)
