"""Particle clouds: token positions and their paths through depth (2-D views of trajectories).

Every function draws onto axes or a figure it is given and returns them; none calls ``plt.show``.
Trajectories are :class:`tpde_lib.particles.Trajectory` objects (``points`` of shape (T, n, d));
only the first two coordinates are drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.figure import Figure
from numpy.typing import ArrayLike

from .._checks import as_at_least, as_count, as_float_array, as_index, as_instance, as_positive, as_weights
from ..particles import Trajectory
from ._animation import animation_html

__all__ = ["plot_cloud", "plot_paths", "initial_angle", "common_limits", "cloud_panels", "animate_clouds"]


def _sizes(weights, base=12.0):
    """Marker areas proportional to mass (``base`` for a uniform weight)."""
    w = np.asarray(weights, dtype=float)
    return base * w * w.size


def _as_unit_interval(name, value, open_left=False):
    x = as_at_least(name, value, 0.0)
    if x > 1.0 or (open_left and x == 0.0):
        raise ValueError(f"{name} must be in {'(0' if open_left else '[0'}, 1], got {x!r}")
    return x


def plot_cloud(
    ax: Axes,
    points: ArrayLike,
    weights: ArrayLike | None = None,
    c=None,
    cmap: str = "viridis",
    base_size: float = 12.0,
    **scatter_kw,
) -> PathCollection:
    """Scatter the tokens on ``ax`` (first two coordinates), marker area ∝ weight.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    points : array_like, shape (n, d), d >= 2
    weights : array_like, shape (n,), optional
        Masses (area ``base_size`` for a uniform weight).
    c : array_like (n,) or colour, optional
        Colours (e.g. the initial angle or the sequence position), or one colour.
    cmap : str
    base_size : float
    **scatter_kw
        Passed to ``ax.scatter``.

    Returns
    -------
    matplotlib.collections.PathCollection
    """
    pts = as_float_array("points", points, ndim=2)
    if pts.shape[1] < 2:
        raise ValueError(f"points must have shape (n, d) with d >= 2, got {pts.shape}")
    base_size = as_positive("base_size", base_size)
    if weights is not None:
        weights = as_weights("weights", weights, pts.shape[0], normalised=False)
    s = base_size if weights is None else _sizes(weights, base_size)
    kw = {"linewidths": 0, "alpha": 0.9, "zorder": 3}
    kw.update(scatter_kw)
    return ax.scatter(pts[:, 0], pts[:, 1], s=s, c=c, cmap=cmap, **kw)


def plot_paths(
    ax: Axes,
    traj,
    upto: int | None = None,
    colours: ArrayLike | None = None,
    cmap: str = "viridis",
    alpha: float = 0.25,
    lw: float = 0.6,
) -> LineCollection:
    """Draw every token's path from ``times[0]`` to ``times[upto]`` (default: the end).

    Parameters
    ----------
    ax : matplotlib Axes
    traj : Trajectory
    upto : int, optional
        Last time index drawn.
    colours : array_like (n,), optional
        Scalar per token mapped through ``cmap``; default: the initial polar angle.
    cmap : str
    alpha, lw : float

    Returns
    -------
    matplotlib.collections.LineCollection

    Raises
    ------
    ValueError
        ``upto`` out of range (it is not wrapped).
    """
    as_instance("traj", traj, Trajectory, "a Trajectory")
    alpha, lw = _as_unit_interval("alpha", alpha), as_positive("lw", lw)
    n_times = traj.points.shape[0]
    k = n_times - 1 if upto is None else as_index("upto", upto, n_times, what="times")
    pts = traj.points[: k + 1, :, :2]
    if colours is None:
        colours = initial_angle(traj)
    cvals = mpl.colormaps[cmap](_normalise(colours))
    segs = np.transpose(pts, (1, 0, 2))  # (n, T, 2)
    lc = LineCollection(segs, colors=cvals, alpha=alpha, linewidths=lw, zorder=2)
    ax.add_collection(lc)
    return lc


def initial_angle(traj) -> np.ndarray:
    """Polar angle of each token about the mean at the first time (a stable colouring).

    Returns
    -------
    ndarray, shape (n,)
    """
    x0 = traj.points[0]
    return np.arctan2(x0[:, 1] - x0[:, 1].mean(), x0[:, 0] - x0[:, 0].mean())


def _normalise(c):
    c = np.asarray(c, dtype=float)
    span = c.max() - c.min()
    return np.zeros_like(c) if span == 0 else (c - c.min()) / span


def common_limits(
    trajs: Sequence, k: int | None = None, pad: float = 0.08, quantile: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Square axis limits holding every cloud of ``trajs`` (all times, or time index ``k``).

    Parameters
    ----------
    trajs : sequence of Trajectory
    k : int, optional
        Time index (negative counts from the end; out of range raises).
    pad : float
        Relative margin.
    quantile : float
        Below 1, ignores the farthest tokens (useful when a few escape).

    Returns
    -------
    lo, hi : ndarray, shape (2,)
        The x and y limits: a square of the same side around the clouds' per-axis median.
    """
    pad = as_at_least("pad", pad, 0.0)
    quantile = _as_unit_interval("quantile", quantile, open_left=True)
    trajs = list(trajs)
    if not trajs:
        raise ValueError("trajs must hold at least one Trajectory")
    for t in trajs:
        as_instance("trajs", t, Trajectory, "Trajectory objects")
    pts = [
        t.points[:, :, :2] if k is None else t.points[as_index("k", k, len(t.points), what="times"), :, :2]
        for t in trajs
    ]
    allp = np.concatenate([p.reshape(-1, 2) for p in pts])
    allp = allp[np.all(np.isfinite(allp), axis=1)]
    centre = np.median(allp, axis=0)
    r = np.quantile(np.abs(allp - centre).max(axis=1), quantile)
    r = r * (1 + pad) if r > 0 else 1.0
    return centre - r, centre + r


def _limits_choice(limits):
    """``"shared"``, ``"own"`` or ``"given"`` (a pair (lo, hi) of finite (x, y) corners with
    lo < hi), else ValueError naming ``limits`` and what it may be."""
    if isinstance(limits, str):
        if limits in ("shared", "own"):
            return limits
        raise ValueError(f"limits must be 'shared', 'own' or (lo, hi) corners, got {limits!r:.40}")
    try:
        lo, hi = (as_float_array("limits", c, shape=(2,)) for c in limits)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"limits must be 'shared', 'own' or (lo, hi), two (x, y) corners, got {limits!r:.60} ({exc})"
        ) from None
    if not np.all(lo < hi):
        raise ValueError(f"limits must have lo < hi in x and y, got lo={lo.tolist()}, hi={hi.tolist()}")
    return "given"


def cloud_panels(
    fig: Figure,
    trajs: Mapping[str, object] | Sequence,
    k: int = -1,
    titles: Sequence[str] | None = None,
    paths: bool = True,
    ncols: int | None = None,
    limits="shared",
    colour_by: ArrayLike | None = None,
) -> list[Axes]:
    """One panel per trajectory: the cloud at time index ``k`` over its faint paths.

    Parameters
    ----------
    fig : matplotlib Figure
    trajs : dict name -> Trajectory (or sequence)
    k : int
        Time index drawn (negative counts from the end; out of range raises, no wrapping).
    titles : sequence of str, optional (default: the dict keys)
    paths : bool
        Draw the paths up to ``k``.
    ncols : int, optional
    limits : "shared", "own" or (lo, hi)
        ``lo`` and ``hi`` the (x, y) corners, finite with ``lo < hi`` (``ValueError`` else).
    colour_by : array_like (n,), optional
        Default: the initial polar angle of the first trajectory.

    Returns
    -------
    list of Axes
    """
    if isinstance(trajs, dict):
        names, trajs = list(trajs), list(trajs.values())
    else:
        trajs = list(trajs)
        names = [""] * len(trajs)
    if not trajs:
        raise ValueError("trajs must hold at least one Trajectory")
    titles = names if titles is None else list(titles)
    if len(titles) != len(trajs):
        raise ValueError(f"titles must have one entry per trajectory ({len(trajs)}), got {len(titles)}")
    ncols = len(trajs) if ncols is None else as_count("ncols", ncols)
    nrows = int(np.ceil(len(trajs) / ncols))
    colours = initial_angle(trajs[0]) if colour_by is None else colour_by
    lims = common_limits(trajs) if _limits_choice(limits) == "shared" else limits
    axes = []
    for i, (tr, title) in enumerate(zip(trajs, titles)):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        kk = as_index("k", k, tr.points.shape[0], what="times")
        if paths:
            plot_paths(ax, tr, upto=kk, colours=colours)
        plot_cloud(ax, tr.points[kk], tr.weights, c=colours)
        lo, hi = common_limits([tr]) if lims == "own" else lims
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(title, fontsize=9)
        axes.append(ax)
    return axes


def animate_clouds(
    trajs: Mapping[str, object] | Sequence,
    titles: Sequence[str] | None = None,
    figsize: tuple[float, float] = (10, 3),
    interval: int = 150,
    ncols: int | None = None,
    dpi: float = 72,
):
    """A playable ``to_jshtml`` animation of the clouds through time (no kernel needed).

    Parameters
    ----------
    trajs : dict name -> Trajectory, or sequence
        All must share their ``times``.
    titles, ncols
        As in :func:`cloud_panels`.
    figsize : (float, float)
    interval : int
        Milliseconds between frames.
    dpi : float

    Returns
    -------
    IPython.display.HTML
    """
    interval, dpi = as_positive("interval", interval), as_positive("dpi", dpi)
    from IPython.display import HTML  # (the widgets extra: checked arguments first)
    from matplotlib.animation import FuncAnimation
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    seq = list(trajs.values()) if isinstance(trajs, dict) else list(trajs)
    if not seq:
        raise ValueError("trajs must hold at least one Trajectory")
    times = seq[0].times
    if any(t.times.shape != times.shape or np.any(t.times != times) for t in seq[1:]):
        raise ValueError("trajs must share their times")
    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    lims = common_limits(seq)

    def frame(k):
        fig.clear()
        cloud_panels(fig, trajs, k=k, titles=titles, ncols=ncols, limits=lims)
        fig.suptitle(f"t = {times[k]:.2f}", fontsize=9)
        return []

    anim = FuncAnimation(fig, frame, frames=len(times), interval=interval, blit=False)
    try:
        html = animation_html(anim, default_mode="loop")
    finally:
        fig.clear()
    return HTML(html)
