r"""Energies, gradient-flow structure and the metrics of the Transformer PDE (chapter "Gradient flows").

Which attention dynamics are gradient flows, of which energy, for which metric (the paper's
gradient-flow part, arXiv:2501.18322; each statement below is derived and checked in the chapter
"Gradient flows", which says which are the paper's claims and which are ours):

- **Sinkhorn attention** with :math:`V = A = A^\top` is the :math:`W_2` gradient flow of the
  entropic self-transport energy :math:`F(\mu) = \frac12\mathrm{OT}_\varepsilon(\mu,\mu)`
  (:func:`sinkhorn_energy`); on Gaussians it is the Bures–Wasserstein gradient flow of the
  closed form :func:`sinkhorn_energy_gaussian` (Sander et al. 2022 for the first statement).
- **Unnormalised attention** with :math:`A = A^\top` is :math:`\Gamma = -P\nabla\frac{\delta E}{\delta\mu}`
  with the constant *mobility* :math:`P = -VA^{-1}` (:func:`mobility`) and the interaction energy
  :math:`E(\mu) = \frac12\iint e^{\langle Ax,y\rangle}\mathrm d\mu\,\mathrm d\mu`
  (:func:`interaction_energy`): for :math:`P` symmetric positive definite, the gradient flow of
  :math:`E` for the twisted distance :func:`tpde_lib.transport.twisted_wasserstein`.
- **Softmax attention** is the unnormalised field divided by :math:`Z_\mu(x)` (:func:`partition_function`):
  the gradient flow of :math:`E` for the metric of kinetic energy
  :math:`\int Z_\mu\langle v, P^{-1}v\rangle\,\mathrm d\mu` (:func:`dissipation`,
  :func:`gaussian_metric`); it is not a :math:`W_2` gradient flow for general :math:`\mu`.

The closed forms on Gaussians live in :mod:`tpde_lib.energy_gaussian`, the finite-difference
witnesses (Jacobian symmetry, gradients, second differences along geodesics) in
:mod:`tpde_lib.gradient_witnesses`; both are re-exported here.

Conventions: score :math:`\langle Ax,y\rangle = y^\top Ax`, :math:`\Sigma` a covariance,
:math:`\alpha` a mean, :math:`\varepsilon > 0` the entropic temperature.
"""

from __future__ import annotations

import warnings

import numpy as np
import ot
from scipy.special import logsumexp

from ._checks import as_count, as_flag, as_float_array, as_positive, as_square
from .attention import Attention, Sinkhorn, Softmax, Unnormalised
from .energy_gaussian import (
    bures_wasserstein_gradient_flow_rhs,
    gaussian_metric,
    interaction_energy_gaussian,
    sinkhorn_energy_gaussian,
    sinkhorn_energy_gradient_gaussian,
    sinkhorn_gain_gaussian,
)
from .gradient_witnesses import (
    ConvexitySearch,
    configuration_gradient,
    energy_along_geodesic,
    frobenius_gradient,
    search_geodesic_convexity,
    second_differences,
    symmetry_defect,
    velocity_jacobian,
)
from .measures import Empirical

# moved to tpde_lib.transport; kept importable from here for one release
from .transport import (
    bures_wasserstein_geodesic,
    bures_wasserstein_map,
    twisted_bures_wasserstein,
    twisted_wasserstein,
)

__all__ = [
    "sinkhorn_energy", "sinkhorn_energy_gaussian", "sinkhorn_energy_gradient_gaussian",
    "bures_wasserstein_gradient_flow_rhs", "interaction_energy", "interaction_energy_gaussian",
    "partition_function", "mobility", "dissipation", "gaussian_metric",
    # re-exported from gradient_witnesses
    "velocity_jacobian", "symmetry_defect", "configuration_gradient", "frobenius_gradient",
    "energy_along_geodesic", "second_differences", "search_geodesic_convexity", "ConvexitySearch",
    # deprecated, or moved to tpde_lib.transport (kept for one release)
    "sinkhorn_gain_gaussian", "bures_wasserstein_map", "bures_wasserstein_geodesic",
    "twisted_wasserstein", "twisted_bures_wasserstein",
]

#: rows per block in the O(n^2) interaction sums (memory O(block * n))
_BLOCK_ROWS = 1024


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------

def _check_measure(mu, name="mu"):
    if not isinstance(mu, Empirical):
        raise TypeError(f"{name} must be an Empirical measure, got {type(mu).__name__}")
    return mu


def _logits(points, A):
    """L_ij = <A x_i, x_j> = x_j^T A x_i for a block of rows, shape (n, n)."""
    return (points @ A.T) @ points.T
# --------------------------------------------------------------------------------------------
# entropic self-transport (Sinkhorn) energy
# --------------------------------------------------------------------------------------------

def sinkhorn_energy(mu, A, eps=1.0, tol=1e-12, max_iter=100_000):
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
        POT's ``stopThr`` (marginal violation).
    max_iter : int, default 100000
        POT's ``numItermax``.

    Returns
    -------
    float

    Raises
    ------
    RuntimeError
        POT did not reach ``tol`` (the value would be inaccurate).
    """
    _check_measure(mu)
    A = as_square("A", A, mu.d)
    eps = as_positive("eps", eps)
    tol = as_positive("tol", tol)
    max_iter = as_count("max_iter", max_iter, 1)
    keep = mu.weights > 0
    X, w = mu.points[keep], mu.weights[keep]
    C = -_logits(X, A)
    shift = C.min()
    with np.errstate(over="ignore", invalid="ignore"):
        finite = np.isfinite((C - shift) / eps).all()
    if not finite:
        raise RuntimeError(f"entropic self-transport: the scores <Ax, y> / eps are not finite "
                           f"(eps={eps:g} too small, or the scores overflow)")
    plan, log = ot.sinkhorn(w, w, C - shift, eps, method="sinkhorn_log", stopThr=tol,
                            numItermax=int(max_iter), log=True, warn=False)
    err = float(log.get("err", [np.inf])[-1]) if log.get("err") else np.inf
    if not err <= tol:
        raise RuntimeError(f"entropic self-transport did not converge: marginal violation "
                           f"{err:.3g} > tol={tol:g} after {max_iter} iterations "
                           f"(eps={eps:g} too small for these scores?)")
    plan = np.asarray(plan)
    pos = plan > 0
    kl = float(np.sum(plan[pos] * np.log(plan[pos] / np.outer(w, w)[pos])))
    return 0.5 * (float(np.sum(plan * C)) + eps * kl)


# --------------------------------------------------------------------------------------------
# interaction energy of unnormalised attention, partition function
# --------------------------------------------------------------------------------------------

def _block_lse(mu, A):
    """Row log-sum-exps LSE_j(L_ij + log w_j) for every token (blocked over rows), shape (n,)."""
    keep = mu.weights > 0
    keys, logw = mu.points[keep], np.log(mu.weights[keep])
    AX = mu.points @ A.T
    out = np.empty(mu.n)
    for start in range(0, mu.n, _BLOCK_ROWS):
        sl = slice(start, min(mu.n, start + _BLOCK_ROWS))
        out[sl] = logsumexp(AX[sl] @ keys.T + logw[None, :], axis=1)
    return out


def partition_function(mu, A, log=False):
    r"""Softmax normaliser :math:`Z_\mu(x_i) = \int e^{\langle Ax_i,y\rangle}\mathrm d\mu(y)` at every token.

    Parameters
    ----------
    mu : Empirical
        Points (n, d), weights (n,).
    A : array_like, shape (d, d)
    log : bool, default False
        Return :math:`\log Z` (never overflows).

    Returns
    -------
    ndarray, shape (n,)
    """
    _check_measure(mu)
    A = as_square("A", A, mu.d)
    log = as_flag("log", log)
    lz = _block_lse(mu, A)
    if log:
        return lz
    if lz.max() > np.log(np.finfo(float).max):
        raise FloatingPointError("partition_function overflows the float range: use log=True")
    return np.exp(lz)


def interaction_energy(mu, A, log=False):
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
        Return :math:`\log E` instead (finite even when :math:`E` overflows float range).

    Returns
    -------
    float

    Raises
    ------
    FloatingPointError
        :math:`E` exceeds the float range (use ``log=True``).
    """
    _check_measure(mu)
    A = as_square("A", A, mu.d)
    log = as_flag("log", log)
    keep = mu.weights > 0
    lz = _block_lse(mu, A)[keep]
    log_e = float(np.log(0.5) + logsumexp(lz + np.log(mu.weights[keep])))
    if log:
        return log_e
    if log_e > np.log(np.finfo(float).max):
        raise FloatingPointError(f"interaction_energy = exp({log_e:.4g}) overflows the float "
                                 "range: use log=True")
    return float(np.exp(log_e))


# --------------------------------------------------------------------------------------------
# mobility, dissipation, the metrics
# --------------------------------------------------------------------------------------------

_LEGACY_VARIANTS = {"unnormalised": Unnormalised, "softmax": Softmax, "sinkhorn": Sinkhorn}


def mobility(att, t=0.0, variant=None):
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
    variant : str, optional
        Deprecated form ``mobility(A, V, variant)`` with ``variant`` in
        ``{"unnormalised", "softmax", "sinkhorn"}``: emits a ``DeprecationWarning``.

    Returns
    -------
    ndarray, shape (d, d)
        :math:`P`; it defines the twisted metric when it is symmetric positive definite.

    Raises
    ------
    ValueError
        ``A`` not symmetric or singular; ``P`` not symmetric (no gradient structure of this
        form); unknown ``variant``.
    NotImplementedError
        The variant has no mobility.
    """
    if isinstance(att, Attention):
        if variant is not None:
            raise TypeError("variant must not be given with an attention: call mobility(att, t)")
        return att.mobility(t)
    if variant is None:
        raise TypeError(f"att must be an Attention (e.g. tp.Softmax(A, V)), got {type(att).__name__}")
    warnings.warn("mobility(A, V, variant) is deprecated: use mobility(att, t) or att.mobility(t), "
                  "e.g. tp.Softmax(A, V).mobility()", DeprecationWarning, stacklevel=2)
    if variant not in _LEGACY_VARIANTS:
        raise ValueError(f"variant must be one of {sorted(_LEGACY_VARIANTS)}, got {variant!r}")
    A = as_square("A", att)
    V = as_square("V", t, A.shape[0])
    return _LEGACY_VARIANTS[variant](A, V).mobility()


def dissipation(mu, velocity, mobility_matrix=None, factor=None):
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
    _check_measure(mu)
    G = as_float_array("velocity", velocity, shape=(mu.n, mu.d))
    if mobility_matrix is None:
        PiG = G
    else:
        P = as_square("mobility_matrix", mobility_matrix, mu.d)
        PiG = np.linalg.solve(P, G.T).T
    rho = np.ones(mu.n) if factor is None else as_float_array("factor", factor, shape=(mu.n,))
    return float(np.sum(mu.weights * rho * np.sum(G * PiG, axis=1)))




