r"""Bounds for masked attention: the prefix average, its norms on :math:`L^p(m)`, the constants.

A perturbation of the fibres of a masked (causal) measure reaches the token at position
:math:`s` through the *prefix average* :math:`H_m` of the fibre distances over :math:`[0, s]`;
its norm :math:`\kappa_p(m)` on :math:`L^p(m)` decides in which distance the masked stability
estimate needs an atom of the position marginal at :math:`s = 0` (the chapter "Masked
attention", equations ``eq-masked-prefix`` to ``eq-masked-series``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import (
    as_at_least,
    as_count,
    as_flag,
    as_float_array,
    as_positive,
    as_sink_mass,
    as_square,
    as_times,
    as_weights,
)

# ---- the prefix average and its norms ------------------------------------------------------


def prefix_average_matrix(weights: ArrayLike, positions: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""The prefix average :math:`H_m`, the causal attention of zero scores, as a matrix.

    .. math::
        (H_m u)_i = \frac{1}{m([0, s_i])}\sum_{j:\, s_j \le s_i} w_j u_j ,
        \qquad m([0, s_i]) = \sum_{j:\, s_j \le s_i} w_j .

    With :math:`A = 0` the causal softmax field is exactly :math:`\Gamma = V (H_m X)` row by row,
    and a perturbation :math:`u` of the fibres reaches the token at :math:`s` as
    :math:`(H_m u)(s)` (chapter "Masked attention", equation ``eq-masked-prefix``).

    Parameters
    ----------
    weights : array_like, shape (n,)
        Non-negative masses, positive total, with a positive mass at the smallest position.
    positions : array_like, shape (n,), optional
        Default: distinct and increasing in the given order (``H`` lower triangular).

    Returns
    -------
    ndarray, shape (n, n)
        Row-stochastic: every row sums to 1.
    """
    w = as_weights("weights", weights, normalised=False)
    s = (
        np.arange(w.size, dtype=float)
        if positions is None
        else as_float_array("positions", positions, shape=(w.size,))
    )
    seen = s[None, :] <= s[:, None]  # (i, j): key j visible from query i
    prefix = seen @ w
    if np.any(prefix <= 0):
        raise ValueError(
            "weights must give every token a positive prefix mass m([0, s_i]) "
            "(a positive weight at the smallest position)"
        )
    return seen * w[None, :] / prefix[:, None]


def lp_operator_norm(E: ArrayLike, masses: ArrayLike, p: float) -> float:
    r"""Operator norm of the matrix ``E`` on :math:`\ell^p(m)`, :math:`\|u\|_p^p = \sum_i m_i|u_i|^p`.

    Computed from the matrix: :math:`p = 1`, the largest weighted column sum
    :math:`\max_j m_j^{-1}\sum_i m_i|E_{ij}|`; :math:`p = \infty`, the largest row sum
    :math:`\max_i \sum_j |E_{ij}|`; :math:`p = 2`, the largest singular value of
    :math:`D^{1/2} E D^{-1/2}`, :math:`D = \mathrm{diag}(m)`.

    Parameters
    ----------
    E : array_like, shape (K, K)
    masses : array_like, shape (K,)
        Positive.
    p : {1, 2, inf}

    Returns
    -------
    float
    """
    E = as_square("E", E)
    m = as_float_array("masses", masses, shape=(E.shape[0],))
    if np.any(m <= 0):
        raise ValueError("masses must be positive")
    p = _as_p(p, (1.0, 2.0, np.inf))
    if p == 1:
        return float(np.max((m @ np.abs(E)) / m))
    if p == np.inf:
        return float(np.max(np.abs(E).sum(axis=1)))
    r = np.sqrt(m)
    return float(np.linalg.norm(r[:, None] * E / r[None, :], 2))


def hardy_constant(masses: ArrayLike, p: float) -> float:
    r"""The bound :math:`\kappa_p(m)` on the norm of the prefix average :math:`H_m` on
    :math:`\ell^p(m)`, for fibre masses listed in increasing position.

    .. math::
        \kappa_1(m) = \sum_i \frac{m_i}{m([0, s_i])} \le 1 + \ln\frac{1}{m_1}, \qquad
        \kappa_p = \frac{p}{p - 1}\ (1 < p < \infty), \qquad \kappa_\infty = 1 .

    :math:`\kappa_1` is the norm itself; :math:`p/(p-1)` is Hardy's constant, which holds for
    every marginal, with or without an atom (the chapter "Masked attention" proves both, equations
    ``eq-masked-kappa1`` and ``eq-masked-hardy``). Only :math:`\kappa_1` depends on :math:`m`, and
    it grows without bound as the first mass :math:`m_1` goes to 0.

    Parameters
    ----------
    masses : array_like, shape (K,)
        Positive fibre masses, in increasing order of position.
    p : float
        ``p >= 1`` or ``inf``.

    Returns
    -------
    float
    """
    m = as_float_array("masses", masses, ndim=1)
    if m.size == 0 or np.any(m <= 0):
        raise ValueError("masses must be a non-empty array of positive numbers")
    p = _as_p(p)
    if p == np.inf:
        return 1.0
    return float(np.sum(m / np.cumsum(m))) if p == 1.0 else p / (p - 1.0)


def _as_p(p, choices=None):
    """``p`` as a float: a real number >= 1 or inf (one of ``choices`` when given), not a bool."""
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise TypeError(
            f"p must be a real number >= 1 or inf (an int or float), got {type(p).__name__} {p!r:.40}"
        )
    p = float(p)
    if choices is not None and p not in choices:
        raise ValueError(f"p must be 1, 2 or inf, got {p!r}")
    if not p >= 1.0:  # also NaN
        raise ValueError(f"p must be a real number >= 1 or inf, got {p!r}")
    return p


def _finite_constant(name, value, log_value, hint=""):
    """``value`` if finite, else FloatingPointError giving its logarithm (issue: silent inf)."""
    if not np.all(np.isfinite(value)):
        raise FloatingPointError(
            f"{name} exceeds the float range (its natural log is {np.max(log_value):.6g}){hint}"
        )
    return value


# ---- explicit constants ----------------------------------------------------------------------


def _softmax_constants(A, V, R):
    r"""(L_x, L_mu): :math:`\|V\|\|A\|R^2` and :math:`\|V\|(1 + 2\|A\|R^2)e^{2\|A\|R^2}`."""
    a, v = np.linalg.norm(A, 2), np.linalg.norm(V, 2)
    L_x = v * a * R**2
    L_mu = v * (1.0 + 2.0 * a * R**2) * np.exp(2.0 * a * R**2)
    return L_x, L_mu


def masked_lipschitz_constant(A: ArrayLike, V: ArrayLike, R: float, sink_mass: float, p: float = 1) -> float:
    r"""Pointwise Lipschitz constant of the masked softmax field in :math:`W_p^{\rm cond}`.

    .. math::
        \sup_{x, s}|\Gamma_\mu(x, s) - \Gamma_\nu(x, s)| \le
        \frac{L_\mu(R)}{m(\{0\})^{1/p}}\; W_p^{\rm cond}(\mu, \nu), \qquad
        L_\mu(R) = \|V\|\,(1 + 2\|A\|R^2)\,e^{2\|A\|R^2},

    for :math:`\mu, \nu` supported in :math:`B_R \times [0, 1]` with the same position marginal
    :math:`m`, :math:`|x| \le R` (spectral norms). It follows from the prefix bound
    ``eq-masked-prefix`` of the chapter "Masked attention" by Hölder's inequality on
    :math:`[0, s]` and :math:`m([0, s]) \ge m(\{0\})`; a shift of the sink fibre attains it as
    :math:`A \to 0`. For ``p = inf`` (the supremum over fibres) the constant is
    :math:`L_\mu(R)`, with no atom.

    Parameters
    ----------
    A, V : array_like, shape (d, d)
    R : float
        Radius of the supports, > 0.
    sink_mass : float
        :math:`m(\{0\}) \in (0, 1)`; may be 0 for ``p = inf``.
    p : float, default 1
        ``p >= 1`` or ``inf``.

    Returns
    -------
    float
    """
    A = as_square("A", A)
    V = as_square("V", V, A.shape[0])
    R = as_positive("R", R)
    p = _as_p(p)
    m = as_sink_mass(sink_mass, allow_zero=p == np.inf)
    a, v = np.linalg.norm(A, 2), np.linalg.norm(V, 2)
    log_value = (
        np.log(v) + np.log1p(2.0 * a * R**2) + 2.0 * a * R**2 - (0.0 if p == np.inf else np.log(m) / p)
    )
    with np.errstate(over="ignore"):
        L_mu = _softmax_constants(A, V, R)[1]
        _finite_constant(
            "the Lipschitz constant",
            L_mu if p == np.inf else L_mu / m ** (1.0 / p),
            log_value,
            " (R or A too large)",
        )
    if p == np.inf:
        return float(L_mu)
    return float(L_mu / m ** (1.0 / p))


def masked_stability_constant(
    A: ArrayLike, V: ArrayLike, R0: float, times: ArrayLike, masses: ArrayLike, p: float, log: bool = False
) -> NDArray[np.float64]:
    r"""Stability constant of masked softmax attention in :math:`W_p^{\rm cond}` (``p = inf``: the
    supremum over fibres).

    .. math::
        C_p(t) = \exp\!\Big(t\,\big[L_x(R_t) + \kappa_p(m)\,L_\mu(R_t)\big]\Big),\qquad
        R_t = R_0 e^{\|V\|t},\quad L_x(R) = \|V\|\|A\|R^2,

    with :math:`\kappa_p` of :func:`hardy_constant` and :math:`L_\mu` of
    :func:`masked_lipschitz_constant`: the Grönwall argument of the chapter "Masked attention",
    equation ``eq-masked-stability``. At :math:`A = 0` it is :math:`e^{t\kappa_p\|V\|}`; for
    :math:`A \ne 0` the factor :math:`e^{2\|A\|R_t^2}` makes it astronomically large.

    Parameters
    ----------
    A, V : array_like, shape (d, d)
    R0 : float
        Radius of the initial supports, > 0.
    times : array_like, shape (T,)
        Increasing, >= 0.
    masses : array_like, shape (K,)
        The position marginal's masses in increasing position (see :func:`tpde_lib.masked.position_marginal`).
    p : float
        ``p >= 1`` or ``inf``.
    log : bool, default False
        Return the natural logarithm of :math:`C_p(t)` (which overflows much later).

    Returns
    -------
    ndarray, shape (T,)
    """
    A = as_square("A", A)
    V = as_square("V", V, A.shape[0])
    R0 = as_positive("R0", R0)
    t = as_times("times", times)
    if t[0] < 0:
        raise ValueError(f"times must be >= 0, got {t[0]!r}")
    kappa = hardy_constant(masses, p)
    log = as_flag("log", log)
    with np.errstate(over="ignore", invalid="ignore"):
        R_t = R0 * np.exp(np.linalg.norm(V, 2) * t)
        L_x, L_mu = _softmax_constants(A, V, R_t)
        log_C = np.where(t == 0, 0.0, t * (L_x + kappa * L_mu))
        if not np.all(np.isfinite(log_C)):
            k = int(np.argmax(~np.isfinite(log_C)))
            raise FloatingPointError(
                f"log C_p(t) exceeds the float range from times[{k}]="
                f"{t[k]:g} on (the factor exp(2|A| R_t^2) with R_t = R0 "
                "e^{|V| t}): shorten times"
            )
        if log:
            return log_C
        C = np.exp(log_C)
    return _finite_constant("C_p(t)", C, log_C, ": use log=True")


def linear_sink_response(t: float, sink_mass: float, n_terms: int = 120) -> float:
    r"""The :math:`W_1^{\rm cond}` amplification of a sink shift in the linear model, continuum limit.

    With :math:`A = 0`, :math:`V = I` and the position marginal
    :math:`m = a\,\delta_0 + (1 - a)\,\mathrm{d}s` on :math:`(0, 1]`, a shift of the sink fibre
    grows in :math:`W_1^{\rm cond}` by the factor

    .. math::
        \rho_1(t, a) = \sum_{n \ge 0} \frac{t^n}{n!}\sum_{i=0}^{n}\frac{\ell^i}{i!},
        \qquad \ell = \ln\frac1a ,

    derived in the chapter "Masked attention" (equation ``eq-masked-series``); it lies between
    :math:`I_0(2\sqrt{t\ell})` and :math:`e^t I_0(2\sqrt{t\ell})`.

    Parameters
    ----------
    t : float
        Time, >= 0.
    sink_mass : float
        :math:`a \in (0, 1)`.
    n_terms : int, default 120
        Terms of the outer sum; the tail is below round-off for :math:`t, \ell \le 20`
        (``ValueError`` when the last term kept is not below :math:`10^{-16}` of the sum).

    Raises
    ------
    FloatingPointError
        The response exceeds the float range (large ``t``).

    Returns
    -------
    float
    """
    t = as_at_least("t", t, 0.0)
    ell = np.log(1.0 / as_sink_mass(sink_mass))
    n_terms = as_count("n_terms", n_terms, 1)
    if t == 0:
        return 1.0
    k = np.arange(n_terms)
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, k.size)))])
    truncated_exp = np.cumsum(np.exp(k * np.log(ell) - log_fact)) if ell > 0 else np.ones(k.size)
    with np.errstate(over="ignore"):
        terms = np.exp(k * np.log(t) - log_fact) * truncated_exp
        value = np.sum(terms)
    if not np.isfinite(value):
        raise FloatingPointError(
            f"linear_sink_response exceeds the float range at t={t:g} (it grows like e^t)"
        )
    # the terms decrease once n > t + ell; the omitted tail is below the last term times
    # (1 + ...) ~ e^t / (n-1)!, so a last term above 1e-16 of the sum means n_terms is too small
    if n_terms < t + ell + 2 or terms[-1] > 1e-16 * value:
        raise ValueError(
            f"n_terms={n_terms} is too small for t={t:g}, ln(1/sink_mass)="
            f"{ell:.3g}: the last term is {terms[-1] / value:.2g} of the sum "
            "(raise n_terms)"
        )
    return float(value)
