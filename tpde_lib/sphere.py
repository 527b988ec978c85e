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

from ._checks import (
    as_count,
    as_flag,
    as_float_array,
    as_positive,
    as_seed,
    as_times,
    as_weights,
    unit_scale,
)

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


#: most tokens the pairwise quantities accept (their work grows as n^2; memory stays bounded)
MAX_TOKENS = 200_000
#: pairs in one block of the pairwise quantities (8 MiB of float64 per block array; a call
#: holds a few such arrays at a time)
_BLOCK_PAIRS = 1 << 20
#: calls with at most this many pairs are one dense matrix, as before the blocks existed
_DENSE_PAIRS = 1 << 20


def _check_tokens(x):
    n = x.shape[-2]
    if n > MAX_TOKENS:
        raise ValueError(
            f"points has {n} tokens; the pairwise quantities of tpde_lib.sphere take at most "
            f"{MAX_TOKENS} (their work grows as n^2; memory stays within blocks of "
            f"{_BLOCK_PAIRS} pairs)"
        )


def _row_blocks(n):
    """Row slices of at most ``_BLOCK_PAIRS / n`` rows (at least one)."""
    b = max(1, _BLOCK_PAIRS // max(n, 1))
    return [slice(i, min(n, i + b)) for i in range(0, n, b)]


def _gram_d2(x, sq, rows):
    """Squared distances of the rows ``rows`` of ``x`` to all of its rows, by the Gram matrix
    (one product), and a bound of their round-off per row: |x|^2 + |y|^2 - 2<x, y> cancels
    when the distance is small against the norms (error about (d + 4) 2^-52 (|x| + |y|)^2,
    bounded here with the largest |y|)."""
    d2 = x[rows] @ x.T
    d2 *= -2.0
    d2 += sq[None, :]
    d2 += sq[rows, None]
    norms = np.sqrt(sq[rows])
    err = 2.0 * (x.shape[1] + 4) * np.finfo(float).eps * (norms + math.sqrt(sq.max())) ** 2
    return d2, err[:, None]


def _exact_d2(x, i, j):
    """Squared distances |x_i - x_j|^2 of the index pairs (i, j), by differences (no
    cancellation), in chunks of bounded size."""
    out = np.empty(i.size)
    step = max(1, _BLOCK_PAIRS // x.shape[1])
    for k in range(0, i.size, step):
        diff = x[i[k : k + step]] - x[j[k : k + step]]
        out[k : k + step] = np.einsum("ij,ij->i", diff, diff)
    return out


def _roots(parent):
    """The root of every node of the union-find forest ``parent`` (pointer jumping, which
    also flattens it)."""
    while True:
        up = parent[parent]
        if np.array_equal(up, parent):
            return up
        parent[:] = up


def _union(parent, i, j):
    """Merge the trees of the pairs (i, j): roots hooked onto the smaller root until every pair
    shares one (vectorised)."""
    while i.size:
        root = _roots(parent)
        ri, rj = root[i], root[j]
        apart = ri != rj
        if not apart.any():
            return
        i, j = i[apart], j[apart]
        np.minimum.at(parent, np.maximum(ri[apart], rj[apart]), np.minimum(ri[apart], rj[apart]))


def _frame_clusters(x, r):
    """Connected components of the graph |x_i - x_j| <= r, blockwise (memory O(n + block))."""
    n = x.shape[0]
    s = unit_scale(x)
    x = x / s  # exact (a power of two): no overflow in the squares
    r2 = (r / s) ** 2
    if not np.isfinite(r2) or r2 > 4.0 * 4.0 * x.shape[1]:  # r beyond every distance
        return 1
    x = x - x.mean(axis=0)  # the Gram form cancels less around the centre
    sq = np.einsum("ij,ij->i", x, x)
    parent = np.arange(n)
    for rows in _row_blocks(n):
        d2, err = _gram_d2(x, sq, rows)
        close = d2 <= r2 - err
        bi, bj = np.nonzero(~close & (d2 < r2 + err))  # the Gram form cannot tell
        if bi.size:
            keep = _exact_d2(x, bi + rows.start, bj) <= r2
            close[bi[keep], bj[keep]] = True
        # each row joins the smallest root among its neighbours (itself included), and so do
        # the roots of its other neighbours: few pairs once the first blocks have merged
        root = _roots(parent)
        lowest = np.where(close, root[None, :], n).min(axis=1)
        ci, cj = np.nonzero(close & (root[None, :] != lowest[:, None]))
        _union(
            parent,
            np.concatenate([rows.start + np.arange(lowest.size), root[cj]]),
            np.concatenate([lowest, lowest[ci]]),
        )
    return int(np.unique(_roots(parent)).size)


def sphere_energy(
    points: ArrayLike, beta: float, weights: ArrayLike | None = None, log: bool = False
) -> float | np.ndarray:
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
    log : bool
        Return :math:`\log E_\beta` instead (finite where :math:`E_\beta` exceeds float64,
        e.g. one cluster at :math:`\beta = 800`).

    Returns
    -------
    float, or ndarray of shape (T,)

    Raises
    ------
    ValueError
        :math:`E_\beta` exceeds the largest float64 (pass ``log=True``).

    Notes
    -----
    Up to ``_DENSE_PAIRS`` pairs (1 024 tokens) in one dense matrix; beyond, block by block
    (memory bounded) with the exponent shifted by its largest value; at most ``MAX_TOKENS``.

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
    log = as_flag("log", log)
    _check_tokens(x)
    frames = x[None] if x.ndim == 2 else x
    n = x.shape[-2]
    out = np.empty(frames.shape[0])
    for k, frame in enumerate(frames):
        if not log and n * n <= _DENSE_PAIRS:
            gram = np.einsum("id,jd->ij", frame, frame)
            if beta * np.abs(gram).max() <= 700.0:  # no overflow: the plain sum
                out[k] = np.einsum("i,ij,j->", w, np.exp(beta * gram), w) / (2.0 * beta)
                continue
        out[k] = _log_energy(frame, beta, w)
        if not log:
            if out[k] > np.log(np.finfo(float).max):
                raise ValueError(
                    f"sphere_energy exceeds float64 at beta={beta:g} (log E = {out[k]:.6g}): pass log=True"
                )
            out[k] = np.exp(out[k])
    return float(out[0]) if x.ndim == 2 else out


def _log_energy(x, beta, w):
    """log E_beta of one frame, block by block: log sum w_i w_j e^{beta <x_i, x_j> - M} + M -
    log(2 beta), M the largest exponent (its blocks' maxima, updated as they come)."""
    shift, total = -np.inf, 0.0
    for rows in _row_blocks(x.shape[0]):
        e = beta * (x[rows] @ x.T)
        top = float(e.max())
        if top > shift:
            total *= math.exp(shift - top) if np.isfinite(shift) else 0.0
            shift = top
        total += float(w[rows] @ np.exp(e - shift) @ w)
    return math.log(total) + shift - math.log(2.0 * beta)


def diameter(points: ArrayLike) -> float | np.ndarray:
    r"""Largest distance between two tokens, :math:`\max_{i,j}|x_i - x_j|`.

    Parameters
    ----------
    points : array_like, shape (n, d) or (T, n, d)

    Returns
    -------
    float, or ndarray of shape (T,)

    Notes
    -----
    Computed on the points divided by a power of two near their largest entry (exact), so
    that 1e200 does not overflow; beyond ``_DENSE_PAIRS`` pairs block by block (the Gram form,
    then the candidate pairs again by differences), memory bounded; at most ``MAX_TOKENS``.

    Raises
    ------
    ValueError
        The diameter exceeds the largest float64.

    Examples
    --------
    >>> import tpde_lib as tp
    >>> tp.sphere.diameter([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    2.0
    """
    x = _points("points", points)
    _check_tokens(x)
    frames = x[None] if x.ndim == 2 else x
    out = np.empty(frames.shape[0])
    for k, frame in enumerate(frames):
        s = unit_scale(frame)
        u = frame / s  # exact: no overflow in the squares
        if u.shape[0] ** 2 <= _DENSE_PAIRS:
            diff = u[:, None, :] - u[None, :, :]
            top = np.sqrt((diff**2).sum(axis=-1)).max()
        else:
            top = _blocked_diameter(u)
        with np.errstate(over="ignore"):
            out[k] = top * s
        if not np.isfinite(out[k]):
            raise ValueError(f"diameter of points exceeds float64 ({top:.6g} x {s:.6g})")
    return float(out[0]) if x.ndim == 2 else out


def _blocked_diameter(u):
    """Largest distance of the rows of ``u`` (max |entry| < 2), block by block: the Gram form
    bounds every distance within its round-off; the pairs that may be the largest are measured
    again by differences."""
    u = u - u.mean(axis=0)
    sq = np.einsum("ij,ij->i", u, u)
    best = 0.0
    for rows in _row_blocks(u.shape[0]):  # a lower bound of the largest squared distance
        d2, err = _gram_d2(u, sq, rows)
        best = max(best, float((d2 - err).max()))
    top = 0.0
    for rows in _row_blocks(u.shape[0]):
        d2, err = _gram_d2(u, sq, rows)
        bi, bj = np.nonzero(d2 + err >= best)
        if bi.size:
            top = max(top, float(_exact_d2(u, bi + rows.start, bj).max()))
    return math.sqrt(top)


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

    Notes
    -----
    Distances are compared with ``resolution`` exactly: by the Gram form block by block
    (memory bounded, at most ``MAX_TOKENS`` tokens), and, where its round-off could decide,
    again by differences (no cancellation, no unit norms assumed: two tokens 1e-8 apart at
    1e8 from the origin, or two unit vectors 1e-8 apart at ``resolution`` 1e-9, stay apart).

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
    _check_tokens(x)
    frames = x[None] if x.ndim == 2 else x
    counts = [_frame_clusters(frame, r) for frame in frames]
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


def two_cluster_time(beta: float, theta0: float, theta1: float, m1: float = 0.5, log: bool = False) -> float:
    r"""Time two point clusters on the sphere take to close from angle :math:`\theta_0` to
    :math:`\theta_1` (:eq:`eq-two-clusters`, derived in the appendix).

    Two clusters of masses :math:`m_1, m_2 = 1 - m_1` (all tokens of each at one point) stay
    point clusters on the great circle through them, and their angle obeys

    .. math::
        \dot\theta = -\sin\theta\; q\Big(\frac{m_2}{m_1 + m_2 q} + \frac{m_1}{m_2 + m_1 q}\Big),
        \qquad q = e^{-\beta(1 - \cos\theta)},

    so the time is :math:`\int_{\theta_1}^{\theta_0} d\theta / |\dot\theta|`, computed here by
    adaptive quadrature in :math:`u = \log\tan(\theta/2)` (:math:`du = d\theta/\sin\theta`:
    the integrand :math:`e^{\beta(1-\cos\theta)}/h` is bounded, so :math:`\theta_1 = 10^{-300}`
    is as easy as 0.1), its exponential factored out as :math:`e^{\beta(1 - \cos\theta_0)}`
    (log domain). For large :math:`\beta` it grows like
    :math:`e^{\beta(1-\cos\theta_0)}/\beta`: the plateau is exponentially long in :math:`\beta`.

    Parameters
    ----------
    beta : float
        > 0.
    theta0, theta1 : float
        Angles with :math:`0 < \theta_1 < \theta_0 < \pi`.
    m1 : float
        Mass of the first cluster, in (0, 1).
    log : bool
        Return the logarithm of the time (finite where the time exceeds float64).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        The time exceeds the largest float64 (pass ``log=True``), or an argument out of range.

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
    log = as_flag("log", log)
    if not theta1 < theta0 < math.pi:
        raise ValueError(f"need 0 < theta1 < theta0 < pi, got theta1={theta1:g}, theta0={theta0:g}")
    if not m1 < 1:
        raise ValueError(f"m1 must be in (0, 1), got {m1:g}")
    m2 = 1.0 - m1

    def gap(theta):  # 1 - cos(theta), without cancellation at small angles
        return 2.0 * math.sin(0.5 * theta) ** 2

    top = beta * gap(theta0)  # the largest exponent, at theta0

    def integrand(u):  # e^{beta (1 - cos) - top} / h, h the bracket of the speed
        theta = 2.0 * math.atan(math.exp(u))
        e = beta * gap(theta)
        q = math.exp(-e)
        return math.exp(e - top) / (m2 / (m1 + m2 * q) + m1 / (m2 + m1 * q))

    u0, u1 = math.log(math.tan(0.5 * theta0)), math.log(math.tan(0.5 * theta1))
    # the integrand rises over the last ~1/(beta sin^2 theta0) of [u1, u0]: a break there
    width = min(u0 - u1, 50.0 / max(beta * math.sin(theta0) ** 2, 1e-300))
    points = [u0 - width] if u1 < u0 - width else None
    value, _ = quad(integrand, u1, u0, epsabs=0, epsrel=1e-12, limit=400, points=points)
    log_time = math.log(value) + top
    if log:
        return log_time
    if log_time > math.log(np.finfo(float).max):
        raise ValueError(
            f"two_cluster_time exceeds float64 at beta={beta:g} (log of the time {log_time:.6g}): "
            "pass log=True"
        )
    return float(value * math.exp(top)) if top < 700 else math.exp(log_time)


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
    c = c / np.array([unit_scale(row) for row in c])[:, None]  # exact: no overflow below
    zero = np.flatnonzero(~np.any(c, axis=1))
    if zero.size:
        raise ValueError(f"centres must be non-zero vectors (a direction each), row {int(zero[0])} is zero")
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
