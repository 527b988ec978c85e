r"""Covariance ellipses of Gaussian measures (chapter "Gaussian solutions").

The ellipse of :math:`\mathcal N(\alpha, \Sigma)` at ``n_std`` standard deviations is
:math:`\{\alpha + n_{\rm std}\,\Sigma^{1/2}u : |u| = 1\}`, drawn in a 2-D coordinate plane
(``dims``) of :math:`\mathbb R^d` (the marginal of the Gaussian on that plane, whose covariance is
the corresponding 2×2 block). Degenerate covariances give segments or points.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["ellipse_points", "draw_ellipse", "draw_ellipses"]


def ellipse_points(mean, cov, n_std=2.0, n=100, dims=(0, 1)):
    r"""Boundary points of the ``n_std`` ellipse of :math:`\mathcal N(\alpha, \Sigma)`.

    Parameters
    ----------
    mean : array_like, shape (d,)
    cov : array_like, shape (d, d)
        Symmetric PSD (tiny negative eigenvalues from round-off are clipped to 0).
    n_std : float
        Radius in standard deviations (2: about 86% of the mass of a 2-D Gaussian).
    n : int
        Number of points (the curve is closed: first point = last point).
    dims : pair of int
        Coordinates of the plane (marginal) drawn.

    Returns
    -------
    ndarray, shape (n, 2)
    """
    i, j = dims
    mean = np.asarray(mean, dtype=float)
    cov = np.asarray(cov, dtype=float)
    m = mean[[i, j]]
    C = cov[np.ix_([i, j], [i, j])]
    lam, U = np.linalg.eigh(0.5 * (C + C.T))
    root = U * np.sqrt(np.clip(lam, 0.0, None))
    theta = np.linspace(0.0, 2 * np.pi, n)
    circle = np.stack([np.cos(theta), np.sin(theta)])
    return m + n_std * (root @ circle).T


def draw_ellipse(ax, mean, cov, n_std=2.0, dims=(0, 1), **kwargs):
    """Draw one covariance ellipse on a matplotlib ``ax``; returns the ``Line2D``.

    ``kwargs`` go to ``ax.plot`` (``color``, ``lw``, ``label``, ...).
    """
    pts = ellipse_points(mean, cov, n_std=n_std, dims=dims)
    (line,) = ax.plot(pts[:, 0], pts[:, 1], **kwargs)
    return line


def draw_ellipses(ax, means, covs, n_std=2.0, dims=(0, 1), cmap="viridis", lw=1.5, alpha=1.0,
                  colors=None):
    """Draw a sequence of ellipses (e.g. a trajectory), coloured along ``cmap`` in order.

    Parameters
    ----------
    ax : matplotlib Axes
    means : array_like, shape (T, d)
    covs : array_like, shape (T, d, d)
    n_std, dims : as in :func:`ellipse_points`
    cmap : str
        Colormap name used when ``colors`` is None (first = dark, last = light for viridis).
    lw, alpha : float
    colors : sequence of colours, optional

    Returns
    -------
    list of Line2D
    """

    means = np.asarray(means, dtype=float)
    covs = np.asarray(covs, dtype=float)
    T = len(means)
    if colors is None:
        cm = plt.get_cmap(cmap)
        colors = [cm(k / max(T - 1, 1)) for k in range(T)]
    return [draw_ellipse(ax, means[k], covs[k], n_std=n_std, dims=dims, color=colors[k], lw=lw,
                         alpha=alpha) for k in range(T)]
