r"""Attention variants as velocity fields of the Transformer PDE (paper notes §1–§2).

A sequence of tokens is a measure :math:`\mu` on :math:`\mathbb R^d` and one attention layer is
the velocity field :math:`\Gamma_\mu`, so that depth is time in

.. math::
    \partial_t \mu + \nabla\cdot(\mu\,\Gamma_\mu) = 0 .

Conventions (paper notes §1.2): tokens are rows of an ``(n, d)`` array; the score of a query
:math:`x` against a key :math:`y` is :math:`\langle Ax, y\rangle = y^\top A x` with
:math:`A = K^\top Q/\sqrt k` when built from query/key matrices :math:`Q, K\in\mathbb R^{k\times d}`;
:math:`V\in\mathbb R^{d\times d}` merges the value and output matrices. Every matrix may be a
constant array or a callable ``t -> array`` (layer-dependent weights, :class:`~tpde_lib._params.Param`).

Each variant is a small class with ``velocity(mu, t)`` (the field at the points of an
:class:`~tpde_lib.measures.Empirical`, using its weights) and, where Gaussians are preserved,
``gaussian_rhs(mean, cov, t)``. The shared machinery lives once, in :func:`_kernel_sums`:
interactions are evaluated in blocks of query rows (memory :math:`O(n\,b)`, a block is at most
``_BLOCK_ENTRIES`` numbers, i.e. 32 MB), with exponentials stabilised by row maxima.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.special import expit

from ._checks import as_float_array, as_positive
from ._params import Param
from .measures import Empirical

__all__ = ["Softmax", "MultiHead", "L2", "Sinkhorn", "Sigmoid", "Linear", "Unnormalised"]

#: numbers in one block of interactions (4e6 float64 = 32 MB): block rows b = max(1, this // n)
_BLOCK_ENTRIES = 4_000_000


# --------------------------------------------------------------------------------------------
# shared machinery
# --------------------------------------------------------------------------------------------

def _kernel_sums(queries, keys, values, kind, q_pos=None, k_pos=None):
    r"""Blocked kernel sums :math:`\sum_j \kappa(S_{ij})\, \mathrm{values}_j` with :math:`S = QK^\top`.

    Parameters
    ----------
    queries : ndarray, shape (n, p)
        Query features; the score matrix is ``S = queries @ keys.T`` (biases enter as an extra
        column of ones in ``queries`` and a bias column in ``keys``).
    keys : ndarray, shape (m, p)
    values : ndarray, shape (m, c)
        What is summed (typically ``[w_j y_j | w_j]``, numerator and denominator in one matmul).
    kind : {"softmax", "exp", "sigmoid"}
        ``"softmax"``: returns :math:`\sum_j e^{S_{ij}-M_i}\mathrm{values}_j` with the row maximum
        :math:`M_i` (the caller divides numerator by denominator, so :math:`M_i` cancels);
        ``"exp"``: same sum and also :math:`M_i`, so that the unscaled sum is
        :math:`e^{M_i}` times it; ``"sigmoid"``: :math:`\sum_j \sigma(S_{ij})\mathrm{values}_j`.
    q_pos, k_pos : ndarray, shape (n,) and (m,), optional
        Sequence positions; when given, query ``i`` only sees keys with ``k_pos[j] <= q_pos[i]``
        (masked attention, paper notes §2.8).

    Returns
    -------
    sums : ndarray, shape (n, c)
    row_max : ndarray, shape (n,) (only for ``kind="exp"``)
    """
    n, m = queries.shape[0], keys.shape[0]
    out = np.empty((n, values.shape[1]))
    row_max = np.empty(n)
    b = min(n, max(1, _BLOCK_ENTRIES // max(m, 1)))
    keys_t = np.ascontiguousarray(keys.T)
    buf = np.empty((b, m))   # one buffer reused by every block: no page faults per block
    for start in range(0, n, b):
        stop = min(n, start + b)
        S = buf[: stop - start]
        np.matmul(queries[start:stop], keys_t, out=S)      # (b, m) scores
        if q_pos is not None:
            np.copyto(S, -np.inf, where=k_pos[None, :] > q_pos[start:stop, None])
        if kind == "sigmoid":
            expit(S, out=S)
        else:
            M = np.max(S, axis=1, out=row_max[start:stop])
            S -= M[:, None]
            np.exp(S, out=S)
        np.matmul(S, values, out=out[start:stop])
    return (out, row_max) if kind == "exp" else out


def _weighted_values(points, weights):
    """``[w_j y_j | w_j]``, shape (m, d + 1): numerator and denominator of a normalised average."""
    return np.hstack([points * weights[:, None], weights[:, None]])


def _support(points, weights, positions):
    """Keys of positive mass: (points (m, d), weights (m,), positions (m,) or None)."""
    keep = weights > 0
    if keep.all():
        return points, weights, positions
    return points[keep], weights[keep], None if positions is None else positions[keep]


def _as_measure(mu):
    if isinstance(mu, Empirical):
        return mu
    if isinstance(mu, np.ndarray):
        return Empirical(mu)
    raise TypeError(f"mu must be an Empirical measure (or an (n, d) array), got {type(mu).__name__}")


def _matrix_param(name, value, shape=None):
    return Param(name, value, ndim=2, shape=shape)


def _square_param(name, value, d=None):
    p = _matrix_param(name, value)
    if p.shape[0] != p.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {p.shape}")
    if d is not None and p.shape[0] != d:
        raise ValueError(f"{name} must have shape ({d}, {d}) to match A, got {p.shape}")
    return p


class _Attention:
    """Base class: validation of the measure, causal bookkeeping, finiteness, Gaussian hook.

    Subclasses set ``name`` and ``d`` and implement ``_velocity(points, weights, positions, t)``
    (masked attention: ``positions`` is None unless ``self.causal``).
    """

    name = "attention"
    causal = False

    def velocity(self, mu, t=0.0):
        r"""The velocity field :math:`\Gamma_{\mu}(t, x_i)` at every point of ``mu``.

        Parameters
        ----------
        mu : Empirical
            Points (n, d), weights (n,) (the measure's masses), positions (n,) for causal
            attention.
        t : float
            Time (depth), used by time-dependent parameters.

        Returns
        -------
        ndarray, shape (n, d)

        Raises
        ------
        ValueError
            ``mu`` of the wrong dimension; causal attention without ``mu.positions``.
        FloatingPointError
            The field overflowed (e.g. unnormalised attention at large scores).
        """
        mu = _as_measure(mu)
        if mu.d != self.d:
            raise ValueError(f"mu has dimension {mu.d} but the {self.name} parameters act on "
                             f"dimension d={self.d}")
        positions = None
        if self.causal:
            positions = mu.positions
            if positions is None:
                raise ValueError(f"causal {self.name} attention needs token positions: "
                                 "pass mu = Empirical(points, positions=...)")
            w = mu.weights
            if np.any(positions < positions[w > 0].min()):
                raise ValueError("causal attention: every token needs a token of positive weight "
                                 "at a position <= its own (positions vs weights)")
        out = self._velocity(mu.points, mu.weights, positions, float(t))
        if not np.all(np.isfinite(out)):
            raise FloatingPointError(f"{self.name} velocity field is not finite at t={float(t):g} "
                                     "(overflow)")
        return out

    # ---- Gaussian closure ------------------------------------------------------------------
    def gaussian_rhs(self, mean, cov, t=0.0):
        r"""Right-hand side :math:`(\alpha', \Sigma')` of the Gaussian closure (paper notes §5).

        Raises ``NotImplementedError`` for variants that do not preserve Gaussians.
        """
        raise NotImplementedError(f"{self.name} attention does not preserve Gaussians: "
                                  "no mean/covariance ODE")

    def _check_gaussian(self, mean, cov):
        if self.causal:
            raise NotImplementedError(f"causal (masked) {self.name} attention does not preserve "
                                      "Gaussians: no mean/covariance ODE")
        m = as_float_array("mean", mean, shape=(self.d,))
        # cov may be slightly non-PSD mid-integration: check shape, finiteness and symmetry only
        c = as_float_array("cov", cov, shape=(self.d, self.d))
        scale = max(np.abs(c).max(), np.finfo(float).tiny)
        if np.abs(c - c.T).max() > 1e-8 * scale:
            raise ValueError(f"cov must be symmetric (max |cov - cov^T| = {np.abs(c - c.T).max():.3g})")
        return m, c

    def __repr__(self):
        flag = ", causal" if self.causal else ""
        return f"{type(self).__name__}(d={self.d}{flag})"


class _BilinearAttention(_Attention):
    """Variants with parameters A (d, d) and V (d, d): score <A x, y> = y^T A x."""

    def __init__(self, A, V, causal=False):
        self.A = _square_param("A", A)
        self.d = self.A.shape[0]
        self.V = _square_param("V", V, self.d)
        self.causal = bool(causal)

    def _queries(self, points, t):
        """Rows A x_i, shape (n, d): the scores are (points @ A.T) @ points.T."""
        return points @ self.A(t).T


# --------------------------------------------------------------------------------------------
# the variants
# --------------------------------------------------------------------------------------------

class Softmax(_BilinearAttention):
    r"""Softmax self-attention (paper notes §2.1, §2.8).

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
    """

    name = "softmax"

    @classmethod
    def from_qk(cls, Q, K, V, causal=False):
        r"""Build from query/key matrices :math:`Q, K\in\mathbb R^{k\times d}`: :math:`A = K^\top Q/\sqrt k`.

        ``Q`` and ``K`` may be arrays or callables of ``t``.
        """
        q, k = _matrix_param("Q", Q), _matrix_param("K", K)
        if q.shape != k.shape:
            raise ValueError(f"Q and K must have the same shape (k, d), got {q.shape} and {k.shape}")
        scale = 1.0 / math.sqrt(q.shape[0])
        if q.is_constant and k.is_constant:
            A = k().T @ q() * scale
        else:
            def A(t):
                return k(t).T @ q(t) * scale
        return cls(A, V, causal=causal)

    def _velocity(self, points, weights, positions, t):
        keys, w, k_pos = _support(points, weights, positions)
        nd = _kernel_sums(self._queries(points, t), keys, _weighted_values(keys, w), "softmax",
                          positions, k_pos)
        return (nd[:, :-1] / nd[:, -1:]) @ self.V(t).T

    def gaussian_rhs(self, mean, cov, t=0.0):
        r"""Softmax Gaussian closure, :math:`\Sigma' = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top`
        (paper notes §5.2); delegates to :func:`tpde_lib.gaussian_odes.softmax_rhs`.

        Returns ``(dmean (d,), dcov (d, d))``.
        """
        m, c = self._check_gaussian(mean, cov)
        from . import gaussian_odes
        return gaussian_odes.softmax_rhs(self.A(t), self.V(t), m, c)


class MultiHead(_Attention):
    r"""Multi-head attention: the sum of its softmax heads (paper notes §2.2).

    .. math:: \Gamma_\mu(x) = \sum_{h=1}^H \Gamma^h_\mu(x)

    Parameters
    ----------
    heads : sequence of Softmax
        Non-empty, all of the same dimension; causal iff every head is causal (mixing causal and
        non-causal heads raises ``ValueError``). Head ``h``'s value matrix is the merged
        :math:`C_h = W^O_h V_h` of the notes.
    """

    name = "multi-head"

    def __init__(self, heads):
        try:
            heads = tuple(heads)
        except TypeError as exc:
            raise TypeError("heads must be a sequence of Softmax attentions") from exc
        if not heads:
            raise ValueError("heads must contain at least one Softmax head")
        for i, h in enumerate(heads):
            if not isinstance(h, Softmax):
                raise TypeError(f"heads[{i}] must be a Softmax attention, got {type(h).__name__}")
        dims = {h.d for h in heads}
        if len(dims) != 1:
            raise ValueError(f"heads must all act on the same dimension, got {sorted(dims)}")
        flags = {h.causal for h in heads}
        if len(flags) != 1:
            raise ValueError("heads must be all causal or all non-causal")
        self.heads = heads
        self.d = heads[0].d
        self.causal = heads[0].causal

    def _velocity(self, points, weights, positions, t):
        out = self.heads[0]._velocity(points, weights, positions, t)
        for h in self.heads[1:]:
            out += h._velocity(points, weights, positions, t)
        return out

    def gaussian_rhs(self, mean, cov, t=0.0):
        """Sum of the heads' softmax closures; delegates to ``gaussian_odes.multihead_rhs``."""
        m, c = self._check_gaussian(mean, cov)
        from . import gaussian_odes
        return gaussian_odes.multihead_rhs([h.A(t) for h in self.heads],
                                           [h.V(t) for h in self.heads], m, c)

    def __repr__(self):
        flag = ", causal" if self.causal else ""
        return f"MultiHead(H={len(self.heads)}, d={self.d}{flag})"


class L2(_Attention):
    r"""ℓ² (distance) attention (paper notes §2.3).

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
        Masked attention (paper notes §2.8).
    """

    name = "L2"

    def __init__(self, Q, K, V, tau=1.0, causal=False):
        self.Q, self.K = _matrix_param("Q", Q), _matrix_param("K", K)
        if self.Q.shape != self.K.shape:
            raise ValueError(f"Q and K must have the same shape (k, d), got {self.Q.shape} "
                             f"and {self.K.shape}")
        self.d = self.Q.shape[1]
        self.V = _square_param("V", V)
        if self.V.shape[0] != self.d:
            raise ValueError(f"V must have shape ({self.d}, {self.d}) to match Q and K, "
                             f"got {self.V.shape}")
        self.tau = as_positive("tau", tau)
        self.causal = bool(causal)

    def _velocity(self, points, weights, positions, t):
        keys, w, k_pos = _support(points, weights, positions)
        qx = points @ self.Q(t).T * (2.0 / self.tau)            # (n, k)
        ky = keys @ self.K(t).T                                 # (m, k)
        queries = np.hstack([qx, np.ones((qx.shape[0], 1))])
        key_feats = np.hstack([ky, -(ky**2).sum(axis=1, keepdims=True) / self.tau])
        nd = _kernel_sums(queries, key_feats, _weighted_values(keys, w), "softmax",
                          positions, k_pos)
        return (nd[:, :-1] / nd[:, -1:]) @ self.V(t).T

    def gaussian_rhs(self, mean, cov, t=0.0):
        """ℓ² Gaussian closure; delegates to ``gaussian_odes.l2_rhs(Q, K, V, tau, mean, cov)``."""
        m, c = self._check_gaussian(mean, cov)
        from . import gaussian_odes
        return gaussian_odes.l2_rhs(self.Q(t), self.K(t), self.V(t), self.tau, m, c)


class Sigmoid(_BilinearAttention):
    r"""Sigmoid attention, mean-field candidate (i) of paper notes §2.5 (no normalisation).

    .. math:: \Gamma_\mu(x) = \int \sigma(\langle Ax,y\rangle + b)\, V y\,\mathrm d\mu(y),
              \qquad \sigma(s) = 1/(1+e^{-s})

    Parameters
    ----------
    A, V : array_like (d, d) or callable
    bias : float
        The bias b (Ramapuram et al. recommend :math:`-\log n` for the unscaled sum).
    causal : bool
    """

    name = "sigmoid"

    def __init__(self, A, V, bias=0.0, causal=False):
        super().__init__(A, V, causal)
        self.bias = float(bias)
        if not np.isfinite(self.bias):
            raise ValueError(f"bias must be finite, got {bias!r}")

    def _velocity(self, points, weights, positions, t):
        qa = self._queries(points, t)
        queries = np.hstack([qa, np.ones((qa.shape[0], 1))])
        keys, w, k_pos = _support(points, weights, positions)
        key_feats = np.hstack([keys, np.full((keys.shape[0], 1), self.bias)])
        s = _kernel_sums(queries, key_feats, keys * w[:, None], "sigmoid", positions, k_pos)
        return s @ self.V(t).T

    def gaussian_rhs(self, mean, cov, t=0.0):
        """Not available: the field is not affine in x for Gaussian mu (paper notes §2.5)."""
        raise NotImplementedError("Sigmoid attention does not preserve Gaussians: "
                                  "no mean/covariance ODE")


class Linear(_BilinearAttention):
    r"""Linear attention (paper notes §2.6).

    .. math:: \Gamma_\mu(x) = \int\langle Ax,y\rangle\,Vy\,\mathrm d\mu(y)
              = V\Big(\int y y^\top\mathrm d\mu\Big) A x

    Evaluated through the second-moment matrix, :math:`O(n d^2)`; causal attention uses its
    running sums over positions.
    """

    name = "linear"

    def _velocity(self, points, weights, positions, t):
        with np.errstate(over="ignore", invalid="ignore"):   # overflow reported by velocity()
            return self._moments_field(points, weights, positions, t)

    def _moments_field(self, points, weights, positions, t):
        qa = self._queries(points, t)                    # rows A x_i
        wy = points * weights[:, None]
        if positions is None:
            return qa @ (points.T @ wy) @ self.V(t).T    # rows (sum_j w_j y_j y_j^T) A x_i
        order = np.argsort(positions, kind="stable")
        s_sorted = positions[order]
        # cumulative second moments over keys sorted by position; ties: take the last equal one
        outer = wy[order][:, :, None] * points[order][:, None, :]
        cum = np.cumsum(outer, axis=0)
        last = np.searchsorted(s_sorted, positions, side="right") - 1
        moments = cum[last]                              # (n, d, d), symmetric
        return np.einsum("nij,nj->ni", moments, qa) @ self.V(t).T

    def gaussian_rhs(self, mean, cov, t=0.0):
        """Linear Gaussian closure; delegates to ``gaussian_odes.linear_rhs(A, V, mean, cov)``."""
        m, c = self._check_gaussian(mean, cov)
        from . import gaussian_odes
        return gaussian_odes.linear_rhs(self.A(t), self.V(t), m, c)


class Unnormalised(_BilinearAttention):
    r"""Unnormalised exponential attention, the reference model (paper notes §2.7).

    .. math:: \Gamma_\mu(x) = \int e^{\langle Ax,y\rangle}\,Vy\,\mathrm d\mu(y)

    Computed as :math:`e^{M_i}\sum_j w_j e^{S_{ij}-M_i} V y_j` with the row maximum :math:`M_i`,
    so it overflows (``FloatingPointError``) only when the field itself exceeds float range.
    """

    name = "unnormalised"

    def _velocity(self, points, weights, positions, t):
        keys, w, k_pos = _support(points, weights, positions)
        s, row_max = _kernel_sums(self._queries(points, t), keys, keys * w[:, None], "exp",
                                  positions, k_pos)
        with np.errstate(over="ignore", invalid="ignore"):
            return (s * np.exp(row_max)[:, None]) @ self.V(t).T


class Sinkhorn(_BilinearAttention):
    r"""Sinkhorn attention: the entropic self-transport plan of :math:`\mu` (paper notes §2.4).

    With :math:`L(x,y)=\langle Ax,y\rangle` and the plan

    .. math::
        \pi(\mathrm dx,\mathrm dy) = e^{f(x)+g(y)+L(x,y)/\varepsilon}\,\mu(\mathrm dx)\mu(\mathrm dy)
        \in \Pi(\mu,\mu),

    the entropic optimal transport of :math:`\mu` to itself for the cost :math:`-\langle Ax,y\rangle`
    and regularisation :math:`\varepsilon`, the field is
    :math:`\Gamma_\mu(x) = V\,\mathbb E_\pi[y\mid x] = V\,\frac{\int e^{L(x,y)/\varepsilon+g(y)}y\,
    \mathrm d\mu}{\int e^{L(x,y)/\varepsilon+g(y)}\,\mathrm d\mu}` (the conditional is normalised
    row by row; with :math:`g=0` this is softmax attention with :math:`A/\varepsilon`).

    Algorithm (log-domain stabilised Sinkhorn, our implementation): the potentials are kept in the
    log domain; a log-sum-exp pass computes a row half-step, which bounds the stabilised kernel
    :math:`\tilde K_{ij} = e^{L_{ij}/\varepsilon + f_i + g_j}`; iterations then run on scalings
    :math:`a=e^{f-f_0}`, :math:`b=e^{g-g_0}` (one matrix–vector product each) and are absorbed
    into the potentials (a new log-domain pass) as soon as :math:`|\log a|` or :math:`|\log b|`
    exceeds ``_ABSORB``. For symmetric :math:`A` both marginals and both potentials coincide,
    :math:`f=g=\varphi`, and the averaged symmetric update
    :math:`\varphi\leftarrow\frac12(T\varphi+T^2\varphi)` is used (:math:`T` is the log-domain
    half-step :math:`T\varphi_i=-\log\int e^{L(x_i,y)/\varepsilon+\varphi(y)}\mathrm d\mu(y)`;
    the average removes the oscillating constant mode of plain Sinkhorn and damps the slow modes
    of positive kernels), for at most ``_SYMMETRIC_ITERS`` updates. Otherwise (or after that)
    alternating row/column updates, over-relaxed when they are slow: the linear rate
    :math:`\lambda` of plain Sinkhorn is measured and the updates become
    :math:`\log b\leftarrow(1-\omega)\log b-\omega\log(\tilde K^\top(w a))` (and likewise for
    :math:`a`) with :math:`\omega=2/(1+\sqrt{1-\lambda})\le 1.99`, the optimal SOR factor of a
    two-block iteration; a diverging over-relaxation falls back to :math:`\omega=1`.

    Convergence: the marginal violation :math:`\sum_i|(\pi\mathbf 1)_i-w_i|` (L1, over the
    support) is compared with ``tol``, always on a plan whose rows are exact (symmetric scheme:
    the plan with :math:`f=g`, whose row and column sums coincide). It bounds the L2 violation
    used by POT's ``stopThr``. Sinkhorn slows down as the span of the scores / eps grows (an
    expanding cloud makes the problem nearly unregularised): raise ``eps``, ``tol`` or
    ``max_iter`` there.

    Warm start: the last converged column potential is kept on the instance (keyed by the number
    of tokens of positive weight and the symmetry of A) and is the starting point of the next
    call, so the consecutive steps of a simulation start from the previous potentials.
    :meth:`reset` forgets it. The converged result does not depend on the start (up to ``tol``).

    Parameters
    ----------
    A, V : array_like (d, d) or callable
        The code of the paper uses ``A = K.T @ Q`` (no 1/sqrt(k)) and ``eps = 1``.
    eps : float
        Entropic regularisation, > 0.
    tol : float
        Marginal violation (L1) at which the iterations stop, > 0.
    max_iter : int
        Maximum number of potential updates. ``max_iter=0``: no update, so a cold start gives
        one row normalisation of the kernel, i.e. softmax attention with ``A / eps``.
    strict : bool
        If True (default) a run that does not reach ``tol`` raises ``RuntimeError`` stating the
        achieved violation; if False it warns (``RuntimeWarning``) and returns the last iterate.
    causal : bool
        Must be False: masked Sinkhorn attention is not defined (``ValueError``).

    Notes
    -----
    The full kernel of the tokens of positive weight is stored (8 m² bytes), so at most
    ``max_tokens = 10_000`` such tokens are accepted (``ValueError`` above).
    """

    name = "Sinkhorn"
    max_tokens = 10_000
    _ABSORB = 30.0
    _SYMMETRIC_ITERS = 100

    def __init__(self, A, V, eps=1.0, tol=1e-9, max_iter=10_000, strict=True, causal=False):
        if causal:
            raise ValueError("causal Sinkhorn attention is not defined (causal=True): the doubly "
                             "stochastic normalisation uses every token")
        super().__init__(A, V, causal=False)
        self.eps = as_positive("eps", eps)
        self.tol = as_positive("tol", tol)
        if not isinstance(max_iter, (int, np.integer)) or max_iter < 0:
            raise ValueError(f"max_iter must be a non-negative integer, got {max_iter!r}")
        self.max_iter = int(max_iter)
        self.strict = bool(strict)
        self._warm = None
        self.last_iterations = None
        self.last_error = None

    def reset(self):
        """Forget the warm-start potentials."""
        self._warm = None

    # ---- solver --------------------------------------------------------------------------
    def _logits(self, Y, A, out=None):
        """L / eps on the support, shape (m, m), written into ``out`` when given."""
        return np.matmul(Y @ (A.T / self.eps), Y.T, out=out)

    def _row_pass(self, Y, A, logw, g, buf):
        """Log-domain half-step T(g)_i = -LSE_j(L_ij/eps + g_j + log w_j); leaves in ``buf``
        the row-normalised kernel exp(L_ij/eps + T_i + g_j) (entries <= 1/w_j)."""
        self._logits(Y, A, out=buf)
        buf += (g + logw)[None, :]
        c = buf.max(axis=1)
        buf -= c[:, None]
        np.exp(buf, out=buf)
        s = buf.sum(axis=1)
        buf /= s[:, None]
        buf /= np.exp(logw)[None, :]
        return -(c + np.log(s))

    def _solve(self, Y, w, A, symmetric):
        """Column potential g (m,) of the self-transport plan, and (iterations, error)."""
        m = Y.shape[0]
        logw = np.log(w)
        warm = self._warm
        g = warm[2].copy() if warm is not None and warm[:2] == (m, symmetric) else np.zeros(m)
        omega = warm[3] if warm is not None and warm[:2] == (m, symmetric) else 1.0
        buf = np.empty((m, m))
        state = {"it": 0, "err": np.inf, "omega": omega, "errs": []}
        use_symmetric = symmetric
        while True:
            T = self._row_pass(Y, A, logw, g, buf)
            if use_symmetric:
                g, done = self._symmetric_sweeps(Y, A, w, g, T, buf, state)
                if not done and state["it"] >= self._SYMMETRIC_ITERS:
                    use_symmetric = False          # slow: switch to over-relaxed alternation
            else:
                g, done = self._alternating_sweeps(w, g, buf, state)
            if done or not np.all(np.isfinite(g)):
                break
        if not np.all(np.isfinite(g)):
            raise RuntimeError(f"Sinkhorn potentials overflowed after {state['it']} iterations "
                               f"(eps={self.eps:g} too small for these scores?)")
        self._omega = state["omega"]
        return g, state["it"], state["err"]

    def _symmetric_sweeps(self, Y, A, w, g, T, buf, state):
        """Averaged symmetric updates phi <- (T phi + T T phi) / 2 from phi = g (T = T(g)).

        Returns the new potential and whether the run is over (converged or out of iterations).
        """
        m = g.size
        # row sums of the plan with f = g = phi are w_i exp(phi_i - T_i)
        with np.errstate(over="ignore"):
            state["err"] = float(np.sum(w * np.abs(np.expm1(g - T))))
        if state["err"] <= self.tol or state["it"] >= self.max_iter:
            return g, True
        g = 0.5 * (g + T)
        state["it"] += 1
        # stabilised symmetric kernel exp(L/eps + phi_i + phi_j) <= 1/sqrt(w_i w_j)
        self._logits(Y, A, out=buf)
        buf += g[:, None]
        buf += g[None, :]
        np.exp(buf, out=buf)
        u = np.ones(m)
        while True:
            Ku = buf @ (w * u)
            state["err"] = float(np.sum(w * np.abs(u * Ku - 1.0)))
            if state["err"] <= self.tol or state["it"] >= self.max_iter:
                return g + np.log(u), True
            if state["it"] >= self._SYMMETRIC_ITERS:
                return g + np.log(u), False
            v1 = 1.0 / Ku                   # T(phi)
            v2 = 1.0 / (buf @ (w * v1))     # T(T(phi))
            u_new = np.sqrt(v1 * v2)        # phi <- (T phi + T T phi) / 2
            state["it"] += 1
            if not np.all(np.isfinite(u_new)):
                return g + np.log(u), False
            u = u_new
            if np.abs(np.log(u)).max() > self._ABSORB:
                return g + np.log(u), False

    def _alternating_sweeps(self, w, g, buf, state):
        """Alternating (over-relaxed) updates on the stabilised kernel ``buf`` (rows exact).

        Plain Sinkhorn (omega = 1) measures its linear rate lambda; when it is slow the updates
        are over-relaxed, log b <- (1 - omega) log b - omega log(K^T w a) and likewise for a,
        with omega = 2 / (1 + sqrt(1 - lambda)) (the optimal SOR factor of a 2-cyclic
        iteration), capped at 1.99, with lambda re-estimated every 10 sweeps from the observed
        rate (Young's relation). Convergence is always confirmed on the plan
        (T(g), g) with exact rows before stopping. Returns (g, done).
        """
        m = g.size
        la, lb = np.zeros(m), np.zeros(m)
        exact, best = True, np.inf
        omega = state["omega"]
        while True:
            Ka = buf.T @ (w * np.exp(la))           # column sums / w_j
            col = float(np.sum(w * np.abs(np.exp(lb) * Ka - 1.0)))
            if exact:
                state["err"] = col
                if col <= self.tol or state["it"] >= self.max_iter:
                    return g + lb, True
            elif col <= self.tol or state["it"] >= self.max_iter:
                return g + lb, False                # confirm with an exact row pass
            if not np.isfinite(col) or col > 100.0 * best:
                # over-relaxation diverged: back to plain Sinkhorn, and never this far again
                state["cap"] = 0.5 * (1.0 + omega)
                state["omega"] = 1.0
                state["errs"] = []
                return g, False
            best = min(best, col)
            errs = state["errs"]
            errs.append(col)
            if len(errs) % 10 == 1 and len(errs) > 20:
                # observed rate rho over 20 sweeps -> rate lambda of plain Sinkhorn through
                # Young's SOR relation (rho + omega - 1)^2 = rho omega^2 lambda
                rho = (errs[-1] / errs[-21]) ** 0.05
                if 0.0 < rho < 1.0:
                    lam = min((rho + omega - 1.0) ** 2 / (rho * omega**2), 0.99999)
                    new = min(state.get("cap", 1.99), 2.0 / (1.0 + math.sqrt(1.0 - lam)))
                    if new > omega * 1.01:
                        omega = state["omega"] = new
            lb = (1.0 - omega) * lb - omega * np.log(Ka)
            Kb = buf @ (w * np.exp(lb))
            la = (1.0 - omega) * la - omega * np.log(Kb)
            exact = omega == 1.0
            state["it"] += 1
            if max(np.abs(la).max(), np.abs(lb).max()) > self._ABSORB:
                return g + lb, False
            if not (np.all(np.isfinite(la)) and np.all(np.isfinite(lb))):
                return g, False

    def potentials(self, mu, t=0.0):
        r"""Converged potentials on the support of ``mu``.

        Returns
        -------
        f, g : ndarray, shape (m,)
            Row and column potentials of :math:`\pi_{ij} = w_iw_j e^{f_i+g_j+L_{ij}/\varepsilon}`
            for the m tokens of positive weight: ``f = g`` for symmetric A, otherwise ``f`` is
            the exact row half-step from ``g``. Either way both marginals are within ``tol``.
        support : ndarray of bool, shape (n,)
        """
        mu = _as_measure(mu)
        Y, w, A, keep, symmetric = self._prepare(mu.points, mu.weights, t)
        g = self._solve_and_report(Y, w, A, symmetric, t)
        if symmetric:
            return g.copy(), g, keep
        f = self._row_pass(Y, A, np.log(w), g, np.empty((Y.shape[0],) * 2))
        return f, g, keep

    def plan(self, mu, t=0.0):
        r"""The entropic self-transport plan :math:`\pi` on the tokens of ``mu``, shape (n, n).

        Rows and columns of zero-weight tokens are zero; both marginals are the weights up to
        ``tol`` (L1). ``velocity`` is ``V`` times this plan's row-normalised barycentres.
        """
        mu = _as_measure(mu)
        f, g, keep = self.potentials(mu, t)
        Y, w = mu.points[keep], mu.weights[keep]
        logits = self._logits(Y, self.A(t)) + f[:, None] + g[None, :]
        P = np.zeros((mu.n, mu.n))
        P[np.ix_(keep, keep)] = np.exp(logits) * np.outer(w, w)
        return P

    def _prepare(self, points, weights, t):
        if points.shape[1] != self.d:
            raise ValueError(f"mu has dimension {points.shape[1]} but the Sinkhorn parameters "
                             f"act on dimension d={self.d}")
        keep = weights > 0
        m = int(keep.sum())
        if m > self.max_tokens:
            raise ValueError(f"Sinkhorn attention stores the full kernel: at most "
                             f"{self.max_tokens} tokens of positive weight (mu has {m})")
        A = self.A(t)
        scale = max(np.abs(A).max(), np.finfo(float).tiny)
        symmetric = bool(np.abs(A - A.T).max() <= 1e-12 * scale)
        return points[keep], weights[keep], A, keep, symmetric

    def _solve_and_report(self, Y, w, A, symmetric, t):
        g, it, err = self._solve(Y, w, A, symmetric)
        self.last_iterations, self.last_error = it, err
        if err <= self.tol:
            self._warm = (Y.shape[0], symmetric, g.copy(), self._omega)
        else:
            L = self._logits(Y, A)
            msg = (f"Sinkhorn did not converge at t={t:g}: marginal violation {err:.3g} > "
                   f"tol={self.tol:g} after max_iter={self.max_iter} iterations (the scores / eps "
                   f"span {L.max() - L.min():.3g}; convergence slows as this span grows: raise "
                   f"eps, tol or max_iter)")
            if self.strict:
                raise RuntimeError(msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
        return g

    def _velocity(self, points, weights, positions, t):
        Y, w, A, _, symmetric = self._prepare(points, weights, t)
        g = self._solve_and_report(Y, w, A, symmetric, t)
        queries = np.hstack([points @ (A.T / self.eps), np.ones((points.shape[0], 1))])
        keys = np.hstack([Y, g[:, None]])
        nd = _kernel_sums(queries, keys, _weighted_values(Y, w), "softmax")
        return (nd[:, :-1] / nd[:, -1:]) @ self.V(t).T

    def gaussian_rhs(self, mean, cov, t=0.0):
        """Sinkhorn Gaussian closure; delegates to ``gaussian_odes.sinkhorn_rhs(A, V, eps, ...)``."""
        m, c = self._check_gaussian(mean, cov)
        from . import gaussian_odes
        return gaussian_odes.sinkhorn_rhs(self.A(t), self.V(t), self.eps, m, c)
