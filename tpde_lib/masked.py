r"""Masked (causal) attention: positions, the attention sink, the prefix average, sensitivity.

Masked attention lives on :math:`\mathbb R^d \times [0, 1]`: each token carries a position
:math:`s`, and the token at :math:`s` attends to the tokens at :math:`s' \le s` (the paper,
arXiv:2501.18322, and the book's chapter "Masked attention", section "Tokens with positions and
the causal field"). The dynamics never moves :math:`s`, so the position marginal
:math:`m = (\pi_s)_\#\mu` is fixed and two solutions are compared fibre by fibre, either in the
conditional distance :math:`W_p^{\mathrm{cond}}` (an :math:`L^p(m)` average of the fibre
distances, :func:`tpde_lib.transport.conditional_wasserstein`) or in the supremum over fibres
(:func:`sup_fibre_distance`). A perturbation reaches the token at :math:`s` through the *prefix
average* of the fibre distances over :math:`[0, s]` (:func:`prefix_average_matrix`); its norm
on :math:`L^p(m)` (:func:`hardy_constant`) decides which distance needs an atom of :math:`m`
at :math:`s = 0`, the *attention sink* (chapter "Masked attention", equations
``eq-masked-prefix`` to ``eq-masked-stability``). Those bounds live in
:mod:`tpde_lib.masked_bounds` and are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import as_count, as_float_array, as_positive, as_square, as_times
from .attention import kernel_sums
from .masked_bounds import (
    _check_sink_mass,
    hardy_constant,
    linear_sink_response,
    lp_operator_norm,
    masked_lipschitz_constant,
    masked_stability_constant,
    prefix_average_matrix,
)
from .meanfield import fit_rate
from .measures import Empirical
from .particles import simulate
from .transport import MARGINAL_TOL, fibre_distances, sup_fibre_distance  # noqa: F401

__all__ = ["sink_positions", "with_sink", "sink_mass", "position_marginal", "shift_prefix",
           "sink_attention_share", "fibre_distances", "sup_fibre_distance",
           "prefix_average_matrix", "lp_operator_norm", "hardy_constant",
           "masked_lipschitz_constant", "masked_stability_constant",
           "linear_sink_response", "Sensitivity", "sensitivity", "sink_mass_sweep", "prefix_sweep",
           "fit_exponent"]



def sink_positions(n, sink_mass, n_sink=None):
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
    m = _check_sink_mass(sink_mass, allow_zero=True)
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


def with_sink(points, sink_mass, n_sink=None):
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


def sink_mass(mu):
    r"""The mass :math:`m(\{0\}) = \sum_{i : s_i = 0} w_i` of the atom at position 0 (float)."""
    s = _positions_of(mu)
    return float(mu.weights[s == 0].sum())


def position_marginal(mu):
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


def shift_prefix(mu, shift, s_max=0.0):
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
    X[s <= float(s_max)] += v
    return mu.with_points(X)


def sink_attention_share(A, mu):
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
    keep = w > 0                                   # keys of positive mass
    keys, w_k, s_k = mu.points[keep], w[keep], s[keep]
    # scores <A x_i, x_j> = x_j^T A x_i; numerator (sink keys) and denominator in one pass
    values = np.column_stack([w_k * (s_k == 0), w_k])
    sums = kernel_sums(mu.points @ A.T, keys, values, "softmax", q_pos=s, k_pos=s_k)
    return sums[:, 0] / sums[:, 1]


# ---- measured sensitivity --------------------------------------------------------------------

@dataclass(frozen=True)
class Sensitivity:
    """Result of :func:`sensitivity`.

    Attributes
    ----------
    times : ndarray, shape (T,)
    distance : ndarray, shape (T,) or (P, T)
        :math:`W_p^{\\rm cond}(\\mu_t, \\nu_t)` (one row per exponent when several ``p`` are given).
    ratio : ndarray, same shape as ``distance``
        ``distance / distance[..., 0]``.
    p : float or tuple of float
    sup_distance, sup_ratio : ndarray, same shape as ``distance``, or None
        The same for the supremum over fibres :math:`\\sup_s W_p(\\mu_{t,s}, \\nu_{t,s})`
        (with ``sup=True``).
    """

    times: np.ndarray
    distance: np.ndarray
    ratio: np.ndarray
    p: object
    sup_distance: np.ndarray = None
    sup_ratio: np.ndarray = None


def _both_distances(mu, nu, ps):
    """(W_p^cond, sup-fibre W_p) for each p, from one set of fibre distances per p."""
    cond, sup = [], []
    for q in ps:
        _, masses, dist = fibre_distances(mu, nu, q)
        cond.append(float(np.sum(masses * dist ** q)) ** (1.0 / q))
        sup.append(float(dist[masses > 0].max()))
    return cond, sup


def sensitivity(att, mu, nu, T, p=2, n_times=21, method="rk4", h=None, sup=False):
    r"""Measured stability ratio :math:`W_p^{\rm cond}(\mu_t, \nu_t) / W_p^{\rm cond}(\mu_0, \nu_0)`.

    Both measures are simulated with :func:`tpde_lib.particles.simulate` (same attention, same
    times, same integrator) and compared fibre by fibre (:func:`fibre_distances`) at every
    output time: the measured counterpart of :func:`masked_stability_constant`.

    Parameters
    ----------
    att : attention
        Typically causal, e.g. ``Softmax(A, V, causal=True)``.
    mu, nu : Empirical
        With positions and the same position marginal, and :math:`W_p^{\rm cond}(\mu, \nu) > 0`.
    T : float or array_like
        Final time (output times ``linspace(0, T, n_times)``), or the output times themselves
        (increasing, starting at 0).
    p : float or sequence of float, default 2
        Exponent(s) of the distance; a sequence gives one row per exponent (one pair of
        simulations for all).
    n_times : int, default 21
        Number of output times when ``T`` is a float.
    method, h
        Passed to ``simulate``.
    sup : bool, default False
        Also measure the supremum over fibres, :func:`sup_fibre_distance`.

    Returns
    -------
    Sensitivity
        ``times`` (T,), ``distance`` and ``ratio`` (T,) for a scalar ``p``, (P, T) otherwise.

    Raises
    ------
    ValueError
        Positions missing or marginals differ; identical initial measures (ratio undefined);
        times not starting at 0.
    """
    if np.ndim(T) == 0:
        T = as_positive("T", T)
        n_times = as_count("n_times", n_times, 2)
        times = np.linspace(0.0, T, int(n_times))
    else:
        times = as_times("T", T)
        if times[0] != 0:
            raise ValueError(f"the output times T must start at 0, got {times[0]!r}")
    ps = tuple(np.atleast_1d(np.asarray(p, dtype=float)).tolist())
    cond0, sup0 = _both_distances(mu, nu, ps)
    if min(cond0) <= 0:
        raise ValueError("mu and nu must differ (W_p^cond(mu, nu) = 0: the ratio is undefined)")
    traj_mu = simulate(att, mu, times, method=method, h=h)
    traj_nu = simulate(att, nu, times, method=method, h=h)
    cond, sups = np.empty((len(ps), times.size)), np.empty((len(ps), times.size))
    cond[:, 0], sups[:, 0] = cond0, sup0
    for k in range(1, times.size):
        cond[:, k], sups[:, k] = _both_distances(traj_mu.measure(k), traj_nu.measure(k), ps)
    out = [cond, cond / cond[:, :1], sups, sups / sups[:, :1]]
    if np.ndim(p) == 0:
        out = [a[0] for a in out]
    p_out = ps[0] if np.ndim(p) == 0 else ps
    if not sup:
        return Sensitivity(times, out[0], out[1], p_out)
    return Sensitivity(times, out[0], out[1], p_out, out[2], out[3])


def _final_ratios(res, sup):
    return (res.ratio[..., -1], res.sup_ratio[..., -1]) if sup else res.ratio[..., -1]


def _stack(results, sup):
    if sup:
        return np.stack([r[0] for r in results], axis=-1), np.stack([r[1] for r in results], axis=-1)
    return np.stack(results, axis=-1)


def sink_mass_sweep(att, points, sink_masses, shift, T, n_sink, p=(1, 2), n_times=2, method="rk4",
                    h=None, sup=False):
    r"""Sensitivity to a shift of the sink fibre, as the sink's mass :math:`m(\{0\})` varies.

    For each mass the same tokens ``points`` get the positions and weights of
    :func:`sink_positions` with a fixed number ``n_sink`` of sink tokens (so only the weights
    change with the mass); :math:`\nu_0` is :math:`\mu_0` with its sink fibre translated by
    ``shift`` (:func:`shift_prefix`), so :math:`W_p^{\rm cond}(\mu_0, \nu_0) =
    |{\rm shift}|\,m(\{0\})^{1/p}`. Returns the measured ratios at time ``T``.

    Parameters
    ----------
    att : attention
        Causal.
    points : array_like, shape (n, d)
        Tokens; the first ``n_sink`` rows are the sink.
    sink_masses : array_like, shape (M,)
        Values of :math:`m(\{0\})` in (0, 1).
    shift : array_like, shape (d,)
    T : float
        Final time.
    n_sink : int
    p : float or sequence of float
    n_times, method, h, sup
        As in :func:`sensitivity`.

    Returns
    -------
    ndarray, shape (M,) for a scalar ``p``, (P, M) otherwise
        The :math:`W_p^{\rm cond}` ratios at ``T``; with ``sup=True`` a pair (these, the ratios
        of the supremum over fibres).
    """
    masses = as_float_array("sink_masses", sink_masses, ndim=1)
    out = []
    for m in masses:   # one pair of simulations per mass (the tokens are vectorised inside)
        mu = with_sink(points, m, n_sink)
        res = sensitivity(att, mu, shift_prefix(mu, shift), T, p=p, n_times=n_times,
                          method=method, h=h, sup=sup)
        out.append(_final_ratios(res, sup))
    return _stack(out, sup)


def prefix_sweep(att, mu, s_max_values, shift, T, p=(1, 2), method="rk4", h=None, sup=False):
    r"""Sensitivity to a shift of the prefix :math:`[0, s_{\max}]`, as :math:`s_{\max}` varies.

    :math:`\nu_0` is :math:`\mu_0` with its tokens at :math:`s \le s_{\max}` translated by
    ``shift`` (:func:`shift_prefix`); :math:`\mu` is simulated once for all values.

    Parameters
    ----------
    att : attention
        Causal.
    mu : Empirical
        With positions.
    s_max_values : array_like, shape (M,)
        Each must move at least one token of positive weight.
    shift : array_like, shape (d,)
    T : float
        Final time.
    p, method, h, sup
        As in :func:`sensitivity`.

    Returns
    -------
    ndarray or pair of ndarray
        As for :func:`sink_mass_sweep`.
    """
    s_max = as_float_array("s_max_values", s_max_values, ndim=1)
    T = as_positive("T", T)
    ps = tuple(np.atleast_1d(np.asarray(p, dtype=float)).tolist())
    end_mu = simulate(att, mu, [0.0, T], method=method, h=h).measure(1)
    out = []
    for value in s_max:
        nu = shift_prefix(mu, shift, s_max=value)
        cond0, sup0 = _both_distances(mu, nu, ps)
        if min(cond0) <= 0:
            raise ValueError(f"s_max = {value!r} moves no token of positive weight")
        condT, supT = _both_distances(end_mu, simulate(att, nu, [0.0, T], method=method,
                                                       h=h).measure(1), ps)
        ratio, sup_ratio = np.divide(condT, cond0), np.divide(supT, sup0)
        if np.ndim(p) == 0:
            ratio, sup_ratio = ratio[0], sup_ratio[0]
        out.append((ratio, sup_ratio) if sup else ratio)
    return _stack(out, sup)


def fit_exponent(x, y):
    r"""Least-squares power law :math:`y \approx c\,x^{b}` in log–log coordinates.

    Parameters
    ----------
    x, y : array_like, shape (M,)
        Positive values, ``M >= 2``.

    Returns
    -------
    b : float
        The fitted exponent.
    c : float
        The prefactor.

    A shorthand for :func:`tpde_lib.meanfield.fit_rate` (which also gives the confidence
    interval).
    """
    fit = fit_rate(x, y)
    return fit.slope, fit.prefactor

