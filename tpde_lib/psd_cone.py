r"""Geometry of 2×2 covariances: the PSD cone as a round cone in 3-D, and its trace-one disk.

A 2×2 covariance :math:`\Sigma = \begin{pmatrix} a & c\\ c & b\end{pmatrix}` is drawn at
:math:`(a-b,\ 2c,\ a+b)` (the coordinates of the authors' figures, section "Pictures of 2×2
covariances" of the chapter "Clustering versus blow-up"). The PSD cone becomes the round cone
:math:`z \ge \sqrt{x^2+y^2}`: its boundary holds the rank-≤1 matrices, its apex is :math:`0`
(the eigenvalues are :math:`(z \pm \sqrt{x^2+y^2})/2`, appendix "Derivations", :eq:`eq-cone`);
dividing by the trace flattens it onto the unit disk. The plots are in :mod:`tpde_lib.viz.cone`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._checks import as_float_array

__all__ = ["to_3d", "from_3d", "to_disk", "init_grid", "rank_one_direction"]


def to_3d(S: ArrayLike) -> NDArray[np.float64]:
    r"""Cone coordinates of 2×2 symmetric matrices.

    :math:`\Sigma = \begin{pmatrix} a & c\\ c & b\end{pmatrix} \mapsto (a-b,\ 2c,\ a+b)`. This
    linear map sends the PSD cone onto the round cone :math:`\{z \ge \sqrt{x^2+y^2}\}`: the
    eigenvalues are :math:`(z \pm \sqrt{x^2+y^2})/2`, so the boundary :math:`z = \sqrt{x^2+y^2}` is
    the set of rank-≤1 matrices and the apex is :math:`0`.

    Parameters
    ----------
    S : array_like, shape (..., 2, 2)

    Returns
    -------
    ndarray, shape (..., 3)
    """
    S = as_float_array("S", S)
    if S.shape[-2:] != (2, 2):
        raise ValueError(f"S must have shape (..., 2, 2), got {S.shape}")
    a, b = S[..., 0, 0], S[..., 1, 1]
    c = 0.5 * (S[..., 0, 1] + S[..., 1, 0])
    return np.stack([a - b, 2.0 * c, a + b], axis=-1)


def from_3d(X: ArrayLike) -> NDArray[np.float64]:
    r"""Inverse of :func:`to_3d`: :math:`(u, w, v) \mapsto \begin{pmatrix}(u+v)/2 & w/2\\ w/2 &
    (v-u)/2\end{pmatrix}`.

    Parameters
    ----------
    X : array_like, shape (..., 3)

    Returns
    -------
    ndarray, shape (..., 2, 2)
    """
    X = as_float_array("X", X)
    if X.shape[-1:] != (3,):
        raise ValueError(f"X must have shape (..., 3), got {X.shape}")
    u, w, v = X[..., 0], X[..., 1], X[..., 2]
    a, b, c = 0.5 * (u + v), 0.5 * (v - u), 0.5 * w
    return np.stack([np.stack([a, c], -1), np.stack([c, b], -1)], axis=-2)


def to_disk(S: ArrayLike) -> NDArray[np.float64]:
    r"""Normalised-trace disk coordinates of 2×2 covariances.

    The first two cone coordinates of :math:`\Sigma/\operatorname{tr}\Sigma`,
    :math:`((a-b)/(a+b),\ 2c/(a+b))`. PSD matrices land in the closed unit disk; the unit circle is
    the rank-one matrices and the centre is a multiple of the identity (an isotropic Gaussian).

    Parameters
    ----------
    S : array_like, shape (..., 2, 2)
        Covariances with positive trace.

    Returns
    -------
    ndarray, shape (..., 2)
    """
    X = to_3d(S)
    if np.any(X[..., 2] <= 0):
        raise ValueError("S must have positive trace to be normalised")
    return X[..., :2] / X[..., 2:3]


def init_grid(n_u: int, n_c: int, limits: ArrayLike = (-0.5, 0.5, -0.5, 0.5)) -> NDArray[np.float64]:
    r"""Trace-one initial covariances on a grid inside the disk.

    :math:`u` runs over ``linspace(limits[0], limits[1], n_u)`` and :math:`w` over
    ``linspace(limits[2], limits[3], n_c)``; the points with :math:`u^2 + w^2 < 1` (strictly
    positive definite) are mapped by :func:`from_3d` at :math:`v = \operatorname{tr}\Sigma_0 = 1`.
    The order is the official code's (``u`` slow, ``w`` fast), so member ``i`` is the authors'
    ``inits[i]``.

    Parameters
    ----------
    n_u, n_c : int
        Grid sizes (the authors use 10×10 on the default limits, 20×20, 30×30, 40×40 on
        :math:`[-1, 1]^2`).
    limits : sequence of 4 floats
        ``(u_min, u_max, w_min, w_max)``.

    Returns
    -------
    ndarray, shape (m, 2, 2)
        The ``m`` grid covariances strictly inside the PSD cone.
    """
    for name, n in (("n_u", n_u), ("n_c", n_c)):
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{name} must be a positive integer, got {n!r}")
    lim = as_float_array("limits", limits, shape=(4,))
    u = np.linspace(lim[0], lim[1], n_u)
    w = np.linspace(lim[2], lim[3], n_c)
    uu, ww = np.meshgrid(u, w, indexing="ij")  # u slow, w fast: the official ordering
    keep = 1.0 - uu**2 > ww**2
    X = np.stack([uu[keep], ww[keep], np.ones(keep.sum())], axis=-1)
    return from_3d(X)


def rank_one_direction(q: ArrayLike) -> NDArray[np.float64]:
    r"""Unit cone-coordinate direction of the projector onto :math:`q^\perp` (2-D).

    The official ``compute_dir_mat`` projects a random vector onto :math:`q^\perp`; the projector
    does not depend on that draw (only on its sign, which cancels), so we compute it directly.

    Parameters
    ----------
    q : array_like, shape (2,)

    Returns
    -------
    ndarray, shape (3,)
    """
    q = as_float_array("q", q, shape=(2,))
    p = np.array([-q[1], q[0]]) / np.linalg.norm(q)
    X = to_3d(np.outer(p, p))
    return X / np.linalg.norm(X)
