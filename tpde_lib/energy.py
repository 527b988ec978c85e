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

The finite-difference witnesses (Jacobian symmetry, gradients, second differences along geodesics)
live in :mod:`tpde_lib.gradient_witnesses` and are re-exported here.

Conventions: score :math:`\langle Ax,y\rangle = y^\top Ax`, :math:`\Sigma` a covariance,
:math:`\alpha` a mean, :math:`\varepsilon > 0` the entropic temperature.
"""

from __future__ import annotations

import warnings

import numpy as np
import ot
from scipy.special import logsumexp

from . import gaussian_odes
from ._checks import as_covariance, as_float_array, as_positive, as_square
from ._linalg import psd_sqrt, sym_fn
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
from .measures import Empirical, Gaussian

# moved to tpde_lib.transport; kept importable from here for one release
from .transport import (
    bures_wasserstein_geodesic,
    bures_wasserstein_map,
    twisted_bures_wasserstein,
    twisted_wasserstein,
)

__all__ = [
    "sinkhorn_energy",
    "sinkhorn_energy_gaussian",
    "sinkhorn_energy_gradient_gaussian",
    "bures_wasserstein_gradient_flow_rhs",
    "interaction_energy",
    "interaction_energy_gaussian",
    "partition_function",
    "mobility",
    "dissipation",
    "gaussian_metric",
    # re-exported from gradient_witnesses
    "velocity_jacobian", "symmetry_defect", "configuration_gradient", "frobenius_gradient",
    "energy_along_geodesic", "second_differences", "search_geodesic_convexity", "ConvexitySearch",
    # deprecated, or moved to tpde_lib.transport (kept for one release)
    "sinkhorn_gain_gaussian",
    "bures_wasserstein_map", "bures_wasserstein_geodesic",
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


def _phi(s):
    r""":math:`\varphi(s) = 2/(1+\sqrt{1+4s})`, the root in (0, 1] of :math:`s\varphi^2+\varphi-1=0`."""
    return 2.0 / (1.0 + np.sqrt(1.0 + 4.0 * np.clip(s, 0.0, None)))


def _h(s):
    r"""Per-eigenvalue entropic self-transport value :math:`h(s)` (ε = 1), :math:`h' = -\varphi/2`.

    :math:`h(s) = -\tfrac12(\sqrt{1+4s}-1) + \tfrac12\log\tfrac{1+\sqrt{1+4s}}{2}`.
    """
    r = np.sqrt(1.0 + 4.0 * np.clip(s, 0.0, None))
    return -0.5 * (r - 1.0) + 0.5 * np.log(0.5 * (1.0 + r))


def _mean_or_zero(mean, d):
    if mean is None:
        return np.zeros(d)
    return as_float_array("mean", mean, shape=(d,))


def _gaussian_args(cov, A, eps):
    S = as_covariance("cov", cov)
    A = as_square("A", A, S.shape[0])
    eps = as_positive("eps", eps)
    return S, A, eps


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

    Solver: POT's log-domain Sinkhorn (``ot.sinkhorn(..., method="sinkhorn_log")``) on the
    tokens of positive weight, then the primal value :math:`\langle\pi, C\rangle +
    \varepsilon\sum_{ij}\pi_{ij}\log\frac{\pi_{ij}}{w_iw_j}`. (The attention class
    :class:`~tpde_lib.attention.Sinkhorn` has its own solver: the tests use it as the
    independent check.) Memory :math:`O(n^2)`.

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
    TypeError, ValueError
        ``mu`` not an Empirical; ``A`` not (d, d); ``eps`` not positive.
    RuntimeError
        POT did not reach ``tol`` (the value would be inaccurate).
    """
    _check_measure(mu)
    A = as_square("A", A, mu.d)
    eps = as_positive("eps", eps)
    keep = mu.weights > 0
    X, w = mu.points[keep], mu.weights[keep]
    C = -_logits(X, A)
    shift = C.min()
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


def sinkhorn_gain_gaussian(cov, A, eps=1.0):
    r"""Deprecated: slope :math:`G` of :math:`\mathbb E_\pi[y|x] = \alpha + G(x-\alpha)`.

    Use :func:`tpde_lib.gaussian_odes.sinkhorn_gain` (the one Gaussian Sinkhorn gain, which
    returns :math:`G\Sigma` for the score matrix :math:`A/\varepsilon`); this wrapper returns
    :math:`G = (G\Sigma)\,\Sigma^{+}` (pseudo-inverse; for singular :math:`\Sigma` only the
    action of :math:`G` on the range of :math:`\Sigma` is defined). Kept for one release.

    Parameters
    ----------
    cov : array_like, shape (d, d)
    A : array_like, shape (d, d)
    eps : float, default 1

    Returns
    -------
    ndarray, shape (d, d)
    """
    warnings.warn("energy.sinkhorn_gain_gaussian(cov, A, eps) is deprecated: use "
                  "gaussian_odes.sinkhorn_gain(A / eps, cov), which returns G Sigma",
                  DeprecationWarning, stacklevel=2)
    S, A, eps = _gaussian_args(cov, A, eps)
    return gaussian_odes.sinkhorn_gain(A / eps, S) @ np.linalg.pinv(S, hermitian=True)


def sinkhorn_energy_gaussian(cov, A, eps=1.0, mean=None):
    r"""Closed form of :math:`F = \frac12\mathrm{OT}_\varepsilon(\mu,\mu)` for Gaussian :math:`\mu`.

    Derived in the chapter "Gradient flows" ({eq}`eq-gf-sinkhorn-gaussian-energy`): with
    :math:`s_i` the eigenvalues of :math:`\Sigma^{1/2}A\Sigma A^\top\Sigma^{1/2}/\varepsilon^2`,

    .. math::
        F = \frac{\varepsilon}{2}\sum_i h(s_i) - \frac12\alpha^\top A\alpha,\qquad
        h(s) = -\frac{\sqrt{1+4s}-1}{2} + \frac12\log\frac{1+\sqrt{1+4s}}{2},

    equal to :math:`\frac12[-\operatorname{tr}(A\Sigma G^\top)
    + \frac\varepsilon2\log\det\Sigma - \frac\varepsilon2\log\det(\Sigma - G\Sigma G^\top)]
    - \frac12\alpha^\top A\alpha`. :math:`F\le -\frac12\alpha^\top A\alpha` and it depends on
    :math:`A` only through :math:`A\Sigma A^\top` (so :math:`A` and :math:`-A` give the same
    centred energy).

    Parameters
    ----------
    cov : array_like, shape (d, d)
        :math:`\Sigma`, symmetric PSD.
    A : array_like, shape (d, d)
    eps : float, default 1
    mean : array_like, shape (d,), optional
        :math:`\alpha` (default 0).

    Returns
    -------
    float
    """
    S, A, eps = _gaussian_args(cov, A, eps)
    alpha = _mean_or_zero(mean, S.shape[0])
    R = psd_sqrt(S)
    M = R @ (A / eps) @ R
    s = np.linalg.eigvalsh(M @ M.T)
    return float(0.5 * eps * np.sum(_h(s)) - 0.5 * alpha @ A @ alpha)


def sinkhorn_energy_gradient_gaussian(cov, A, eps=1.0):
    r"""Gradient :math:`\nabla_\Sigma F` of the centred :func:`sinkhorn_energy_gaussian`, shape (d, d).

    Derived in the chapter "Gradient flows" (envelope theorem on the Schrödinger potentials):

    .. math::
        \nabla_\Sigma F = -\frac{\varepsilon}{4}\big(B^\top RKRB + BRK'RB^\top\big),\quad
        K = \varphi(MM^\top),\ K' = \varphi(M^\top M),\ M = RBR,\ B = A/\varepsilon,

    symmetric, the gradient for the Frobenius inner product on symmetric matrices
    (:math:`\mathrm dF = \operatorname{tr}(\nabla F\,\mathrm d\Sigma)`). For symmetric :math:`A`
    it is :math:`-\frac12 AG`, with :math:`G\Sigma` of
    :func:`tpde_lib.gaussian_odes.sinkhorn_gain`.

    Parameters
    ----------
    cov : array_like, shape (d, d)
    A : array_like, shape (d, d)
    eps : float, default 1

    Returns
    -------
    ndarray, shape (d, d), symmetric
    """
    S, A, eps = _gaussian_args(cov, A, eps)
    R = psd_sqrt(S)
    B = A / eps
    M = R @ B @ R
    K, K2 = sym_fn(M @ M.T, _phi), sym_fn(M.T @ M, _phi)
    grad = -0.25 * eps * (B.T @ R @ K @ R @ B + B @ R @ K2 @ R @ B.T)
    return 0.5 * (grad + grad.T)


def bures_wasserstein_gradient_flow_rhs(cov, A, eps=1.0):
    r"""Bures–Wasserstein gradient flow of :math:`F`: :math:`\Sigma' = -2(\nabla F\,\Sigma + \Sigma\nabla F)`.

    A linear velocity field :math:`x\mapsto Mx` moves :math:`\mathcal N(0,\Sigma)` by
    :math:`\Sigma' = M\Sigma + \Sigma M^\top`, and the :math:`W_2` gradient of a function of
    :math:`\Sigma` is the linear field :math:`M = -2\nabla_\Sigma F` (chapter "Gradient flows").
    With :math:`V = A = A^\top` this equals the Sinkhorn covariance ODE
    :math:`VG\Sigma + \Sigma G^\top V^\top` (checked in the chapter).

    Parameters
    ----------
    cov : array_like, shape (d, d)
    A : array_like, shape (d, d)
    eps : float, default 1

    Returns
    -------
    ndarray, shape (d, d), symmetric
    """
    S, A, eps = _gaussian_args(cov, A, eps)
    grad = sinkhorn_energy_gradient_gaussian(S, A, eps)
    out = -2.0 * (grad @ S + S @ grad)
    return 0.5 * (out + out.T)


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
    lz = _block_lse(mu, A)
    return lz if log else np.exp(lz)


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
        :math:`E` (``inf`` only if it exceeds the float range; use ``log=True`` then).
    """
    _check_measure(mu)
    A = as_square("A", A, mu.d)
    keep = mu.weights > 0
    lz = _block_lse(mu, A)[keep]
    log_e = float(np.log(0.5) + logsumexp(lz + np.log(mu.weights[keep])))
    if log:
        return log_e
    with np.errstate(over="ignore"):
        return float(np.exp(log_e))


def interaction_energy_gaussian(cov, A, mean=None):
    r"""Closed form of :func:`interaction_energy` for :math:`\mu = \mathcal N(\alpha,\Sigma)`.

    Derived in the chapter "Gradient flows" (Gaussian integral of :math:`e^{y^\top Ax}` over
    :math:`x, y` i.i.d.): with :math:`R = \Sigma^{1/2}` and :math:`C = RAR`, the energy is finite
    iff :math:`\|C\|_2 < 1`, and then

    .. math::
        E = \frac12\det(I - C^\top C)^{-1/2}
            \exp\Big(\alpha^\top A\alpha + \tfrac12 b^\top
            \begin{pmatrix} I & -C^\top\\ -C & I\end{pmatrix}^{-1} b\Big),\qquad
        b = \begin{pmatrix}RA^\top\alpha\\ RA\alpha\end{pmatrix}.

    For :math:`\alpha = 0`: :math:`E = \frac12\det(I - \Sigma A^\top\Sigma A)^{-1/2}`; for
    :math:`A = -I`: :math:`\frac12\det(I-\Sigma^2)^{-1/2}`.

    Parameters
    ----------
    cov : array_like, shape (d, d)
    A : array_like, shape (d, d)
    mean : array_like, shape (d,), optional

    Returns
    -------
    float
        ``inf`` when :math:`\|\Sigma^{1/2}A\Sigma^{1/2}\|_2 \ge 1` (the integral diverges).
    """
    S = as_covariance("cov", cov)
    d = S.shape[0]
    A = as_square("A", A, d)
    alpha = _mean_or_zero(mean, d)
    R = psd_sqrt(S)
    C = R @ A @ R
    sv = np.linalg.svd(C, compute_uv=False)
    if sv.max() >= 1.0:
        return float("inf")
    eye = np.eye(d)
    block = np.block([[eye, -C.T], [-C, eye]])
    b = np.concatenate([R @ A.T @ alpha, R @ A @ alpha])
    expo = alpha @ A @ alpha + 0.5 * b @ np.linalg.solve(block, b)
    return float(0.5 * np.prod(1.0 - sv ** 2) ** -0.5 * np.exp(expo))



# --------------------------------------------------------------------------------------------
# mobility, dissipation, the metrics
# --------------------------------------------------------------------------------------------

def mobility(A, V, variant):
    r"""Constant mobility :math:`P` with :math:`\Gamma = -P\nabla\frac{\delta\mathcal E}{\delta\mu}`.

    - ``"unnormalised"`` (energy :math:`E`, :func:`interaction_energy`): :math:`P = -VA^{-1}`;
      ``"softmax"`` uses the same :math:`P`, with the extra factor :math:`1/Z_\mu(x)`.
    - ``"sinkhorn"`` (energy :math:`F`, :func:`sinkhorn_energy`): :math:`P = VA^{-1}`
      (:math:`\Gamma = V\mathbb E_\pi[y|x] = -VA^{-1}\nabla\frac{\delta F}{\delta\mu}`).

    Derived in the chapter "Gradient flows" ({eq}`eq-gf-twisted-metric`).

    Parameters
    ----------
    A, V : array_like, shape (d, d)
        ``A`` symmetric and invertible.
    variant : {"unnormalised", "softmax", "sinkhorn"}

    Returns
    -------
    ndarray, shape (d, d)
        :math:`P`; it defines the twisted metric when it is symmetric positive definite.

    Raises
    ------
    ValueError
        ``A`` not symmetric or singular; ``P`` not symmetric (no gradient structure of this
        form); unknown ``variant``.
    """
    A = as_square("A", A)
    V = as_square("V", V, A.shape[0])
    scale = max(np.abs(A).max(), np.finfo(float).tiny)
    if np.abs(A - A.T).max() > 1e-12 * scale:
        raise ValueError("A must be symmetric for the gradient-flow structure (energy first "
                         "variation uses a symmetric kernel)")
    if np.linalg.cond(A) > 1e12:
        raise ValueError("A must be invertible to define the mobility V A^{-1}")
    sign = {"unnormalised": -1.0, "softmax": -1.0, "sinkhorn": 1.0}
    if variant not in sign:
        raise ValueError(f"variant must be one of {sorted(sign)}, got {variant!r}")
    P = sign[variant] * np.linalg.solve(A.T, V.T).T        # V A^{-1}
    pscale = max(np.abs(P).max(), np.finfo(float).tiny)
    if np.abs(P - P.T).max() > 1e-9 * pscale:
        raise ValueError("the mobility V A^{-1} is not symmetric: choose V = P A (or -P A) "
                         "with P symmetric")
    return 0.5 * (P + P.T)


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




def gaussian_metric(g, u1, u2, P=None, A=None):
    r"""Inner product of two affine velocity fields at a Gaussian, for a (weighted) mobility metric.

    For :math:`\mu = \mathcal N(\alpha,\Sigma)` and :math:`u_k(x) = b_k + M_k(x-\alpha)`,

    .. math::
        g_\mu(u_1, u_2) = \int \rho(x)\,\langle u_1(x), P^{-1}u_2(x)\rangle\,\mathrm d\mu(x),

    with :math:`\rho = 1` (``A`` None: the constant-mobility metric :math:`d_P`) or
    :math:`\rho = Z_\mu` (``A`` given: softmax's metric, chapter "Gradient flows",
    {eq}`eq-gf-softmax-metric`). Closed form (derived in the chapter): :math:`Z_\mu(x) =
    e^{\alpha^\top Ax + \frac12 x^\top A^\top\Sigma Ax}`, so :math:`Z_\mu\mu = c\,\mathcal N(m, S)`
    with :math:`S^{-1} = \Sigma^{-1} - A^\top\Sigma A`, :math:`m = S(\Sigma^{-1} + A^\top)\alpha`,
    :math:`c = 2E(\mu)` (:func:`interaction_energy_gaussian`), and

    .. math::
        g_\mu(u_1, u_2) = c\,\big[u_1(m)^\top P^{-1}u_2(m)
            + \operatorname{tr}(M_1^\top P^{-1}M_2 S)\big].

    Parameters
    ----------
    g : Gaussian
        Mean (d,), positive definite covariance (d, d).
    u1, u2 : tuple (b, M)
        Offsets (d,) and slopes (d, d) of the two fields.
    P : array_like, shape (d, d), optional
        Symmetric positive definite mobility (default identity).
    A : array_like, shape (d, d), optional
        Score matrix of the weight :math:`Z_\mu`; requires
        :math:`\|\Sigma^{1/2}A\Sigma^{1/2}\|_2 < 1` (else the weighted integral diverges).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Wrong shapes; ``P`` not SPD; the weighted integral diverges.
    """
    if not isinstance(g, Gaussian):
        raise TypeError(f"g must be a Gaussian, got {type(g).__name__}")
    d = g.d
    (b1, M1), (b2, M2) = [(as_float_array(f"u{k}[0]", u[0], shape=(d,)),
                           as_square(f"u{k}[1]", u[1], d)) for k, u in ((1, u1), (2, u2))]
    Pinv = np.eye(d) if P is None else np.linalg.inv(as_covariance("P", P, d))
    if P is not None and np.linalg.eigvalsh(Pinv)[0] <= 0:
        raise ValueError("P must be symmetric positive definite")
    alpha, Sigma = g.mean, g.cov
    if A is None:
        c, m, S = 1.0, alpha, Sigma
    else:
        A = as_square("A", A, d)
        prec = np.linalg.inv(Sigma) - A.T @ Sigma @ A
        if np.linalg.eigvalsh(0.5 * (prec + prec.T))[0] <= 0:
            raise ValueError("the weight Z_mu is not integrable: ||Sigma^1/2 A Sigma^1/2||_2 >= 1")
        S = np.linalg.inv(prec)
        m = S @ (np.linalg.solve(Sigma, alpha) + A.T @ alpha)
        c = 2.0 * interaction_energy_gaussian(Sigma, A, mean=alpha)
    v1, v2 = b1 + M1 @ (m - alpha), b2 + M2 @ (m - alpha)
    return float(c * (v1 @ Pinv @ v2 + np.trace(M1.T @ Pinv @ M2 @ S)))
