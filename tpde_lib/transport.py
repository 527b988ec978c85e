r"""Optimal-transport distances between token measures: W_p, Bures–Wasserstein, conditional W_p.

The stability and mean-field statements of the paper are measured in Wasserstein distances
(paper notes §3): :math:`W_p(\mu, \nu) = \big(\min_{\pi \in \Pi(\mu, \nu)} \int |x - y|^p
\, d\pi\big)^{1/p}`. Masked attention uses the conditional distance of paper notes §4.1, which only
couples tokens at the same sequence position. Gaussians have the closed-form Bures–Wasserstein
distance (paper notes §5). Exact discrete OT is POT's network simplex ``ot.emd2``
(Flamary et al. 2021); the large-n option (sliced) is labelled an approximation, and it is a lower
bound.
"""

from __future__ import annotations

import numpy as np
import ot

from ._checks import as_at_least
from ._linalg import psd_sqrt
from .measures import Empirical, Gaussian

__all__ = ["wasserstein", "bures_wasserstein", "conditional_wasserstein"]

_METHODS = ("exact", "sliced")
# network-simplex iteration budget: far above what n, m <= 10^4 needs (POT's default 1e5 is hit
# around n ~ 1000, which would silently return a sub-optimal cost)
_EMD_MAX_ITER = 100_000_000
# two fibres of the conditional distance must carry the same mass to this absolute tolerance
# (the same tolerance Empirical uses for weights summing to 1)
MARGINAL_TOL = 1e-9


def _check_pair(mu, nu):
    for name, m in (("mu", mu), ("nu", nu)):
        if not isinstance(m, Empirical):
            raise TypeError(f"{name} must be an Empirical measure, got {type(m).__name__}")
    if mu.d != nu.d:
        raise ValueError(f"nu must live in the same dimension as mu: mu has d={mu.d}, "
                         f"nu has d={nu.d}")


def _check_p(p):
    return as_at_least("p", p, 1.0, " (W_p is a metric only for p >= 1)")


def _cost_matrix(x, y, p):
    """|x_i - y_j|^p, shape (n, m); the squared case without a square root (exact for p = 2)."""
    sq = np.maximum(ot.dist(x, y, metric="sqeuclidean"), 0.0)
    return sq if p == 2 else sq ** (p / 2)


def _exact_cost(a, b, M):
    """min_pi <pi, M> over couplings of a and b (network simplex), checked for convergence."""
    cost, log = ot.emd2(a, b, M, numItermax=_EMD_MAX_ITER, log=True)
    if log.get("warning"):
        raise RuntimeError(f"exact optimal transport did not converge: {log['warning']}")
    return max(float(cost), 0.0)


def wasserstein(mu, nu, p=2, method="exact", n_projections=200, seed=0):
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
        Number of directions for ``method="sliced"``.
    seed : int, default 0
        Seed of the projections for ``method="sliced"``.

    Returns
    -------
    float

    Raises
    ------
    TypeError
        ``mu`` or ``nu`` not an :class:`~tpde_lib.measures.Empirical`.
    ValueError
        Dimensions differ (names ``nu``), ``p < 1`` (names ``p``), unknown ``method``.
    RuntimeError
        The exact solver did not reach optimality.

    See paper notes §3 (stability in W_p) and chapter "Mean-field limit".
    """
    _check_pair(mu, nu)
    p = _check_p(p)
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    x, y, a, b = mu.points, nu.points, mu.weights, nu.weights
    if method == "exact":
        return _exact_cost(a, b, _cost_matrix(x, y, p)) ** (1 / p)
    # sliced
    if not isinstance(n_projections, (int, np.integer)) or n_projections < 1:
        raise ValueError(f"n_projections must be a positive integer, got {n_projections!r}")
    theta = np.random.default_rng(seed).standard_normal((mu.d, int(n_projections)))
    theta /= np.linalg.norm(theta, axis=0, keepdims=True)
    return float(ot.sliced_wasserstein_distance(x, y, a, b, p=p, projections=theta))


def bures_wasserstein(g1, g2):
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

    See paper notes §5 and chapter "Gaussian solutions"; Peyré and Cuturi (2019), Remark 2.31.
    """
    for name, g in (("g1", g1), ("g2", g2)):
        if not isinstance(g, Gaussian):
            raise TypeError(f"{name} must be a Gaussian, got {type(g).__name__}")
    if g1.d != g2.d:
        raise ValueError(f"g2 must have the same dimension as g1: g1 has d={g1.d}, g2 has d={g2.d}")
    root1 = psd_sqrt(g1.cov)
    cross = np.linalg.eigvalsh(0.5 * ((root1 @ g2.cov @ root1) + (root1 @ g2.cov @ root1).T))
    bures2 = np.trace(g1.cov) + np.trace(g2.cov) - 2.0 * np.sqrt(np.clip(cross, 0.0, None)).sum()
    mean2 = float(np.sum((g1.mean - g2.mean) ** 2))
    return float(np.sqrt(max(mean2 + bures2, 0.0)))


def _fibres(m, name):
    """Unique positions of ``m`` (sorted), the fibre index of each token, the fibre masses."""
    if m.positions is None:
        raise ValueError(f"{name} must carry positions (Empirical(..., positions=...)) for the "
                         "conditional Wasserstein distance")
    s, idx = np.unique(m.positions, return_inverse=True)
    return s, idx, np.bincount(idx, weights=m.weights, minlength=s.size)


def conditional_wasserstein(mu, nu, p=2):
    r"""Conditional Wasserstein distance of masked attention (paper notes §4.1), not raised to p.

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

    See paper notes §4.1 and chapter "Masked attention".
    """
    _check_pair(mu, nu)
    p = _check_p(p)
    s_mu, idx_mu, m_mu = _fibres(mu, "mu")
    s_nu, idx_nu, m_nu = _fibres(nu, "nu")
    if s_mu.shape != s_nu.shape or np.any(s_mu != s_nu):
        extra = np.setxor1d(s_mu, s_nu)
        raise ValueError("mu and nu must have the same position marginal: positions "
                         f"{extra[:5].tolist()} carry mass in only one of them")
    gap = np.abs(m_mu - m_nu)
    if np.any(gap > MARGINAL_TOL):
        k = int(np.argmax(gap))
        raise ValueError("mu and nu must have the same position marginal (to 1e-9): at position "
                         f"s={s_mu[k]:.6g} mu has mass {m_mu[k]:.12g}, nu has {m_nu[k]:.12g}")
    count_mu = np.bincount(idx_mu, minlength=s_mu.size)
    count_nu = np.bincount(idx_nu, minlength=s_mu.size)
    single = (count_mu == 1) & (count_nu == 1)
    total = 0.0
    if np.any(single):
        # one token per side: W_p^p of two Diracs is |x - y|^p; scatter the token of each fibre
        at_mu = np.empty((s_mu.size, mu.d))
        at_nu = np.empty((s_mu.size, mu.d))
        at_mu[idx_mu] = mu.points
        at_nu[idx_nu] = nu.points
        dist = np.linalg.norm(at_mu[single] - at_nu[single], axis=1)
        total += float(np.sum(m_mu[single] * dist ** p))
    for k in np.flatnonzero(~single & (m_mu > 0)):
        sel_mu, sel_nu = idx_mu == k, idx_nu == k
        a = mu.weights[sel_mu] / m_mu[k]
        b = nu.weights[sel_nu] / m_nu[k]
        M = _cost_matrix(mu.points[sel_mu], nu.points[sel_nu], p)
        total += m_mu[k] * _exact_cost(a, b, M)
    return max(total, 0.0) ** (1 / p)


# ============================================================================================
# Bures–Wasserstein maps and geodesics; the twisted distances of a constant mobility P.
# (Moved here from ``tpde_lib.energy``, which keeps the old names for one release; used by the
# chapter "Gradient flows". Owned with energy.py: append-only section.)
# ============================================================================================

from ._checks import as_covariance as _as_covariance  # noqa: E402
from ._checks import as_float_array as _as_float_array  # noqa: E402
from ._linalg import sym_fn as _sym_fn  # noqa: E402

__all__ += [
    "bures_wasserstein_map", "bures_wasserstein_geodesic",
    "twisted_wasserstein", "twisted_bures_wasserstein", "twisted_bures_wasserstein_geodesic",
]


def _check_gaussian(g, name):
    if not isinstance(g, Gaussian):
        raise TypeError(f"{name} must be a Gaussian, got {type(g).__name__}")
    return g


def _check_same_dimension(g0, g1):
    if g0.d != g1.d:
        raise ValueError(f"g1 must have the dimension of g0 ({g0.d}), got {g1.d}")


def _mobility_roots(P, d):
    r"""(:math:`P^{1/2}`, :math:`P^{-1/2}`) of a symmetric positive definite mobility ``P`` (d, d)."""
    P = _as_covariance("P", P, d)
    lam = np.linalg.eigvalsh(P)
    if lam[0] <= 0:
        raise ValueError(f"P must be symmetric positive definite (smallest eigenvalue {lam[0]:.3g})")
    return _sym_fn(P, np.sqrt), _sym_fn(P, lambda x: 1.0 / np.sqrt(x))


def bures_wasserstein_map(cov0, cov1):
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


def bures_wasserstein_geodesic(g0, g1, s):
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
        Interpolation times.

    Returns
    -------
    means : ndarray, shape (k, d)
    covs : ndarray, shape (k, d, d)
    """
    _check_gaussian(g0, "g0")
    _check_gaussian(g1, "g1")
    _check_same_dimension(g0, g1)
    s = _as_float_array("s", s, ndim=1)
    T = bures_wasserstein_map(g0.cov, g1.cov)
    L = (1.0 - s)[:, None, None] * np.eye(g0.d) + s[:, None, None] * T
    covs = L @ g0.cov @ L
    means = (1.0 - s)[:, None] * g0.mean + s[:, None] * g1.mean
    return means, 0.5 * (covs + np.swapaxes(covs, 1, 2))


def twisted_wasserstein(mu, nu, P, **kwargs):
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
    return wasserstein(Empirical(mu.points @ T, mu.weights), Empirical(nu.points @ T, nu.weights),
                       p=2, **kwargs)


def twisted_bures_wasserstein(g1, g2, P):
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
    _check_gaussian(g1, "g1")
    _check_gaussian(g2, "g2")
    _check_same_dimension(g1, g2)
    _, T = _mobility_roots(P, g1.d)
    return bures_wasserstein(Gaussian(T @ g1.mean, T @ g1.cov @ T),
                             Gaussian(T @ g2.mean, T @ g2.cov @ T))


def twisted_bures_wasserstein_geodesic(g0, g1, P, s):
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
    _check_gaussian(g0, "g0")
    _check_gaussian(g1, "g1")
    _check_same_dimension(g0, g1)
    R, T = _mobility_roots(P, g0.d)
    means, covs = bures_wasserstein_geodesic(Gaussian(T @ g0.mean, T @ g0.cov @ T),
                                             Gaussian(T @ g1.mean, T @ g1.cov @ T), s)
    covs = R @ covs @ R
    return means @ R, 0.5 * (covs + np.swapaxes(covs, 1, 2))
