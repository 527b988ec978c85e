r"""Optimal-transport distances between token measures: W_p, Bures–Wasserstein, conditional W_p.

The stability and mean-field statements of the paper are measured in Wasserstein distances:
:math:`W_p(\mu, \nu) = \big(\min_{\pi \in \Pi(\mu, \nu)} \int |x - y|^p
\, d\pi\big)^{1/p}`. Masked attention uses the conditional distance (chapter "Masked attention"), which only
couples tokens at the same sequence position. Gaussians have the closed-form Bures–Wasserstein
distance. Exact discrete OT is POT's network simplex ``ot.emd2``
(Flamary et al. 2021); the large-n option (sliced) is labelled an approximation, and it is a lower
bound.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .._checks import as_at_least, as_choice, as_count, as_instance, as_seed, unit_scale
from .._linalg import psd_sqrt
from ..measures import Empirical, Gaussian

_METHODS = ("exact", "sliced")
# network-simplex iteration budget: far above what n, m <= 10^4 needs (POT's default 1e5 is hit
# around n ~ 1000, which would silently return a sub-optimal cost)
_EMD_MAX_ITER = 100_000_000
# two fibres of the conditional distance must carry the same mass to this absolute tolerance
# (the same tolerance Empirical uses for weights summing to 1)
MARGINAL_TOL = 1e-9
# the network simplex resolves costs to ~1e-15 of the largest entry: an optimal value (in units of
# the largest distance to the p) above this is accurate to ~1e-9 relative; below, see _wp_cost
_RESOLVED = 1e-6
# rescaled costs are clipped here (an entry this far above the optimum is never worth using), and
# the rescaling is repeated at most this many times (it stops as soon as the cost stops falling)
_COST_CLIP = 1e8
_MAX_REFINEMENTS = 8
# plan entries below this are round-off of the simplex's flow updates; quantile intervals below
# this are round-off of cumulative sums (weights sum to 1 to 1e-9)
_PLAN_FLOOR = 1e-13
_QUANTILE_FLOOR = 1e-12
# numbers per (n + m, directions) array of the sliced distance (4e6 float64 = 32 MB)
_BLOCK_ENTRIES = 4_000_000


def _check_pair(mu, nu):
    for name, m in (("mu", mu), ("nu", nu)):
        as_instance(name, m, Empirical, "an Empirical measure")
    if mu.d != nu.d:
        raise ValueError(f"nu must live in the same dimension as mu: mu has d={mu.d}, nu has d={nu.d}")


def _check_p(p):
    return as_at_least("p", p, 1.0, " (W_p is a metric only for p >= 1)")


def _distances(x, y):
    r"""``(D, scale)`` with ``|x_i - y_j| = scale * D_ij``, D of shape (n, m).

    The distances are formed from coordinate differences (``cdist``), never as
    :math:`|x|^2 + |y|^2 - 2\langle x, y\rangle` (which cancels: at 1e8 it loses every digit of a
    distance 1), on points divided by a common power of two so that nothing overflows (1e300) or
    underflows (1e-300) needlessly.
    """
    scale = unit_scale(x, y)
    return _cdist(x / scale, y / scale), scale


def _cdist(x, y):
    """Euclidean distance matrix (scipy's ``cdist``, imported on first use: ``import tpde_lib``
    stays light)."""
    from scipy.spatial.distance import cdist

    return cdist(x, y)


def _exact_plan(a, b, M):
    """An optimal coupling of a and b for the cost M (network simplex), checked for convergence.

    Entries below ``_PLAN_FLOOR`` are round-off of the simplex's flow updates and set to 0.
    """
    import ot  # POT, imported on first use: import tpde_lib stays light

    plan, log = ot.emd(a, b, M, numItermax=_EMD_MAX_ITER, log=True)
    if log.get("warning"):
        raise RuntimeError(f"exact optimal transport did not converge: {log['warning']}")
    plan = np.asarray(plan, dtype=float)
    plan[plan < _PLAN_FLOOR] = 0.0
    return plan


def _plan_cost(plan, D, p):
    r""":math:`(\sum_{ij} \pi_{ij} D_{ij}^p)^{1/p}`, in units of the largest distance it uses."""
    used = plan > 0
    top = float(D[used].max()) if np.any(used) else 0.0
    if top == 0.0:
        return 0.0
    with np.errstate(under="ignore"):
        return top * float(np.sum(plan[used] * (D[used] / top) ** p)) ** (1.0 / p)


def _wp_cost(a, b, D, p):
    r""":math:`(\min_\pi \sum_{ij} \pi_{ij} D_{ij}^p)^{1/p}` for distances D, stable for all p >= 1.

    The network simplex resolves costs only to about 1e-15 of the largest entry. So the cost is
    first taken in units of the largest distance, :math:`(D/\max D)^p \in [0, 1]` (no overflow);
    if the optimal value is then below ``_RESOLVED`` (large p, or distances spread over many
    orders of magnitude: the optimal entries underflow or fall below the resolution), the problem
    is solved again in units of the best cost found so far, where the optimum is of order 1, with
    entries above ``_COST_CLIP`` clipped (they are never worth using), until it stops improving.
    The value returned is then the cost of an actual coupling, computed stably.
    """
    top = float(D.max())
    if top == 0.0:
        return 0.0
    with np.errstate(under="ignore"):
        plan = _exact_plan(a, b, (D / top) ** p)
        value = float(np.sum(plan * (D / top) ** p))
    if value >= _RESOLVED:
        return top * value ** (1.0 / p)
    best = _plan_cost(plan, D, p)
    for _ in range(_MAX_REFINEMENTS):
        if best == 0.0:
            return 0.0
        with np.errstate(under="ignore", over="ignore"):
            plan = _exact_plan(a, b, np.minimum((D / best) ** p, _COST_CLIP))
        cost = _plan_cost(plan, D, p)
        if not cost < best * (1.0 - 1e-12):
            break
        best = cost
    return best


def _sliced_logs(u, v, a, b, p):
    """log W_p^p of the 1-D quantile matching of every column of u (n, L) against v (m, L)."""
    n, m, L = u.shape[0], v.shape[0], u.shape[1]
    ou, ov = np.argsort(u, axis=0), np.argsort(v, axis=0)
    u, v = np.take_along_axis(u, ou, axis=0), np.take_along_axis(v, ov, axis=0)
    cu, cv = np.cumsum(a[ou], axis=0), np.cumsum(b[ov], axis=0)  # cumulative weights, per column
    q = np.sort(np.concatenate([np.zeros((1, L)), cu, cv]), axis=0)
    mass = np.diff(q, axis=0)  # (n + m, L)
    mid = (0.5 * (q[1:] + q[:-1])).T
    # column-wise searchsorted in one call: shift column l by 2 l (cumulative weights lie in [0, 1 + 1e-9])
    col = np.arange(L)[:, None]
    probe = (mid + 2.0 * col).ravel()
    iu = np.searchsorted((cu.T + 2.0 * col).ravel(), probe).reshape(L, -1) - n * col
    iv = np.searchsorted((cv.T + 2.0 * col).ravel(), probe).reshape(L, -1) - m * col
    iu, iv = np.clip(iu.T, 0, n - 1), np.clip(iv.T, 0, m - 1)
    gaps = np.abs(np.take_along_axis(u, iu, axis=0) - np.take_along_axis(v, iv, axis=0))
    gaps = np.where(mass > _QUANTILE_FLOOR, gaps, 0.0)  # round-off slivers carry no mass
    top = gaps.max(axis=0)  # (L,)
    logs = np.full(L, -np.inf)
    keep = top > 0
    with np.errstate(under="ignore"):
        unit = np.sum(mass[:, keep] * (gaps[:, keep] / top[keep]) ** p, axis=0)
    logs[keep] = p * np.log(top[keep]) + np.log(unit)
    return logs


def _sliced(x, y, a, b, p, theta):
    r"""Sliced W_p over the unit directions ``theta`` (d, L): mean over l of :math:`W_p^p` in 1-D.

    Each 1-D distance is the quantile matching: the sorted atoms of both sides are paired on the
    common refinement of their cumulative weights; its p-th power is taken in units of the
    largest gap that carries mass, and the mean over directions in the log domain, so nothing
    overflows or underflows at any scale or p. Directions are processed in chunks of at most
    ``_BLOCK_ENTRIES`` numbers per array.
    """
    scale = unit_scale(x, y)
    xs, ys = x / scale, y / scale
    L = theta.shape[1]
    chunk = max(1, _BLOCK_ENTRIES // (xs.shape[0] + ys.shape[0] + 1))
    logs = np.concatenate(
        [
            _sliced_logs(xs @ theta[:, k : k + chunk], ys @ theta[:, k : k + chunk], a, b, p)
            for k in range(0, L, chunk)
        ]
    )
    peak = logs.max()
    if peak == -np.inf:
        return 0.0
    return float(scale * np.exp((peak + np.log(np.sum(np.exp(logs - peak)) / L)) / p))


def wasserstein(
    mu: Empirical, nu: Empirical, p: float = 2, method: str = "exact", n_projections: int = 200, seed: int = 0
) -> float:
    r"""Wasserstein distance :math:`W_p(\mu, \nu)` between two empirical measures (not raised to p).

    .. math::
        W_p(\mu, \nu) = \Big(\min_{\pi \in \Pi(\mu, \nu)} \sum_{ij} \pi_{ij} |x_i - y_j|^p\Big)^{1/p}

    Parameters
    ----------
    mu, nu : Empirical
        Points of shapes (n, d) and (m, d), weights (n,) and (m,); positions are ignored
        (see :func:`conditional_wasserstein` for the masked setting).
    p : float, default 2
        Exponent, ``p >= 1``.
    method : {"exact", "sliced"}
        ``"exact"`` (default): POT's network simplex ``ot.emd2`` on the full (n, m) cost matrix.
        Memory O(n m), time roughly O(n^2 log n) in practice (0.2 s for n = m = 1600 here);
        use it up to a few thousand points.

        ``"sliced"`` (APPROXIMATION, a lower bound): the Monte-Carlo sliced distance
        :math:`SW_p = (\frac1L \sum_{l} W_p^p(\theta_{l\#}\mu, \theta_{l\#}\nu))^{1/p}` over
        ``n_projections`` directions :math:`\theta_l` drawn uniformly on the sphere with
        ``np.random.default_rng(seed)``. Each 1-D term is at most :math:`W_p^p(\mu,\nu)`
        (projection is 1-Lipschitz), so the value is always :math:`\le W_p`; it equals
        :math:`W_p` when d = 1. It is a different metric, not a converging estimate of
        :math:`W_p` (it is :math:`W_p/\sqrt2` for a translation in d = 2, and 0.5-0.7 times
        :math:`W_p` between a uniform square and a Gaussian sample in our tests). Memory
        O((n + m) L), so it is the option for n beyond ~10^4.

        An entropic (Sinkhorn) option was tried and left out: on this hardware a converged
        small-regularisation Sinkhorn was 100-1000 times slower than the exact simplex at every n
        where the (n, m) cost matrix fits in memory (n = 300, p = 2: 5 s against 10 ms).
    n_projections : int, default 200
        Number of directions for ``method="sliced"`` (an ``int >= 1``; validated for every method).
    seed : int, default 0
        Seed of the projections for ``method="sliced"`` (an ``int >= 0``; validated for every
        method).

    Both methods form distances from coordinate differences (no cancellation: the distance
    between 1e8 and 1e8 + 1 is exactly 1) and raise them to the power p in units of the largest
    distance (no overflow or underflow at large p, or at scales 1e-300 ... 1e300).

    Returns
    -------
    float

    Raises
    ------
    TypeError
        ``mu`` or ``nu`` not an :class:`~tpde_lib.measures.Empirical`; ``p`` not a real number;
        ``n_projections`` or ``seed`` not an ``int``.
    ValueError
        Dimensions differ (names ``nu``), ``p < 1`` or not finite (names ``p``), unknown
        ``method``, ``n_projections < 1``, ``seed < 0``.
    RuntimeError
        The exact solver did not reach optimality.

    Notes
    -----
    Used in the chapters "Mean-field limit" and "Well-posedness and stability".

    Examples
    --------
    Two equal-weight clouds that differ by a shift :math:`v` are :math:`|v|` apart:

    >>> import numpy as np
    >>> import tpde_lib as tp
    >>> x = np.random.default_rng(0).standard_normal((50, 2))
    >>> mu, nu = tp.Empirical(x), tp.Empirical(x + [3.0, 4.0])
    >>> round(tp.wasserstein(mu, nu), 12)
    5.0
    >>> round(tp.wasserstein(mu, nu, p=1), 12)
    5.0
    """
    _check_pair(mu, nu)
    p = _check_p(p)
    method = as_choice("method", method, _METHODS)
    n_projections = as_count("n_projections", n_projections, 1)
    seed = as_seed("seed", seed)
    x, y, a, b = mu.points, nu.points, mu.weights, nu.weights
    if method == "exact":
        D, scale = _distances(x, y)
        return float(scale * _wp_cost(a, b, D, p))
    theta = np.random.default_rng(seed).standard_normal((mu.d, n_projections))
    theta /= np.linalg.norm(theta, axis=0, keepdims=True)
    return _sliced(x, y, a, b, p, theta)


def bures_wasserstein(g1: Gaussian, g2: Gaussian) -> float:
    r"""Wasserstein-2 distance between two Gaussian measures (not squared).

    .. math::
        W_2^2\big(\mathcal N(\alpha_1, \Sigma_1), \mathcal N(\alpha_2, \Sigma_2)\big)
          = |\alpha_1 - \alpha_2|^2
          + \operatorname{tr}\big(\Sigma_1 + \Sigma_2
          - 2(\Sigma_1^{1/2}\Sigma_2\Sigma_1^{1/2})^{1/2}\big)

    Both square roots are symmetric eigendecomposition roots (negative round-off eigenvalues
    clipped to 0), so degenerate (low-rank) covariances are handled exactly.

    Parameters
    ----------
    g1, g2 : Gaussian
        Means of shape (d,), covariances of shape (d, d).

    Returns
    -------
    float

    Raises
    ------
    TypeError
        An argument is not a :class:`~tpde_lib.measures.Gaussian`.
    ValueError
        The dimensions differ (names ``g2``).

    Notes
    -----
    Used in the chapter "Gaussian solutions"; Peyré and Cuturi (2019), Remark 2.31.

    Examples
    --------
    For commuting covariances :math:`W_2^2 = |\alpha_1-\alpha_2|^2 + \sum_i(\sqrt{\lambda_i}-\sqrt{\mu_i})^2`:

    >>> import numpy as np
    >>> import tpde_lib as tp
    >>> g1 = tp.Gaussian([0.0, 0.0], np.diag([1.0, 4.0]))
    >>> g2 = tp.Gaussian([3.0, 0.0], np.diag([4.0, 4.0]))
    >>> round(tp.bures_wasserstein(g1, g2) ** 2, 12)     # 3^2 + (1 - 2)^2
    10.0
    """
    for name, g in (("g1", g1), ("g2", g2)):
        as_instance(name, g, Gaussian, "a Gaussian")
    if g1.d != g2.d:
        raise ValueError(f"g2 must have the same dimension as g1: g1 has d={g1.d}, g2 has d={g2.d}")
    # W_2 is 1-homogeneous: compute it for the Gaussians scaled by a power of two s (means / s,
    # covariances / s^2, both exact) so that squares of 1e200 or 1e-200 neither overflow nor vanish
    big = max(
        float(np.abs(np.concatenate([g1.mean, g2.mean])).max()),
        float(np.sqrt(max(np.abs(g1.cov).max(), np.abs(g2.cov).max()))),
    )
    s = unit_scale(np.array(big))
    m1, m2, c1, c2 = g1.mean / s, g2.mean / s, (g1.cov / s) / s, (g2.cov / s) / s
    root1 = psd_sqrt(c1)
    mid = root1 @ c2 @ root1
    cross = np.linalg.eigvalsh(0.5 * (mid + mid.T))
    bures2 = np.trace(c1) + np.trace(c2) - 2.0 * np.sqrt(np.clip(cross, 0.0, None)).sum()
    mean2 = float(np.sum((m1 - m2) ** 2))
    return float(s * np.sqrt(max(mean2 + bures2, 0.0)))


def _fibres(m, name):
    """Unique positions of ``m`` (sorted), the fibre index of each token, the fibre masses."""
    if m.positions is None:
        raise ValueError(
            f"{name} must carry positions (Empirical(..., positions=...)) for the "
            "conditional Wasserstein distance"
        )
    s, idx = np.unique(m.positions, return_inverse=True)
    return s, idx, np.bincount(idx, weights=m.weights, minlength=s.size)


def _fibre_wp(mu, nu, p):
    """The fibres of two measures of the same position marginal and their W_p, in units of a
    power of two: ``(values (K,), masses (K,), distances / scale (K,), scale, p)``.

    Checks the arguments (``p >= 1``, positions, the same marginal to ``MARGINAL_TOL``). Fibres
    holding one token on each side are done in one vectorised step (W_p of two Diracs is their
    distance), the others by exact OT (``ot.emd2``); the points are divided by ``scale``
    (:func:`tpde_lib._linalg.unit_scale`), so that no square overflows or vanishes.
    """
    _check_pair(mu, nu)
    p = _check_p(p)
    s_mu, idx_mu, m_mu = _fibres(mu, "mu")
    s_nu, idx_nu, m_nu = _fibres(nu, "nu")
    if s_mu.shape != s_nu.shape or np.any(s_mu != s_nu):
        extra = np.setxor1d(s_mu, s_nu)
        raise ValueError(
            "mu and nu must have the same position marginal: positions "
            f"{extra[:5].tolist()} carry mass in only one of them"
        )
    gap = np.abs(m_mu - m_nu)
    if np.any(gap > MARGINAL_TOL):
        k = int(np.argmax(gap))
        raise ValueError(
            "mu and nu must have the same position marginal (to 1e-9): at position "
            f"s={s_mu[k]:.6g} mu has mass {m_mu[k]:.12g}, nu has {m_nu[k]:.12g}"
        )
    count_mu = np.bincount(idx_mu, minlength=s_mu.size)
    count_nu = np.bincount(idx_nu, minlength=s_mu.size)
    single = (count_mu == 1) & (count_nu == 1)
    scale = unit_scale(mu.points, nu.points)
    fibre_w = np.zeros(s_mu.size)
    if np.any(single):  # one token per side: scatter the token of each fibre
        at_mu = np.empty((s_mu.size, mu.d))
        at_nu = np.empty((s_mu.size, mu.d))
        at_mu[idx_mu] = mu.points / scale
        at_nu[idx_nu] = nu.points / scale
        fibre_w[single] = np.linalg.norm(at_mu[single] - at_nu[single], axis=1)
    for k in np.flatnonzero(~single & (m_mu > 0)):
        sel_mu, sel_nu = idx_mu == k, idx_nu == k
        a = mu.weights[sel_mu] / m_mu[k]
        b = nu.weights[sel_nu] / m_nu[k]
        fibre_w[k] = _wp_cost(a, b, _cdist(mu.points[sel_mu] / scale, nu.points[sel_nu] / scale), p)
    return s_mu, m_mu, fibre_w, scale, p


def conditional_wasserstein(mu: Empirical, nu: Empirical, p: float = 2) -> float:
    r"""Conditional Wasserstein distance of masked attention, not raised to p.

    For :math:`\mu, \nu` on :math:`\mathbb R^d \times [0, 1]` with the same position marginal
    :math:`m`, disintegrated as :math:`\mu = \int \mu_s \, dm(s)`, :math:`\nu = \int \nu_s \, dm(s)`:

    .. math::
        W_p^{\mathrm{cond}}(\mu, \nu) = \Big(\int_{[0,1]} W_p(\mu_s, \nu_s)^p \, dm(s)\Big)^{1/p},

    equivalently the :math:`W_p` cost on :math:`\mathbb R^d \times [0, 1]` over couplings that do
    not move the position. Discretely, the tokens are grouped by (exactly equal) position value;
    in each fibre the weights are normalised to probabilities and :math:`W_p^p` is the exact OT
    cost (``ot.emd2``); fibres holding one token on each side are done in one vectorised step.

    Parameters
    ----------
    mu, nu : Empirical
        Points (n, d) and (m, d), weights, and positions (n,), (m,) in [0, 1] (required).
    p : float, default 2
        Exponent, ``p >= 1``.

    Returns
    -------
    float

    Raises
    ------
    TypeError
        An argument is not an :class:`~tpde_lib.measures.Empirical`.
    ValueError
        Positions missing; dimensions differ; ``p < 1``; the position marginals differ: the two
        measures must have the same set of position values and the same mass at each, to an
        absolute tolerance ``MARGINAL_TOL`` = 1e-9.

    Notes
    -----
    Used in the chapter "Masked attention".

    Examples
    --------
    Tokens compared only with the tokens at their own position: moving the token at
    :math:`s = 1` by 2 costs :math:`(\tfrac12 \cdot 2^2)^{1/2}`, whatever the others do:

    >>> import numpy as np
    >>> import tpde_lib as tp
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0]])
    >>> mu = tp.Empirical(x, positions=[0.0, 1.0])
    >>> nu = tp.Empirical(x + [[0.0, 0.0], [0.0, 2.0]], positions=[0.0, 1.0])
    >>> bool(abs(tp.conditional_wasserstein(mu, nu) - np.sqrt(2.0)) < 1e-12)
    True
    """
    _, m_mu, fibre_w, scale, p = _fibre_wp(mu, nu, p)
    # the total sum_s m_s W_s^p is formed in units of the largest fibre distance
    top = fibre_w.max()
    if top == 0.0:
        return 0.0
    with np.errstate(under="ignore"):
        total = float(np.sum(m_mu * (fibre_w / top) ** p))
    return float(scale * top * total ** (1.0 / p))


def fibre_distances(
    mu: Empirical, nu: Empirical, p: float = 2
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    r"""The Wasserstein distance :math:`W_p(\mu_s, \nu_s)` of every fibre of two measures with the
    same position marginal.

    The fibre :math:`\mu_s` holds the tokens at position :math:`s` with their weights normalised
    to 1. Both averages of these numbers appear in the chapter "Masked attention": the
    conditional distance :math:`W_p^{\rm cond} = (\sum_s m_s W_p(\mu_s, \nu_s)^p)^{1/p}` and the
    supremum over fibres (:func:`sup_fibre_distance`).

    Parameters
    ----------
    mu, nu : Empirical
        With positions and the same position marginal (masses equal to ``MARGINAL_TOL``).
    p : float, default 2
        ``p >= 1``.

    Returns
    -------
    values : ndarray, shape (K,)
        The distinct positions, increasing.
    masses : ndarray, shape (K,)
        :math:`m(\{s\})` for each.
    distances : ndarray, shape (K,)
        :math:`W_p(\mu_s, \nu_s)`: exact OT (``ot.emd2``) in fibres of several tokens, the
        distance of the two points in fibres of one token each (vectorised).
    """
    values, masses, dist, scale, _ = _fibre_wp(mu, nu, p)
    return values, masses, scale * dist


def sup_fibre_distance(mu: Empirical, nu: Empirical, p: float = 2) -> float:
    r"""The supremum over fibres, :math:`\sup_{s:\, m(\{s\}) > 0} W_p(\mu_s, \nu_s)` (float).

    The :math:`L^\infty(m)` counterpart of :math:`W_p^{\rm cond}`, the :math:`L^p(m)` average of
    the same fibre distances (:func:`fibre_distances`). Masked attention is stable in it with
    no atom at :math:`s = 0` (chapter "Masked attention", equation ``eq-masked-stability``).
    """
    _, masses, dist = fibre_distances(mu, nu, p)
    return float(dist[masses > 0].max())
