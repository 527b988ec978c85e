r"""2×2 covariance trajectories: the PSD cone in 3-D, the normalised-trace disk; rank histograms.

A 2×2 covariance :math:`\Sigma = \begin{pmatrix}a&c\\c&b\end{pmatrix}` is drawn at
:math:`(a-b, 2c, a+b)`: the PSD cone becomes the round cone :math:`z \ge \sqrt{x^2+y^2}`, whose
boundary holds the rank-one matrices and whose apex is :math:`0`: the eigenvalues of
:math:`\Sigma` are :math:`(z \pm \sqrt{x^2+y^2})/2` (derived in the appendix "Derivations",
:eq:`eq-cone`). The disk view plots :math:`\Sigma/\operatorname{tr}\Sigma`: the unit circle is
rank one, the centre isotropic. These are the coordinates of the authors' plotting code.
Covariance ellipses are drawn by :func:`tpde_lib.viz.ellipses.draw_ellipses`.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from mpl_toolkits.mplot3d.art3d import Line3DCollection
from numpy.typing import ArrayLike

from .._checks import as_count, as_positive
from ..psd_cone import to_3d, to_disk

__all__ = [
    "as_paths",
    "path_colours",
    "draw_cone",
    "plot_cone_trajectories",
    "plot_disk_trajectories",
    "plot_rank_histograms",
]


def as_paths(paths: ArrayLike | Sequence[ArrayLike], valid: ArrayLike | None = None) -> list[np.ndarray]:
    """A list of (T_i, 2, 2) arrays from a list of paths or a (B, T, 2, 2) array (+ valid mask).

    Parameters
    ----------
    paths : sequence of array_like (T_i, 2, 2), or array_like (B, T, 2, 2)
    valid : array_like of bool, shape (B, T), optional
        Times to keep (e.g. before blow-up) when ``paths`` is an array.
    """
    if isinstance(paths, np.ndarray) and paths.ndim == 4:
        if valid is None:
            return [p for p in paths]
        valid = np.asarray(valid, bool)
        return [p[v] for p, v in zip(paths, valid) if v.any()]
    out = [np.asarray(p, float) for p in paths]
    for p in out:
        if p.ndim != 3 or p.shape[1:] != (2, 2):
            raise ValueError(f"each path must have shape (T, 2, 2), got {p.shape}")
    return out


def path_colours(
    paths: Sequence[np.ndarray], by: str | ArrayLike = "start", cmap: str = "viridis"
) -> np.ndarray:
    """Colours as in the official plots: by the starting :math:`2c` or by the final trace.

    Parameters
    ----------
    paths : list of (T_i, 2, 2) arrays
    by : {"start", "final"} or array_like of shape (B,)
        Colour key; an array gives the values to map directly.

    Returns
    -------
    ndarray, shape (B, 4)
        RGBA colours (viridis, min-max normalised).
    """
    if isinstance(by, str):
        if by == "start":
            key = np.array([to_3d(p[0])[1] for p in paths])
        elif by == "final":
            key = np.array([np.trace(p[-1]) for p in paths])
        else:
            raise ValueError(f"by must be 'start', 'final' or an array, got {by!r}")
    else:
        key = np.asarray(by, float)
        if key.shape != (len(paths),):
            raise ValueError(f"by must have shape ({len(paths)},), got {key.shape}")
    span = np.ptp(key) if key.size else 0.0
    u = (key - key.min()) / span if span > 0 else np.full(key.shape, 0.5)
    return mpl.colormaps[cmap](u)


def draw_cone(ax: Axes, scale: float, alpha: float = 0.07, color: str = "k") -> None:
    """Translucent surface :math:`z = \\sqrt{x^2+y^2}` up to radius ``scale`` on a 3-D axis."""
    scale = as_positive("scale", scale)
    u, r = np.meshgrid(np.linspace(0, 2 * np.pi, 60), np.linspace(0, scale, 12))
    x, y = r * np.cos(u), r * np.sin(u)
    ax.plot_surface(x, y, np.hypot(x, y), alpha=alpha, color=color, linewidth=0)


def plot_cone_trajectories(
    ax: Axes,
    paths: ArrayLike | Sequence[ArrayLike],
    valid: ArrayLike | None = None,
    colour: str | ArrayLike = "start",
    cone: bool = True,
    rank_one: ArrayLike | None = None,
    view: tuple[float, float] = (20, -112),
    cmap: str = "viridis",
    linewidth: float = 1.0,
    alpha: float = 0.6,
    title: str | None = None,
) -> Axes:
    """Covariance trajectories inside the PSD cone (3-D), like the official ``plot_evolution``.

    Parameters
    ----------
    ax : mpl_toolkits.mplot3d.Axes3D
        A 3-D axis (``fig.add_subplot(projection="3d")``).
    paths : list of (T_i, 2, 2) arrays, or (B, T, 2, 2) array
    valid : (B, T) bool array, optional
    colour : {"start", "final"} or (B,) array
        See :func:`path_colours`.
    cone : bool
        Draw the translucent cone.
    rank_one : array_like, shape (3,), optional
        Unit direction of a predicted rank-one limit ray, drawn as a black line.
    view : (elev, azim)
    title : str, optional
    """

    paths = as_paths(paths, valid)
    cols = path_colours(paths, colour, cmap)
    pts = [to_3d(p) for p in paths]
    ax.add_collection3d(Line3DCollection(pts, colors=cols, alpha=alpha, linewidths=linewidth))
    ends = np.array([X[-1] for X in pts])
    ax.scatter(ends[:, 0], ends[:, 1], ends[:, 2], color=cols, s=5)
    scale = max(float(np.abs(X[:, 2]).max()) for X in pts)
    lim = max(scale, 1e-12)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_zlim(0, lim)
    if rank_one is not None:
        s = np.linspace(0, scale * np.sqrt(2), 50)
        d = np.asarray(rank_one, float)
        ax.plot(d[0] * s, d[1] * s, d[2] * s, color="k", alpha=0.7, linewidth=1.2)
    if cone:
        draw_cone(ax, lim)
    ax.view_init(elev=view[0], azim=view[1])
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def plot_disk_trajectories(
    ax: Axes,
    paths: ArrayLike | Sequence[ArrayLike],
    valid: ArrayLike | None = None,
    colour: str | ArrayLike = "start",
    cmap: str = "viridis",
    linewidth: float = 1.0,
    alpha: float = 0.6,
    title: str | None = None,
) -> Axes:
    """Normalised trajectories :math:`\\Sigma/\\operatorname{tr}\\Sigma` in the unit disk.

    Like the official ``plot_evolution_2d``: the unit circle (rank one) is drawn in black.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    paths, valid, colour, cmap : see :func:`plot_cone_trajectories`
    """

    paths = as_paths(paths, valid)
    cols = path_colours(paths, colour, cmap)
    pts = [to_disk(p) for p in paths]
    ax.add_collection(LineCollection(pts, colors=cols, alpha=alpha, linewidths=linewidth))
    ends = np.array([X[-1] for X in pts])
    ax.scatter(ends[:, 0], ends[:, 1], color=cols, s=5)
    th = np.linspace(0, 2 * np.pi, 200)
    ax.plot(np.cos(th), np.sin(th), color="k", alpha=0.5, linewidth=0.8)
    ax.set_aspect("equal")
    ax.set_xlim(-1.05, 1.05)
    ax.set_ylim(-1.05, 1.05)
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def plot_rank_histograms(
    fig: Figure,
    ranks: dict,
    rows: Sequence[str],
    dims: Sequence[int] = (3, 4, 5),
    predicted: dict | None = None,
    title: str | None = None,
) -> np.ndarray:
    """A grid of rank histograms (rows × dimensions), like the official ``histograms_*.pdf``.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    ranks : dict
        ``(row, d) -> sequence of int`` ranks.
    rows : sequence of str
        Row labels (keys of ``ranks``).
    dims : sequence of int
    predicted : dict, optional
        ``(row, d) -> int``: a predicted rank, marked by a red triangle.
    """
    if isinstance(rows, str) or not all(isinstance(r, str) for r in rows):
        raise TypeError(f"rows must be a sequence of str row labels (not one str), got {rows!r}")
    dims = [as_count("dims", d) for d in dims]
    if not rows or not dims:
        raise ValueError("rows and dims must be non-empty")
    missing = [(r, d) for r in rows for d in dims if (r, d) not in ranks]
    if len(missing) == len(rows) * len(dims):
        raise ValueError(f"ranks has none of the (row, d) keys asked for, e.g. {missing[0]!r}")
    for (row, d), values in ranks.items():
        if (row in rows and d in dims) and isinstance(values, (str, bytes)):
            raise TypeError(f"ranks[{(row, d)!r}] must be a sequence of int ranks, got {values!r:.40}")
        if row in rows and d in dims:
            arr = np.asarray(list(values))
            if arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() > d):
                # a histogram over 0..d would drop them silently
                raise ValueError(
                    f"ranks[{(row, d)!r}] must hold integers in 0..{d} (ranks of {d} x {d} "
                    f"matrices), got {arr.tolist()!r:.80}"
                )
    axes = fig.subplots(len(rows), len(dims), squeeze=False)
    for i, row in enumerate(rows):
        for j, d in enumerate(dims):
            ax = axes[i, j]
            bins = np.arange(0, d + 1.5) - 0.5
            values = list(ranks.get((row, d), []))
            ax.hist(values, bins=bins, color="tab:blue", rwidth=0.8)
            if not values:
                ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="0.5")
            ax.set_xticks(np.arange(0, d + 1))
            if predicted is not None and (row, d) in predicted:
                ax.plot([predicted[(row, d)]], [0], marker="^", color="tab:red", ms=9, clip_on=False)
            if j == 0:
                ax.set_ylabel(row, fontsize=9)
            if i == 0:
                ax.set_title(f"d = {d}", fontsize=9)
            if i == len(rows) - 1:
                ax.set_xlabel("rank")
    if title:
        fig.suptitle(title, fontsize=10)
    return axes
