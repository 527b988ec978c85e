r"""Does a variant preserve Gaussians? The affine defect of its field on a Gaussian.

If the solution of the Transformer PDE started from a Gaussian stays Gaussian, then the field
:math:`\Gamma_\mu` of every Gaussian :math:`\mu` on its path is affine, :math:`\Gamma_\mu(x) =
Mx + b` (the push-forward of a Gaussian by a non-affine flow is not Gaussian). The converse
needs more (the closure of the family along the flow), so a zero defect at one time is
*necessary*, not sufficient; a clearly non-zero defect proves that the variant does not preserve
Gaussians.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.polynomial.hermite_e import hermegauss

from .._checks import as_float_array
from .._linalg import psd_sqrt
from ..measures import Empirical, Gaussian
from ._closure import check_attention

if TYPE_CHECKING:
    from ..attention import Attention

#: default nodes per dimension of the product grid (the grid has nodes**d points)
_NODES = {1: 80, 2: 50, 3: 20, 4: 9}
_MAX_POINTS = 10_000


def gauss_hermite(g: Gaussian, nodes_per_dim: int | None = None) -> Empirical:
    r"""Gauss–Hermite product quadrature of a Gaussian: a weighted point cloud.

    The nodes are :math:`\alpha + \Sigma^{1/2} z_k` for the tensor grid of the
    probabilists' Hermite nodes :math:`z_k` (weight :math:`e^{-|z|^2/2}`); the weights are the
    products of the one-dimensional weights, normalised to sum to 1. It integrates every
    polynomial of degree :math:`\le 2\,\text{nodes}-1` in each variable exactly.

    Parameters
    ----------
    g : Gaussian
        Mean (d,), covariance (d, d).
    nodes_per_dim : int, optional
        Default 80, 50, 20, 9 for d = 1, 2, 3, 4 (measured: round-off level for softmax and ℓ²
        with unit scores in d <= 2, about 1e-5 in d = 3); required for d > 4. The grid has at most
        10,000 points.

    Returns
    -------
    Empirical
        ``nodes_per_dim**d`` points with the quadrature weights.
    """
    if not isinstance(g, Gaussian):
        raise TypeError(f"g must be a tpde_lib Gaussian, got {type(g).__name__}")
    d = g.d
    if nodes_per_dim is None:
        if d not in _NODES:
            raise ValueError(
                f"d = {d} > 4: pass nodes_per_dim (the grid has nodes_per_dim**d "
                f"points, at most {_MAX_POINTS})"
            )
        nodes_per_dim = _NODES[d]
    if isinstance(nodes_per_dim, (bool, np.bool_)) or not isinstance(nodes_per_dim, (int, np.integer)):
        raise TypeError(f"nodes_per_dim must be an int, got {nodes_per_dim!r}")
    if nodes_per_dim < 4:
        raise ValueError(
            f"nodes_per_dim must be >= 4 (a coarser grid cannot tell an affine field "
            f"from a curved one), got {nodes_per_dim}"
        )
    if nodes_per_dim**d > _MAX_POINTS:
        raise ValueError(f"nodes_per_dim**d = {nodes_per_dim**d} exceeds {_MAX_POINTS} points")
    z, w = hermegauss(int(nodes_per_dim))
    grids = np.meshgrid(*([z] * d), indexing="ij")
    Z = np.stack([G.ravel() for G in grids], axis=1)  # (N, d)
    W = np.prod(np.stack(np.meshgrid(*([w] * d), indexing="ij")).reshape(d, -1), axis=0)
    keep = W > 0
    points = g.mean + Z[keep] @ psd_sqrt(g.cov)
    return Empirical(points, W[keep] / W[keep].sum())


def affine_defect(att: Attention, g: Gaussian, t: float = 0.0, nodes_per_dim: int | None = None) -> float:
    r"""Relative distance of the field of a Gaussian from its best affine fit.

    .. math::
        \delta = \frac{\min_{M, b}\|\Gamma_\mu - (M\cdot + b)\|_{L^2(\mu)}}
                      {\|\Gamma_\mu - \textstyle\int\Gamma_\mu\,d\mu\|_{L^2(\mu)}},
        \qquad \mu = \mathcal N(\alpha, \Sigma),

    with the field and the integrals evaluated on the Gauss–Hermite grid of
    :func:`gauss_hermite` (no sampling noise; in d <= 3 the quadrature error of smooth fields is
    near round-off). :math:`\delta = 0` for a field that is constant on the support.

    Parameters
    ----------
    att : Attention
        Non-causal.
    g : Gaussian
    t : float
        Time at which the field is evaluated.
    nodes_per_dim : int, optional
        Passed to :func:`gauss_hermite`.

    Returns
    -------
    float
        :math:`\delta \in [0, 1]`: round-off small for variants whose field is affine on
        Gaussians (softmax, ℓ², linear, Sinkhorn up to its ``tol``), clearly non-zero for
        sigmoid or ReLU attention.

    Examples
    --------
    Softmax attention keeps Gaussians Gaussian (its field is affine on them); sigmoid does not:

    >>> import numpy as np
    >>> import tpde_lib as tp
    >>> g = tp.Gaussian([0.2, -0.1], [[1.0, 0.3], [0.3, 0.5]])
    >>> A, V = np.array([[0.5, 0.2], [-0.1, 0.4]]), np.eye(2)
    >>> bool(tp.affine_defect(tp.Softmax(A, V), g) < 1e-10)
    True
    >>> bool(tp.affine_defect(tp.Sigmoid(3 * A, V), g) > 1e-3)
    True
    """
    check_attention(att)
    if att.causal:
        raise ValueError("affine_defect needs a non-causal attention (a Gaussian has no positions)")
    t = float(as_float_array("t", t, ndim=0))
    if not isinstance(g, Gaussian):
        raise TypeError(f"g must be a tpde_lib Gaussian, got {type(g).__name__}")
    if g.d != att.d:
        raise ValueError(f"g has dimension {g.d} but att acts on dimension d={att.d}")
    mu = gauss_hermite(g, nodes_per_dim)
    field = att.velocity(mu, t)
    field = field / max(np.abs(field).max(), np.finfo(float).tiny)  # the defect is scale-free
    X = np.hstack([mu.points, np.ones((mu.n, 1))])
    sw = np.sqrt(mu.weights)[:, None]
    coef, *_ = np.linalg.lstsq(X * sw, field * sw, rcond=None)
    resid = field - X @ coef
    centred = field - mu.weights @ field
    num = float(np.sqrt(mu.weights @ (resid**2).sum(axis=1)))
    den = float(np.sqrt(mu.weights @ (centred**2).sum(axis=1)))
    # a field constant up to round-off (relative 1e-12 of its size, which is 1 after the
    # scaling above) is affine: its defect is 0, not a ratio of two round-off errors
    return 0.0 if den <= 1e-12 else min(1.0, num / den)
