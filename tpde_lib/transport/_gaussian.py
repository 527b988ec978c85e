r"""Bures–Wasserstein maps and geodesics between Gaussians, and the twisted distances of a
constant mobility :math:`P` (used by the chapter "Gradient flows").

For a symmetric positive definite mobility :math:`P`, the twisted distance
:math:`d_P(\mu, \nu)` is :math:`W_2` of the images of :math:`\mu, \nu` under
:math:`x \mapsto P^{-1/2}x` (derived in the chapter "Gradient flows").
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import as_covariance as _as_covariance
from .._checks import as_float_array as _as_float_array
from .._linalg import psd_sqrt
from .._linalg import sym_fn as _sym_fn
from ..measures import Empirical, Gaussian
from ._wasserstein import _check_pair, bures_wasserstein, wasserstein


def _check_gaussian(g, name):
    if not isinstance(g, Gaussian):
        raise TypeError(f"{name} must be a Gaussian, got {type(g).__name__}")
    return g


def _check_gaussians(g0, g1, names=("g0", "g1")):
    """Two Gaussians of one dimension (TypeError / ValueError naming the argument)."""
    _check_gaussian(g0, names[0])
    _check_gaussian(g1, names[1])
    if g0.d != g1.d:
        raise ValueError(f"{names[1]} must have the dimension of {names[0]} ({g0.d}), got {g1.d}")


def _mobility_roots(P, d):
    r"""(:math:`P^{1/2}`, :math:`P^{-1/2}`) of a symmetric positive definite mobility ``P`` (d, d)."""
    P = _as_covariance("P", P, d)
    lam = np.linalg.eigvalsh(P)
    if lam[0] <= 0:
        raise ValueError(f"P must be symmetric positive definite (smallest eigenvalue {lam[0]:.3g})")
    return _sym_fn(P, np.sqrt), _sym_fn(P, lambda x: 1.0 / np.sqrt(x))


def bures_wasserstein_map(cov0: ArrayLike, cov1: ArrayLike) -> NDArray[np.float64]:
    r"""Matrix :math:`T` of the optimal (Brenier) map :math:`x\mapsto Tx` between centred Gaussians.

    .. math:: T = \Sigma_0^{-1/2}\big(\Sigma_0^{1/2}\Sigma_1\Sigma_0^{1/2}\big)^{1/2}\Sigma_0^{-1/2}

    symmetric positive semi-definite, with :math:`T\Sigma_0T = \Sigma_1` [1]_.

    Parameters
    ----------
    cov0 : array_like, shape (d, d)
        Positive definite.
    cov1 : array_like, shape (d, d)
        PSD.

    Returns
    -------
    ndarray, shape (d, d)

    References
    ----------
    .. [1] Peyré & Cuturi (2019), Computational Optimal Transport, Remark 2.31.
    """
    S0 = _as_covariance("cov0", cov0)
    S1 = _as_covariance("cov1", cov1, S0.shape[0])
    lam = np.linalg.eigvalsh(S0)
    if lam[0] <= 1e-12 * max(lam[-1], np.finfo(float).tiny):
        raise ValueError("cov0 must be positive definite for the optimal map to exist")
    R = psd_sqrt(S0)
    Ri = _sym_fn(S0, lambda x: 1.0 / np.sqrt(x))
    T = Ri @ psd_sqrt(R @ S1 @ R) @ Ri
    return 0.5 * (T + T.T)


def bures_wasserstein_geodesic(
    g0: Gaussian, g1: Gaussian, s: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Points of the :math:`W_2` geodesic between two Gaussians (McCann interpolation).

    .. math::
        \alpha_s = (1-s)\alpha_0 + s\alpha_1,\qquad
        \Sigma_s = \big((1-s)I + sT\big)\Sigma_0\big((1-s)I + sT\big)

    with :math:`T` of :func:`bures_wasserstein_map`; :math:`s\in[0,1]`.

    Parameters
    ----------
    g0, g1 : Gaussian
        ``g0`` with positive definite covariance.
    s : array_like, shape (k,)
        Interpolation times, in [0, 1] (``ValueError`` otherwise: beyond its ends the formula
        is not the geodesic, e.g. it is not length-minimising at s = 2).

    Returns
    -------
    means : ndarray, shape (k, d)
    covs : ndarray, shape (k, d, d)
    """
    _check_gaussians(g0, g1)
    s = _as_float_array("s", s, ndim=1)
    outside = s[(s < 0.0) | (s > 1.0)]
    if outside.size:
        # beyond [0, 1] the formula extrapolates: a curve, not a point of the geodesic
        raise ValueError(f"s must lie in [0, 1] (the geodesic from g0 to g1), got {float(outside[0])!r}")
    T = bures_wasserstein_map(g0.cov, g1.cov)
    L = (1.0 - s)[:, None, None] * np.eye(g0.d) + s[:, None, None] * T
    covs = L @ g0.cov @ L
    means = (1.0 - s)[:, None] * g0.mean + s[:, None] * g1.mean
    return means, 0.5 * (covs + np.swapaxes(covs, 1, 2))


def twisted_wasserstein(mu: Empirical, nu: Empirical, P: ArrayLike, **kwargs) -> float:
    r"""Twisted distance :math:`d_P(\mu,\nu) = W_2\big((P^{-1/2})_\#\mu, (P^{-1/2})_\#\nu\big)`.

    The distance of the kinetic energy :math:`\int\langle v, P^{-1}v\rangle\,\mathrm d\mu` of a
    constant symmetric positive definite mobility :math:`P` (chapter "Gradient flows",
    {eq}`eq-gf-twisted-metric`): a field :math:`\Gamma = -P\nabla\frac{\delta\mathcal E}{\delta\mu}`
    moves :math:`y = P^{-1/2}x` by :math:`\dot y = -\nabla_y\frac{\delta\mathcal E}{\delta\mu}`, a
    plain :math:`W_2` gradient flow. Computed with :func:`wasserstein` on the mapped points.

    Parameters
    ----------
    mu, nu : Empirical
    P : array_like, shape (d, d)
        Symmetric positive definite mobility.
    **kwargs
        Passed to :func:`wasserstein` (``method`` ...).

    Returns
    -------
    float
    """
    _check_pair(mu, nu)
    _, T = _mobility_roots(P, mu.d)
    return wasserstein(
        Empirical(mu.points @ T, mu.weights), Empirical(nu.points @ T, nu.weights), p=2, **kwargs
    )


def twisted_bures_wasserstein(g1: Gaussian, g2: Gaussian, P: ArrayLike) -> float:
    r"""Twisted Bures–Wasserstein distance: :math:`W_2` of the images under :math:`x\mapsto P^{-1/2}x`.

    :math:`\mathcal N(\alpha,\Sigma)\mapsto\mathcal N(P^{-1/2}\alpha, P^{-1/2}\Sigma P^{-1/2})`.

    Parameters
    ----------
    g1, g2 : Gaussian
    P : array_like, shape (d, d), symmetric positive definite

    Returns
    -------
    float
    """
    _check_gaussians(g1, g2, ("g1", "g2"))
    _, T = _mobility_roots(P, g1.d)
    return bures_wasserstein(Gaussian(T @ g1.mean, T @ g1.cov @ T), Gaussian(T @ g2.mean, T @ g2.cov @ T))


def twisted_bures_wasserstein_geodesic(
    g0: Gaussian, g1: Gaussian, P: ArrayLike, s: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Points of the geodesic of the twisted distance :math:`d_P` between two Gaussians.

    :math:`x\mapsto P^{-1/2}x` is an isometry from :math:`d_P` to :math:`W_2`, so the
    :math:`d_P` geodesic is the image under :math:`x\mapsto P^{1/2}x` of the Bures–Wasserstein
    geodesic (:func:`bures_wasserstein_geodesic`) between the images of ``g0``, ``g1`` under
    :math:`x\mapsto P^{-1/2}x`:

    .. math::
        \alpha_s = (1-s)\alpha_0 + s\alpha_1,\qquad
        \Sigma_s = P^{1/2}L_s\tilde\Sigma_0L_sP^{1/2},\quad
        L_s = (1-s)I + s\tilde T,\ \tilde\Sigma_i = P^{-1/2}\Sigma_iP^{-1/2},

    with :math:`\tilde T` the map from :math:`\tilde\Sigma_0` to :math:`\tilde\Sigma_1`. For
    :math:`P = I` it is the Bures–Wasserstein geodesic.

    Parameters
    ----------
    g0, g1 : Gaussian
        ``g0`` with positive definite covariance.
    P : array_like, shape (d, d), symmetric positive definite
    s : array_like, shape (k,)

    Returns
    -------
    means : ndarray, shape (k, d)
    covs : ndarray, shape (k, d, d)
    """
    _check_gaussians(g0, g1)
    R, T = _mobility_roots(P, g0.d)
    means, covs = bures_wasserstein_geodesic(
        Gaussian(T @ g0.mean, T @ g0.cov @ T), Gaussian(T @ g1.mean, T @ g1.cov @ T), s
    )
    covs = R @ covs @ R
    return means @ R, 0.5 * (covs + np.swapaxes(covs, 1, 2))
