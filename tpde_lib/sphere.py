r"""Tokens on the unit sphere: the interaction energy, clusters, plateaus and their durations.

With a normalisation, tokens are unit vectors and, for :math:`Q = K = I` scaled by
:math:`\beta` and :math:`V = I`, they follow the self-attention model on the sphere
(:class:`~tpde_lib.Layer` with ``normalisation="sphere"``),

.. math::
    \dot x_i = P^\perp_{x_i}\Big(\frac{\sum_j w_j e^{\beta\langle x_i, x_j\rangle} x_j}
                                      {\sum_j w_j e^{\beta\langle x_i, x_j\rangle}}\Big),

which increases the energy :func:`sphere_energy` (:eq:`eq-sphere-energy`,
:eq:`eq-sphere-ascent`, derived in the appendix). The functions here measure what the chapter
"Tokens on the sphere" needs: the energy, the number of clusters at a resolution, the
plateaus of that number along a trajectory, and the exact merging time of two point clusters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ._checks import as_count, as_float_array, as_positive, as_seed, as_times, as_weights

__all__ = [
    "sphere_energy",
    "diameter",
    "count_clusters",
    "Plateau",
    "cluster_plateaus",
    "two_cluster_time",
    "sample_caps",
]


def _points(name, x):
    arr = as_float_array(name, x)
    if arr.ndim not in (2, 3):
        raise ValueError(f"{name} must have shape (n, d) or (T, n, d), got {arr.shape}")
    return arr


def _weights(weights, n):
    if weights is None:
        return np.full(n, 1.0 / n)
    return as_weights("weights", weights, n)


def sphere_energy(points: ArrayLike, beta: float, weights: ArrayLike | None = None) -> float | np.ndarray:
    r"""Interaction energy of tokens on the sphere (:eq:`eq-sphere-energy`).

    .. math::
        E_\beta(\mu) = \frac{1}{2\beta}\iint e^{\beta\langle x, y\rangle}\,d\mu(x)\,d\mu(y)
        = \frac{1}{2\beta}\sum_{i,j} w_i w_j e^{\beta\langle x_i, x_j\rangle}

    The self-attention dynamics on the sphere with :math:`A = \beta I`, :math:`V = I` is an
    ascent of :math:`E_\beta` (:eq:`eq-sphere-ascent`): it never decreases along a trajectory.
    Its largest value on the sphere, :math:`e^\beta/(2\beta)`, is reached exactly at one cluster.

    Parameters
    ----------
    points : array_like, shape (n, d) or (T, n, d)
        Tokens (unit vectors), or a trajectory of them.
    beta : float
        Inverse temperature, > 0.
    weights : array_like, shape (n,), optional
        Masses summing to 1 (default uniform).

    Returns
    -------
    float, or ndarray of shape (T,)

    Examples
    --------
    One cluster reaches the maximum :math:`e^\beta / (2\beta)`:

    >>> import numpy as np, tpde_lib as tp
    >>> x = np.tile([0.0, 1.0], (4, 1))
    >>> bool(np.isclose(tp.sphere.sphere_energy(x, 2.0), np.exp(2.0) / 4.0, rtol=1e-15))
    True
    """
    x = _points("points", points)
    beta = as_positive("beta", beta)
    w = _weights(weights, x.shape[-2])
    gram = np.einsum("...id,...jd->...ij", x, x)
    out = np.einsum("i,...ij,j->...", w, np.exp(beta * gram), w) / (2.0 * beta)
    return float(out) if x.ndim == 2 else out


def diameter(points: ArrayLike) -> float | np.ndarray:
    r"""Largest distance between two tokens, :math:`\max_{i,j}|x_i - x_j|`.

    Parameters
    ----------
    points : array_like, shape (n, d) or (T, n, d)

    Returns
    -------
    float, or ndarray of shape (T,)

    Examples
    --------
    >>> import tpde_lib as tp
    >>> tp.sphere.diameter([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    2.0
    """
    x = _points("points", points)
    diff = x[..., :, None, :] - x[..., None, :, :]
    out = np.sqrt((diff**2).sum(axis=-1)).max(axis=(-2, -1))
    return float(out) if x.ndim == 2 else out


def _components(close):
    """Number of connected components of the graph with adjacency ``close`` (n, n) bool."""
    n = close.shape[0]
    label = np.arange(n)
    while True:  # min-label propagation: at most n rounds, each a vectorised pass
        new = np.where(close, label[None, :], n).min(axis=1)
        new = np.minimum(new, label)
        if np.array_equal(new, label):
            return int(np.unique(label).size)
        label = new[new]  # pointer jumping: labels travel along chains quickly


def count_clusters(points: ArrayLike, resolution: float) -> int | np.ndarray:
    r"""Number of clusters at a resolution: connected groups of tokens linked by steps shorter
    than it (single linkage).

    Tokens :math:`x_i, x_j` are linked when :math:`|x_i - x_j| \le r`; the clusters are the
    connected components of that graph. A group of tokens of diameter :math:`\le r` is one
    cluster; groups further than :math:`r` apart are separate ones.

    Parameters
    ----------
    points : array_like, shape (n, d) or (T, n, d)
    resolution : float
        The linking distance :math:`r > 0`.

    Returns
    -------
    int, or ndarray of int of shape (T,)

    Examples
    --------
    Two groups on the circle, 0.01 apart inside and 1.4 apart between them:

    >>> import numpy as np, tpde_lib as tp
    >>> a = np.array([0.0, 0.01, 0.02, 1.4, 1.41])
    >>> x = np.stack([np.cos(a), np.sin(a)], axis=1)
    >>> tp.sphere.count_clusters(x, 0.1), tp.sphere.count_clusters(x, 2.0)
    (2, 1)
    """
    x = _points("points", points)
    r = as_positive("resolution", resolution)
    frames = x[None] if x.ndim == 2 else x
    counts = []
    for frame in frames:
        sq = np.einsum("id,id->i", frame, frame)
        dist2 = sq[:, None] + sq[None, :] - 2.0 * frame @ frame.T
        counts.append(_components(dist2 <= r * r))
    return counts[0] if x.ndim == 2 else np.array(counts)


@dataclass(frozen=True)
class Plateau:
    """A maximal run of equal cluster counts along a trajectory.

    Attributes
    ----------
    clusters : int
        The number of clusters during the run.
    start, end : float
        The first time of the run and the first time after it (the last time of the trajectory
        for the final run, which may not be over).
    final : bool
        True for the last run (its end is only a lower bound of when it ends).
    """

    clusters: int
    start: float
    end: float
    final: bool

    @property
    def duration(self) -> float:
        """``end - start``."""
        return self.end - self.start


def cluster_plateaus(times: ArrayLike, points: ArrayLike, resolution: float) -> list[Plateau]:
    r"""The runs of constant cluster count along a trajectory: how long each number of
    clusters lasts (the metastable plateaus).

    Parameters
    ----------
    times : array_like, shape (T,)
        Strictly increasing.
    points : array_like, shape (T, n, d)
        The tokens at those times (``Trajectory.points``).
    resolution : float
        Passed to :func:`count_clusters`.

    Returns
    -------
    list of Plateau
        In time order; the count may go up as well as down (a run is cut at every change).
        Durations are resolved to the spacing of ``times``.

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> far = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> near = np.array([[1.0, 0.0], [1.0, 0.0]])
    >>> runs = tp.sphere.cluster_plateaus([0.0, 1.0, 2.0, 3.0], [far, far, near, near], 0.5)
    >>> [(p.clusters, p.start, p.end, p.final) for p in runs]
    [(2, 0.0, 2.0, False), (1, 2.0, 3.0, True)]
    """
    t = as_times("times", times)
    x = _points("points", points)
    if x.ndim != 3 or x.shape[0] != t.size:
        raise ValueError(f"points must have shape ({t.size}, n, d) to match times, got {x.shape}")
    counts = count_clusters(x, resolution)
    cuts = np.flatnonzero(np.diff(counts)) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [t.size - 1]])
    return [
        Plateau(int(counts[s]), float(t[s]), float(t[e]), bool(k == starts.size - 1))
        for k, (s, e) in enumerate(zip(starts, ends))
    ]


def _two_cluster_speed(theta, beta, m1):
    """Closing speed -dθ/dt of two point clusters of masses m1, 1 - m1 at angle θ."""
    m2 = 1.0 - m1
    q = np.exp(-beta * (1.0 - np.cos(theta)))
    return np.sin(theta) * q * (m2 / (m1 + m2 * q) + m1 / (m2 + m1 * q))


def two_cluster_time(beta: float, theta0: float, theta1: float, m1: float = 0.5) -> float:
    r"""Time two point clusters on the sphere take to close from angle :math:`\theta_0` to
    :math:`\theta_1` (:eq:`eq-two-clusters`, derived in the appendix).

    Two clusters of masses :math:`m_1, m_2 = 1 - m_1` (all tokens of each at one point) stay
    point clusters on the great circle through them, and their angle obeys

    .. math::
        \dot\theta = -\sin\theta\; q\Big(\frac{m_2}{m_1 + m_2 q} + \frac{m_1}{m_2 + m_1 q}\Big),
        \qquad q = e^{-\beta(1 - \cos\theta)},

    so the time is :math:`\int_{\theta_1}^{\theta_0} d\theta / |\dot\theta|`, computed here by
    adaptive quadrature. For large :math:`\beta` it grows like
    :math:`e^{\beta(1-\cos\theta_0)}/\beta`: the plateau is exponentially long in :math:`\beta`.

    Parameters
    ----------
    beta : float
        > 0.
    theta0, theta1 : float
        Angles with :math:`0 < \theta_1 < \theta_0 < \pi`.
    m1 : float
        Mass of the first cluster, in (0, 1).

    Returns
    -------
    float

    Examples
    --------
    At :math:`\beta \to 0` with equal masses, :math:`\dot\theta = -\sin\theta`, whose time is
    :math:`\log\tan(\theta_0/2) - \log\tan(\theta_1/2)`; a small :math:`\beta` is close to it:

    >>> import numpy as np, tpde_lib as tp
    >>> t = tp.sphere.two_cluster_time(1e-9, 1.5, 0.1)
    >>> bool(np.isclose(t, np.log(np.tan(0.75) / np.tan(0.05)), rtol=1e-8))
    True
    """
    from scipy.integrate import quad  # lazy: only this function needs it

    beta = as_positive("beta", beta)
    theta0, theta1 = as_positive("theta0", theta0), as_positive("theta1", theta1)
    m1 = as_positive("m1", m1)
    if not theta1 < theta0 < math.pi:
        raise ValueError(f"need 0 < theta1 < theta0 < pi, got theta1={theta1:g}, theta0={theta0:g}")
    if not m1 < 1:
        raise ValueError(f"m1 must be in (0, 1), got {m1:g}")
    value, _ = quad(
        lambda th: 1.0 / _two_cluster_speed(th, beta, m1), theta1, theta0, epsabs=0, epsrel=1e-12, limit=200
    )
    return float(value)


def sample_caps(centres: ArrayLike, counts: ArrayLike, spread: float, seed: int = 0) -> np.ndarray:
    r"""Unit vectors in caps around given centres: a multi-cluster initial condition.

    Token :math:`k` of cap :math:`a` is :math:`(c_a + s\,g_k)/|c_a + s\,g_k|` with
    :math:`g_k` standard Gaussian in :math:`\mathbb R^d` and :math:`s` the spread.

    Parameters
    ----------
    centres : array_like, shape (k, d)
        Cap centres (normalised here).
    counts : array_like of int, shape (k,)
        Tokens per cap, each >= 1.
    spread : float
        > 0; the caps have angular radius about ``spread * sqrt(d)``.
    seed : int
        Seed of ``numpy.random.default_rng``.

    Returns
    -------
    ndarray, shape (sum(counts), d)
        Unit rows, cap by cap.

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> x = tp.sphere.sample_caps(np.eye(3)[:2], [3, 2], 0.01, seed=1)
    >>> x.shape, bool(np.allclose(np.linalg.norm(x, axis=1), 1.0))
    ((5, 3), True)
    >>> tp.sphere.count_clusters(x, 0.2)
    2
    """
    c = as_float_array("centres", centres, ndim=2)
    sizes = [
        as_count(f"counts[{i}]", int(k) if isinstance(k, np.integer) else k) for i, k in enumerate(counts)
    ]
    if len(sizes) != c.shape[0]:
        raise ValueError(f"counts must have {c.shape[0]} entries (one per centre), got {len(sizes)}")
    s = as_positive("spread", spread)
    rng = np.random.default_rng(as_seed("seed", seed))
    c = c / np.linalg.norm(c, axis=1, keepdims=True)
    x = np.concatenate([c[a] + s * rng.standard_normal((k, c.shape[1])) for a, k in enumerate(sizes)])
    return x / np.linalg.norm(x, axis=1, keepdims=True)
