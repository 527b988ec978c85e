r"""A Transformer layer as a sum of velocity fields: attention, feed-forward, normalisation.

A residual Transformer block adds to each token the output of its attention and of its
feed-forward (MLP) sub-layer; in the depth-as-time limit the tokens follow the sum of the two
fields (appendix, :eq:`eq-layer-field`),

.. math::
    \dot x_i = \Gamma_{\mu}(t, x_i) + F(t, x_i),

and with a normalisation (LayerNorm or RMSNorm without their gains, idealised as in the
"self-attention dynamics" models) the tokens live on the unit sphere and move with the
tangential part of that field, :math:`\dot x_i = P^\perp_{x_i}(\Gamma_\mu + F)(x_i)` with
:math:`P^\perp_x v = v - \langle x, v\rangle x` (:eq:`eq-sphere-dynamics`).

:class:`Layer` is an :class:`~tpde_lib.Attention` (the protocol of the library), so that
:func:`~tpde_lib.simulate`, :func:`~tpde_lib.affine_defect` and, for an affine feed-forward
without normalisation, :func:`~tpde_lib.simulate_gaussian` take it as they take any variant.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from ._checks import as_callable_of, as_choice, as_float_array, checked_result, unit_scale
from ._params import Param
from .attention import Attention, GaussianClosure
from .attention._base import owns_field

__all__ = ["Layer", "AffineFeedForward", "to_sphere", "tangent_projection"]


def to_sphere(points: ArrayLike) -> np.ndarray:
    r"""Each row divided by its Euclidean norm: the retraction onto the unit sphere.

    .. math:: x \mapsto x / |x|

    Parameters
    ----------
    points : array_like, shape (n, d)
        Finite rows, none of them zero.

    Returns
    -------
    ndarray, shape (n, d)

    Raises
    ------
    TypeError
        Not real numbers (strings, complex).
    ValueError
        A zero row (it has no direction), or a non-finite entry.

    Notes
    -----
    Each row is divided by a power of two near its largest entry first (exact), so that rows of
    size 1e200 or 1e-200 are normalised as well as rows of size 1.

    Examples
    --------
    >>> import tpde_lib as tp
    >>> tp.to_sphere([[3.0, 4.0], [0.0, -2.0]]).tolist()
    [[0.6, 0.8], [0.0, -1.0]]
    """
    x = as_float_array("points", points, ndim=2)
    out = _retract(x)
    bad = np.flatnonzero(~np.isfinite(out).all(axis=1))
    if bad.size:
        raise ValueError(f"points must have no zero row to be normalised (row {int(bad[0])})")
    return out


def _retract(x):
    """x / |x| row by row, each row first divided by a power of two near its largest entry (exact:
    1e200 does not overflow in the squares, nor 1e-200 underflow); a zero row gives NaN, a
    non-finite one NaN or inf (the integrator then reports the blow-up with its time)."""
    big = np.abs(x).max(axis=1)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        scale = np.ldexp(1.0, np.frexp(big)[1] - 1)  # [1, 2) after the division
        scale[~(big > 0) | ~np.isfinite(big)] = 1.0
        u = x / scale[:, None]
        norms = np.sqrt(np.einsum("ij,ij->i", u, u))
        return u / norms[:, None]


def tangent_projection(points: ArrayLike, vectors: ArrayLike) -> np.ndarray:
    r"""The part of each vector tangent to the sphere through its point (:eq:`eq-tangent-projection`).

    .. math:: P^\perp_x v = v - \frac{\langle x, v\rangle}{|x|^2}\,x

    (:math:`|x| = 1` on the sphere; the division keeps :math:`\langle x, P^\perp_x v\rangle = 0`
    exactly off it, so the norm of a token is a first integral of the projected ODE.)

    Parameters
    ----------
    points : array_like, shape (n, d)
        Non-zero rows.
    vectors : array_like, shape (n, d)
        The same shape as ``points`` (no broadcasting).

    Returns
    -------
    ndarray, shape (n, d)

    Raises
    ------
    TypeError
        Not real numbers.
    ValueError
        Shapes that differ, a zero point, non-finite entries, a result beyond float64.

    Examples
    --------
    >>> import tpde_lib as tp
    >>> tp.tangent_projection([[1.0, 0.0]], [[2.0, 3.0]]).tolist()
    [[0.0, 3.0]]
    """
    x = as_float_array("points", points, ndim=2)
    v = as_float_array("vectors", vectors, shape=x.shape)
    zero = np.flatnonzero(~np.any(x, axis=1))
    if zero.size:
        raise ValueError(f"points must have no zero row (no tangent space there), row {int(zero[0])} is zero")
    # the point's direction x / |x| (scaled: no overflow), then the vector's radial part; the
    # vectors scaled by a power of two near their largest entry, exact (no overflow)
    u = _retract(x)
    s = unit_scale(v)
    w = v / s
    with np.errstate(over="ignore"):
        out = (w - np.einsum("ij,ij->i", u, w)[:, None] * u) * s
    if not np.all(np.isfinite(out)):
        raise ValueError("tangent_projection of vectors exceeds float64")
    return out


def _tangent(x, v):
    """:func:`tangent_projection` without the checks (the layer's field on validated tokens)."""
    radial = np.einsum("ij,ij->i", x, v) / np.einsum("ij,ij->i", x, x)
    return v - radial[:, None] * x


class AffineFeedForward:
    r"""The affine feed-forward field :math:`F(t, x) = W(t)\,x + b(t)`.

    The feed-forward sub-layer of a Transformer block with its non-linearity removed (or
    linearised). Its Gaussian closure is (:eq:`eq-affine-ff-closure`)

    .. math:: (\alpha', \Sigma') = (W\alpha + b,\; W\Sigma + \Sigma W^\top).

    Parameters
    ----------
    W : array_like, shape (d, d), or callable ``t -> (d, d)``
    b : array_like, shape (d,), or callable ``t -> (d,)``, optional
        Default zero.

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> ff = tp.AffineFeedForward(2 * np.eye(2), [1.0, 0.0])
    >>> ff(np.array([[1.0, 1.0]]), 0.0).tolist()
    [[3.0, 2.0]]
    >>> [a.tolist() for a in ff.gaussian_rhs(np.zeros(2), np.eye(2))]
    [[1.0, 0.0], [[4.0, 0.0], [0.0, 4.0]]]
    """

    def __init__(self, W: ArrayLike | Callable[[float], ArrayLike], b: ArrayLike | None = None) -> None:
        self.W = Param("W", W, ndim=2)
        if self.W.shape[0] != self.W.shape[1]:
            raise ValueError(f"W must be a square (d, d) matrix, got shape {self.W.shape}")
        self.d = int(self.W.shape[0])
        self.b = Param("b", np.zeros(self.d) if b is None else b, ndim=1, shape=(self.d,))

    @property
    def time_dependent(self) -> bool:
        """True when ``W`` or ``b`` depends on ``t``."""
        return not (self.W.is_constant and self.b.is_constant)

    def __call__(self, points: np.ndarray, t: float = 0.0) -> np.ndarray:
        """The field at the points (n, d) -> (n, d): ``points @ W(t).T + b(t)``."""
        return points @ self.W(t).T + self.b(t)

    def gaussian_rhs(
        self, mean: np.ndarray, cov: np.ndarray, t: float = 0.0
    ) -> tuple[np.ndarray, np.ndarray]:
        r"""The feed-forward's part :math:`(W\alpha + b, W\Sigma + \Sigma W^\top)` of a closure."""
        W = self.W(t)
        WS = W @ cov
        return W @ mean + self.b(t), WS + WS.T

    def __repr__(self) -> str:
        return f"AffineFeedForward(d={self.d})"


class Layer(Attention):
    r"""A Transformer layer: attention plus feed-forward, optionally on the unit sphere.

    .. math::
        V_\mu(t, x) = \Gamma_\mu(t, x) + F(t, x)
        \quad\text{or, with ``normalisation="sphere"``,}\quad
        V_\mu(t, x) = P^\perp_x\big(\Gamma_\mu(t, x) + F(t, x)\big)

    (:eq:`eq-layer-field`, :eq:`eq-sphere-dynamics`). On the sphere, :func:`tpde_lib.simulate`
    integrates the projected field and maps the tokens back onto the sphere after every step
    (the layer's :meth:`normalise`); the initial tokens must be unit vectors.

    Parameters
    ----------
    attention : Attention
        Any variant (causal too); its field is the attention part.
    feedforward : AffineFeedForward or callable, optional
        A callable ``(points (n, d), t) -> (n, d)``; None for attention alone. Its result is
        checked (real, shape (n, d)) where it comes back.
    normalisation : {None, "sphere"}
        ``"sphere"``: tokens on the unit sphere, the field projected on its tangent spaces.

    Attributes
    ----------
    normalise : callable or None
        :func:`to_sphere` on the sphere, None otherwise: what :func:`~tpde_lib.simulate` applies
        after each step (without its checks: non-finite tokens pass through, so that the
        integrator reports a blow-up with its time).

    Notes
    -----
    The Gaussian closure (:meth:`gaussian_rhs`) exists without normalisation when the attention
    has one and the feed-forward is an :class:`AffineFeedForward`: it is the attention's closure
    plus :math:`(W\alpha + b, W\Sigma + \Sigma W^\top)` (:eq:`eq-affine-ff-closure`).

    Examples
    --------
    Tokens on the circle with :math:`Q = K = V = I` (the self-attention model on the sphere):

    >>> import numpy as np, tpde_lib as tp
    >>> layer = tp.Layer(tp.Softmax(np.eye(2), np.eye(2)), normalisation="sphere")
    >>> x0 = tp.to_sphere(np.array([[1.0, 0.2], [0.3, 1.0], [-0.2, 1.0]]))
    >>> traj = tp.simulate(layer, x0, [0.0, 5.0], h=0.05)
    >>> bool(np.abs(np.linalg.norm(traj.points[-1], axis=1) - 1).max() < 1e-15)
    True
    >>> float(np.linalg.norm(traj.points[-1] - traj.points[-1][0], axis=1).max()) < 0.05
    True

    Attention plus an affine feed-forward keeps Gaussians Gaussian:

    >>> g = tp.Gaussian([0.1, 0.0], [[1.0, 0.2], [0.2, 0.5]])
    >>> mlp = tp.AffineFeedForward([[0.0, -1.0], [1.0, 0.0]], [0.5, 0.0])
    >>> bool(tp.affine_defect(tp.Layer(tp.Softmax(np.eye(2), np.eye(2)), mlp), g) < 1e-10)
    True
    """

    def __init__(
        self,
        attention: Attention,
        feedforward: AffineFeedForward | Callable[[np.ndarray, float], ArrayLike] | None = None,
        normalisation: str | None = None,
    ) -> None:
        if not isinstance(attention, Attention):
            raise TypeError(f"attention must be a tpde_lib Attention, got {type(attention).__name__}")
        d = getattr(attention, "d", None)
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 1:
            raise TypeError(f"attention must set d, its token dimension (a positive int), got {d!r}")
        if feedforward is not None and not callable(feedforward):
            raise TypeError(
                "feedforward must be an AffineFeedForward or a callable (points, t) -> (n, d), "
                f"got {type(feedforward).__name__}"
            )
        if feedforward is not None and not isinstance(feedforward, AffineFeedForward):
            as_callable_of("feedforward", feedforward, "(points, t)", np.zeros((1, int(d))), 0.0)
        if isinstance(feedforward, AffineFeedForward) and feedforward.d != d:
            raise ValueError(f"feedforward acts on dimension {feedforward.d}, the attention on d={d}")
        if normalisation is not None:
            normalisation = as_choice("normalisation", normalisation, ("sphere",))
        self.attention = attention
        self.feedforward = feedforward
        self.normalisation = normalisation
        self.normalise = _retract if normalisation == "sphere" else None
        self.d = int(d)
        self.causal = attention.causal

    @property
    def time_dependent(self) -> bool:
        ff = self.feedforward
        return self.attention.time_dependent or bool(getattr(ff, "time_dependent", ff is not None))

    def field(self, points, weights, positions, t):
        out = self.attention.field(points, weights, positions, t)
        return self._completed(points, _checked(out, points.shape, t, "attention.field"), t)

    def _completed(self, points, out, t):
        """The layer's field from its attention's field ``out`` (n, d) at ``points``: plus the
        feed-forward, then the tangent projection on the sphere (the rest of :meth:`field`,
        which a run's prepared field shares)."""
        shape = points.shape
        if self.feedforward is not None:
            ff = _checked(self.feedforward(points, t), shape, t, "feedforward")
            if not isinstance(self.feedforward, AffineFeedForward) and np.isnan(ff).any():
                # a reader's callable returned NaN at finite tokens: its error, not a blow-up of
                # the tokens (an AffineFeedForward's NaN can only come from an overflow: inf - inf)
                raise ValueError(
                    f"Layer's feedforward returned NaN at t={t:g} for finite tokens; expected "
                    "real numbers (inf is reported as a blow-up, NaN is not)"
                )
            out = out + ff
        if self.normalisation == "sphere":
            out = _tangent(points, out)
        return out

    def _prepared_field(self, weights, positions):
        """:meth:`field` for a whole run (:meth:`Attention._prepared_field`): the attention's
        prepared field, completed as :meth:`field` completes it; None when the attention has
        none."""
        if not owns_field(self, Layer):
            return None
        attention = self.attention._prepared_field(weights, positions)
        if attention is None:
            return None

        def field(points, t):
            return self._completed(points, attention(points, t), t)

        return field

    def field_batch(self, points, weights, positions, t):
        """The field of a batch of clouds (B, n, d): the attention's ``field_batch``, plus an
        :class:`AffineFeedForward` and the tangent projection member by member in one stacked
        computation each (bitwise each member's :meth:`field`); member by member with a
        reader's feed-forward or for a subclass with a field of its own."""
        ff = self.feedforward
        if not owns_field(self, Layer) or not (ff is None or isinstance(ff, AffineFeedForward)):
            return Attention.field_batch(self, points, weights, positions, t)
        shape = points.shape
        out = self.attention.field_batch(points, weights, positions, t)
        out = _checked(out, shape, t, "attention.field_batch")
        if ff is not None:
            out = out + (np.matmul(points, ff.W(t).T) + ff.b(t))
        if self.normalisation == "sphere":  # row by row: each member's rows as alone
            out = _tangent(points.reshape(-1, shape[2]), out.reshape(-1, shape[2])).reshape(shape)
        return out

    @property
    def stateful(self) -> bool:
        """Whether the attention keeps state between calls (Sinkhorn attention)."""
        return bool(getattr(self.attention, "stateful", False))

    @property
    def normalise_batch(self) -> Callable[[np.ndarray], np.ndarray] | None:
        """``normalise`` of every member of a batch (B, n, d) at once, bitwise each member's
        (the sphere's retraction acts row by row); None without a normalisation, or when
        ``normalise`` was replaced by another map (:func:`tpde_lib.simulate_batch` then
        simulates the members one after the other).

        Examples
        --------
        >>> import numpy as np, tpde_lib as tp
        >>> layer = tp.Layer(tp.Softmax(np.eye(2), np.eye(2)), normalisation="sphere")
        >>> layer.normalise_batch(np.array([[[3.0, 4.0], [0.0, 2.0]]])).tolist()
        [[[0.6, 0.8], [0.0, 1.0]]]
        """
        if self.normalise is not _retract:
            return None

        def retract_all(points):
            return _retract(points.reshape(-1, points.shape[2])).reshape(points.shape)

        return retract_all

    def _affine_feedforward(self):
        """The feed-forward, which a Gaussian closure needs affine (or None), off the sphere."""
        if self.normalisation is not None:
            raise NotImplementedError("a Layer on the sphere has no Gaussian closure")
        ff = self.feedforward
        if ff is not None and not isinstance(ff, AffineFeedForward):
            raise NotImplementedError(
                f"the feed-forward {type(ff).__name__} is not an AffineFeedForward: no Gaussian closure"
            )
        return ff

    def gaussian_rhs(self, mean, cov, t=0.0):
        r"""The closure: the attention's plus :math:`(W\alpha + b, W\Sigma + \Sigma W^\top)`.

        Raises ``NotImplementedError`` on the sphere (a Gaussian does not live there), for a
        feed-forward that is not an :class:`AffineFeedForward`, or an attention without closure.
        """
        ff = self._affine_feedforward()
        m, c = self.check_gaussian(mean, cov, t)
        dm, dc = self.attention.gaussian_rhs(m, c, t)
        dm = as_float_array("attention.gaussian_rhs mean", dm, shape=(self.d,))
        dc = as_float_array("attention.gaussian_rhs cov", dc, shape=(self.d, self.d))
        if ff is None:
            return dm, dc
        fm, fc = ff.gaussian_rhs(m, c, t)
        return dm + fm, dc + fc

    def batched_closure(self) -> GaussianClosure:
        """The closure vectorised over a batch: the attention's batched closure plus the affine
        feed-forward's part (``NotImplementedError`` when :meth:`gaussian_rhs` has none, or the
        attention has no batched closure)."""
        ff = self._affine_feedforward()
        inner = self.attention.batched_closure()
        if ff is None:
            return inner

        def params(t):
            return (*inner.params(t), ff.W(t), ff.b(t))

        def rhs(*args):
            *att_params, W, b, mean, cov = args
            dm, dc = inner.rhs(*att_params, mean, cov)
            WS = W @ cov
            return dm + (W @ mean[..., None])[..., 0] + b, dc + WS + np.swapaxes(WS, -1, -2)

        constant = inner.constant and not ff.time_dependent
        return GaussianClosure(("Layer", inner.key, "affine"), params, rhs, constant)

    def __repr__(self):
        ff = "" if self.feedforward is None else f", feedforward={self.feedforward!r}"
        norm = "" if self.normalisation is None else f", normalisation={self.normalisation!r}"
        return f"Layer({self.attention!r}{ff}{norm})"


def _checked(value, shape, t, what):
    return checked_result(f"Layer's {what}", value, shape, when=f" at t={t:g}", finite=False)
