"""Gauss-Hermite quadrature of Gaussians and the affine defect of a field."""

import numpy as np
import pytest

import tpde_lib as tp
from tpde_lib.gaussian import gauss_hermite


class Poly1d(tp.Attention):
    """Gamma(x) = x + c x^2 in d = 1 (does not depend on the measure)."""

    def __init__(self, c):
        self.c, self.d = c, 1

    def field(self, points, weights, positions, t):
        return points + self.c * points**2


class ReLU(tp.Attention):
    def __init__(self, A, V):
        self.A, self.V, self.d = np.asarray(A), np.asarray(V), len(A)

    def field(self, points, weights, positions, t):
        def relu(S):
            np.maximum(S, 0.0, out=S)

        return tp.kernel_sums(points @ self.A.T, points, points * weights[:, None], relu) @ self.V.T


G2 = tp.Gaussian([0.5, -0.3], [[1.0, 0.3], [0.3, 0.5]])


def test_quadrature_reproduces_the_moments_of_the_gaussian():
    mu = gauss_hermite(G2)
    c = mu.points - G2.mean
    assert np.allclose(mu.weights @ mu.points, G2.mean, atol=1e-14)
    assert np.allclose((c * mu.weights[:, None]).T @ c, G2.cov, atol=1e-14)
    # fourth moment of the first coordinate: 3 sigma^4 (exact for polynomials of degree < 100)
    assert mu.weights @ c[:, 0] ** 4 == pytest.approx(3 * G2.cov[0, 0] ** 2, rel=1e-13)


@pytest.mark.parametrize("c", [0.0, 0.1, 1.0])
def test_defect_of_a_quadratic_field_has_its_closed_form(c):
    # on N(0, 1): best affine fit of x + c x^2 is x + c, residual c (x^2 - 1) of norm c sqrt 2,
    # centred field x + c (x^2 - 1) of norm sqrt(1 + 2 c^2)
    g = tp.Gaussian([0.0], [[1.0]])
    expected = c * np.sqrt(2.0) / np.sqrt(1.0 + 2.0 * c * c)
    assert tp.affine_defect(Poly1d(c), g) == pytest.approx(expected, abs=1e-13)


@pytest.mark.parametrize(
    "att",
    [
        tp.Softmax(np.array([[-0.6, 0.3], [0.1, -0.4]]), np.eye(2)),
        tp.L2(np.eye(2), np.eye(2), np.eye(2)),
        tp.Linear(np.eye(2), np.eye(2)),
        tp.MultiHead([tp.Softmax(np.eye(2), np.eye(2)), tp.Linear(-np.eye(2), np.eye(2))]),
    ],
    ids=["softmax", "L2", "linear", "multihead"],
)
def test_gaussian_preserving_variants_have_a_round_off_defect(att):
    # measured 1e-16 .. 1e-13 with 50 nodes per axis (30 nodes: up to 1e-9)
    assert tp.affine_defect(att, G2) < 1e-11


def test_sinkhorn_defect_is_at_the_level_of_its_marginal_tolerance():
    att = tp.Sinkhorn(-np.eye(2), np.eye(2), eps=1.0, tol=1e-11)
    assert tp.affine_defect(att, G2, nodes_per_dim=30) < 1e-8


@pytest.mark.parametrize(
    "att", [tp.Sigmoid(np.eye(2), np.eye(2)), ReLU(np.eye(2), np.eye(2))], ids=["sigmoid", "relu"]
)
def test_non_gaussian_preserving_variants_have_a_clear_defect(att):
    assert tp.affine_defect(att, G2) > 0.05


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="att"):
        tp.affine_defect("softmax", G2)
    with pytest.raises(TypeError, match="g must be"):
        tp.affine_defect(tp.Linear(np.eye(2), np.eye(2)), np.eye(2))
    with pytest.raises(ValueError, match="non-causal"):
        tp.affine_defect(tp.Softmax(np.eye(2), np.eye(2), causal=True), G2)
    with pytest.raises(ValueError, match="nodes_per_dim"):
        tp.affine_defect(tp.Linear(np.eye(5), np.eye(5)), tp.Gaussian(np.zeros(5), np.eye(5)))
    with pytest.raises(TypeError, match="nodes_per_dim"):
        gauss_hermite(G2, nodes_per_dim=2.5)


def test_defect_of_a_constant_field_is_zero_and_the_scale_does_not_matter():
    assert tp.affine_defect(tp.Softmax(np.zeros((2, 2)), np.eye(2)), G2) == 0.0
    small = tp.affine_defect(tp.Softmax(-0.5 * np.eye(2), np.eye(2)), G2)
    huge = tp.affine_defect(tp.Softmax(-0.5 * np.eye(2), 1e300 * np.eye(2)), G2)
    assert small < 1e-12 and huge < 1e-12


def test_too_coarse_grids_and_wrong_dimensions_are_refused():
    with pytest.raises(ValueError, match=">= 4"):
        gauss_hermite(G2, nodes_per_dim=2)
    with pytest.raises(ValueError, match="g has dimension 3"):
        tp.affine_defect(tp.Linear(np.eye(2), np.eye(2)), tp.Gaussian(np.zeros(3), np.eye(3)))
