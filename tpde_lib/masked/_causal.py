r"""Causal attention on the sphere: leaders, and the retrieval profile of tokens on the circle.

Causal (decoder) attention is masked attention with one token per position: token :math:`j`
attends to the tokens :math:`k \le j`. On the sphere with :math:`V = I` the first token sees only
itself and never moves (the atom at :math:`s = 0` of the chapter "Masked attention"). This module
holds what the chapter "Causal attention" needs beyond the library's causal variants:

* :func:`renyi_centers`: the tokens that, read in order, are at distance at least
  :math:`\delta` from every earlier centre (a sequential packing, Rényi's parking process), or
  from every earlier token (``strong=True``);
* the causal dynamics of tokens on the circle :math:`x_j = (\cos\theta_j, \sin\theta_j)` with a
  linear positional bias of slope :math:`\lambda` (ALiBi), vectorised over independent draws
  (:func:`circle_field`, :func:`circle_retrieval`), in two normalisations: the softmax of the
  book (``normalised=True``) and the positional average of the unnormalised kernel
  (``normalised=False``);
* the next-order correlation between the last token and a source token for iid uniform tokens:
  its closed form in the limit of many tokens (:func:`correlation_closed_form`,
  :func:`retrieval_profile`, :func:`retrieval_threshold`) and its linear prediction for
  :math:`n` tokens (:func:`correlation_linear`).

The derivations are in the appendix, section "Causal attention".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import as_at_least, as_count, as_flag, as_float_array, as_positive, as_seed, as_times

# ---- leaders: the sequential packing of the tokens ------------------------------------------


def renyi_centers(points: ArrayLike, delta: float, strong: bool = False) -> NDArray[np.intp]:
    r"""Indices of the Rényi centres of tokens read in their causal order.

    Token 0 is a centre; token :math:`k` is a centre when :math:`|x_k - x_c| \ge \delta` for every
    earlier centre :math:`c` (the sequential packing of Rényi's parking problem). With
    ``strong=True`` it must be at distance :math:`\ge \delta` from *every* earlier token: such a
    token attends to itself with weight at least :math:`1/(1 + k e^{-\beta\delta^2/2})` at
    :math:`A = \beta I` (appendix, "Causal attention").

    Parameters
    ----------
    points : array_like, shape (n, d)
        Tokens in causal order (unit vectors for the sphere; any points are accepted).
    delta : float
        Separation, > 0 (Euclidean distance).
    strong : bool, default False
        Separation from all earlier tokens instead of the earlier centres.

    Returns
    -------
    ndarray of int, shape (k,)
        Increasing indices; always starts with 0.

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> a = np.array([0.0, 0.1, 1.0, 0.9, 2.0])
    >>> x = np.stack([np.cos(a), np.sin(a)], axis=1)
    >>> tp.masked.renyi_centers(x, 0.5).tolist()
    [0, 2, 4]
    >>> tp.masked.renyi_centers(x, 0.95, strong=True).tolist()  # token 2 is 0.87 from token 1
    [0, 4]
    """
    x = as_float_array("points", points, ndim=2)
    delta = as_positive("delta", delta)
    strong = as_flag("strong", strong)
    dist = np.linalg.norm(x[:, None, :] - x[None, :, :], axis=-1)
    centres = [0]
    for k in range(1, x.shape[0]):
        earlier = np.arange(k) if strong else np.asarray(centres)
        if dist[k, earlier].min() >= delta:
            centres.append(k)
    return np.asarray(centres, dtype=np.intp)


# ---- the retrieval profile: closed form ------------------------------------------------------


def mode_rates(beta: float, n_modes: int, normalised: bool = True) -> NDArray[np.float64]:
    r"""Growth rates :math:`a_m` of the Fourier modes :math:`m = 1, \dots, n_{\rm modes}` of the
    causal dynamics on the circle, linearised at the uniform law.

    .. math::
        a_m = m^2 I_m(\beta) \quad\text{(unnormalised kernel)},\qquad
        a_m = \frac{m^2 I_m(\beta)}{\beta I_0(\beta)} \quad\text{(softmax)},

    with :math:`I_m` the modified Bessel functions (appendix, "Causal attention").

    Parameters
    ----------
    beta : float
        Inverse temperature, > 0.
    n_modes : int
        Number of modes, >= 1.
    normalised : bool, default True
        Softmax (True) or the unnormalised kernel :math:`\partial_\theta e^{\beta\cos\theta}`.

    Returns
    -------
    ndarray, shape (n_modes,)

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> from scipy.special import iv
    >>> a = tp.masked.mode_rates(1.0, 2, normalised=False)
    >>> bool(np.allclose(a, [iv(1, 1.0), 4 * iv(2, 1.0)], rtol=1e-15))
    True
    """
    from scipy.special import ive  # lazy: scipy.special only here

    beta = as_positive("beta", beta)
    n_modes = as_count("n_modes", n_modes)
    normalised = as_flag("normalised", normalised)
    m = np.arange(1, n_modes + 1, dtype=float)
    scaled = ive(m, beta)  # I_m(beta) e^{-beta}: no overflow at large beta
    if normalised:
        return m**2 * scaled / (beta * ive(0, beta))
    return m**2 * scaled * math.exp(beta)


def _alibi_coordinates(s, lam):
    """(coefficient, Y) of the closed form at source positions s in (0, 1]."""
    if lam == 0.0:
        return np.ones_like(s), -np.log(s)
    coeff = lam * np.exp(lam * (s - 1.0)) / -np.expm1(-lam)
    return coeff, np.log(np.expm1(lam) / np.expm1(lam * s))


def _psi(c, y):
    r""":math:`\psi_c(y) = \sum_k c^{k+1} y^k / (k!(k+1)!) = \sqrt{c/y}\,I_1(2\sqrt{cy})`."""
    from scipy.special import ive

    z = 2.0 * np.sqrt(c * y)
    small = z < 1e-6
    safe = np.where(small, 1.0, z)
    bessel = 2.0 * c * ive(1, safe) * np.exp(safe) / safe  # sqrt(c/y) I_1(z) = 2c I_1(z)/z
    return np.where(small, c * (1.0 + c * y / 2.0), bessel)


def _source_positions(s):
    s = as_float_array("s", s)
    if np.any(s <= 0) or np.any(s > 1):
        raise ValueError("s must lie in (0, 1] (source positions; the query is at 1)")
    return s


def correlation_closed_form(s: ArrayLike, rate: float, t: float, lam: float = 0.0) -> NDArray[np.float64]:
    r"""The next-order correlation of one Fourier mode between the last token (position 1) at
    depth :math:`t` and a source at position :math:`s`, for iid uniform tokens on the circle and
    infinitely many of them.

    .. math::
        g(t; s) = \frac{\lambda e^{\lambda s}}{e^\lambda - 1}\,\psi_{at}\big(Y_\lambda(s)\big),
        \qquad Y_\lambda(s) = \log\frac{e^\lambda - 1}{e^{\lambda s} - 1},\qquad
        \psi_c(y) = \sum_{k\ge 0}\frac{c^{k+1}y^k}{k!\,(k+1)!},

    (:math:`\lambda = 0`: coefficient 1 and :math:`Y = \log(1/s)`). With :math:`n` tokens,
    :math:`n\,\mathbb E[\cos m(\theta_n(t) - \theta_k(0))] \to g` for the source :math:`k` at
    :math:`s`, ``rate`` :math:`= a_m` (:func:`mode_rates`). Derived in the appendix ("Causal
    attention") as the resolvent of a Volterra operator in the position.

    Parameters
    ----------
    s : array_like
        Source positions in (0, 1].
    rate : float
        The mode's rate :math:`a_m \ge 0`.
    t : float
        Depth, >= 0.
    lam : float, default 0.0
        Slope of the positional bias, >= 0.

    Returns
    -------
    ndarray, the shape of ``s``

    Examples
    --------
    At :math:`s = 1` the series starts at :math:`at`, times :math:`\lambda/(1 - e^{-\lambda})`:

    >>> import numpy as np, tpde_lib as tp
    >>> g = tp.masked.correlation_closed_form([1.0], 0.5, 2.0, lam=1.0)
    >>> bool(np.isclose(g[0], 1.0 / (1 - np.exp(-1.0)), rtol=1e-14))
    True
    """
    s = _source_positions(s)
    rate = as_at_least("rate", rate, 0.0)
    t = as_at_least("t", t, 0.0)
    lam = as_at_least("lam", lam, 0.0)
    coeff, y = _alibi_coordinates(s, lam)
    return coeff * _psi(rate * t, np.maximum(y, 0.0))


def _fourier_weights(M, n_modes):
    m = np.arange(1, n_modes + 1, dtype=float)
    return np.exp(-0.5 * (math.pi * m / M) ** 2)


def retrieval_profile(
    s: ArrayLike,
    beta: float,
    t: float,
    lam: float = 1.0,
    M: float = 8.0,
    n_modes: int = 20,
    normalised: bool = True,
) -> NDArray[np.float64]:
    r"""The retrieval profile :math:`S_t(s) = \sum_{m=1}^{n_{\rm modes}} \omega_m\, g_m(t; s)`,
    :math:`\omega_m = e^{-\pi^2 m^2/(2M^2)}`.

    :math:`\omega_m` are the Fourier coefficients of a wrapped Gaussian of width
    :math:`\pi/M`, :math:`\varphi_M(\theta) = 1 + 2\sum_m \omega_m\cos m\theta`; so
    :math:`2S_t(s) = \lim n\,(\mathbb E[\varphi_M(\theta_n(t) - \theta_k(0))] - 1)`: how much more
    often than chance the last token points, at depth :math:`t`, within about :math:`\pi/M` of
    where the source at :math:`s` started.

    Parameters
    ----------
    s : array_like
        Source positions in (0, 1].
    beta, t, lam : float
        Inverse temperature (> 0), depth (>= 0), slope of the positional bias (>= 0).
    M : float, default 8.0
        Resolution, > 0.
    n_modes : int, default 20
        Modes summed, >= 1.
    normalised : bool, default True
        Softmax (True) or the unnormalised kernel (see :func:`mode_rates`).

    Returns
    -------
    ndarray, the shape of ``s``

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> S = tp.masked.retrieval_profile(np.linspace(0.05, 1, 96), 1.0, 1.0, lam=2.0)
    >>> 0 < int(np.argmin(S)) < 95  # an interior minimum: U-shaped
    True
    """
    s = _source_positions(s)
    rates = mode_rates(beta, n_modes, normalised)
    w = _fourier_weights(as_positive("M", M), n_modes)
    return sum(wm * correlation_closed_form(s, a, t, lam) for wm, a in zip(w, rates))


def retrieval_threshold(
    beta: float, lam: float = 1.0, M: float = 8.0, n_modes: int = 20, normalised: bool = True
) -> float:
    r"""The depth below which the retrieval profile rises at :math:`s = 1` (recency):

    .. math::
        t_{\rm crit} = 2(1 - e^{-\lambda})\,\frac{\sum_m \omega_m a_m}{\sum_m \omega_m a_m^2},

    the root of :math:`\partial_s S_t(1) = 0` (appendix, "Causal attention"). For
    :math:`t < t_{\rm crit}` the profile increases at the end of the prompt.

    Parameters
    ----------
    beta, lam, M, n_modes, normalised
        As in :func:`retrieval_profile`; ``lam`` must be > 0 (at 0 the threshold is 0).

    Returns
    -------
    float

    Examples
    --------
    >>> import tpde_lib as tp
    >>> round(tp.masked.retrieval_threshold(1.0, normalised=False), 6)
    2.457489
    """
    lam = as_positive("lam", lam)
    a = mode_rates(beta, n_modes, normalised)
    w = _fourier_weights(as_positive("M", M), n_modes)
    return float(-2.0 * math.expm1(-lam) * (w @ a) / (w @ a**2))


# ---- the circle: n tokens, their dynamics and the linear prediction ----------------------------


def _positional_logits(n, lam, normalised):
    """(n, n) log-weights of the positional bias, -inf where masked."""
    j = np.arange(n)
    rel = (j[:, None] - j[None, :]) / n  # s_j - s_k with s_j = (j + 1) / n
    keep = rel >= 0 if normalised else rel > 0
    with np.errstate(divide="ignore"):
        logw = np.where(keep, -lam * rel, -np.inf)
    if not normalised:  # the positional average over k < j (token 0: no keys, no motion)
        top = np.where(keep, logw, -np.inf).max(axis=1, keepdims=True)
        top = np.where(np.isfinite(top), top, 0.0)
        total = np.where(keep, np.exp(logw - top), 0.0).sum(axis=1, keepdims=True)
        logw = np.where(keep, logw - top - np.log(np.where(total > 0, total, 1.0)), -np.inf)
    return logw


def correlation_linear(
    n: int, beta: float, t: float, mode: int = 1, lam: float = 0.0, normalised: bool = True
) -> NDArray[np.float64]:
    r"""The linear prediction of :math:`n\,\mathbb E[\cos m(\theta_n(t) - \theta_k(0))]` for
    :math:`n` iid uniform tokens: :math:`n\,[e^{t\,m^2 I_m(\beta)\,G}]_{n,k}`.

    :math:`G` is strictly lower triangular: the positional weight of key :math:`k` for query
    :math:`j` divided by the query's mean softmax denominator at the uniform law,
    :math:`\beta(e^\beta w_{jj} + I_0(\beta)\sum_{k<j} w_{jk})` (``normalised=True``), or the
    positional average itself (``normalised=False``). It solves the linearised law of each token
    with the tokens independent; as :math:`n \to \infty` it tends to
    :func:`correlation_closed_form` (a Riemann sum of the Volterra operator).

    Parameters
    ----------
    n : int
        Tokens, >= 2 (positions :math:`(k + 1)/n`).
    beta, t : float
        > 0 and >= 0.
    mode : int, default 1
        The Fourier mode :math:`m \ge 1`.
    lam : float, default 0.0
        Slope of the positional bias, >= 0.
    normalised : bool, default True

    Returns
    -------
    ndarray, shape (n,)
        Entry :math:`k` for the source at position :math:`(k + 1)/n`; the last entry (the query
        itself) is :math:`n` times a diagonal term, not a correlation.

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> lin = tp.masked.correlation_linear(400, 1.0, 1.0, lam=1.0, normalised=False)
    >>> cf = tp.masked.correlation_closed_form(0.5, tp.masked.mode_rates(1.0, 1, False)[0], 1.0, 1.0)
    >>> bool(abs(lin[199] / cf - 1) < 0.01)
    True
    """
    from scipy.linalg import expm  # lazy
    from scipy.special import ive

    n = as_count("n", n, 2)
    beta = as_positive("beta", beta)
    t = as_at_least("t", t, 0.0)
    mode = as_count("mode", mode)
    lam = as_at_least("lam", lam, 0.0)
    normalised = as_flag("normalised", normalised)
    w = np.exp(_positional_logits(n, lam, normalised))
    if normalised:
        denom = beta * (
            np.diag(w) * math.exp(beta) + (w.sum(axis=1) - np.diag(w)) * ive(0, beta) * math.exp(beta)
        )
        G = np.tril(w, -1) / denom[:, None]
    else:
        G = w
    growth = mode**2 * ive(mode, beta) * math.exp(beta)
    return n * expm(t * growth * G)[-1]


def _circle_velocity(theta, beta, logw, normalised, tangent=False):
    """Velocities (D, n) and, with ``tangent``, the Jacobian (D, n, n) of the field."""
    c, s = np.cos(theta), np.sin(theta)
    # u[., j, k] = theta_k - theta_j through the addition formulas: n trig calls, not n^2
    cos = c[:, :, None] * c[:, None, :] + s[:, :, None] * s[:, None, :]
    sin = c[:, :, None] * s[:, None, :] - s[:, :, None] * c[:, None, :]
    score = beta * cos + logw
    if normalised:
        score = score - score.max(axis=2, keepdims=True)
        p = np.exp(score)
        p /= p.sum(axis=2, keepdims=True)
        v = (p * sin).sum(axis=2)
        if not tangent:
            return v, None
        M = p * (cos - beta * sin**2 + beta * v[:, :, None] * sin)
    else:
        e = np.exp(score)  # logw is the normalised positional log-weight: e <= e^beta
        v = beta * (e * sin).sum(axis=2)
        if not tangent:
            return v, None
        M = beta * e * (cos - beta * sin**2)
    idx = np.arange(theta.shape[1])
    M[:, idx, idx] = 0.0
    M[:, idx, idx] = -M.sum(axis=2)
    return v, M


def circle_field(
    theta: ArrayLike, beta: float, lam: float = 0.0, normalised: bool = True
) -> NDArray[np.float64]:
    r"""Velocities of the causal dynamics of tokens on the circle, for a batch of sequences.

    Token :math:`j` (position :math:`(j + 1)/n`) at angle :math:`\theta_j` moves with

    .. math::
        \dot\theta_j = \sum_{k \le j} p_{jk}\sin(\theta_k - \theta_j),\qquad
        p_{jk} \propto e^{\beta\cos(\theta_k - \theta_j) - \lambda (j - k)/n}

    (``normalised=True``: the softmax of the sphere model with :math:`A = \beta I`, :math:`V = I`
    and a linear positional bias), or with
    :math:`\dot\theta_j = \beta\sum_{k<j} w_{jk}\sin(\theta_k - \theta_j)e^{\beta\cos(\theta_k -
    \theta_j)}`, :math:`w_{jk} \propto e^{-\lambda(j-k)/n}` summing to 1 over :math:`k < j`
    (``normalised=False``).

    Parameters
    ----------
    theta : array_like, shape (n,) or (D, n)
        Angles of the tokens in causal order, for one or D sequences.
    beta : float
        > 0.
    lam : float, default 0.0
        Slope of the positional bias, >= 0.
    normalised : bool, default True

    Returns
    -------
    ndarray, the shape of ``theta``

    Examples
    --------
    The first token sees only itself and does not move:

    >>> import numpy as np, tpde_lib as tp
    >>> v = tp.masked.circle_field(np.random.default_rng(0).uniform(0, 6, 5), 2.0, lam=1.0)
    >>> float(v[0])
    0.0
    """
    th = as_float_array("theta", theta)
    if th.ndim not in (1, 2) or th.shape[-1] < 2:
        raise ValueError(f"theta must have shape (n,) or (D, n) with n >= 2, got {th.shape}")
    beta = as_positive("beta", beta)
    lam = as_at_least("lam", lam, 0.0)
    normalised = as_flag("normalised", normalised)
    batch = th[None] if th.ndim == 1 else th
    v, _ = _circle_velocity(batch, beta, _positional_logits(batch.shape[1], lam, normalised), normalised)
    return v[0] if th.ndim == 1 else v


def circle_simulate(
    theta0: ArrayLike,
    beta: float,
    times: ArrayLike,
    lam: float = 0.0,
    normalised: bool = True,
    h: float = 0.1,
) -> NDArray[np.float64]:
    r"""Integrate the causal dynamics of :func:`circle_field` for a batch of sequences (RK4).

    Parameters
    ----------
    theta0 : array_like, shape (n,) or (D, n)
        Initial angles, in causal order.
    beta : float
        > 0.
    times : array_like, shape (T,)
        Increasing, starting anywhere; each interval is split into equal steps of at most ``h``.
    lam : float, default 0.0
        Slope of the positional bias, >= 0.
    normalised : bool, default True
    h : float, default 0.1
        Largest RK4 step, > 0.

    Returns
    -------
    ndarray, shape (T,) + theta0.shape
        The angles at ``times`` (not wrapped to an interval).

    Examples
    --------
    Two tokens close in (the second moves, the first does not):

    >>> import numpy as np, tpde_lib as tp
    >>> th = tp.masked.circle_simulate([0.0, 1.0], 2.0, [0.0, 5.0])
    >>> float(th[-1, 0]), bool(0 < th[-1, 1] < 1.0)
    (0.0, True)
    """
    th = as_float_array("theta0", theta0)
    if th.ndim not in (1, 2) or th.shape[-1] < 2:
        raise ValueError(f"theta0 must have shape (n,) or (D, n) with n >= 2, got {th.shape}")
    beta = as_positive("beta", beta)
    t = as_times("times", times)
    lam = as_at_least("lam", lam, 0.0)
    normalised = as_flag("normalised", normalised)
    h = as_positive("h", h)
    batch = (th[None] if th.ndim == 1 else th).copy()
    logw = _positional_logits(batch.shape[1], lam, normalised)

    def f(x):
        return _circle_velocity(x, beta, logw, normalised)[0]

    out = [batch.copy()]
    for dt in np.diff(t):
        steps = max(1, math.ceil(dt / h - 1e-9))
        step = dt / steps
        for _ in range(steps):
            k1 = f(batch)
            k2 = f(batch + 0.5 * step * k1)
            k3 = f(batch + 0.5 * step * k2)
            k4 = f(batch + step * k3)
            batch = batch + step / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        out.append(batch.copy())
    res = np.stack(out)
    return res[:, 0] if th.ndim == 1 else res


@dataclass(frozen=True)
class Retrieval:
    """Result of :func:`circle_retrieval`.

    Attributes
    ----------
    positions : ndarray, shape (n,)
        The source positions :math:`(k + 1)/n`.
    modes : ndarray of int, shape (m,)
    mean : ndarray, shape (m, n)
        Estimates of :math:`n\\,\\mathbb E[\\cos m(\\theta_n(t) - \\theta_k(0))]` (last column: the
        query itself).
    stderr : ndarray, shape (m, n)
        Their standard errors (standard deviation over the draws / sqrt(draws)).
    draws : int
    samples : ndarray, shape (m, draws, n)
        The estimator's value for each draw (for statistics of combinations of modes).
    final : ndarray, shape (draws, n)
        The angles at depth t.
    """

    positions: np.ndarray
    modes: np.ndarray
    mean: np.ndarray
    stderr: np.ndarray
    draws: int
    samples: np.ndarray
    final: np.ndarray


def circle_retrieval(
    n: int,
    beta: float,
    t: float,
    lam: float = 0.0,
    draws: int = 1000,
    modes: tuple[int, ...] = (1, 2),
    normalised: bool = True,
    h: float = 0.1,
    seed: int = 0,
    estimator: str = "tangent",
) -> Retrieval:
    r"""The correlation between the last token at depth :math:`t` and each source, by particles:
    ``draws`` independent sequences of :math:`n` iid uniform tokens on the circle, integrated
    together (RK4, step ``h``).

    Two unbiased estimators of :math:`n\,\mathbb E[\cos m(\theta_n(t) - \theta_k(0))]`:

    * ``"plain"``: :math:`n[\cos m(\theta_n(t) - \theta_k(0)) - \cos m(\theta_n(0) - \theta_k(0))]`
      (the second term has mean 0 and removes most of the noise at small depth);
    * ``"tangent"``: :math:`n\cos m(\theta_n(t) - \theta_k(0))\,\partial\theta_n(t)/\partial
      \theta_k(0)`, the real part of the identity
      :math:`\mathbb E[e^{-im(\Phi - \theta_k)}] = \mathbb E[e^{-im(\Phi - \theta_k)}\,
      \partial_{\theta_k}\Phi]` (integration by parts in the uniform :math:`\theta_k`; appendix),
      whose variance does not grow with :math:`n`. The Jacobian is the exact derivative of the
      RK4 map (the variational equation integrated with the same stages).

    Parameters
    ----------
    n : int
        Tokens, >= 2.
    beta, t : float
        > 0 and > 0.
    lam : float, default 0.0
        Slope of the positional bias, >= 0.
    draws : int, default 1000
        Independent sequences, >= 2.
    modes : tuple of int, default (1, 2)
        Fourier modes, each >= 1.
    normalised : bool, default True
        The dynamics of :func:`circle_field`.
    h : float, default 0.1
        RK4 step (rounded so that a whole number of steps reaches t).
    seed : int, default 0
    estimator : {"tangent", "plain"}

    Returns
    -------
    Retrieval

    Examples
    --------
    >>> import tpde_lib as tp
    >>> r = tp.masked.circle_retrieval(8, 1.0, 0.5, draws=50, modes=(1,), seed=1)
    >>> r.mean.shape, r.stderr.shape, r.final.shape
    ((1, 8), (1, 8), (50, 8))
    """
    n = as_count("n", n, 2)
    beta = as_positive("beta", beta)
    t = as_positive("t", t)
    lam = as_at_least("lam", lam, 0.0)
    draws = as_count("draws", draws, 2)
    if not isinstance(modes, (tuple, list, np.ndarray)):
        raise TypeError(f"modes must be a tuple of mode numbers, got {type(modes).__name__}")
    ms = np.array([as_count(f"modes[{i}]", m) for i, m in enumerate(modes)], dtype=int)
    if ms.size == 0:
        raise ValueError("modes must hold at least one mode")
    normalised = as_flag("normalised", normalised)
    h = as_positive("h", h)
    seed = as_seed("seed", seed)
    if estimator not in ("tangent", "plain"):
        raise ValueError(f"estimator must be 'tangent' or 'plain', got {estimator!r}")
    steps = max(1, math.ceil(t / h - 1e-9))
    h = t / steps
    logw = _positional_logits(n, lam, normalised)
    theta0 = np.random.default_rng(seed).uniform(0.0, 2.0 * math.pi, (draws, n))
    tangent = estimator == "tangent"

    def rhs(th, J):
        v, M = _circle_velocity(th, beta, logw, normalised, tangent)
        return v, (M @ J if tangent else None)

    th = theta0.copy()
    J = np.broadcast_to(np.eye(n), (draws, n, n)).copy() if tangent else None
    for _ in range(steps):
        k1, K1 = rhs(th, J)
        k2, K2 = rhs(th + 0.5 * h * k1, J + 0.5 * h * K1 if tangent else None)
        k3, K3 = rhs(th + 0.5 * h * k2, J + 0.5 * h * K2 if tangent else None)
        k4, K4 = rhs(th + h * k3, J + h * K3 if tangent else None)
        th = th + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        if tangent:
            J = J + h / 6.0 * (K1 + 2.0 * K2 + 2.0 * K3 + K4)
    phase = th[:, -1:] - theta0  # theta_n(t) - theta_k(0), (draws, n)
    if tangent:
        samples = [n * np.cos(m * phase) * J[:, -1, :] for m in ms]
    else:
        start = theta0[:, -1:] - theta0
        samples = [n * (np.cos(m * phase) - np.cos(m * start)) for m in ms]
    X = np.stack(samples)  # (modes, draws, n)
    return Retrieval(
        positions=np.arange(1, n + 1) / n,
        modes=ms,
        mean=X.mean(axis=1),
        stderr=X.std(axis=1, ddof=1) / math.sqrt(draws),
        draws=draws,
        samples=X,
        final=th,
    )
