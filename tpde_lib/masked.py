r"""Masked (causal) attention: positions with an attention sink, the masked constants, sensitivity.

Masked attention lives on the augmented space :math:`\mathbb R^d \times [0, 1]`: each token carries
a position :math:`s`, and the token at :math:`s` attends to the tokens at :math:`s' \le s`
(paper notes §2.8). The dynamics never moves :math:`s`, so the position marginal
:math:`m = (\pi_s)_\#\mu` is conserved, and the natural distance is the conditional Wasserstein
distance (paper notes §4.1, :func:`tpde_lib.transport.conditional_wasserstein`). Uniform-in-``s``
Lipschitz bounds need an atom of the marginal at :math:`s = 0`, the *attention sink*
(paper notes §4.2). This module builds such position grids, evaluates the masked constants and
measures the sensitivity :math:`W_p^{\mathrm{cond}}(\mu_t, \nu_t) / W_p^{\mathrm{cond}}(\mu_0, \nu_0)`
by simulating both measures.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._checks import as_float_array, as_positive, as_square, as_times
from .attention import Softmax
from .measures import Empirical
from .particles import simulate
from .transport import conditional_wasserstein

__all__ = ["sink_positions", "with_sink", "sink_mass", "position_marginal", "shift_prefix",
           "sink_attention_share", "masked_lipschitz_constant", "masked_stability_bound",
           "Sensitivity", "sensitivity", "sink_mass_sweep", "fit_exponent"]


def _check_sink_mass(value):
    m = as_positive("sink_mass", value)
    if m >= 1.0:
        raise ValueError(f"sink_mass must lie in (0, 1) (the mass m({{0}}) of the sink; 1 would "
                         f"put every token at s = 0, i.e. unmasked attention), got {value!r}")
    return m


def sink_positions(n, sink_mass, n_sink=None):
    r"""Positions and weights of ``n`` tokens whose position marginal has an atom at :math:`s = 0`.

    The first ``n_sink`` tokens are the *sink*: position :math:`s = 0`, total mass
    :math:`m(\{0\})` = ``sink_mass``, shared equally. The other :math:`n_r = n - n_{\rm sink}`
    tokens sit at the distinct positions :math:`s = k / n_r`, :math:`k = 1, \dots, n_r`
    (evenly spread over :math:`(0, 1]`, the last one at 1) and share :math:`1 - m(\{0\})`
    equally. The position marginal is therefore

    .. math::
        m = m(\{0\})\,\delta_0 + \frac{1 - m(\{0\})}{n_r}\sum_{k=1}^{n_r}\delta_{k/n_r}.

    Parameters
    ----------
    n : int
        Number of tokens, ``n >= 2``.
    sink_mass : float
        :math:`m(\{0\}) \in (0, 1)`.
    n_sink : int, optional
        Number of sink tokens, ``1 <= n_sink <= n - 1``. Default ``round(sink_mass * n)`` (clipped
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
        ``n < 2``, ``sink_mass`` outside (0, 1), ``n_sink`` outside ``[1, n - 1]``.

    See paper notes §2.8 (positions) and §4.2 (the atom at 0).
    """
    if not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"n must be an integer >= 2 (one sink token and one other), got {n!r}")
    m = _check_sink_mass(sink_mass)
    if n_sink is None:
        n_sink = int(min(max(round(m * n), 1), n - 1))
    elif not isinstance(n_sink, (int, np.integer)) or not 1 <= n_sink <= n - 1:
        raise ValueError(f"n_sink must be an integer in [1, n - 1] = [1, {n - 1}], got {n_sink!r}")
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


def sink_attention_share(att, mu, t=0.0, block=2048):
    r"""The attention each token pays to the sink fibre: :math:`\pi_{x_i, s_i}(\{s' = 0\})`.

    For causal softmax attention the token :math:`(x, s)` averages the values with the tilted,
    masked weights :math:`\pi_{x,s}(dy, ds') \propto \mathbf 1_{s'\le s}\,e^{\langle Ax,y\rangle}
    \mu(dy, ds')`; this returns the mass those weights put on :math:`s' = 0`,

    .. math::
        \mathrm{share}_i = \frac{\sum_{j: s_j = 0} w_j e^{\langle Ax_i, x_j\rangle}}
                               {\sum_{j: s_j \le s_i} w_j e^{\langle Ax_i, x_j\rangle}} .

    Without the tilt (:math:`A = 0`) it is :math:`m(\{0\}) / m([0, s_i])`; the sink tokens
    themselves have share 1.

    Parameters
    ----------
    att : Softmax
        Causal softmax attention (its ``A`` is used).
    mu : Empirical
        Points (n, d), weights (n,), positions (n,) with an atom at 0.
    t : float
        Time, for time-dependent ``A``.
    block : int
        Query rows per block (memory O(block * n)).

    Returns
    -------
    ndarray, shape (n,)
        Values in [0, 1].
    """
    if not isinstance(att, Softmax):
        raise TypeError(f"att must be a Softmax attention, got {type(att).__name__}")
    if not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be a positive integer, got {block!r}")
    s = _positions_of(mu)
    if not np.any((s == 0) & (mu.weights > 0)):
        raise ValueError("mu must have a sink: tokens of positive weight at position 0")
    X, logw = mu.points, np.log(np.where(mu.weights > 0, mu.weights, 1.0))
    logw[mu.weights == 0] = -np.inf
    queries = X @ att.A(t).T                       # rows A x_i: scores <A x_i, x_j> = x_j^T A x_i
    share = np.empty(mu.n)
    for start in range(0, mu.n, block):       # row blocks of queries, vectorised inside
        sl = slice(start, min(mu.n, start + block))
        L = queries[sl] @ X.T + logw[None, :]
        L[s[None, :] > s[sl, None]] = -np.inf
        L -= L.max(axis=1, keepdims=True)
        E = np.exp(L)
        share[sl] = E[:, s == 0].sum(axis=1) / E.sum(axis=1)
    return share


def _softmax_constants(A, V, R):
    """(L_x, L_mu) of paper notes §3.3 for spectral norms of A, V and radius R (floats)."""
    a, v = np.linalg.norm(A, 2), np.linalg.norm(V, 2)
    L_x = v * a * R ** 2
    L_mu = v * (1.0 + 2.0 * a * R ** 2) * np.exp(2.0 * a * R ** 2)
    return L_x, L_mu


def masked_lipschitz_constant(A, V, R, sink_mass):
    r"""Lipschitz constant of the masked softmax field in the measure, in :math:`W_1^{\rm cond}`.

    .. math::
        |\Gamma_\mu(x, s) - \Gamma_\nu(x, s)| \le
        \frac{\|V\|\,(1 + 2\|A\|R^2)\,e^{2\|A\|R^2}}{m(\{0\})}\; W_1^{\rm cond}(\mu, \nu)

    for :math:`\mu, \nu` supported in :math:`B_R \times [0, 1]` with the same position marginal
    :math:`m`, :math:`|x| \le R` (spectral norms).

    Derivation (paper notes §4.2, derived here). Write :math:`\Gamma_\mu(x,s) = N_\mu / Z_\mu`
    with :math:`Z_\mu(x, s) = \int \mathbf 1_{s' \le s}\, e^{\langle Ax, y\rangle}\,
    d\mu(y, s')`. Then

    .. math::
        \Gamma_\mu - \Gamma_\nu = \frac{1}{Z_\mu}\int \mathbf 1_{s'\le s}\,f(y)\,
        d(\mu - \nu)(y, s'), \qquad f(y) = e^{\langle Ax, y\rangle}\big(Vy - \Gamma_\nu(x, s)\big).

    On :math:`B_R`, :math:`f` is :math:`\|V\| e^{\|A\|R^2}(1 + 2\|A\|R^2)`-Lipschitz (the gradient
    is :math:`e^{\langle Ax,y\rangle}(V + (Vy - \Gamma_\nu)(Ax)^\top)` and
    :math:`|Vy - \Gamma_\nu| \le 2\|V\|R`). Since :math:`\mu` and :math:`\nu` share the marginal,
    the integral is :math:`\int_{[0,s]} (\int f\,d\mu_{s'} - \int f\,d\nu_{s'})\,dm(s')`, and
    Kantorovich–Rubinstein in each fibre bounds it by
    :math:`\mathrm{Lip}(f)\int_{[0,s]} W_1(\mu_{s'}, \nu_{s'})\,dm(s')`. The denominator is
    :math:`Z_\mu \ge m([0, s])\, e^{-\|A\|R^2} \ge m(\{0\})\, e^{-\|A\|R^2}`. Hence the sharper,
    position-wise form

    .. math::
        |\Gamma_\mu - \Gamma_\nu|(x, s) \le L_\mu(R)\,\frac{1}{m([0,s])}\int_{[0,s]}
        W_1(\mu_{s'}, \nu_{s'})\,dm(s') \le \frac{L_\mu(R)}{m(\{0\})}\,W_1^{\rm cond}(\mu, \nu),

    with :math:`L_\mu(R)` the unmasked constant of paper notes §3.3. The last step is tight only
    when the whole perturbation sits in the sink fibre *and* is felt at :math:`s = 0`.

    Parameters
    ----------
    A, V : array_like, shape (d, d)
        Score and value matrices.
    R : float
        Radius of the supports, > 0.
    sink_mass : float
        :math:`m(\{0\}) \in (0, 1)`.

    Returns
    -------
    float
    """
    A = as_square("A", A)
    V = as_square("V", V, A.shape[0])
    R = as_positive("R", R)
    m = _check_sink_mass(sink_mass)
    return float(_softmax_constants(A, V, R)[1] / m)


def masked_stability_bound(A, V, R0, times, sink_mass, log=False):
    r"""The Dobrushin stability constant in :math:`W_p^{\rm cond}` for masked softmax attention.

    .. math::
        W_p^{\rm cond}(\mu_t, \nu_t) \le C(t)\, W_p^{\rm cond}(\mu_0, \nu_0), \qquad
        C(t) = \exp\!\Big(t\,\big[L_x(R_t) + L_\mu(R_t)/m(\{0\})\big]\Big),

    with :math:`R_t = R_0 e^{\|V\| t}` (the field is a convex combination of the :math:`Vy`, so
    supports grow at most at rate :math:`\|V\|`), :math:`L_x(R) = \|V\|\|A\|R^2` (the masked field
    has :math:`\nabla_x\Gamma = V\,\mathrm{Cov}(y)\,A` for the tilt of the prefix :math:`[0, s]`,
    a covariance bounded by :math:`R^2`) and :math:`L_\mu(R)/m(\{0\})` from
    :func:`masked_lipschitz_constant`.

    Derivation (derived here, the argument of paper notes §3.2 fibre by fibre): couple
    :math:`\mu_0, \nu_0` by a plan :math:`\pi` that is optimal in every fibre (it does not move
    :math:`s`) and carry it along both flows. For coupled tokens at the same :math:`s`,
    :math:`\frac{d}{dt}|X - Y| \le L_x|X - Y| + \frac{L_\mu}{m(\{0\})}W_1^{\rm cond}(\mu_t,\nu_t)`,
    and :math:`W_1^{\rm cond} \le W_p^{\rm cond} \le \|X - Y\|_{L^p(\pi)}`; Grönwall on
    :math:`\|X - Y\|_{L^p(\pi)}` gives the bound (constants evaluated at the final radius
    :math:`R_t`, which dominates :math:`R_\tau` for :math:`\tau \le t`).

    Parameters
    ----------
    A, V : array_like, shape (d, d)
    R0 : float
        Radius of the initial supports, > 0.
    times : array_like, shape (T,)
        Increasing times, >= 0.
    sink_mass : float
        :math:`m(\{0\}) \in (0, 1)`.
    log : bool, default False
        Return :math:`\log C(t)` (natural log) instead: :math:`C` overflows float range as soon as
        :math:`t\,L_\mu/m(\{0\}) > 709`, its logarithm much later.

    Returns
    -------
    ndarray, shape (T,)
        :math:`C(t)` (or its log); ``inf`` where even that overflows.
    """
    A = as_square("A", A)
    V = as_square("V", V, A.shape[0])
    R0 = as_positive("R0", R0)
    t = as_times("times", times)
    if t[0] < 0:
        raise ValueError(f"times must be >= 0, got {t[0]!r}")
    m = _check_sink_mass(sink_mass)
    R_t = R0 * np.exp(np.linalg.norm(V, 2) * t)
    with np.errstate(over="ignore", invalid="ignore"):
        L_x, L_mu = _softmax_constants(A, V, R_t)
        log_C = np.where(t == 0, 0.0, t * (L_x + L_mu / m))
        return log_C if log else np.exp(log_C)


class Sensitivity(NamedTuple):
    """Result of :func:`sensitivity`.

    Attributes
    ----------
    times : ndarray, shape (T,)
    distance : ndarray, shape (T,) or (P, T)
        :math:`W_p^{\\rm cond}(\\mu_t, \\nu_t)` (one row per exponent when several ``p`` are given).
    ratio : ndarray, same shape as ``distance``
        ``distance / distance[..., 0]``.
    p : float or tuple of float
    """

    times: np.ndarray
    distance: np.ndarray
    ratio: np.ndarray
    p: object


def sensitivity(att, mu, nu, T, p=2, n_times=21, method="rk4", h=None):
    r"""Measured stability ratio :math:`W_p^{\rm cond}(\mu_t, \nu_t) / W_p^{\rm cond}(\mu_0, \nu_0)`.

    Both measures are simulated with :func:`tpde_lib.particles.simulate` (same attention, same
    times, same integrator) and compared with
    :func:`tpde_lib.transport.conditional_wasserstein` at every output time. This is the
    measured counterpart of :func:`masked_stability_bound` (paper notes §4.2).

    Parameters
    ----------
    att : attention
        Typically causal, e.g. ``Softmax(A, V, causal=True)``.
    mu, nu : Empirical
        With positions and the same position marginal (checked by the distance), and
        :math:`W_p^{\rm cond}(\mu, \nu) > 0`.
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

    Returns
    -------
    Sensitivity
        ``times`` (T,), ``distance`` and ``ratio`` (T,) for a scalar ``p``, (P, T) otherwise.

    Raises
    ------
    ValueError
        Positions missing or marginals differ (from the distance); identical initial measures
        (ratio undefined); times not starting at 0.
    """
    if np.ndim(T) == 0:
        T = as_positive("T", T)
        if not isinstance(n_times, (int, np.integer)) or n_times < 2:
            raise ValueError(f"n_times must be an integer >= 2, got {n_times!r}")
        times = np.linspace(0.0, T, int(n_times))
    else:
        times = as_times("T", T)
        if times[0] != 0:
            raise ValueError(f"the output times T must start at 0, got {times[0]!r}")
    ps = tuple(np.atleast_1d(np.asarray(p, dtype=float)).tolist())
    d0 = np.array([conditional_wasserstein(mu, nu, q) for q in ps])
    if np.any(d0 <= 0):
        raise ValueError("mu and nu must differ (W_p^cond(mu, nu) = 0: the ratio is undefined)")
    traj_mu = simulate(att, mu, times, method=method, h=h)
    traj_nu = simulate(att, nu, times, method=method, h=h)
    dist = np.empty((len(ps), times.size))
    dist[:, 0] = d0
    for k in range(1, times.size):
        mk, nk = traj_mu.measure(k), traj_nu.measure(k)
        dist[:, k] = [conditional_wasserstein(mk, nk, q) for q in ps]
    ratio = dist / d0[:, None]
    if np.ndim(p) == 0:
        return Sensitivity(times, dist[0], ratio[0], ps[0])
    return Sensitivity(times, dist, ratio, ps)


def sink_mass_sweep(att, points, sink_masses, shift, T, n_sink, p=(1, 2), n_times=2, method="rk4",
                    h=None):
    r"""Sensitivity to a perturbation of the sink fibre, as the sink's mass :math:`m(\{0\})` varies.

    For each mass the same tokens ``points`` get the positions and weights of
    :func:`sink_positions` with a fixed number ``n_sink`` of sink tokens (so only the weights
    change with the mass); :math:`\nu_0` is :math:`\mu_0` with its sink fibre translated by
    ``shift`` (:func:`shift_prefix`), so :math:`W_p^{\rm cond}(\mu_0, \nu_0) =
    |{\rm shift}|\,m(\{0\})^{1/p}`. Returns the measured ratio
    :math:`W_p^{\rm cond}(\mu_T, \nu_T)/W_p^{\rm cond}(\mu_0, \nu_0)` for every mass, to be compared
    with the :math:`1/m(\{0\})` of :func:`masked_lipschitz_constant`.

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
    n_times, method, h
        As in :func:`sensitivity`.

    Returns
    -------
    ndarray, shape (M,) for a scalar ``p``, (P, M) otherwise
        The ratios at time ``T``.
    """
    masses = as_float_array("sink_masses", sink_masses, ndim=1)
    out = []
    for m in masses:   # one pair of simulations per mass (the tokens are vectorised inside)
        mu = with_sink(points, m, n_sink)
        nu = shift_prefix(mu, shift)
        out.append(sensitivity(att, mu, nu, T, p=p, n_times=n_times, method=method, h=h).ratio[..., -1])
    return np.stack(out, axis=-1)


def fit_exponent(x, y):
    r"""Least-squares power law :math:`y \approx c\,x^{b}` in log–log coordinates.

    Parameters
    ----------
    x, y : array_like, shape (M,)
        Positive values, ``M >= 2``.

    Returns
    -------
    b : float
        The fitted exponent (e.g. :math:`b = -1` for the :math:`1/m(\{0\})` of the bound).
    c : float
        The prefactor.
    """
    x = as_float_array("x", x, ndim=1)
    y = as_float_array("y", y, shape=(x.size,))
    if x.size < 2 or np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("x and y must hold at least two positive values each")
    b, log_c = np.polyfit(np.log(x), np.log(y), 1)
    return float(b), float(np.exp(log_c))
