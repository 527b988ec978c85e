r"""Tokens with positions and the attention sink: building, reading and shifting masked measures.

Masked attention lives on :math:`\mathbb R^d \times [0, 1]`: each token carries a position
:math:`s`, and the token at :math:`s` attends to the tokens at :math:`s' \le s`. This module
places tokens (:func:`sink_positions`, :func:`with_sink`: an atom of the position marginal at
:math:`s = 0`, the *attention sink*), reads a measure's position marginal and sink mass, shifts a
prefix of fibres (:func:`shift_prefix`) and measures the share of attention the sink receives
(:func:`sink_attention_share`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import as_count, as_finite, as_float_array, as_sink_mass, as_square
from ..attention import kernel_sums
from ..measures import Empirical


def sink_positions(
    n: int, sink_mass: float, n_sink: int | None = None
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Positions and weights of ``n`` tokens: an atom of mass ``sink_mass`` at :math:`s = 0`, the
    rest spread evenly over :math:`(0, 1]`.

    The first ``n_sink`` tokens are the *sink*: position :math:`s = 0`, total mass
    :math:`m(\{0\})` = ``sink_mass``, shared equally. The other :math:`n_r = n - n_{\rm sink}`
    tokens sit at the distinct positions :math:`s = k / n_r`, :math:`k = 1, \dots, n_r`
    (evenly spread over :math:`(0, 1]`, the last one at 1) and share :math:`1 - m(\{0\})`
    equally. The position marginal is therefore

    .. math::
        m = m(\{0\})\,\delta_0 + \frac{1 - m(\{0\})}{n_r}\sum_{k=1}^{n_r}\delta_{k/n_r}.

    With ``sink_mass = 0`` there is no atom: the ``n`` tokens sit at :math:`k/n`, weights
    :math:`1/n` (the discretisation of a density on :math:`(0, 1]`).

    Parameters
    ----------
    n : int
        Number of tokens, ``n >= 2``.
    sink_mass : float
        :math:`m(\{0\}) \in [0, 1)`.
    n_sink : int, optional
        Number of sink tokens, ``1 <= n_sink <= n - 1`` (``0`` or None when ``sink_mass = 0``).
        Default ``round(sink_mass * n)`` (clipped
        to that range), which makes the weights uniform (``1/n``) when ``sink_mass * n`` is an
        integer. Keep ``n_sink`` fixed to vary ``sink_mass`` with the same points (only the weights
        change).

    Returns
    -------
    positions : ndarray, shape (n,)
        Non-decreasing, in [0, 1].
    weights : ndarray, shape (n,)
        Positive, summing to 1.

    Raises
    ------
    ValueError
        ``n < 2``, ``sink_mass`` outside [0, 1), ``n_sink`` outside ``[1, n - 1]`` (or not 0 without
        an atom).
    """
    n = as_count("n", n, 2)
    m = as_sink_mass(sink_mass, allow_zero=True)
    if m == 0.0:
        if n_sink not in (None, 0):
            raise ValueError(f"n_sink must be 0 (or None) when sink_mass = 0, got {n_sink!r}")
        return np.arange(1, n + 1) / n, np.full(n, 1.0 / n)
    if n_sink is None:
        n_sink = int(min(max(round(m * n), 1), n - 1))
    else:
        n_sink = as_count("n_sink", n_sink, 1, n - 1)
    n_rest = n - int(n_sink)
    positions = np.concatenate([np.zeros(n_sink), np.arange(1, n_rest + 1) / n_rest])
    weights = np.concatenate([np.full(n_sink, m / n_sink), np.full(n_rest, (1.0 - m) / n_rest)])
    return positions, weights


def with_sink(points: ArrayLike, sink_mass: float, n_sink: int | None = None) -> Empirical:
    """The tokens ``points`` in their row order, with the sink positions and weights of
    :func:`sink_positions` (the first ``n_sink`` rows form the sink).

    Parameters
    ----------
    points : Empirical or array_like, shape (n, d)
        Token values; for an Empirical only its points are used (weights and positions replaced).
    sink_mass, n_sink
        As in :func:`sink_positions`.

    Returns
    -------
    Empirical
        With ``positions`` (n,) and ``weights`` (n,).
    """
    X = points.points if isinstance(points, Empirical) else as_float_array("points", points, ndim=2)
    s, w = sink_positions(X.shape[0], sink_mass, n_sink)
    return Empirical(X, weights=w, positions=s)


def _positions_of(mu, name="mu"):
    if not isinstance(mu, Empirical):
        raise TypeError(f"{name} must be an Empirical measure, got {type(mu).__name__}")
    if mu.positions is None:
        raise ValueError(f"{name} must carry positions (Empirical(..., positions=...))")
    return mu.positions


def sink_mass(mu: Empirical) -> float:
    r"""The mass :math:`m(\{0\}) = \sum_{i : s_i = 0} w_i` of the atom at position 0 (float)."""
    s = _positions_of(mu)
    return float(mu.weights[s == 0].sum())


def position_marginal(mu: Empirical) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""The position marginal :math:`m = (\pi_s)_\#\mu` as (values, masses).

    Returns
    -------
    values : ndarray, shape (k,)
        The distinct positions, increasing.
    masses : ndarray, shape (k,)
        The mass at each (sums to 1).
    """
    s = _positions_of(mu)
    values, idx = np.unique(s, return_inverse=True)
    return values, np.bincount(idx, weights=mu.weights, minlength=values.size)


def shift_prefix(mu: Empirical, shift: float, s_max: float = 0.0) -> Empirical:
    r"""Translate the tokens at positions :math:`s \le s_{\max}` by ``shift``; the rest unchanged.

    With the default ``s_max = 0`` this moves the sink fibre :math:`\mu_0` only. The position
    marginal is unchanged, so the conditional distance to ``mu`` is defined:
    :math:`W_p^{\mathrm{cond}}(\mu, \nu) = |{\rm shift}|\; m([0, s_{\max}])^{1/p}` (every moved
    fibre is translated rigidly, and translation by :math:`v` costs exactly :math:`|v|` in
    :math:`W_p`).

    Parameters
    ----------
    mu : Empirical
        With positions.
    shift : array_like, shape (d,)
    s_max : float, default 0.0
        Tokens at :math:`s \le` ``s_max`` are moved.

    Returns
    -------
    Empirical
        Same weights and positions.
    """
    s = _positions_of(mu)
    v = as_float_array("shift", shift, shape=(mu.d,))
    X = mu.points.copy()
    X[s <= as_finite("s_max", s_max)] += v
    return mu.with_points(X)


def sink_attention_share(A: ArrayLike, mu: Empirical) -> NDArray[np.float64]:
    r"""The attention each token pays to the sink fibre, :math:`\pi_{x_i, s_i}(\{s' = 0\})`.

    For causal softmax attention with score matrix :math:`A` the token :math:`(x, s)` averages the
    values with the weights :math:`\pi_{x,s}(dy, ds') \propto \mathbf 1_{s'\le s}\,
    e^{\langle Ax,y\rangle}\mu(dy, ds')`; this returns the mass they put on :math:`s' = 0`,

    .. math::
        \mathrm{share}_i = \frac{\sum_{j: s_j = 0} w_j e^{\langle Ax_i, x_j\rangle}}
                               {\sum_{j: s_j \le s_i} w_j e^{\langle Ax_i, x_j\rangle}} .

    Evaluated by the blocked engine :func:`tpde_lib.kernel_sums` (row maxima cancel in the
    ratio). Without the tilt (:math:`A = 0`) it is :math:`m(\{0\}) / m([0, s_i])`, the first column of
    :func:`prefix_average_matrix`; the sink tokens themselves have share 1.

    Parameters
    ----------
    A : array_like, shape (d, d)
        Score matrix, :math:`\langle Ax, y\rangle = y^\top A x` (for a time-dependent attention,
        pass ``att.A(t)``).
    mu : Empirical
        Points (n, d), weights (n,), positions (n,) with an atom at 0.

    Returns
    -------
    ndarray, shape (n,)
        Values in [0, 1].
    """
    s = _positions_of(mu)
    A = as_square("A", A, mu.d)
    w = mu.weights
    if not np.any((s == 0) & (w > 0)):
        raise ValueError("mu must have a sink: tokens of positive weight at position 0")
    keep = w > 0  # keys of positive mass
    keys, w_k, s_k = mu.points[keep], w[keep], s[keep]
    # scores <A x_i, x_j> = x_j^T A x_i; numerator (sink keys) and denominator in one pass
    values = np.column_stack([w_k * (s_k == 0), w_k])
    sums = kernel_sums(mu.points @ A.T, keys, values, "softmax", q_pos=s, k_pos=s_k)
    return sums[:, 0] / sums[:, 1]
