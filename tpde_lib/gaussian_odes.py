r"""Right-hand sides of the mean/covariance ODEs of Gaussian solutions.

Used in the chapter "Gaussian solutions"; derived in the appendix "Derivations".

If, for every Gaussian :math:`\mu = \mathcal N(\alpha, \Sigma)`, the attention field is affine,
:math:`\Gamma_\mu(x) = b + M x`, then the Transformer PDE keeps :math:`\mu_t` Gaussian and

.. math::
    \alpha' = b + M\alpha, \qquad \Sigma' = M\Sigma + \Sigma M^\top

(appendix "Derivations", :eq:`eq-closure`). Each function below returns ``(dmean, dcov)`` for one
attention variant.
Notation: :math:`\alpha` is the mean, :math:`\Sigma` the covariance, :math:`A` the score matrix
(score :math:`\langle Ax, y\rangle = y^\top A x`, the book's convention) and :math:`V` the value matrix.

Every function **broadcasts over leading batch dimensions** of all its arguments: matrices have
shape ``(..., d, d)``, means ``(..., d)``. Inputs are trusted (validated by the attention classes
and by :mod:`tpde_lib.gaussian`); nothing here validates, so the functions are cheap enough to sit
inside an ODE integrator.
"""

from __future__ import annotations

import numpy as np

from ._linalg import psd_sqrt

__all__ = ["softmax_rhs", "multihead_rhs", "l2_rhs", "sinkhorn_rhs", "linear_rhs", "sinkhorn_gain"]


def _t(X):
    """Transpose of the last two axes (batched ``.T``)."""
    return np.swapaxes(X, -1, -2)


def _mv(M, v):
    """Batched matrix-vector product ``M @ v`` for ``M (..., d, d)``, ``v (..., d)``."""
    return (M @ v[..., None])[..., 0]


def _sym_part2(X):
    """``X + X^T`` (batched), exactly symmetric."""
    return X + _t(X)


def softmax_rhs(A, V, mean, cov):
    r"""Mean/covariance ODE of softmax attention (appendix "Derivations", :eq:`eq-softmax-ode`).

    The exponential tilt :math:`e^{\langle Ax,y\rangle}\mathcal N(\alpha,\Sigma)(dy)\propto
    \mathcal N(\alpha + \Sigma A x, \Sigma)` gives :math:`\Gamma(x) = V(\alpha + \Sigma A x)`, so

    .. math::
        \alpha' = V(I + \Sigma A)\alpha, \qquad
        \Sigma' = V\Sigma A\Sigma + \Sigma A^\top \Sigma V^\top .

    Parameters
    ----------
    A, V : ndarray, shape (..., d, d)
        Score and value matrices.
    mean : ndarray, shape (..., d)
        The mean :math:`\alpha`.
    cov : ndarray, shape (..., d, d)
        The covariance :math:`\Sigma` (symmetric PSD).

    Returns
    -------
    dmean : ndarray, shape (..., d)
    dcov : ndarray, shape (..., d, d), exactly symmetric
    """
    SA = cov @ A
    dmean = _mv(V, mean + _mv(SA, mean))
    dcov = _sym_part2(V @ SA @ cov)
    return dmean, dcov


def multihead_rhs(As, Vs, mean, cov):
    r"""Mean/covariance ODE of multi-head softmax attention (appendix "Derivations", :eq:`eq-multihead-ode`).

    The field is the sum of the heads' fields, :math:`\Gamma = \sum_h V_h(\alpha+\Sigma A_h x)`:

    .. math::
        \alpha' = \sum_h V_h(I+\Sigma A_h)\alpha,\qquad
        \Sigma' = \sum_h \big(V_h\Sigma A_h\Sigma + \Sigma A_h^\top\Sigma V_h^\top\big).

    Parameters
    ----------
    As, Vs : sequence of ndarray, each of shape (..., d, d)
        Score matrices :math:`A_h` and (merged value-output) matrices :math:`V_h` (the notes'
        :math:`C_h`), one per head, same length.
    mean : ndarray, shape (..., d)
    cov : ndarray, shape (..., d, d)

    Returns
    -------
    dmean : ndarray, shape (..., d)
    dcov : ndarray, shape (..., d, d)
    """
    if len(As) != len(Vs) or len(As) == 0:
        raise ValueError(f"As and Vs must be non-empty and of equal length, got {len(As)} and "
                         f"{len(Vs)}")
    dmean, dcov = softmax_rhs(As[0], Vs[0], mean, cov)
    for A, V in zip(As[1:], Vs[1:]):
        dm, dc = softmax_rhs(A, V, mean, cov)
        dmean, dcov = dmean + dm, dcov + dc
    return dmean, dcov


def l2_rhs(Q, K, V, tau, mean, cov):
    r"""Mean/covariance ODE of ℓ² attention with kernel :math:`e^{-|Qx-Ky|^2/\tau}`.

    Derived in the appendix "Derivations", :eq:`eq-l2-ode`.

    The :math:`x`-only factor cancels in the normalisation, so the kernel acts as
    :math:`e^{(2\langle Qx, Ky\rangle - |Ky|^2)/\tau}`. Completing the square against
    :math:`\mathcal N(\alpha, \Sigma)`, with :math:`c = 2/\tau` and :math:`B = K^\top K`, the tilted
    measure is Gaussian with mean :math:`(I + c\Sigma B)^{-1}(\alpha + c\Sigma K^\top Q x)`. Hence
    :math:`\Gamma(x) = b + Mx` with

    .. math::
        M = c\,V (I + c\Sigma B)^{-1}\Sigma K^\top Q,\qquad
        b = V (I + c\Sigma B)^{-1}\alpha,

    and :math:`\alpha' = b + M\alpha`, :math:`\Sigma' = M\Sigma + \Sigma M^\top`. Computed through
    the symmetric PSD matrix :math:`W = (I + c\Sigma B)^{-1}\Sigma = \Sigma(I + cB\Sigma)^{-1}`
    (push-through identity; :math:`I + c\Sigma B` has eigenvalues :math:`\ge 1`, so the solve is
    always well posed, also for singular :math:`\Sigma`), using
    :math:`(I + c\Sigma B)^{-1} = I - cWB`. The official code's scaling is :math:`\tau = 1` with
    :math:`Q` replaced by :math:`Q/\sqrt d`.

    Parameters
    ----------
    Q, K : ndarray, shape (..., k, d)
        Query and key matrices.
    V : ndarray, shape (..., d, d)
    tau : float or ndarray broadcastable to the batch shape
        Temperature :math:`\tau > 0`.
    mean : ndarray, shape (..., d)
    cov : ndarray, shape (..., d, d)

    Returns
    -------
    dmean : ndarray, shape (..., d)
    dcov : ndarray, shape (..., d, d)
    """
    c = (2.0 / np.asarray(tau, dtype=float))[..., None, None]
    Kt = _t(K)
    B = Kt @ K
    d = cov.shape[-1]
    W = np.linalg.solve(np.eye(d) + c * (cov @ B), cov)
    W = 0.5 * (W + _t(W))
    M = c * (V @ W @ Kt @ Q)
    b = _mv(V, mean - _mv(c * (W @ B), mean))
    dmean = b + _mv(M, mean)
    dcov = _sym_part2(M @ cov)
    return dmean, dcov


def sinkhorn_gain(A, cov):
    r"""The product :math:`G\Sigma` of the Sinkhorn conditional-mean slope :math:`G`, ε = 1.

    Derived in the appendix "Derivations", :eq:`eq-sinkhorn-gain`.

    The entropic self-plan of :math:`\mathcal N(\alpha,\Sigma)` for the cost
    :math:`-\langle Ax,y\rangle` has :math:`\mathbb E[y|x] = \alpha + G(x-\alpha)` with (official
    code of the paper) :math:`G\Sigma = \tfrac12 A^{-\top}(\Sigma^{-1/2}D_\Sigma\Sigma^{1/2} - I)`,
    :math:`D_\Sigma = (I + 4 N^\top N)^{1/2}`, :math:`N = \Sigma^{1/2}A\Sigma^{1/2}`. Since
    :math:`D_\Sigma - I = 4N^\top N (I + D_\Sigma)^{-1}` (the factors commute), this equals

    .. math::
        G\Sigma = 2\,\Sigma^{1/2} N (I + D_\Sigma)^{-1}\Sigma^{1/2}
                = 2\,\Sigma A\,\Sigma^{1/2}(I + D_\Sigma)^{-1}\Sigma^{1/2},

    which needs neither :math:`A^{-1}` nor :math:`\Sigma^{-1}`: it is valid for singular :math:`A`
    and singular :math:`\Sigma`, and :math:`(I + D_\Sigma)^{-1}` has eigenvalues
    :math:`1/(1+\sqrt{1+4\nu}) \in (0, 1/2]` (:math:`\nu` the eigenvalues of :math:`N^\top N`).
    For small :math:`A` it reduces to softmax's :math:`\Sigma A \Sigma`.

    Parameters
    ----------
    A : ndarray, shape (..., d, d)
        Score matrix (already divided by ε).
    cov : ndarray, shape (..., d, d)

    Returns
    -------
    ndarray, shape (..., d, d)
        :math:`G\Sigma`.
    """
    S = psd_sqrt(cov)
    N = S @ A @ S
    nu, U = np.linalg.eigh(_t(N) @ N)
    inv_1pD = (U * (1.0 / (1.0 + np.sqrt(1.0 + 4.0 * np.clip(nu, 0.0, None))))[..., None, :]) @ _t(U)
    return 2.0 * (S @ N @ inv_1pD @ S)


def sinkhorn_rhs(A, V, eps, mean, cov):
    r"""Mean/covariance ODE of Sinkhorn attention, temperature ε.

    Derived in the appendix "Derivations", :eq:`eq-sinkhorn-ode`.

    The field is :math:`\Gamma(x) = V\,\mathbb E_\pi[y|x] = V(\alpha + G(x-\alpha))`, with
    :math:`G` of :func:`sinkhorn_gain` computed for :math:`A/\varepsilon` (the kernel is
    :math:`e^{\langle Ax,y\rangle/\varepsilon}`). The plan has both marginals equal to
    :math:`\mu`, so the mean decouples:

    .. math::
        \alpha' = V\alpha, \qquad \Sigma' = V G\Sigma + \Sigma G^\top V^\top .

    Parameters
    ----------
    A, V : ndarray, shape (..., d, d)
    eps : float or ndarray broadcastable to the batch shape
        Entropic temperature :math:`\varepsilon > 0`.
    mean : ndarray, shape (..., d)
    cov : ndarray, shape (..., d, d)

    Returns
    -------
    dmean : ndarray, shape (..., d)
    dcov : ndarray, shape (..., d, d)
    """
    A_eps = A / np.asarray(eps, dtype=float)[..., None, None]
    dmean = _mv(V, mean)
    dcov = _sym_part2(V @ sinkhorn_gain(A_eps, cov))
    return dmean, dcov


def linear_rhs(A, V, mean, cov):
    r"""Mean/covariance ODE of linear attention (appendix "Derivations", :eq:`eq-linear-ode`).

    :math:`\Gamma(x) = \int\langle Ax,y\rangle Vy\,d\mu(y) = V(\Sigma + \alpha\alpha^\top)Ax`, so
    :math:`M = V(\Sigma+\alpha\alpha^\top)A`, :math:`b = 0` and

    .. math::
        \alpha' = V(\Sigma + \alpha\alpha^\top)A\alpha, \qquad \Sigma' = M\Sigma + \Sigma M^\top .

    For :math:`\alpha = 0` the covariance ODE is softmax's.

    Parameters
    ----------
    A, V : ndarray, shape (..., d, d)
    mean : ndarray, shape (..., d)
    cov : ndarray, shape (..., d, d)

    Returns
    -------
    dmean : ndarray, shape (..., d)
    dcov : ndarray, shape (..., d, d)
    """
    second_moment = cov + mean[..., :, None] * mean[..., None, :]
    M = V @ second_moment @ A
    dmean = _mv(M, mean)
    dcov = _sym_part2(M @ cov)
    return dmean, dcov
