r"""Variants whose score is the bilinear form :math:`\langle Ax, y\rangle = y^\top A x`.

Softmax, unnormalised exponential, sigmoid and linear attention. Each class holds its field,
its Gaussian closure where Gaussians are preserved, its stability constants and (softmax,
unnormalised) its gradient-flow mobility. The constants are derived in the docstring of
:mod:`tpde_lib.stability` (:math:`a = \|A\|`, :math:`v = \|V\|`, spectral norms).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from .. import _closures as closures  # the Gaussian closures' right-hand sides
from .._checks import as_flag
from .._threads import held_blas
from . import _batched as batched
from ._base import Attention, GaussianClosure, MatrixLike, matrix_param, owns_field, square_param
from ._kernels import engine_sums, normalised, support, times_transpose, weighted_values


def _norm(M):
    return float(np.linalg.norm(M, 2))


def _symmetric_mobility(A, V, sign):
    """``sign * V A^{-1}``, symmetrised; ValueError when there is no such gradient structure."""
    scale = max(np.abs(A).max(), np.finfo(float).tiny)
    if np.abs(A - A.T).max() > 1e-12 * scale:
        raise ValueError(
            "A must be symmetric for the gradient-flow structure (energy first "
            "variation uses a symmetric kernel)"
        )
    if np.linalg.cond(A) > 1e12:
        raise ValueError("A must be invertible to define the mobility V A^{-1}")
    P = sign * np.linalg.solve(A.T, V.T).T  # V A^{-1}
    pscale = max(np.abs(P).max(), np.finfo(float).tiny)
    if np.abs(P - P.T).max() > 1e-9 * pscale:
        raise ValueError("the mobility V A^{-1} is not symmetric: choose V = P A (or -P A) with P symmetric")
    return 0.5 * (P + P.T)


def _stackable(att, cls, points, weights):
    """Whether the field of ``att`` on a batch can be stacked over its members: the field is
    ``cls``'s own (not a subclass's), each member is one dense matrix of the engine and every
    weight is positive (each member's keys are all its tokens)."""
    n = points.shape[1]
    return owns_field(att, cls) and batched.fits(n, n) and bool((weights > 0).all())


class _Bilinear(Attention):
    """Parameters A (d, d) and V (d, d); the score of query x and key y is <A x, y> = y^T A x."""

    def __init__(self, A: MatrixLike, V: MatrixLike, causal: bool = False) -> None:
        self.A = square_param("A", A)
        self.d = self.A.shape[0]
        self.V = square_param("V", V, self.d)
        self.causal = as_flag("causal", causal)

    def queries(self, points, t):
        """Rows A x_i, shape (n, d): the scores are (points @ A.T) @ points.T."""
        return times_transpose(points, self.A(t))

    def _closure(self, rhs):
        return GaussianClosure(
            key=(rhs,), params=lambda t: (self.A(t), self.V(t)), rhs=rhs, constant=not self.time_dependent
        )


class Softmax(_Bilinear):
    r"""Softmax self-attention.

    .. math::
        \Gamma_\mu(x) = V\,\frac{\int e^{\langle Ax,y\rangle}\,y\,\mathrm d\mu(y)}
                                {\int e^{\langle Ax,y\rangle}\,\mathrm d\mu(y)}

    For an empirical measure the integrals are :math:`\sum_j w_j(\cdot)`. Masked (causal) attention
    restricts both integrals to keys at positions :math:`s' \le s` of the query.

    Parameters
    ----------
    A : array_like (d, d) or callable t -> (d, d)
        Score matrix, :math:`A = K^\top Q/\sqrt k` (an inverse temperature multiplies it).
    V : array_like (d, d) or callable
        Value (times output) matrix.
    causal : bool
        Masked attention: token at position s attends to positions s' <= s (itself included).

    Examples
    --------
    Two tokens of equal mass; the second sees scores 0 and 1, so it averages the tokens with
    weights :math:`1/(1+e)` and :math:`e/(1+e)`:

    >>> import numpy as np, tpde_lib as tp
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0]])
    >>> v = tp.Softmax(np.eye(2), np.eye(2)).velocity(x)
    >>> np.allclose(v, [[0.5, 0.0], [np.e / (1 + np.e), 0.0]])
    True

    Masked: the first token sees only itself.

    >>> mu = tp.Empirical(x, positions=[0.0, 1.0])
    >>> tp.Softmax(np.eye(2), np.eye(2), causal=True).velocity(mu)[0].tolist()
    [0.0, 0.0]
    """

    @classmethod
    def from_qk(cls, Q: MatrixLike, K: MatrixLike, V: MatrixLike, causal: bool = False) -> Softmax:
        r"""Build from query/key matrices :math:`Q, K\in\mathbb R^{k\times d}`: :math:`A = K^\top Q/\sqrt k`.

        ``Q`` and ``K`` may be arrays or callables of ``t``; ``k = Q.shape[0] >= 1``.
        """
        q, k = matrix_param("Q", Q), matrix_param("K", K)
        if q.shape != k.shape:
            raise ValueError(f"Q and K must have the same shape (k, d), got {q.shape} and {k.shape}")
        if q.shape[0] < 1 or q.shape[1] < 1:
            raise ValueError(f"Q and K must have shape (k, d) with k, d >= 1, got {q.shape}")
        scale = 1.0 / math.sqrt(q.shape[0])
        if q.is_constant and k.is_constant:
            A = k().T @ q() * scale
        else:

            def A(t):
                return k(t).T @ q(t) * scale

        return cls(A, V, causal=causal)

    def field(
        self, points: np.ndarray, weights: np.ndarray, positions: np.ndarray | None, t: float
    ) -> np.ndarray:
        return self._summed_field([self], points, weights, positions, t)

    @staticmethod
    def _summed_field(heads, points, weights, positions, t):
        r"""The sum of the fields of one or several softmax heads (a multi-head layer), shape
        (n, d).

        The heads share their keys and values, so their queries, stacked into one (H n, d)
        array, go through one call of the kernel engine: one set-up and one hand-over to the
        threads instead of H (measured: two heads, n = 1000, d = 16, 2.1 against 2.5 ms).
        """
        keys, w, k_pos = support(points, weights, positions)
        with held_blas(len(heads) * points.shape[0] * keys.shape[0]):  # BLAS on one thread
            return Softmax._heads_field(heads, points, keys, weighted_values(keys, w), positions, k_pos, t)

    @staticmethod
    def _heads_field(heads, points, keys, values, positions, k_pos, t):
        """:meth:`_summed_field` from the keys of positive mass (m, d), their weighted values
        ``[w y | w]`` (m, d + 1) and positions (m,) or None: the body that a run's prepared
        field (:meth:`_prepared_field`) shares."""
        n = points.shape[0]
        queries = [h.queries(points, t) for h in heads]
        queries = queries[0] if len(heads) == 1 else np.concatenate(queries)  # no copy of one
        q_pos = None if positions is None else np.tile(positions, len(heads))
        nd = engine_sums(queries, keys, values, "softmax", q_pos, k_pos)
        out = normalised(nd[:n], heads[0].V(t))
        for i, h in enumerate(heads[1:], start=1):
            out += normalised(nd[i * n : (i + 1) * n], h.V(t))
        return out

    def field_batch(
        self, points: np.ndarray, weights: np.ndarray, positions: np.ndarray | None, t: float
    ) -> np.ndarray:
        """The field of a batch of clouds (B, n, d), all members at once when each is one dense
        matrix of the engine and every weight is positive (stacked over the batch: bitwise each
        member's :meth:`field`); member by member otherwise, and for a subclass with a field of
        its own."""
        if owns_field(self, Softmax):
            return Softmax._summed_field_batch(self, [self], points, weights, positions, t)
        return Attention.field_batch(self, points, weights, positions, t)

    @staticmethod
    def _summed_field_batch(att, heads, points, weights, positions, t):
        """The summed field of softmax ``heads`` on a batch, stacked when each member fits the
        engine's dense path (bitwise each member's ``_summed_field``), else member by member
        through ``att.field``."""
        n = points.shape[1]
        if batched.fits(len(heads) * n, n) and (weights > 0).all():
            return batched.softmax_heads_field(heads, points, weights, positions, t)
        return Attention.field_batch(att, points, weights, positions, t)

    def _prepared_field(self, weights, positions):
        """:meth:`field` for a whole run (:meth:`Attention._prepared_field`) of a cloud whose
        weights are all positive and whose scores are one dense matrix: the body of
        :meth:`_summed_field` for one head, without finding the support of the weights or
        holding BLAS (which a call of at most ``_SMALL_ENTRIES`` scores does not do)."""
        n = weights.shape[0]
        if not (owns_field(self, Softmax) and batched.fits(n, n) and (weights > 0).all()):
            return None
        heads = [self]

        def field(points, t):
            values = weighted_values(points, weights)
            return Softmax._heads_field(heads, points, points, values, positions, positions, t)

        return field

    def gaussian_rhs(self, mean: ArrayLike, cov: ArrayLike, t: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        r"""Softmax Gaussian closure :math:`\Sigma' = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top`
        (:func:`tpde_lib.gaussian.softmax_rhs`). Returns ``(dmean (d,), dcov (d, d))``."""
        m, c = self.check_gaussian(mean, cov, t)
        return closures.softmax_rhs(self.A(t), self.V(t), m, c)

    def batched_closure(self) -> GaussianClosure:
        return self._closure(closures.softmax_rhs)

    def growth_rate(self, t: float = 0.0) -> float:
        return _norm(self.V(t))

    def log_lipschitz(self, R: float, t: float = 0.0) -> tuple[float, float]:
        v, a, R2 = _norm(self.V(t)), _norm(self.A(t)), R * R
        with np.errstate(divide="ignore"):
            return np.log(v * a * R2), np.log(v) + np.log1p(2 * a * R2) + 2 * a * R2

    def mobility(self, t: float = 0.0) -> np.ndarray:
        r"""Mobility :math:`P = -VA^{-1}` (the energy :math:`E` of unnormalised attention, with the
        extra factor :math:`1/Z_\mu(x)`); ``A`` symmetric invertible, ``P`` symmetric."""
        return _symmetric_mobility(self.A(t), self.V(t), -1.0)


class Unnormalised(_Bilinear):
    r"""Unnormalised exponential attention, the reference model.

    .. math:: \Gamma_\mu(x) = \int e^{\langle Ax,y\rangle}\,Vy\,\mathrm d\mu(y)

    Computed as :math:`e^{M_i}\sum_j w_j e^{S_{ij}-M_i} V y_j` with the row maximum :math:`M_i`,
    so it overflows (``FloatingPointError``) only when the field itself exceeds float range.

    Parameters
    ----------
    A, V : array_like (d, d) or callable t -> (d, d)
    causal : bool

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0]])
    >>> v = tp.Unnormalised(np.eye(2), np.eye(2)).velocity(x)    # (e^0 x_0 + e^1 x_1) / 2
    >>> np.allclose(v[1], [np.e / 2, 0.0])
    True
    """

    def field(
        self, points: np.ndarray, weights: np.ndarray, positions: np.ndarray | None, t: float
    ) -> np.ndarray:
        keys, w, k_pos = support(points, weights, positions)
        with held_blas(points.shape[0] * keys.shape[0]):
            s, row_max = engine_sums(
                self.queries(points, t), keys, keys * w[:, None], "exp", positions, k_pos
            )
            with np.errstate(over="ignore", invalid="ignore"):
                return times_transpose(s * np.exp(row_max)[:, None], self.V(t))

    def field_batch(
        self, points: np.ndarray, weights: np.ndarray, positions: np.ndarray | None, t: float
    ) -> np.ndarray:
        """The field of a batch of clouds (B, n, d), stacked over the members as
        :meth:`Softmax.field_batch` is (bitwise each member's :meth:`field`)."""
        if not _stackable(self, Unnormalised, points, weights):
            return Attention.field_batch(self, points, weights, positions, t)
        values = points * weights[:, :, None]
        qa = batched.queries(points, self.A(t))
        s, row_max = batched.dense_sums(qa, points, values, "exp", positions, positions)
        with np.errstate(over="ignore", invalid="ignore"):
            return batched.queries(s * np.exp(row_max)[:, :, None], self.V(t))

    def mobility(self, t: float = 0.0) -> np.ndarray:
        r"""Mobility :math:`P = -VA^{-1}` of the interaction energy
        (:func:`tpde_lib.energy.interaction_energy`)."""
        return _symmetric_mobility(self.A(t), self.V(t), -1.0)


class Sigmoid(_Bilinear):
    r"""Sigmoid attention, with a fixed bias and no normalisation.

    .. math:: \Gamma_\mu(x) = \int \sigma(\langle Ax,y\rangle + b)\, V y\,\mathrm d\mu(y),
              \qquad \sigma(s) = 1/(1+e^{-s})

    Parameters
    ----------
    A, V : array_like (d, d) or callable
    bias : float
        The bias b (Ramapuram et al. recommend :math:`-\log n` for the unscaled sum).
    causal : bool

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0]])
    >>> v = tp.Sigmoid(np.eye(2), np.eye(2)).velocity(x)     # (sigma(0) x_0 + sigma(0) x_1) / 2
    >>> np.allclose(v[0], [0.25, 0.0])
    True
    """

    def __init__(self, A: MatrixLike, V: MatrixLike, bias: float = 0.0, causal: bool = False) -> None:
        super().__init__(A, V, causal)
        if isinstance(bias, (bool, np.bool_)) or not isinstance(bias, (int, float, np.number)):
            raise TypeError(f"bias must be a real number, got {bias!r}")
        self.bias = float(bias)
        if not np.isfinite(self.bias):
            raise ValueError(f"bias must be finite, got {bias!r}")

    def field(
        self, points: np.ndarray, weights: np.ndarray, positions: np.ndarray | None, t: float
    ) -> np.ndarray:
        keys, w, k_pos = support(points, weights, positions)
        with held_blas(points.shape[0] * keys.shape[0]):
            qa = self.queries(points, t)
            queries = np.hstack([qa, np.ones((qa.shape[0], 1))])
            key_feats = np.hstack([keys, np.full((keys.shape[0], 1), self.bias)])
            s = engine_sums(queries, key_feats, keys * w[:, None], "sigmoid", positions, k_pos)
            return times_transpose(s, self.V(t))

    def field_batch(
        self, points: np.ndarray, weights: np.ndarray, positions: np.ndarray | None, t: float
    ) -> np.ndarray:
        """The field of a batch of clouds (B, n, d), stacked over the members as
        :meth:`Softmax.field_batch` is (bitwise each member's :meth:`field`)."""
        if not _stackable(self, Sigmoid, points, weights):
            return Attention.field_batch(self, points, weights, positions, t)
        B, n, _ = points.shape
        qa = batched.queries(points, self.A(t))
        queries = np.concatenate([qa, np.ones((B, n, 1))], axis=2)
        key_feats = np.concatenate([points, np.full((B, n, 1), self.bias)], axis=2)
        values = points * weights[:, :, None]
        s = batched.dense_sums(queries, key_feats, values, "sigmoid", positions, positions)
        return batched.queries(s, self.V(t))

    def gaussian_rhs(self, mean: ArrayLike, cov: ArrayLike, t: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Not available: the field of a Gaussian is not affine in x (see
        :func:`tpde_lib.affine_defect`)."""
        raise NotImplementedError("Sigmoid attention does not preserve Gaussians: no mean/covariance ODE")

    def growth_rate(self, t: float = 0.0) -> float:
        return _norm(self.V(t))

    def log_lipschitz(self, R: float, t: float = 0.0) -> tuple[float, float]:
        v, a, R2 = _norm(self.V(t)), _norm(self.A(t)), R * R
        with np.errstate(divide="ignore"):
            return np.log(v * a * R2 / 4), np.log(v) + np.log1p(a * R2 / 4)


class Linear(_Bilinear):
    r"""Linear attention.

    .. math:: \Gamma_\mu(x) = \int\langle Ax,y\rangle\,Vy\,\mathrm d\mu(y)
              = V\Big(\int y y^\top\mathrm d\mu\Big) A x

    Evaluated through the second-moment matrix, :math:`O(n d^2)`; causal attention uses its
    running sums over positions.

    Parameters
    ----------
    A, V : array_like (d, d) or callable t -> (d, d)
    causal : bool

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0]])
    >>> tp.Linear(np.eye(2), np.eye(2)).velocity(x).tolist()     # (<x_i, x_1> x_1) / 2
    [[0.0, 0.0], [0.5, 0.0]]
    """

    def field(
        self, points: np.ndarray, weights: np.ndarray, positions: np.ndarray | None, t: float
    ) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # overflow reported by velocity()
            return self._moments_field(points, weights, positions, t)

    def _moments_field(self, points, weights, positions, t):
        qa = self.queries(points, t)  # rows A x_i
        wy = points * weights[:, None]
        if positions is None:
            return qa @ (points.T @ wy) @ self.V(t).T  # rows (sum_j w_j y_j y_j^T) A x_i
        order = np.argsort(positions, kind="stable")
        s_sorted = positions[order]
        # cumulative second moments over keys sorted by position; ties: take the last equal one
        outer = wy[order][:, :, None] * points[order][:, None, :]
        cum = np.cumsum(outer, axis=0)
        last = np.searchsorted(s_sorted, positions, side="right") - 1
        moments = cum[last]  # (n, d, d), symmetric
        return np.einsum("nij,nj->ni", moments, qa) @ self.V(t).T

    def field_batch(
        self, points: np.ndarray, weights: np.ndarray, positions: np.ndarray | None, t: float
    ) -> np.ndarray:
        """The field of a batch of clouds (B, n, d), stacked over the members without a mask
        (bitwise each member's :meth:`field`); member by member with one."""
        if positions is not None or not owns_field(self, Linear):
            return Attention.field_batch(self, points, weights, positions, t)
        qa = batched.queries(points, self.A(t))
        wy = points * weights[:, :, None]
        with np.errstate(over="ignore", invalid="ignore"):  # overflow reported by the caller
            return qa @ (points.transpose(0, 2, 1) @ wy) @ self.V(t).T

    def gaussian_rhs(self, mean: ArrayLike, cov: ArrayLike, t: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Linear Gaussian closure (:func:`tpde_lib.gaussian.linear_rhs`)."""
        m, c = self.check_gaussian(mean, cov, t)
        return closures.linear_rhs(self.A(t), self.V(t), m, c)

    def batched_closure(self) -> GaussianClosure:
        return self._closure(closures.linear_rhs)

    def growth_rate(self, t: float = 0.0) -> float:
        r"""The coefficient :math:`\|V\|\|A\|` of :math:`|\Gamma_\mu(x)| \le \|V\|\|A\|R^3` (cubic)."""
        return _norm(self.V(t)) * _norm(self.A(t))

    def support_radius(self, T: float, R0: float, times: ArrayLike) -> float:
        r""":math:`R(T) = R_0(1 - 2 c R_0^2 T)^{-1/2}` from :math:`R' = cR^3`; ValueError past its
        blow-up time :math:`1/(2cR_0^2)`."""
        rate = max(self.growth_rate(float(t)) for t in times)
        blowup = np.inf if rate == 0 else 1.0 / (2.0 * rate * R0**2)
        if T >= blowup:
            raise ValueError(
                f"the support bound of linear attention blows up at "
                f"t* = {blowup:.6g} <= T = {T:g} (R0 = {R0:g})"
            )
        return R0 / np.sqrt(1.0 - T / blowup)

    def log_lipschitz(self, R: float, t: float = 0.0) -> tuple[float, float]:
        v, a, R2 = _norm(self.V(t)), _norm(self.A(t)), R * R
        with np.errstate(divide="ignore"):
            return np.log(v * a * R2), np.log(2 * v * a * R2)
