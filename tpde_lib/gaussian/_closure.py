r"""The Gaussian closures: the mean/covariance ODEs of each variant, and a batch of them.

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

Two parts:

* the right-hand sides of each variant (:func:`softmax_rhs`, :func:`multihead_rhs`,
  :func:`l2_rhs`, :func:`sinkhorn_rhs`, :func:`linear_rhs`, and :func:`sinkhorn_gain`), pure
  and batched, which the variants' :meth:`~tpde_lib.Attention.gaussian_rhs` methods call;
* :class:`BatchRhs`, a batch of B attentions as one vectorised right-hand side: through their
  :meth:`~tpde_lib.Attention.batched_closure` when every member has one with the same key (one
  call of a numpy-vectorised formula), member by member through
  :meth:`~tpde_lib.Attention.gaussian_rhs` otherwise; and :func:`covariance_rhs`, its
  covariance part for the authors' projected Euler scheme. Nothing here dispatches on variants:
  it only calls their methods.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import _real_dtype_array
from .._linalg import psd_sqrt

if TYPE_CHECKING:
    from ..attention import Attention

__all__ = [
    "softmax_rhs",
    "multihead_rhs",
    "l2_rhs",
    "sinkhorn_rhs",
    "linear_rhs",
    "sinkhorn_gain",
    "covariance_rhs",
]


def _t(X):
    """Transpose of the last two axes (batched ``.T``)."""
    return np.swapaxes(X, -1, -2)


def _mv(M, v):
    """Batched matrix-vector product ``M @ v`` for ``M (..., d, d)``, ``v (..., d)``."""
    return (M @ v[..., None])[..., 0]


def _sym_part2(X):
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
    out = {name: _real_dtype_array(name, value) for name, value in named.items()}
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
    return dmean, _softmax_dcov(A, V, cov)


def _softmax_dcov(A, V, cov):
    r"""The covariance part of :func:`softmax_rhs`, :math:`V\Sigma A\Sigma + (\cdot)^\top`."""
    return _sym_part2(V @ (cov @ A) @ cov)


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
    c, Kt, B = _l2_factors(K, tau)
    W, M = _l2_slope(c, Kt, B, Q, V, cov)
    b = _mv(V, mean - _mv(c * (W @ B), mean))
    dmean = b + _mv(M, mean)
    dcov = _sym_part2(M @ cov)
    return dmean, dcov


def _l2_factors(K, tau):
    r"""The covariance-free factors of :func:`l2_rhs`: :math:`c = 2/\tau`, :math:`K^\top`,
    :math:`K^\top K` (computed once per parameter set by the authors' protocol)."""
    c = (2.0 / np.asarray(tau, dtype=float))[..., None, None]
    Kt = _t(K)
    return c, Kt, Kt @ K


def _l2_slope(c, Kt, B, Q, V, cov):
    r""":math:`W = (I + c\Sigma B)^{-1}\Sigma` (symmetrised) and the field's linear part
    :math:`M = cVWK^\top Q` of :func:`l2_rhs`; its covariance part is ``_sym_part2(M @ cov)``."""
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
    dcov = _sym_part2(V @ _sinkhorn_gain(A_eps, cov))
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
    dcov = _sym_part2(M @ cov)
    return dmean, dcov


def _attention_class():
    """:class:`tpde_lib.Attention`, imported when first needed: the attention package imports
    this module (its variants' closures call the right-hand sides above), so a module-level
    import here would be a cycle."""
    from ..attention import Attention

    return Attention


def check_attention(att: object, name: str = "att") -> Attention:
    """``att`` if it is a :class:`tpde_lib.Attention`, TypeError naming ``name`` otherwise."""
    if not isinstance(att, _attention_class()):
        raise TypeError(f"{name} must be a tpde_lib Attention, got {type(att).__name__}")
    return att


def as_attention_list(att: Attention | Sequence[Attention]) -> list[Attention]:
    """``att`` as a non-empty list of attentions (TypeError/ValueError otherwise)."""
    atts = list(att) if isinstance(att, (list, tuple)) else [att]
    if not atts:
        raise ValueError("att must be an attention or a non-empty sequence of attentions")
    single = len(atts) == 1 and not isinstance(att, (list, tuple))
    for i, a in enumerate(atts):
        check_attention(a, "att" if single else f"att[{i}]")
    return atts


def _closures(atts):
    """The members' batched closures, or None (then loop) when one has none or they differ."""
    try:
        closures = [a.batched_closure() for a in atts]
    except NotImplementedError:
        return None
    if len({cl.key for cl in closures}) != 1:
        return None  # different variants: solved member by member
    return closures


class BatchRhs:
    """Vectorised ``(t, mean (b, d), cov (b, d, d), idx) -> (dmean, dcov)`` for B attentions.

    Constant parameters are stacked once (and re-indexed only when the active set ``idx``
    changes); time-dependent ones are evaluated at each member's own time. Exceptions raised by
    a member's ``gaussian_rhs`` propagate unchanged, except ``LinAlgError`` from a batched
    linear solve, which falls back to the member-by-member loop.

    Raises
    ------
    TypeError
        A member is not an :class:`~tpde_lib.Attention`.
    NotImplementedError
        A member has no Gaussian closure (its own message).
    """

    def __init__(self, atts):
        self.atts = as_attention_list(atts)
        self.d = self.atts[0].d
        for a in self.atts:
            if a.causal:
                a.check_gaussian(np.zeros(a.d), np.eye(a.d))  # raises NotImplementedError
        self.closures = _closures(self.atts)
        if self.closures is None:
            for a in self.atts:  # surfaces the variant's own NotImplementedError now
                a.gaussian_rhs(np.zeros(a.d), np.eye(a.d), 0.0)
            self.const = False
            return
        self.rhs_fn = self.closures[0].rhs
        self.const = all(cl.constant for cl in self.closures)
        self._shared = len(self.atts) == 1
        self._idx_key, self._sub = None, None
        if self.const:
            per_member = [tuple(np.asarray(p, dtype=float) for p in cl.params(0.0)) for cl in self.closures]
            self._stacked = [np.stack(vals) for vals in zip(*per_member)]

    @property
    def generic(self):
        """True when the batch loops over the members' ``gaussian_rhs``."""
        return self.closures is None

    def values(self, t, idx):
        """The closure's parameters for the members ``idx`` (stacked on a leading axis)."""
        if self.const:
            if self._shared:
                return [v[0] for v in self._stacked]
            key = (idx.size, hash(idx.tobytes()))
            if key != self._idx_key:
                self._idx_key, self._sub = key, [v[idx] for v in self._stacked]
            return self._sub
        tt = np.broadcast_to(np.asarray(t, dtype=float), idx.shape)
        members = idx if len(self.atts) > 1 else np.zeros_like(idx)
        per_member = [
            tuple(np.asarray(p, dtype=float) for p in self.closures[b].params(float(tb)))
            for b, tb in zip(members, tt)
        ]
        return [np.stack(vals) for vals in zip(*per_member)]

    def __call__(self, t, mean, cov, idx):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if self.generic:
                return self._loop(t, mean, cov, idx)
            try:
                return self.rhs_fn(*self.values(t, idx), mean, cov)
            except np.linalg.LinAlgError:
                return self._loop(t, mean, cov, idx)

    def _loop(self, t, mean, cov, idx):
        """Member by member (variants without a batched closure, or a failed batched solve)."""
        tt = np.broadcast_to(np.asarray(t, dtype=float), idx.shape)
        dm, dc = np.full_like(mean, np.nan), np.full_like(cov, np.nan)
        for i, (b, tb) in enumerate(zip(idx, tt)):
            att = self.atts[b if len(self.atts) > 1 else 0]
            try:
                dm[i], dc[i] = att.gaussian_rhs(mean[i], cov[i], float(tb))
            except np.linalg.LinAlgError:
                pass  # a singular stage state: NaN derivative, the step is rejected
        return dm, dc


def covariance_rhs(att: Attention | Sequence[Attention]) -> Callable[[ArrayLike], NDArray[np.float64]]:
    r"""The covariance right-hand side :math:`\Sigma \mapsto \Sigma'` of an attention, batched.

    The mean is set to 0 (softmax, multi-head, ℓ² and Sinkhorn covariance ODEs do not involve
    the mean; for linear attention this is the :math:`\alpha = 0` case). Parameters are evaluated
    at ``t = 0``. Meant for :func:`tpde_lib.official.projected_euler`.

    Parameters
    ----------
    att : Attention or sequence of B Attentions of the same variant

    Returns
    -------
    callable
        ``rhs(S)`` with ``S`` of shape (B, d, d) (or (d, d) for one attention), returning the
        same shape. With a sequence, member ``b`` of ``S`` uses ``att[b]``. ``S`` must be real
        of that shape (``TypeError``/``ValueError`` naming it); non-finite entries pass through
        (the scheme that calls it reports them with their step).
    """
    f = BatchRhs(att)
    d, members = f.d, None if len(f.atts) == 1 else len(f.atts)

    def rhs(S):
        S = _real_dtype_array("S", S)
        if (
            S.ndim not in (2, 3)
            or S.shape[-2:] != (d, d)
            or (S.ndim == 3 and members not in (None, S.shape[0]))
        ):
            want = f"({d}, {d}) or (B, {d}, {d})" if members is None else f"({members}, {d}, {d})"
            raise ValueError(f"S (the covariances) must have shape {want}, got {S.shape}")
        single = S.ndim == 2
        Sb = S[None] if single else S
        idx = np.arange(Sb.shape[0])
        out = f(0.0, np.zeros(Sb.shape[:-1]), Sb, idx)[1]
        return out[0] if single else out

    return rhs
