r"""Energies, gradient-flow structure and the twisted metric of the Transformer PDE (paper notes §8).

Which attention dynamics are gradient flows, of which energy, for which metric:

- **Sinkhorn attention** with :math:`V = A = A^\top` is the :math:`W_2` gradient flow of the
  entropic self-transport energy :math:`F(\mu) = \frac12\mathrm{OT}_\varepsilon(\mu,\mu)`
  (:func:`sinkhorn_energy`); on Gaussians it is the Bures–Wasserstein gradient flow of
  the closed form :func:`sinkhorn_energy_gaussian` (paper notes §8.1–8.2).
- **Unnormalised attention** with :math:`A = A^\top` is, up to the constant *mobility* matrix
  :math:`P = -VA^{-1}`, the gradient flow of the interaction energy
  :math:`E(\mu) = \frac12\iint e^{\langle Ax,y\rangle}\mathrm d\mu\,\mathrm d\mu`
  (:func:`interaction_energy`); for :math:`P` symmetric positive definite this is a :math:`W_2`
  gradient flow after the change of variables :math:`x\mapsto P^{-1/2}x`, i.e. for the *twisted*
  metric :func:`twisted_wasserstein` (paper notes §2.7, §8.3).
- **Softmax attention** is the unnormalised field divided by the partition function
  :math:`Z_\mu(x) = \int e^{\langle Ax,y\rangle}\mathrm d\mu(y)`; it is not a :math:`W_2` gradient
  flow for general :math:`\mu` (:func:`velocity_jacobian`, :func:`symmetry_defect`), but it
  dissipates :math:`E` at the rate :math:`\int Z_\mu\langle\Gamma, P^{-1}\Gamma\rangle\mathrm d\mu`
  (:func:`dissipation`).

Conventions: score :math:`\langle Ax,y\rangle = y^\top Ax` (paper notes §1.2), :math:`\Sigma` a
covariance, :math:`\alpha` a mean, :math:`\varepsilon > 0` the entropic temperature. Every
formula here that is not in the notes is derived in the chapter "Gradient flows", which also
says which statements are the paper's and which are ours.
"""

from __future__ import annotations

import numpy as np
import ot
from scipy.special import logsumexp

from ._checks import as_covariance, as_float_array, as_positive, as_square
from ._linalg import psd_sqrt, sym_fn
from .measures import Empirical, Gaussian

__all__ = [
    "sinkhorn_energy",
    "sinkhorn_energy_gaussian",
    "sinkhorn_gain_gaussian",
    "sinkhorn_energy_gradient_gaussian",
    "bures_wasserstein_gradient_flow_rhs",
    "interaction_energy",
    "interaction_energy_gaussian",
    "partition_function",
    "mobility",
    "dissipation",
    "twisted_wasserstein",
    "twisted_bures_wasserstein",
    "bures_wasserstein_map",
    "bures_wasserstein_geodesic",
    "energy_along_geodesic",
    "second_differences",
    "velocity_jacobian",
    "symmetry_defect",
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


def _check_gaussian(g, name):
    if not isinstance(g, Gaussian):
        raise TypeError(f"{name} must be a Gaussian, got {type(g).__name__}")
    return g


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
    Sinkhorn attention (paper notes §2.4), and with :math:`V = A = A^\top` the Sinkhorn dynamics
    is the :math:`W_2` gradient flow of :math:`F`, for every :math:`\varepsilon` (paper notes
    §8.1; chapter "Gradient flows"). Convention (ours; UNSURE in the notes whether the paper uses
    the same sign of the cost, the factor 1/2 and KL rather than entropy): with this
    normalisation :math:`F(\delta_x) = -\frac12\langle Ax,x\rangle`.

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
    r"""Slope :math:`G` of the Sinkhorn conditional mean :math:`\mathbb E_\pi[y|x] = \alpha + G(x-\alpha)`.

    Derived in the chapter "Gradient flows" (equivalent to paper notes §5.5 but with neither
    :math:`A^{-1}` nor :math:`\Sigma^{-1}`): with :math:`B = A/\varepsilon`,
    :math:`R = \Sigma^{1/2}` and :math:`M = RBR`,

    .. math::
        G = R\,K\,R\,B,\qquad K = \varphi(MM^\top),\quad \varphi(s) = \frac{2}{1+\sqrt{1+4s}},

    the unique solution of :math:`G = (\Sigma - G\Sigma G^\top)B` with
    :math:`\Sigma - G\Sigma G^\top = RKR \succeq 0`.

    Parameters
    ----------
    cov : array_like, shape (d, d)
        Covariance :math:`\Sigma` (PSD; singular allowed).
    A : array_like, shape (d, d)
    eps : float

    Returns
    -------
    ndarray, shape (d, d)
    """
    S, A, eps = _gaussian_args(cov, A, eps)
    R = psd_sqrt(S)
    B = A / eps
    M = R @ B @ R
    return R @ sym_fn(M @ M.T, _phi) @ R @ B


def sinkhorn_energy_gaussian(cov, A, eps=1.0, mean=None):
    r"""Closed form of :math:`F = \frac12\mathrm{OT}_\varepsilon(\mu,\mu)` for Gaussian :math:`\mu`.

    Derived in the chapter "Gradient flows" (for ε = 1 it is paper notes §8.2): with
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
    it is :math:`-\frac12 AG` (paper notes §8.2, ε = 1), with :math:`G` of
    :func:`sinkhorn_gain_gaussian`.

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
    :math:`VG\Sigma + \Sigma G^\top V^\top` (paper notes §8.2, §9 item 14).

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
    mobility :math:`P = -VA^{-1}` (paper notes §2.7, §8.3).

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
    :math:`A = -I`: :math:`\frac12\det(I-\Sigma^2)^{-1/2}` (paper notes §8.4).

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
# mobility, dissipation, twisted metric
# --------------------------------------------------------------------------------------------

def mobility(A, V, variant):
    r"""Constant mobility :math:`P` with :math:`\Gamma = -P\nabla\frac{\delta\mathcal E}{\delta\mu}`.

    - ``"unnormalised"`` (energy :math:`E`, :func:`interaction_energy`): :math:`P = -VA^{-1}`;
      ``"softmax"`` uses the same :math:`P`, with the extra factor :math:`1/Z_\mu(x)`.
    - ``"sinkhorn"`` (energy :math:`F`, :func:`sinkhorn_energy`): :math:`P = VA^{-1}`
      (:math:`\Gamma = V\mathbb E_\pi[y|x] = -VA^{-1}\nabla\frac{\delta F}{\delta\mu}`).

    Derived in the chapter "Gradient flows" (paper notes §8.3, there written with
    :math:`A^{-\top}`; for symmetric :math:`A` the same).

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


def _inv_sqrt_spd(P, d):
    P = as_covariance("P", P, d)
    lam = np.linalg.eigvalsh(P)
    if lam[0] <= 0:
        raise ValueError(f"P must be symmetric positive definite (smallest eigenvalue "
                         f"{lam[0]:.3g})")
    return sym_fn(P, lambda x: 1.0 / np.sqrt(x))


def twisted_wasserstein(mu, nu, P, **kwargs):
    r"""Twisted distance :math:`d_P(\mu,\nu) = W_2\big((P^{-1/2})_\#\mu, (P^{-1/2})_\#\nu\big)`.

    The candidate :math:`d_{A,V}` of paper notes §8.3 (UNSURE whether it is the paper's): for a
    field :math:`\Gamma = -P\nabla\frac{\delta\mathcal E}{\delta\mu}` with constant SPD mobility
    :math:`P`, the variable :math:`y = P^{-1/2}x` moves by
    :math:`\dot y = -\nabla_y\frac{\delta\mathcal E}{\delta\mu}`: a plain :math:`W_2` gradient flow.
    Computed with :func:`tpde_lib.transport.wasserstein` on the mapped points.

    Parameters
    ----------
    mu, nu : Empirical
    P : array_like, shape (d, d)
        Symmetric positive definite mobility.
    **kwargs
        Passed to :func:`~tpde_lib.transport.wasserstein` (``method`` ...).

    Returns
    -------
    float
    """
    from .transport import wasserstein

    _check_measure(mu, "mu")
    _check_measure(nu, "nu")
    T = _inv_sqrt_spd(P, mu.d)
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
    from .transport import bures_wasserstein

    _check_gaussian(g1, "g1")
    _check_gaussian(g2, "g2")
    T = _inv_sqrt_spd(P, g1.d)
    return bures_wasserstein(Gaussian(T @ g1.mean, T @ g1.cov @ T),
                             Gaussian(T @ g2.mean, T @ g2.cov @ T))


# --------------------------------------------------------------------------------------------
# Bures–Wasserstein geodesics
# --------------------------------------------------------------------------------------------

def bures_wasserstein_map(cov0, cov1):
    r"""Matrix :math:`T` of the optimal (Brenier) map :math:`x\mapsto Tx` between centred Gaussians.

    .. math:: T = \Sigma_0^{-1/2}\big(\Sigma_0^{1/2}\Sigma_1\Sigma_0^{1/2}\big)^{1/2}\Sigma_0^{-1/2}

    symmetric positive semi-definite, :math:`T\Sigma_0T = \Sigma_1`.

    Parameters
    ----------
    cov0 : array_like, shape (d, d)
        Positive definite.
    cov1 : array_like, shape (d, d)
        PSD.

    Returns
    -------
    ndarray, shape (d, d)
    """
    S0 = as_covariance("cov0", cov0)
    S1 = as_covariance("cov1", cov1, S0.shape[0])
    lam = np.linalg.eigvalsh(S0)
    if lam[0] <= 1e-12 * max(lam[-1], np.finfo(float).tiny):
        raise ValueError("cov0 must be positive definite for the optimal map to exist")
    R = psd_sqrt(S0)
    Ri = sym_fn(S0, lambda x: 1.0 / np.sqrt(x))
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
    if g0.d != g1.d:
        raise ValueError(f"g1 must have the dimension of g0 ({g0.d}), got {g1.d}")
    s = as_float_array("s", s, ndim=1)
    T = bures_wasserstein_map(g0.cov, g1.cov)
    eye = np.eye(g0.d)
    L = (1.0 - s)[:, None, None] * eye + s[:, None, None] * T
    covs = L @ g0.cov @ L
    means = (1.0 - s)[:, None] * g0.mean + s[:, None] * g1.mean
    return means, 0.5 * (covs + np.swapaxes(covs, 1, 2))


def energy_along_geodesic(energy, g0, g1, s):
    r"""Energy :math:`\mathcal E(\mathcal N(\alpha_s,\Sigma_s))` along :func:`bures_wasserstein_geodesic`.

    Parameters
    ----------
    energy : callable
        ``energy(mean (d,), cov (d, d)) -> float``, e.g.
        ``lambda m, S: interaction_energy_gaussian(S, A, mean=m)``.
    g0, g1 : Gaussian
    s : array_like, shape (k,)

    Returns
    -------
    ndarray, shape (k,)
    """
    if not callable(energy):
        raise TypeError(f"energy must be a callable (mean, cov) -> float, got "
                        f"{type(energy).__name__}")
    means, covs = bures_wasserstein_geodesic(g0, g1, s)
    return np.array([float(energy(m, S)) for m, S in zip(means, covs)])


def second_differences(values, s):
    r"""Second differences :math:`(v_{k+1}-2v_k+v_{k-1})/\Delta s^2` on a uniform grid, shape (k-2,).

    A negative value well beyond round-off (about :math:`10^{-16}\max|v|/\Delta s^2`) witnesses
    non-convexity along the curve. ``s`` must be uniformly spaced (checked to 1e-9 relative).
    """
    v = as_float_array("values", values, ndim=1)
    s = as_float_array("s", s, shape=(v.size,))
    if v.size < 3:
        raise ValueError(f"values must have at least 3 entries, got {v.size}")
    ds = np.diff(s)
    if np.any(ds <= 0) or np.abs(ds - ds[0]).max() > 1e-9 * ds[0]:
        raise ValueError("s must be uniformly spaced and increasing")
    return np.diff(v, 2) / ds[0] ** 2


# --------------------------------------------------------------------------------------------
# gradient-flow witness: symmetry of the velocity Jacobian
# --------------------------------------------------------------------------------------------

def velocity_jacobian(att, mu, step=1e-4, t=0.0):
    r"""Jacobian :math:`J_{(i,a),(j,b)} = \partial\Gamma_a(x_i)/\partial x_{j,b}`, shape (n d, n d).

    Central finite differences: :math:`J e_k \approx (\Gamma(X + h e_k) - \Gamma(X - h e_k))/2h`,
    error :math:`O(h^2)` plus round-off :math:`O(\epsilon_{\rm mach}/h)` (plus the solver
    tolerance divided by :math:`h` for Sinkhorn). Each of the :math:`2nd` perturbed
    configurations is one vectorised call of ``att.velocity``; the loop runs over perturbation
    directions, which a finite-difference Jacobian of a black-box field cannot avoid. Meant for
    small n (tens of tokens). Rows and columns are ordered as ``points.ravel()``.

    Parameters
    ----------
    att : attention
        Anything with ``velocity(mu, t)`` returning (n, d).
    mu : Empirical
        The configuration (points (n, d), weights kept fixed).
    step : float, default 1e-4
    t : float

    Returns
    -------
    ndarray, shape (n d, n d)
    """
    _check_measure(mu)
    step = as_positive("step", step)
    X = mu.points
    nd = X.size
    J = np.empty((nd, nd))
    for k in range(nd):
        e = np.zeros(nd)
        e[k] = step
        e = e.reshape(X.shape)
        up = att.velocity(mu.with_points(X + e), t)
        down = att.velocity(mu.with_points(X - e), t)
        J[:, k] = (up - down).ravel() / (2.0 * step)
    return J


def symmetry_defect(J, weights, mobility_matrix=None):
    r"""Relative asymmetry :math:`\|S-S^\top\|_F/\|S\|_F`, :math:`S = (\mathrm{diag}(w)\otimes P^{-1})J`.

    If the particles follow a gradient flow :math:`\dot x_i = -w_i^{-1}P\nabla_{x_i}\Phi(X)` (the
    particle form of :math:`\Gamma = -P\nabla\frac{\delta\mathcal E}{\delta\mu}` with
    :math:`\Phi(X) = \mathcal E(\sum_i w_i\delta_{x_i})`), then :math:`S = -\nabla^2\Phi` is
    symmetric. A defect well above the finite-difference error proves that no such
    :math:`\Phi` exists near this configuration (chapter "Gradient flows").

    Parameters
    ----------
    J : array_like, shape (n d, n d)
        From :func:`velocity_jacobian`.
    weights : array_like, shape (n,)
    mobility_matrix : array_like, shape (d, d), optional
        :math:`P` (default identity: plain :math:`W_2`).

    Returns
    -------
    float
    """
    w = as_float_array("weights", weights, ndim=1)
    n = w.size
    J = as_float_array("J", J, ndim=2)
    if J.shape[0] != J.shape[1] or J.shape[0] % n:
        raise ValueError(f"J must be square of size n*d with n={n}, got {J.shape}")
    d = J.shape[0] // n
    Pinv = np.eye(d) if mobility_matrix is None else np.linalg.inv(
        as_square("mobility_matrix", mobility_matrix, d))
    S = np.kron(np.diag(w), Pinv) @ J
    norm = np.linalg.norm(S)
    if norm == 0:
        return 0.0
    return float(np.linalg.norm(S - S.T) / norm)
