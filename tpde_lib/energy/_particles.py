r"""Energies of token measures and the gradient-flow structure of the particle dynamics.

On empirical measures: the entropic self-transport energy :func:`sinkhorn_energy`, the
partition function :math:`Z_\mu` (:func:`partition_function`), the interaction energy
:func:`interaction_energy`, the constant mobility :math:`P` of a variant (:func:`mobility`) and
the dissipation :math:`\int\rho\langle\Gamma, P^{-1}\Gamma\rangle\,\mathrm d\mu`
(:func:`dissipation`). Conventions: score :math:`\langle Ax,y\rangle = y^\top Ax`,
:math:`\varepsilon > 0` the entropic temperature.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp

from .._checks import (
    as_count,
    as_finite,
    as_flag,
    as_float_array,
    as_nonsingular,
    as_positive,
    as_square,
    unit_scale,
)
from ..attention import Attention
from ..measures import Empirical, as_empirical

#: rows per block in the O(n^2) interaction sums (memory O(block * n))
_BLOCK_ROWS = 1024
#: Sinkhorn sweeps allowed after the first two polishing ones, for the returned plan to meet tol
_POLISH = 100


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def _softmin(C, g, w, eps):
    r"""Sinkhorn update :math:`f_i = -\varepsilon\log\sum_j w_j e^{(g_j - C_{ij})/\varepsilon}` in cost units.

    The weighted row mean :math:`m_i = \sum_j w_j(g_j - C_{ij})` is taken out first, so that
    :math:`f_i = -m_i - \varepsilon\log\sum_j w_j e^{y_{ij}}` with :math:`\sum_j w_jy_{ij} = 0`;
    for small :math:`y` (large :math:`\varepsilon`) the log is ``log1p`` of a sum of ``expm1``,
    so :math:`f` keeps its absolute accuracy :math:`\sim 10^{-16}|C|` at any
    :math:`\varepsilon` (a log-sum-exp of :math:`(g - C)/\varepsilon` multiplied back by
    :math:`\varepsilon` would lose :math:`10^{-16}\varepsilon`).
    """
    Z = g[None, :] - C
    m = Z @ w
    Y = (Z - m[:, None]) / eps
    if np.abs(Y).max() <= 0.5:
        return -(m + eps * np.log1p(np.expm1(Y) @ w))
    return -(m + eps * logsumexp(Y + np.log(w)[None, :], axis=1))


# --------------------------------------------------------------------------------------------
# entropic self-transport (Sinkhorn) energy
# --------------------------------------------------------------------------------------------


def sinkhorn_energy(
    mu: Empirical, A: ArrayLike, eps: float = 1.0, tol: float = 1e-12, max_iter: int = 100_000
) -> float:
    r"""Entropic self-transport energy :math:`F(\mu) = \frac12\mathrm{OT}_\varepsilon(\mu,\mu)`.

    .. math::
        \mathrm{OT}_\varepsilon(\mu,\mu) = \min_{\pi\in\Pi(\mu,\mu)}
            \int -\langle Ax,y\rangle\,\mathrm d\pi(x,y)
            + \varepsilon\,\mathrm{KL}(\pi\,|\,\mu\otimes\mu)

    for the cost :math:`c(x,y) = -\langle Ax,y\rangle = -y^\top Ax`. The minimiser is the plan of
    Sinkhorn attention, and with :math:`V = A = A^\top` the Sinkhorn dynamics
    is the :math:`W_2` gradient flow of :math:`F`, for every :math:`\varepsilon` (chapter
    "Gradient flows"; Sander et al. 2022). Convention (ours; the paper's sign of the cost, factor
    1/2 and KL-versus-entropy could not be confirmed): with this normalisation
    :math:`F(\delta_x) = -\frac12\langle Ax,x\rangle`.

    Solver: POT's log-domain Sinkhorn on the tokens of positive weight, then the primal value
    (the attention class :class:`~tpde_lib.attention.Sinkhorn` has its own solver, which the
    tests use as the independent check). Memory :math:`O(n^2)`.

    Parameters
    ----------
    mu : Empirical
        Points (n, d), weights (n,).
    A : array_like, shape (d, d)
        Score matrix (need not be symmetric).
    eps : float, default 1
        Entropic temperature :math:`\varepsilon > 0`.
    tol : float, default 1e-12
        POT's ``stopThr`` (L2 marginal violation), checked again on both marginals of the plan
        whose value is returned (after polishing sweeps).
    max_iter : int, default 100000
        POT's ``numItermax``.

    Returns
    -------
    float

    Raises
    ------
    RuntimeError
        POT did not reach ``tol``, or the returned plan does not (the value would be
        inaccurate).
    """
    as_empirical("mu", mu)
    A = as_square("A", A, mu.d)
    eps = as_positive("eps", eps)
    tol = as_positive("tol", tol)
    max_iter = as_count("max_iter", max_iter, 1)
    keep = mu.weights > 0
    X, w = mu.points[keep], mu.weights[keep]
    C = -((X @ A.T) @ X.T)
    shift = C.min()
    with np.errstate(over="ignore", invalid="ignore"):
        finite = np.isfinite((C - shift) / eps).all()
    if not finite:
        raise RuntimeError(
            f"entropic self-transport: the scores <Ax, y> / eps are not finite "
            f"(eps={eps:g} too small, or the scores overflow)"
        )
    import ot  # POT, imported on first use (import tpde_lib stays light)

    plan, log = ot.sinkhorn(
        w,
        w,
        C - shift,
        eps,
        method="sinkhorn_log",
        stopThr=tol,
        numItermax=int(max_iter),
        log=True,
        warn=False,
    )
    err = float(log.get("err", [np.inf])[-1]) if log.get("err") else np.inf
    if not err <= tol:
        raise RuntimeError(
            f"entropic self-transport did not converge: marginal violation "
            f"{err:.3g} > tol={tol:g} after {max_iter} iterations "
            f"(eps={eps:g} too small for these scores?)"
        )
    # Potentials in cost units, polished by stable Sinkhorn updates (_softmin): then
    # eps * log(plan / w w^T) = f_i + g_j - C_ij, so eps KL = sum plan (f + g - C) carries no
    # round-off multiplied by eps and F = (<plan, C> + eps KL) / 2 is accurate at any eps.
    # Start: POT's scalings, whose eps * log loses 1e-16 * eps (centred: POT splits the
    # constant between u and v arbitrarily), unless osc(C) / eps < 1e-3, where each update
    # contracts the error by tanh(osc(C) / 4 eps) < 3e-4 and the eps -> inf limit
    # f_i = -sum_j w_j C_ij is closer.
    Cs = C - shift
    if np.ptp(Cs) < 1e-3 * eps:
        f = -(Cs @ w)
    else:
        f = eps * (np.asarray(log["log_u"], float) - np.log(w))
    f -= w @ f
    g = _softmin(Cs.T, f, w, eps)
    # two polishing sweeps, then as many as needed (up to _POLISH more) for the plan *returned*
    # to meet the stopping criterion: POT's test ran on its own iterate, not on this plan
    for sweep in range(2 + _POLISH):
        f = _softmin(Cs, g, w, eps)
        g = _softmin(Cs.T, f, w, eps)
        if sweep == 0:
            continue
        log_ratio = (f[:, None] + g[None, :] - Cs) / eps  # log(plan / w w^T)
        plan = np.outer(w, w) * np.exp(log_ratio)
        # POT's criterion (L2 marginal violation), on both marginals of this plan
        err = max(np.linalg.norm(plan.sum(axis=1) - w), np.linalg.norm(plan.sum(axis=0) - w))
        if err <= tol:
            break
    else:
        raise RuntimeError(
            f"entropic self-transport did not converge: the returned plan's marginal violation "
            f"{err:.3g} > tol={tol:g} after {_POLISH + 2} polishing sweeps (POT reported "
            f"{float(log['err'][-1]):.3g}; eps={eps:g} too small for these scores, or tol "
            "below round-off?)"
        )
    kl = float(np.sum(plan * log_ratio))  # eps * kl: relative accuracy kept at any eps
    return 0.5 * (float(np.sum(plan * C)) + eps * kl)


# --------------------------------------------------------------------------------------------
# interaction energy of unnormalised attention, partition function
# --------------------------------------------------------------------------------------------


def _block_lse(mu, A):
    """Row log-sum-exps LSE_j(L_ij + log w_j) for every token (blocked over rows), shape (n,)."""
    # Scores L = a c^2 (Xt At Xt^T) with X = c Xt, A = a At (c, a powers of two: exact, and
    # bitwise the unscaled product wherever that does not overflow): an intermediate A x_i
    # beyond the float range no longer makes a representable score inf or NaN.
    c, a = unit_scale(mu.points), unit_scale(A)
    mu, A = mu.with_points(mu.points / c), A / a
    keep = mu.weights > 0
    keys, logw = mu.points[keep], np.log(mu.weights[keep])
    AX = mu.points @ A.T
    out = np.empty(mu.n)
    with np.errstate(over="ignore"):
        for start in range(0, mu.n, _BLOCK_ROWS):
            sl = slice(start, min(mu.n, start + _BLOCK_ROWS))
            L = ((AX[sl] @ keys.T) * a) * c * c
            if np.isposinf(L).any() or np.isnan(L).any():
                raise FloatingPointError(
                    "the scores <A x_i, x_j> exceed the float range (|A| |x|^2 > 1.8e308), so "
                    "log Z and log E do too: rescale the tokens or A"
                )
            out[sl] = logsumexp(L + logw[None, :], axis=1)
    if not np.isfinite(out).all():
        raise FloatingPointError(
            "log Z_mu(x_i) is below -1.8e308 (every score of some token "
            "is -inf in float64): rescale the tokens or A"
        )
    return out


def partition_function(mu: Empirical, A: ArrayLike, log: bool = False) -> NDArray[np.float64]:
    r"""Softmax normaliser :math:`Z_\mu(x_i) = \int e^{\langle Ax_i,y\rangle}\mathrm d\mu(y)` at every token.

    Parameters
    ----------
    mu : Empirical
        Points (n, d), weights (n,).
    A : array_like, shape (d, d)
    log : bool, default False
        Return :math:`\log Z`: finite wherever the scores :math:`\langle Ax_i, x_j\rangle`
        are (computed from tokens and ``A`` rescaled by powers of two).

    Returns
    -------
    ndarray, shape (n,)

    Raises
    ------
    FloatingPointError
        :math:`Z` overflows (use ``log=True``), or the scores themselves exceed the float range
        (then :math:`\log Z` does too).
    """
    as_empirical("mu", mu)
    A = as_square("A", A, mu.d)
    log = as_flag("log", log)
    lz = _block_lse(mu, A)
    if log:
        return lz
    if lz.max() > np.log(np.finfo(float).max):
        raise FloatingPointError("partition_function overflows the float range: use log=True")
    return np.exp(lz)


def interaction_energy(mu: Empirical, A: ArrayLike, log: bool = False) -> float:
    r"""Interaction energy :math:`E(\mu) = \frac12\iint e^{\langle Ax,y\rangle}d\mu\,d\mu` (unnormalised).

    For :math:`\mu = \sum_i w_i\delta_{x_i}`: :math:`E = \frac12\sum_{ij}w_iw_je^{x_j^\top Ax_i}`,
    evaluated by blocked log-sum-exp (memory :math:`O(n\,b)`). For symmetric :math:`A`,
    :math:`\nabla_x\frac{\delta E}{\delta\mu} = A\int e^{\langle Ax,y\rangle}y\,\mathrm d\mu`, so
    unnormalised attention is :math:`\Gamma_\mu = -P\nabla\frac{\delta E}{\delta\mu}` with the
    mobility :math:`P = -VA^{-1}` (:func:`mobility`).

    Parameters
    ----------
    mu : Empirical
    A : array_like, shape (d, d)
    log : bool, default False
        Return :math:`\log E` instead: finite even when :math:`E` overflows the float range,
        wherever the scores :math:`\langle Ax_i, x_j\rangle` are.

    Returns
    -------
    float

    Raises
    ------
    FloatingPointError
        :math:`E` exceeds the float range (use ``log=True``), or the scores themselves do
        (then :math:`\log E` does too).
    """
    as_empirical("mu", mu)
    A = as_square("A", A, mu.d)
    log = as_flag("log", log)
    keep = mu.weights > 0
    lz = _block_lse(mu, A)[keep]
    log_e = float(np.log(0.5) + logsumexp(lz + np.log(mu.weights[keep])))
    if log:
        return log_e
    if log_e > np.log(np.finfo(float).max):
        raise FloatingPointError(
            f"interaction_energy = exp({log_e:.4g}) overflows the float range: use log=True"
        )
    return float(np.exp(log_e))


# --------------------------------------------------------------------------------------------
# mobility, dissipation, the metrics
# --------------------------------------------------------------------------------------------


def mobility(att: Attention, t: float = 0.0) -> NDArray[np.float64]:
    r"""Mobility :math:`P` of :math:`\Gamma = -P\nabla\frac{\delta\mathcal E}{\delta\mu}`: ``att.mobility(t)``

    - unnormalised attention (energy :math:`E`, :func:`interaction_energy`): :math:`P = -VA^{-1}`;
      softmax has the same :math:`P`, with the extra factor :math:`1/Z_\mu(x)` (its metric is
      weighted by :math:`Z_\mu`, :func:`gaussian_metric`);
    - Sinkhorn attention (energy :math:`F`, :func:`sinkhorn_energy`): :math:`P = VA^{-1}`.

    Derived in the chapter "Gradient flows" ({eq}`eq-gf-unnormalised-mobility`). Each variant
    holds its own mobility (:meth:`tpde_lib.Attention.mobility`); this function calls it.

    Parameters
    ----------
    att : Attention
        A variant with a mobility (``Softmax``, ``Unnormalised``, ``Sinkhorn``).
    t : float, default 0
        Time at which time-dependent parameters are evaluated.

    Returns
    -------
    ndarray, shape (d, d)
        :math:`P`; it defines the twisted metric when it is symmetric positive definite.

    Raises
    ------
    ValueError
        ``A`` not symmetric or singular; ``P`` not symmetric (no gradient structure of this
        form).
    NotImplementedError
        The variant has no mobility.
    """
    if not isinstance(att, Attention):
        raise TypeError(f"att must be an Attention (e.g. tp.Softmax(A, V)), got {type(att).__name__}")
    return att.mobility(as_finite("t", t))


def dissipation(
    mu: Empirical,
    velocity: ArrayLike,
    mobility_matrix: ArrayLike | None = None,
    factor: ArrayLike | None = None,
) -> float:
    r"""Dissipation :math:`\int \rho\,\langle\Gamma, P^{-1}\Gamma\rangle\,\mathrm d\mu` of a velocity field.

    For a gradient flow :math:`\Gamma = -\rho^{-1}P\nabla\frac{\delta\mathcal E}{\delta\mu}`,
    :math:`\frac{\mathrm d}{\mathrm dt}\mathcal E(\mu_t) = -` this quantity (energy dissipation
    identity). :math:`P = I`, :math:`\rho = 1`: :math:`\int|\Gamma|^2\mathrm d\mu`, the squared
    :math:`W_2` metric speed; :math:`\rho = Z_\mu` (:func:`partition_function`) for softmax.

    Parameters
    ----------
    mu : Empirical
        Weights (n,) used for the integral.
    velocity : array_like, shape (n, d)
        :math:`\Gamma` at the points of ``mu``.
    mobility_matrix : array_like, shape (d, d), optional
        :math:`P` (default identity).
    factor : array_like, shape (n,), optional
        :math:`\rho(x_i) > 0` (default 1).

    Returns
    -------
    float
    """
    as_empirical("mu", mu)
    G = as_float_array("velocity", velocity, shape=(mu.n, mu.d))
    if mobility_matrix is None:
        PiG = G
    else:
        P = as_nonsingular("mobility_matrix", as_square("mobility_matrix", mobility_matrix, mu.d))
        PiG = np.linalg.solve(P, G.T).T
    rho = np.ones(mu.n) if factor is None else as_float_array("factor", factor, shape=(mu.n,))
    return float(np.sum(mu.weights * rho * np.sum(G * PiG, axis=1)))
