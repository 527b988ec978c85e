r"""The Gaussian closures' right-hand sides: the mean/covariance ODE of each built-in variant.

Used in the chapter "Gaussian solutions"; derived in the appendix "Derivations". Their documented
home is :mod:`tpde_lib.gaussian` (which re-exports them); they live here, below the attention
package, because each variant's :meth:`~tpde_lib.Attention.gaussian_rhs` calls its own, and
:mod:`tpde_lib.gaussian` (the solvers) imports the attention package: a module of the base layer
that both may import, with no cycle (CONTRIBUTING.md, "Layers").

If, for every Gaussian :math:`\mu = \mathcal N(\alpha, \Sigma)`, the attention field is affine,
:math:`\Gamma_\mu(x) = b + M x`, then the Transformer PDE keeps :math:`\mu_t` Gaussian and

.. math::
    \alpha' = b + M\alpha, \qquad \Sigma' = M\Sigma + \Sigma M^\top

(appendix "Derivations", :eq:`eq-closure`). Each function below returns ``(dmean, dcov)`` for one
attention variant.
Notation: :math:`\alpha` is the mean, :math:`\Sigma` the covariance, :math:`A` the score matrix
(score :math:`\langle Ax, y\rangle = y^\top A x`, the book's convention) and :math:`V` the value matrix.

Every function **broadcasts over leading batch dimensions** of all its arguments: matrices have
shape ``(..., d, d)``, means ``(..., d)``. The public ones check the kind and shape of their
arguments only (cheaply: they run on ODE states, which may be non-finite at a blow-up); the
helpers without a docstring example (:func:`softmax_dcov`, :func:`l2_factors`, :func:`l2_slope`,
:func:`sym_part2`) trust theirs: the authors' protocol (:mod:`tpde_lib.official`) calls them in
its inner loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._checks import as_real_array
from ._linalg import psd_sqrt


def _t(X):
    """Transpose of the last two axes (batched ``.T``)."""
    return np.swapaxes(X, -1, -2)


def _mv(M, v):
    """Batched matrix-vector product ``M @ v`` for ``M (..., d, d)``, ``v (..., d)``."""
    return (M @ v[..., None])[..., 0]


def sym_part2(X):
    """``X + X^T`` (batched), exactly symmetric."""
    return X + _t(X)


def _kernel_args(d_from, **named):
    """Check the arguments of a closure kernel; return them as arrays (float where real).

    The kernels are the solvers' inner loop and run on ODE states, which may be non-finite at a
    blow-up (the solvers detect it from them): this checks kind and shape only, cheaply. Every
    argument must be real numeric (``TypeError`` naming it); matrices have shape (..., d, d)
    and ``mean`` (..., d) with ``d`` the last axis of ``d_from`` (``ValueError`` naming it);
    ``tau`` and ``eps`` must be positive.
    """
    out = {name: as_real_array(name, value) for name, value in named.items()}
    ref = out[d_from]
    if ref.ndim < 2 or ref.shape[-1] != ref.shape[-2]:
        raise ValueError(f"{d_from} must have shape (..., d, d), got {ref.shape}")
    d = ref.shape[-1]
    for name, arr in out.items():
        if name in ("tau", "eps"):
            if not np.all(np.isfinite(arr) & (arr > 0)):
                raise ValueError(f"{name} must be finite and positive, got {arr!r:.60}")
        elif name == "mean":
            if arr.ndim < 1 or arr.shape[-1] != d:
                raise ValueError(f"mean must have shape (..., {d}), got {arr.shape}")
        elif name == "K" or name == "Q":
            if arr.ndim < 2 or arr.shape[-1] != d:
                raise ValueError(f"{name} must have shape (..., k, {d}), got {arr.shape}")
        elif arr.ndim < 2 or arr.shape[-2:] != (d, d):
            raise ValueError(f"{name} must have shape (..., {d}, {d}), got {arr.shape}")
    return out.values()


def softmax_rhs(
    A: ArrayLike, V: ArrayLike, mean: ArrayLike, cov: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
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
    return _softmax(*_kernel_args("cov", A=A, V=V, mean=mean, cov=cov))


def _softmax(A, V, mean, cov):
    """:func:`softmax_rhs` on checked arrays (the arithmetic alone)."""
    dmean = _mv(V, mean + _mv(cov @ A, mean))
    return dmean, softmax_dcov(A, V, cov)


def softmax_dcov(A, V, cov):
    r"""The covariance part of :func:`softmax_rhs`, :math:`V\Sigma A\Sigma + (\cdot)^\top`."""
    return sym_part2(V @ (cov @ A) @ cov)


def multihead_rhs(
    As: Sequence[ArrayLike], Vs: Sequence[ArrayLike], mean: ArrayLike, cov: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Mean/covariance ODE of multi-head softmax attention (appendix "Derivations", :eq:`eq-multihead-ode`).

    The field is the sum of the heads' fields, :math:`\Gamma = \sum_h V_h(\alpha+\Sigma A_h x)`:

    .. math::
        \alpha' = \sum_h V_h(I+\Sigma A_h)\alpha,\qquad
        \Sigma' = \sum_h \big(V_h\Sigma A_h\Sigma + \Sigma A_h^\top\Sigma V_h^\top\big).

    Parameters
    ----------
    As, Vs : sequence of ndarray, each of shape (..., d, d)
        Score matrices :math:`A_h` and value matrices :math:`V_h` (each head's value and output
        projections merged into one (d, d) matrix), one per head, same length.
    mean : ndarray, shape (..., d)
    cov : ndarray, shape (..., d, d)

    Returns
    -------
    dmean : ndarray, shape (..., d)
    dcov : ndarray, shape (..., d, d)
    """
    for name, seq in (("As", As), ("Vs", Vs)):
        if not isinstance(seq, (list, tuple, np.ndarray)):
            raise TypeError(
                f"{name} must be a sequence of (d, d) arrays, one per head, got {type(seq).__name__}"
            )
    if len(As) != len(Vs) or len(As) == 0:
        raise ValueError(f"As and Vs must be non-empty and of equal length, got {len(As)} and {len(Vs)}")
    heads = [
        _kernel_args("cov", cov=cov, **{f"As[{h}]": As[h], f"Vs[{h}]": Vs[h]}, mean=mean)
        for h in range(len(As))
    ]
    c, A, V, m = heads[0]  # each head's arrays, checked once
    dmean, dcov = _softmax(A, V, m, c)
    for c, A, V, m in heads[1:]:
        dm, dc = _softmax(A, V, m, c)
        dmean, dcov = dmean + dm, dcov + dc
    return dmean, dcov


def l2_rhs(
    Q: ArrayLike, K: ArrayLike, V: ArrayLike, tau: float, mean: ArrayLike, cov: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
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
    Q, K, V, tau, mean, cov = _kernel_args("cov", Q=Q, K=K, V=V, tau=tau, mean=mean, cov=cov)
    c, Kt, B = l2_factors(K, tau)
    W, M = l2_slope(c, Kt, B, Q, V, cov)
    b = _mv(V, mean - _mv(c * (W @ B), mean))
    dmean = b + _mv(M, mean)
    dcov = sym_part2(M @ cov)
    return dmean, dcov


def l2_factors(K, tau):
    r"""The covariance-free factors of :func:`l2_rhs`: :math:`c = 2/\tau`, :math:`K^\top`,
    :math:`K^\top K` (computed once per parameter set by the authors' protocol)."""
    c = (2.0 / np.asarray(tau, dtype=float))[..., None, None]
    Kt = _t(K)
    return c, Kt, Kt @ K


def l2_slope(c, Kt, B, Q, V, cov):
    r""":math:`W = (I + c\Sigma B)^{-1}\Sigma` (symmetrised) and the field's linear part
    :math:`M = cVWK^\top Q` of :func:`l2_rhs`; its covariance part is ``sym_part2(M @ cov)``."""
    W = np.linalg.solve(np.eye(cov.shape[-1]) + c * (cov @ B), cov)
    W = 0.5 * (W + _t(W))
    return W, c * (V @ W @ Kt @ Q)


def sinkhorn_gain(A: ArrayLike, cov: ArrayLike) -> NDArray[np.float64]:
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
    return _sinkhorn_gain(*_kernel_args("cov", A=A, cov=cov))


def _sinkhorn_gain(A, cov):
    """:func:`sinkhorn_gain` on checked arrays (the arithmetic alone)."""
    S = psd_sqrt(cov)
    N = S @ A @ S
    nu, U = np.linalg.eigh(_t(N) @ N)
    inv_1pD = (U * (1.0 / (1.0 + np.sqrt(1.0 + 4.0 * np.clip(nu, 0.0, None))))[..., None, :]) @ _t(U)
    return 2.0 * (S @ N @ inv_1pD @ S)


def sinkhorn_rhs(
    A: ArrayLike, V: ArrayLike, eps: float, mean: ArrayLike, cov: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
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
    A, V, eps, mean, cov = _kernel_args("cov", A=A, V=V, eps=eps, mean=mean, cov=cov)
    A_eps = A / np.asarray(eps, dtype=float)[..., None, None]
    dmean = _mv(V, mean)
    dcov = sym_part2(V @ _sinkhorn_gain(A_eps, cov))
    return dmean, dcov


def linear_rhs(
    A: ArrayLike, V: ArrayLike, mean: ArrayLike, cov: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
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
    A, V, mean, cov = _kernel_args("cov", A=A, V=V, mean=mean, cov=cov)
    second_moment = cov + mean[..., :, None] * mean[..., None, :]
    M = V @ second_moment @ A
    dmean = _mv(M, mean)
    dcov = sym_part2(M @ cov)
    return dmean, dcov
