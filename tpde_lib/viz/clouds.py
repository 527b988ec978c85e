"""Particle clouds: token positions and their paths through depth (2-D views of trajectories).

Every function draws onto axes or a figure it is given and returns them; none calls ``plt.show``.
Trajectories are :class:`tpde_lib.particles.Trajectory` objects (``points`` of shape (T, n, d));
only the first two coordinates are drawn.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import HTML
from matplotlib.animation import FuncAnimation
from matplotlib.collections import LineCollection

__all__ = ["plot_cloud", "plot_paths", "common_limits", "cloud_panels", "animate_clouds"]


def _sizes(weights, base=12.0):
    """Marker areas proportional to mass (``base`` for a uniform weight)."""
    w = np.asarray(weights, dtype=float)
    return base * w * w.size


def plot_cloud(ax, points, weights=None, c=None, cmap="viridis", base_size=12.0, **scatter_kw):
    """Scatter the tokens (n, d) on ``ax`` (first two coordinates), marker area ∝ weight.

    ``c``: colours, shape (n,) (e.g. the initial angle or the sequence position), or a colour.
    Returns the ``PathCollection``.
    """
    pts = np.asarray(points, dtype=float)
    s = base_size if weights is None else _sizes(weights, base_size)
    kw = {"linewidths": 0, "alpha": 0.9, "zorder": 3}
    kw.update(scatter_kw)
    return ax.scatter(pts[:, 0], pts[:, 1], s=s, c=c, cmap=cmap, **kw)


def plot_paths(ax, traj, upto=None, colours=None, cmap="viridis", alpha=0.25, lw=0.6):
    """Draw every token's path from ``times[0]`` to ``times[upto]`` (default: the end).

    Parameters
    ----------
    ax : matplotlib Axes
    traj : Trajectory
    upto : int, optional
        Last time index drawn.
    colours : array_like (n,), optional
        Scalar per token mapped through ``cmap``; default: the initial polar angle.
    """

    k = traj.points.shape[0] - 1 if upto is None else int(upto)
    pts = traj.points[: k + 1, :, :2]
    if colours is None:
        colours = initial_angle(traj)
    cvals = plt.get_cmap(cmap)(_normalise(colours))
    segs = np.transpose(pts, (1, 0, 2))           # (n, T, 2)
    lc = LineCollection(segs, colors=cvals, alpha=alpha, linewidths=lw, zorder=2)
    ax.add_collection(lc)
    return lc


def initial_angle(traj):
    """Polar angle of each token at the first time (a stable colouring), shape (n,)."""
    x0 = traj.points[0]
    return np.arctan2(x0[:, 1] - x0[:, 1].mean(), x0[:, 0] - x0[:, 0].mean())


def _normalise(c):
    c = np.asarray(c, dtype=float)
    span = c.max() - c.min()
    return np.zeros_like(c) if span == 0 else (c - c.min()) / span


def common_limits(trajs, k=None, pad=0.08, quantile=1.0):
    """Square axis limits holding every cloud of ``trajs`` (all times, or time index ``k``).

    ``quantile`` < 1 ignores the farthest tokens (useful when a few escape). Returns
    ``(lo, hi)``, each of shape (2,): the x and y limits, a square of the same side around the
    clouds' per-axis median.
    """
    pts = [t.points[:, :, :2] if k is None else t.points[k, :, :2] for t in trajs]
    allp = np.concatenate([p.reshape(-1, 2) for p in pts])
    allp = allp[np.all(np.isfinite(allp), axis=1)]
    centre = np.median(allp, axis=0)
    r = np.quantile(np.abs(allp - centre).max(axis=1), quantile)
    r = r * (1 + pad) if r > 0 else 1.0
    return centre - r, centre + r


def cloud_panels(fig, trajs, k=-1, titles=None, paths=True, ncols=None, limits="shared",
                 colour_by=None):
    """One panel per trajectory: the cloud at time index ``k`` over its faint paths.

    Parameters
    ----------
    fig : matplotlib Figure
    trajs : dict name -> Trajectory (or sequence)
    k : int
        Time index drawn.
    titles : sequence of str, optional (default: the dict keys)
    paths : bool
        Draw the paths up to ``k``.
    ncols : int, optional
    limits : "shared", "own" or (lo, hi)
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
    titles = names if titles is None else list(titles)
    ncols = ncols or len(trajs)
    nrows = int(np.ceil(len(trajs) / ncols))
    colours = initial_angle(trajs[0]) if colour_by is None else colour_by
    lims = common_limits(trajs) if limits == "shared" else limits
    axes = []
    for i, (tr, title) in enumerate(zip(trajs, titles)):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        kk = k % tr.points.shape[0]
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


def animate_clouds(trajs, titles=None, figsize=(10, 3), interval=150, ncols=None, dpi=72):
    """A playable ``to_jshtml`` animation of the clouds through time (no kernel needed).

    All trajectories must share their ``times``. Returns ``IPython.display.HTML``.
    """

    seq = list(trajs.values()) if isinstance(trajs, dict) else list(trajs)
    times = seq[0].times
    fig = plt.figure(figsize=figsize, dpi=dpi)
    lims = common_limits(seq)

    def frame(k):
        fig.clear()
        cloud_panels(fig, trajs, k=k, titles=titles, ncols=ncols, limits=lims)
        fig.suptitle(f"t = {times[k]:.2f}", fontsize=9)
        return []

    anim = FuncAnimation(fig, frame, frames=len(times), interval=interval, blit=False)
    html = anim.to_jshtml(default_mode="loop")
    plt.close(fig)
    return HTML(html)
