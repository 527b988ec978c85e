r"""Covariance ellipses of Gaussian measures: the one ellipse plotter of the book.

The ellipse of :math:`\mathcal N(\alpha, \Sigma)` at ``n_std`` standard deviations is
:math:`\{\alpha + n_{\rm std}\,\Sigma^{1/2}u : |u| = 1\}`, drawn in a 2-D coordinate plane
(``dims``) of :math:`\mathbb R^d` (the marginal of the Gaussian on that plane, whose covariance is
the corresponding 2×2 block). Degenerate covariances give segments or points. Covariances must be
finite, symmetric and positive semi-definite up to round-off (relative ``1e-8``); anything else
raises a ValueError naming the argument, rather than drawing an ellipse of a matrix that is not a
covariance.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from numpy.typing import ArrayLike

__all__ = ["ellipse_points", "draw_ellipse", "draw_ellipses"]

_RTOL = 1e-8  # symmetry and negative eigenvalues tolerated, relative to the largest |entry|


def _check_covs(name: str, covs: ArrayLike, ndim: int) -> np.ndarray:
    """``covs`` as a float array of ``ndim`` dimensions whose last two are (d, d) covariances."""
    try:
        C = np.asarray(covs, dtype=float)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be an array of real covariance matrices") from err
    if C.ndim != ndim or C.shape[-1] != C.shape[-2] or C.shape[-1] < 2:
        want = "(d, d)" if ndim == 2 else "(T, d, d)"
        raise ValueError(f"{name} must have shape {want} with d >= 2, got {C.shape}")
    if not np.all(np.isfinite(C)):
        raise ValueError(f"{name} must be finite (it holds NaN or inf)")
    scale = np.abs(C).max(axis=(-2, -1), keepdims=True)
    if np.any(np.abs(C - np.swapaxes(C, -1, -2)) > _RTOL * scale):
        raise ValueError(f"{name} must be symmetric (to a relative {_RTOL:g})")
    low = np.linalg.eigvalsh(C)[..., 0]
    bad = low < -_RTOL * scale[..., 0, 0]
    if np.any(bad):
        where = "" if ndim == 2 else f" (first at index {int(np.argmax(bad))})"
        raise ValueError(
            f"{name} must be positive semi-definite: smallest eigenvalue {float(low[bad].flat[0]):.3g}{where}"
        )
    return C


def _check_dims(dims: Sequence[int], d: int) -> tuple[int, int]:
    try:
        i, j = (int(k) for k in dims)
    except (TypeError, ValueError) as err:
        raise TypeError(f"dims must be a pair of ints, got {dims!r}") from err
    if i == j or not (0 <= i < d and 0 <= j < d):
        raise ValueError(f"dims must be two distinct coordinates in 0..{d - 1}, got {dims!r}")
    return i, j


def _check_positive(name: str, value: float) -> float:
    v = float(value)
    if not (np.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return v


def _points(m: np.ndarray, C: np.ndarray, n_std: float, n: int) -> np.ndarray:
    """Boundary of the ellipse of a checked 2-vector ``m`` and 2×2 block ``C``, shape (n, 2)."""
    lam, U = np.linalg.eigh(0.5 * (C + C.T))
    root = U * np.sqrt(np.clip(lam, 0.0, None))
    theta = np.linspace(0.0, 2 * np.pi, n)
    return m + n_std * (root @ np.stack([np.cos(theta), np.sin(theta)])).T


def ellipse_points(
    mean: ArrayLike, cov: ArrayLike, n_std: float = 2.0, n: int = 100, dims: Sequence[int] = (0, 1)
) -> np.ndarray:
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

    Raises
    ------
    ValueError
        ``cov`` not a finite symmetric PSD matrix, ``mean`` not a finite (d,) vector, ``dims``
        out of range, ``n_std`` not positive, ``n`` below 2.
    """
    C = _check_covs("cov", cov, 2)
    d = C.shape[0]
    m = np.asarray(mean, dtype=float)
    if m.shape != (d,) or not np.all(np.isfinite(m)):
        raise ValueError(f"mean must be a finite vector of shape ({d},), got shape {m.shape}")
    i, j = _check_dims(dims, d)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"n must be an int >= 2, got {n!r}")
    block = C[np.ix_([i, j], [i, j])]
    return _points(m[[i, j]], block, _check_positive("n_std", n_std), int(n))


def draw_ellipse(
    ax: Axes, mean: ArrayLike, cov: ArrayLike, n_std: float = 2.0, dims: Sequence[int] = (0, 1), **kwargs
) -> Line2D:
    """Draw one covariance ellipse on ``ax``.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    mean, cov, n_std, dims
        As in :func:`ellipse_points`.
    **kwargs
        Passed to ``ax.plot`` (``color``, ``lw``, ``label``, ...).

    Returns
    -------
    matplotlib.lines.Line2D
    """
    pts = ellipse_points(mean, cov, n_std=n_std, dims=dims)
    (line,) = ax.plot(pts[:, 0], pts[:, 1], **kwargs)
    return line


def draw_ellipses(
    ax: Axes,
    covs: ArrayLike,
    means: ArrayLike | None = None,
    n_std: float = 2.0,
    dims: Sequence[int] = (0, 1),
    n_max: int | None = None,
    normalise: bool = False,
    cmap: str = "viridis",
    lw: float = 1.5,
    alpha: float = 1.0,
    colors: Sequence | None = None,
) -> list[Line2D]:
    r"""Draw a sequence of covariance ellipses (e.g. a trajectory), coloured in order.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    covs : array_like, shape (T, d, d)
        Finite, symmetric, positive semi-definite.
    means : array_like, shape (T, d) or (d,), optional
        Centres (default: the origin).
    n_std : float
        Radius in standard deviations.
    dims : pair of int
        Coordinates of the plane drawn.
    n_max : int, optional
        Draw at most this many ellipses, evenly spaced in the index (first and last included).
    normalise : bool
        Divide each covariance by its trace: only the shape is drawn (the trace must then be
        positive).
    cmap : str
        Colormap used when ``colors`` is None (first = dark, last = light for viridis).
    lw, alpha : float
    colors : sequence of colours, optional
        One per ellipse drawn.

    Returns
    -------
    list of matplotlib.lines.Line2D
        One per ellipse drawn, in order.

    Raises
    ------
    ValueError
        A covariance that is not finite, symmetric and PSD (naming ``covs`` and the index),
        ``means`` of the wrong shape, ``n_max`` below 1, ``colors`` of the wrong length.
    """
    C = _check_covs("covs", covs, 3)
    T, d = C.shape[:2]
    if means is None:
        M = np.zeros((T, d))
    else:
        M = np.asarray(means, dtype=float)
        if M.shape not in {(d,), (T, d)} or not np.all(np.isfinite(M)):
            raise ValueError(f"means must be finite, of shape ({T}, {d}) or ({d},), got shape {M.shape}")
        M = np.broadcast_to(M, (T, d))
    i, j = _check_dims(dims, d)
    n_std = _check_positive("n_std", n_std)
    if n_max is None:
        idx = np.arange(T)
    else:
        if isinstance(n_max, bool) or not isinstance(n_max, (int, np.integer)) or n_max < 1:
            raise ValueError(f"n_max must be a positive int, got {n_max!r}")
        idx = np.unique(np.linspace(0, T - 1, min(int(n_max), T)).round().astype(int))
    blocks = C[idx][:, [i, j]][:, :, [i, j]]
    if normalise:
        tr = np.trace(C[idx], axis1=1, axis2=2)
        if np.any(tr <= 0):
            raise ValueError(
                "covs must have a positive trace to be drawn with normalise=True "
                f"(index {int(idx[np.argmax(tr <= 0)])} has {tr[tr <= 0][0]:.3g})"
            )
        blocks = blocks / tr[:, None, None]
    if colors is None:
        colormap = mpl.colormaps[cmap]
        colors = [colormap(k / max(idx.size - 1, 1)) for k in range(idx.size)]
    elif len(colors) != idx.size:
        raise ValueError(f"colors must hold one colour per ellipse drawn ({idx.size}), got {len(colors)}")
    lines = []
    for k, t in enumerate(idx):
        pts = _points(M[t, [i, j]], blocks[k], n_std, 100)
        (line,) = ax.plot(pts[:, 0], pts[:, 1], color=colors[k], lw=lw, alpha=alpha)
        lines.append(line)
    return lines
