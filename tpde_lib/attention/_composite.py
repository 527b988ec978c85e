r"""Multi-head attention (a sum of attentions) and ℓ² (distance) attention."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .. import _closures as closures  # the Gaussian closures' right-hand sides
from .._checks import as_flag, checked_result
from .._threads import held_blas
from . import _batched as batched
from ._base import Attention, GaussianClosure, matrix_param, owns_field, square_param
from ._bilinear import Softmax
from ._kernels import engine_sums, normalised, support, times_transpose, weighted_values


def _norm(M):
    return float(np.linalg.norm(M, 2))


def _head_result(i, head, what, value, shape, t, finite=True):
    """Head ``i``'s ``what`` (a field, or a part of its Gaussian closure) as a real array of
    ``shape``: checked where it comes back, before a sum could broadcast it or drop an
    imaginary part (TypeError, ValueError, FloatingPointError naming the head). Closures are
    not checked for finiteness (``finite=False``): a non-finite derivative at a stage state
    makes the Gaussian solvers reject the step."""
    where = f"MultiHead heads[{i}] ({type(head).__name__})"
    when = "" if t is None else f" at t={t:g}"
    return checked_result(
        where, value, shape, part=what, when=when, finite=finite, nonfinite=FloatingPointError
    )


class MultiHead(Attention):
    r"""Multi-head attention: the sum of its heads.

    .. math:: \Gamma_\mu(x) = \sum_{h=1}^H \Gamma^h_\mu(x)

    Each head is any :class:`~tpde_lib.Attention` (softmax heads give the usual multi-head
    layer; head ``h``'s value matrix is then the merged :math:`W^O_h V_h`). The Gaussian closure
    is the sum of the heads' closures, and exists only when every head has one; likewise the
    stability constants. The :class:`Softmax` heads (not its subclasses) share their keys and
    values, so their fields are computed in one call of the kernel engine, their queries
    stacked (``Softmax._summed_field``).

    Each head's result is checked where it comes back (its field: real, shape (n, d), finite;
    its Gaussian closure: shapes (d,) and (d, d)): a head that returns a scalar, one row, one
    column or complex values raises an error naming the head (index and class) and what was
    expected, instead of being broadcast into the sum.

    Parameters
    ----------
    heads : sequence of Attention
        Non-empty, all of the same dimension (a positive int ``d``); causal iff every head is
        causal (mixing causal and non-causal heads raises ``ValueError``).

    Examples
    --------
    Two softmax heads sum their fields:

    >>> import numpy as np, tpde_lib as tp
    >>> A, V = np.array([[1.0, 0.5], [0.0, 1.0]]), np.eye(2)
    >>> heads = [tp.Softmax(A, V), tp.Softmax(-A.T, 0.5 * V)]
    >>> x = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    >>> mh = tp.MultiHead(heads)
    >>> np.allclose(mh.velocity(x), heads[0].velocity(x) + heads[1].velocity(x), rtol=1e-13)
    True
    >>> tp.MultiHead([tp.Softmax(np.eye(2), V), tp.Softmax(np.eye(3), np.eye(3))])
    Traceback (most recent call last):
    ...
    ValueError: heads must all act on the same dimension, got [2, 3]
    """

    def __init__(self, heads: Iterable[Attention]) -> None:
        if isinstance(heads, Attention):
            raise TypeError("heads must be a sequence of attentions, got a single attention")
        try:
            heads = tuple(heads)
        except TypeError as exc:
            raise TypeError("heads must be a sequence of attentions") from exc
        if not heads:
            raise ValueError("heads must contain at least one attention")
        for i, h in enumerate(heads):
            if not isinstance(h, Attention):
                raise TypeError(f"heads[{i}] must be a tpde_lib Attention, got {type(h).__name__}")
        for i, h in enumerate(heads):
            d = getattr(h, "d", None)
            if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 1:
                raise TypeError(
                    f"heads[{i}] ({type(h).__name__}) must set d, its token "
                    f"dimension (a positive int), got {d!r}"
                )
        dims = {h.d for h in heads}
        if len(dims) != 1:
            raise ValueError(
                f"heads must all act on the same dimension, got {[getattr(h, 'd', None) for h in heads]}"
            )
        flags = {bool(h.causal) for h in heads}
        if len(flags) != 1:
            raise ValueError("heads must be all causal or all non-causal")
        self.heads = heads
        self.d = int(heads[0].d)
        self.causal = heads[0].causal

    def field(self, points, weights, positions, t):
        # plain softmax heads (not subclasses, which may change their field) in one engine call;
        # every other head's field is checked before it is added
        shape = points.shape
        soft = [h for h in self.heads if type(h) is Softmax]
        if len(soft) > 1:
            out = Softmax._summed_field(soft, points, weights, positions, t)
            rest = [(i, h) for i, h in enumerate(self.heads) if type(h) is not Softmax]
        else:
            first = self.heads[0].field(points, weights, positions, t)
            out = np.array(_head_result(0, self.heads[0], "a field", first, shape, t), dtype=float)
            rest = list(enumerate(self.heads))[1:]
        for i, h in rest:
            out += _head_result(i, h, "a field", h.field(points, weights, positions, t), shape, t)
        return out

    def field_batch(self, points, weights, positions, t):
        # as ``field``, stacked over the batch: the plain softmax heads in one call of the
        # batched kernel, every other head by its own ``field_batch``, summed in the same order
        # (each member bitwise its ``field``); a member's non-finite field is left to the
        # caller, which stops that member alone
        n, shape = points.shape[1], points.shape
        soft = [h for h in self.heads if type(h) is Softmax]
        stackable = len(soft) < 2 or (batched.fits(len(soft) * n, n) and bool((weights > 0).all()))
        if not (owns_field(self, MultiHead) and stackable):
            return Attention.field_batch(self, points, weights, positions, t)
        if len(soft) > 1:
            out = batched.softmax_heads_field(soft, points, weights, positions, t)
            rest = [(i, h) for i, h in enumerate(self.heads) if type(h) is not Softmax]
        else:
            first = self.heads[0].field_batch(points, weights, positions, t)
            first = _head_result(0, self.heads[0], "a field", first, shape, t, finite=False)
            out = np.array(first, dtype=float)
            rest = list(enumerate(self.heads))[1:]
        for i, h in rest:
            term = h.field_batch(points, weights, positions, t)
            out += _head_result(i, h, "a field", term, shape, t, finite=False)
        return out

    @property
    def time_dependent(self):
        return any(h.time_dependent for h in self.heads)

    @property
    def stateful(self):
        """Whether some head keeps state between calls (Sinkhorn attention)."""
        return any(getattr(h, "stateful", False) for h in self.heads)

    def gaussian_rhs(self, mean, cov, t=0.0):
        """Sum of the heads' Gaussian closures (``NotImplementedError`` if a head has none)."""
        m, c = self.check_gaussian(mean, cov, t)
        d = self.d
        dm = dc = None
        for i, h in enumerate(self.heads):
            res = h.gaussian_rhs(m, c, t)
            if not isinstance(res, (tuple, list)) or len(res) != 2:
                raise TypeError(
                    f"MultiHead heads[{i}] ({type(h).__name__}).gaussian_rhs must "
                    f"return a pair (dmean, dcov), got {type(res).__name__}"
                )
            a = _head_result(i, h, "a mean derivative", res[0], (d,), t, finite=False)
            b = _head_result(i, h, "a covariance derivative", res[1], (d, d), t, finite=False)
            if dm is None:
                dm, dc = np.array(a, dtype=float), np.array(b, dtype=float)
            else:
                dm += a
                dc += b
        return dm, dc

    def batched_closure(self):
        if self.causal:
            raise NotImplementedError("causal multi-head attention has no Gaussian closure")
        closures = [h.batched_closure() for h in self.heads]
        counts = [len(cl.params(0.0)) for cl in closures]

        def params(t):
            return tuple(p for cl in closures for p in cl.params(t))

        heads = self.heads

        def rhs(*args):
            *values, mean, cov = args
            dm, dc, start = 0.0, 0.0, 0
            for i, (cl, k) in enumerate(zip(closures, counts)):
                a, b = cl.rhs(*values[start : start + k], mean, cov)
                a = _head_result(i, heads[i], "a batched mean derivative", a, mean.shape, None, finite=False)
                b = _head_result(
                    i, heads[i], "a batched covariance derivative", b, cov.shape, None, finite=False
                )
                dm, dc, start = dm + a, dc + b, start + k
            return dm, dc

        return GaussianClosure(
            key=("multihead",) + tuple(cl.key for cl in closures),
            params=params,
            rhs=rhs,
            constant=all(cl.constant for cl in closures),
        )

    def growth_rate(self, t=0.0):
        return sum(h.growth_rate(t) for h in self.heads)

    def support_radius(self, T, R0, times):
        for i, h in enumerate(self.heads):
            if type(h).support_radius is not Attention.support_radius:
                raise NotImplementedError(
                    f"multi-head support radius: heads[{i}] ({h.name}) has no linear growth "
                    "bound |Gamma| <= c R (its supports grow faster), so the sum has none here"
                )
        return Attention.support_radius(self, T, R0, times)

    def log_lipschitz(self, R, t=0.0):
        logs = np.array([h.log_lipschitz(R, t) for h in self.heads])
        return tuple(np.logaddexp.reduce(logs, axis=0))

    def __repr__(self):
        flag = ", causal" if self.causal else ""
        return f"MultiHead(H={len(self.heads)}, d={self.d}{flag})"


class L2(Attention):
    r"""ℓ² (distance) attention.

    .. math::
        \Gamma_\mu(x) = V\,\frac{\int e^{-|Qx-Ky|^2/\tau}\,y\,\mathrm d\mu(y)}
                                {\int e^{-|Qx-Ky|^2/\tau}\,\mathrm d\mu(y)}

    The factor :math:`e^{-|Qx|^2/\tau}` cancels, so the logits are
    :math:`(2\langle Qx,Ky\rangle - |Ky|^2)/\tau`. The official code's version is ``tau=1`` with
    ``Q`` replaced by ``Q/sqrt(d)``.

    Parameters
    ----------
    Q, K : array_like (k, d) or callable
        Query and key matrices (same shape).
    V : array_like (d, d) or callable
    tau : float
        Temperature, > 0.
    causal : bool
        Masked attention.

    Examples
    --------
    With :math:`Q = K = V = I` the field is the kernel-weighted average of the tokens:

    >>> import numpy as np, tpde_lib as tp
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    >>> att = tp.L2(np.eye(2), np.eye(2), np.eye(2), tau=2.0)
    >>> P = np.exp(-((x[:, None] - x[None]) ** 2).sum(-1) / 2.0)
    >>> bool(np.allclose(att.velocity(x), (P / P.sum(1, keepdims=True)) @ x))
    True
    """

    def __init__(self, Q, K, V, tau=1.0, causal=False):
        self.Q, self.K = matrix_param("Q", Q), matrix_param("K", K)
        if self.Q.shape != self.K.shape:
            raise ValueError(
                f"Q and K must have the same shape (k, d), got {self.Q.shape} and {self.K.shape}"
            )
        self.d = self.Q.shape[1]
        self.V = square_param("V", V, self.d, what="Q and K")
        if isinstance(tau, (bool, np.bool_)) or not isinstance(tau, (int, float, np.number)):
            raise TypeError(f"tau must be a positive real number, got {tau!r}")
        if not (np.isfinite(tau) and tau > 0):
            raise ValueError(f"tau must be a finite positive number, got {tau!r}")
        self.tau = float(tau)
        self.causal = as_flag("causal", causal)

    def field(self, points, weights, positions, t):
        keys, w, k_pos = support(points, weights, positions)
        qx = times_transpose(points, self.Q(t)) * (2.0 / self.tau)  # (n, k)
        ky = times_transpose(keys, self.K(t))  # (m, k)
        queries = np.hstack([qx, np.ones((qx.shape[0], 1))])
        key_feats = np.hstack([ky, -(ky**2).sum(axis=1, keepdims=True) / self.tau])
        # the engine's private entry (its arrays are built here, valid), with the hold that
        # kernel_sums would take
        with held_blas(queries.shape[0] * key_feats.shape[0]):
            nd = engine_sums(queries, key_feats, weighted_values(keys, w), "softmax", positions, k_pos)
        return normalised(nd, self.V(t))

    def field_batch(self, points, weights, positions, t):
        """The field of a batch of clouds (B, n, d), stacked over the members as
        :meth:`Softmax.field_batch` is (bitwise each member's :meth:`field`)."""
        n = points.shape[1]
        if not (owns_field(self, L2) and batched.fits(n, n) and bool((weights > 0).all())):
            return Attention.field_batch(self, points, weights, positions, t)
        qx = batched.queries(points, self.Q(t)) * (2.0 / self.tau)
        ky = batched.queries(points, self.K(t))
        queries = np.concatenate([qx, np.ones(qx.shape[:2] + (1,))], axis=2)
        key_feats = np.concatenate([ky, -(ky**2).sum(axis=2, keepdims=True) / self.tau], axis=2)
        values = batched.weighted_values(points, weights)
        nd = batched.dense_sums(queries, key_feats, values, "softmax", positions, positions)
        return batched.normalised(nd, self.V(t))

    def gaussian_rhs(self, mean, cov, t=0.0):
        """ℓ² Gaussian closure (:func:`tpde_lib.gaussian.l2_rhs`)."""
        m, c = self.check_gaussian(mean, cov, t)
        return closures.l2_rhs(self.Q(t), self.K(t), self.V(t), self.tau, m, c)

    def batched_closure(self):
        tau = np.asarray(self.tau)
        return GaussianClosure(
            key=(closures.l2_rhs,),
            params=lambda t: (self.Q(t), self.K(t), self.V(t), tau),
            rhs=closures.l2_rhs,
            constant=not self.time_dependent,
        )

    def growth_rate(self, t=0.0):
        return _norm(self.V(t))

    def log_lipschitz(self, R, t=0.0):
        Q, K, tau = self.Q(t), self.K(t), self.tau
        v, q, k, R2 = _norm(self.V(t)), _norm(Q), _norm(K), R * R
        with np.errstate(divide="ignore"):
            return (
                np.log(2 / tau * v * _norm(K.T @ Q) * R2),
                np.log(v) + np.log1p(4 / tau * k * (q + k) * R2) + (q + k) ** 2 * R2 / tau,
            )
