r"""Closed forms of the softmax Gaussian dynamics with :math:`V = vI`, and the scalar case.

With :math:`V = vI` the covariance ODE :math:`\Sigma' = v(\Sigma A\Sigma + \Sigma A^\top\Sigma)`
is a matrix Riccati equation solved in closed form by whitening with :math:`\Sigma_0^{1/2}`
(derived in the book's appendix "Derivations"): blow-up time, solution and limit covariance.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import as_at_least, as_covariance, as_finite, as_float_array, as_positive, as_square
from .._linalg import psd_sqrt

_ROUNDOFF = 1e-12  # relative level of round-off in eigenvalues


# --------------------------------------------------------------------------------------------
def _whitened(cov0, A):
    """R = Sigma0^{1/2} and P = R (A + A^T) R with its eigen-decomposition (batched)."""
    R = psd_sqrt(cov0)
    P = R @ (A + np.swapaxes(A, -1, -2)) @ R
    p, U = np.linalg.eigh(0.5 * (P + np.swapaxes(P, -1, -2)))
    return R, p, U


def _check_cov_A(cov0, A):
    cov0 = as_float_array("cov0", cov0)
    if cov0.ndim < 2 or cov0.shape[-1] != cov0.shape[-2]:
        raise ValueError(f"cov0 must have shape (..., d, d), got {cov0.shape}")
    flat = cov0.reshape(-1, *cov0.shape[-2:])
    cov0 = np.stack([as_covariance("cov0", c) for c in flat]).reshape(cov0.shape)
    d = cov0.shape[-1]
    A = as_float_array("A", A)
    if A.ndim < 2 or A.shape[-2:] != (d, d):
        raise ValueError(f"A must have shape (..., {d}, {d}) to match cov0, got {A.shape}")
    return cov0, A


def softmax_blowup_time(cov0: ArrayLike, A: ArrayLike, v: float = 1.0) -> float:
    r"""Blow-up time of softmax attention with :math:`V = vI` (appendix "Derivations", :eq:`eq-blowup-time`).

    .. math::
        t^* = \frac{1}{\max_i v\,p_i},\qquad p_i \text{ the eigenvalues of }
        \Sigma_0^{1/2}(A+A^\top)\Sigma_0^{1/2},

    and :math:`t^* = \infty` when no :math:`v p_i` is positive (a rate below ``1e-12`` times
    :math:`\max_i |v p_i|` is round-off of a zero eigenvalue and counts as zero). For
    :math:`v > 0` this is :math:`1/(v\lambda_{\max})`.

    Parameters
    ----------
    cov0 : array_like, shape (..., d, d)
    A : array_like, shape (..., d, d)
        Broadcast against ``cov0``.
    v : float
        Scalar value matrix :math:`V = vI` (any sign).

    Returns
    -------
    float or ndarray of shape (...)
    """
    cov0, A = _check_cov_A(cov0, A)
    v = as_finite("v", v)
    _, p, _ = _whitened(cov0, A)
    rate = (v * p).max(axis=-1)
    # a rate at round-off level of the spectrum is a zero eigenvalue (e.g. rank-deficient A+A^T)
    pos = rate > _ROUNDOFF * np.abs(v * p).max(axis=-1)
    out = np.where(pos, 1.0 / np.where(pos, rate, 1.0), np.inf)
    return float(out) if out.ndim == 0 else out


def softmax_identity_V_closed_form(
    cov0: ArrayLike, A: ArrayLike, times: ArrayLike, v: float = 1.0
) -> NDArray[np.float64]:
    r"""Exact covariance of softmax attention with :math:`V = vI`.

    Derived in the appendix "Derivations", :eq:`eq-identity-v`.

    :math:`(\Sigma^{-1})' = -v(A+A^\top)`, so :math:`\Sigma_t = (\Sigma_0^{-1} - vt(A+A^\top))^{-1}`.
    Evaluated in the stable form

    .. math::
        \Sigma_t = R\,U\operatorname{diag}\big(1/(1 - vt\,p_i)\big)U^\top R,\qquad
        R = \Sigma_0^{1/2},\quad R(A+A^\top)R = U\operatorname{diag}(p)U^\top,

    which needs no inverse and also holds for singular :math:`\Sigma_0` (rank is preserved).

    Parameters
    ----------
    cov0 : array_like, shape (d, d)
    A : array_like, shape (d, d)
    times : array_like, shape (T,)
        Times measured from the initial time 0; all must be before the blow-up time.
    v : float

    Returns
    -------
    ndarray, shape (T, d, d)

    Raises
    ------
    ValueError
        Some time is at or after the blow-up time :math:`t^*` (named in the message).
    """
    cov0 = as_covariance("cov0", cov0)
    A = as_square("A", A, cov0.shape[0])
    times = as_float_array("times", times, ndim=1)
    v = as_finite("v", v)
    R, p, U = _whitened(cov0, A)
    denom = 1.0 - v * times[:, None] * p[None, :]
    if np.any(denom <= 0):
        raise ValueError(
            f"times reach the blow-up time t* = {softmax_blowup_time(cov0, A, v):.6g}"
            f" (largest time {times.max():.6g})"
        )
    return _unwhiten(R, U, 1.0 / denom)


def _unwhiten(R, U, scale):
    """R U diag(scale[k]) U^T R for each row k of ``scale`` (T, d), symmetrised: the covariance
    from its whitened eigenvalues (the closed forms here and of a layer, ``_layer``)."""
    RU = R @ U
    out = (RU[None] * scale[:, None, :]) @ RU.T[None]
    return 0.5 * (out + np.swapaxes(out, -1, -2))


def softmax_limit_cov(cov0: ArrayLike, A: ArrayLike, rank_tol: float = 1e-10) -> NDArray[np.float64]:
    r"""Limit :math:`\Sigma_\infty` of softmax attention with :math:`V = I` and :math:`A+A^\top \preceq 0`.

    (appendix "Derivations", :eq:`eq-limit-cov`.) With :math:`-(A+A^\top) = UU^\top`,
    :math:`\Sigma_\infty = \Sigma_0 - \Sigma_0U(U^\top\Sigma_0U)^{-1}U^\top\Sigma_0`
    (Woodbury on :math:`\Sigma_t = (\Sigma_0^{-1} + tUU^\top)^{-1}`). Computed in the equivalent,
    inverse-free form :math:`\Sigma_\infty = R\,\Pi\,R`, where :math:`R = \Sigma_0^{1/2}` and
    :math:`\Pi` is the orthogonal projector onto the kernel of :math:`P = -R(A+A^\top)R`
    (the limit of :math:`R(I + tP)^{-1}R`); this also holds for singular :math:`\Sigma_0`.
    Eigenvalues of :math:`P` below ``rank_tol * max(1, max eig P)`` count as zero.

    Parameters
    ----------
    cov0 : array_like, shape (..., d, d)
    A : array_like, shape (..., d, d)
    rank_tol : float
        Relative rank tolerance for :math:`P`.

    Returns
    -------
    ndarray, shape (..., d, d)
        Of rank :math:`d - \operatorname{rank}(A+A^\top)` when :math:`\Sigma_0 \succ 0`.

    Raises
    ------
    ValueError
        :math:`A + A^\top` has a positive eigenvalue (beyond ``rank_tol``): no limit (blow-up).
    """
    cov0, A = _check_cov_A(cov0, A)
    rank_tol = as_positive("rank_tol", rank_tol)
    Ssym = A + np.swapaxes(A, -1, -2)
    ev = np.linalg.eigvalsh(Ssym)
    if np.any(ev[..., -1] > rank_tol * np.maximum(1.0, np.abs(ev).max(axis=-1))):
        raise ValueError(
            "softmax_limit_cov needs A + A^T negative semi-definite; its largest "
            f"eigenvalue is {ev[..., -1].max():.3g} > 0 (the covariance blows up)"
        )
    R, p, U = _whitened(cov0, A)
    P_eig = -p  # eigenvalues of P = -R (A + A^T) R, ascending order reversed
    keep = P_eig <= rank_tol * np.maximum(1.0, P_eig.max(axis=-1, keepdims=True))
    Uk = U * keep[..., None, :]
    out = R @ Uk @ np.swapaxes(Uk, -1, -2) @ R
    return 0.5 * (out + np.swapaxes(out, -1, -2))


def scalar_closed_form(sigma0: ArrayLike, a: float, v: float, times: ArrayLike) -> NDArray[np.float64]:
    r"""One-dimensional softmax variance :math:`\sigma_t = \sigma_0/(1 - 2va\sigma_0 t)`.

    Derived in the appendix "Derivations", :eq:`eq-scalar`.

    Parameters
    ----------
    sigma0 : float
        Initial variance, >= 0.
    a, v : float
        Scalar score and value.
    times : array_like, shape (T,)
        Times from 0, before the blow-up time :math:`1/(2va\sigma_0)` when :math:`va > 0`.

    Returns
    -------
    ndarray, shape (T,)

    Raises
    ------
    ValueError
        Negative ``sigma0``, or a time at or after the blow-up time.
    """
    sigma0 = as_at_least("sigma0", sigma0, 0.0, " (a variance)")
    times = as_float_array("times", times, ndim=1)
    a, v = as_finite("a", a), as_finite("v", v)
    denom = 1.0 - 2.0 * v * a * sigma0 * times
    if np.any(denom <= 0):
        raise ValueError(f"times reach the blow-up time t* = {1 / (2 * v * a * sigma0):.6g}")
    return sigma0 / denom
