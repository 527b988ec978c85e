r"""Measured sensitivity of masked attention: two solutions compared fibre by fibre.

:func:`sensitivity` simulates two masked measures with the same integrator and measures the
conditional distance :math:`W_p^{\mathrm{cond}}` (and optionally the supremum over fibres)
between them over time; :func:`sink_mass_sweep` and :func:`prefix_sweep` repeat it over the
sink mass and the length of a shifted prefix; :func:`fit_exponent` fits the slope of a log-log
law.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_at_least, as_count, as_flag, as_float_array, as_positive, as_times
from ..meanfield import fit_rate
from ..measures import Empirical, as_empirical
from ..particles import simulate
from ..transport import fibre_distances
from ._positions import shift_prefix, with_sink

if TYPE_CHECKING:
    from ..attention import Attention


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


def _as_ps(p):
    """``p`` (a real >= 1 or inf, or a non-empty sequence of them) as a tuple of floats."""
    items = list(p) if isinstance(p, (list, tuple, np.ndarray)) else [p]
    if not items:
        raise ValueError("p must be a number >= 1 (or inf) or a non-empty sequence of them")
    out = []
    for x in items:
        if isinstance(x, float | np.floating) and x == np.inf:
            out.append(np.inf)
        else:
            out.append(as_at_least("p", x, 1.0, " (or inf), or a sequence of them"))
    return tuple(out)


def _both_distances(mu, nu, ps):
    """(W_p^cond, sup-fibre W_p) for each p, from one set of fibre distances per p."""
    cond, sup = [], []
    for q in ps:
        _, masses, dist = fibre_distances(mu, nu, q)
        cond.append(float(np.sum(masses * dist**q)) ** (1.0 / q))
        sup.append(float(dist[masses > 0].max()))
    return cond, sup


def sensitivity(
    att: Attention,
    mu: Empirical,
    nu: Empirical,
    T: float,
    p: float | Sequence[float] = 2,
    n_times: int = 21,
    method: str = "rk4",
    h: float | None = None,
    sup: bool = False,
) -> Sensitivity:
    r"""Measured stability ratio :math:`W_p^{\rm cond}(\mu_t, \nu_t) / W_p^{\rm cond}(\mu_0, \nu_0)`.

    Both measures are simulated with :func:`tpde_lib.particles.simulate` (same attention, same
    times, same integrator) and compared fibre by fibre (:func:`~tpde_lib.transport.fibre_distances`) at every
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
        Also measure the supremum over fibres, :func:`~tpde_lib.transport.sup_fibre_distance`.

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
    ps = _as_ps(p)
    sup = as_flag("sup", sup)
    if isinstance(T, (int, float, np.integer, np.floating)) or (isinstance(T, np.ndarray) and T.ndim == 0):
        T = as_positive("T", T)
        n_times = as_count("n_times", n_times, 2)
        times = np.linspace(0.0, T, int(n_times))
    else:
        times = as_times("T", T)
        if times[0] != 0:
            raise ValueError(f"the output times T must start at 0, got {times[0]!r}")
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


def sink_mass_sweep(
    att: Attention,
    points: ArrayLike,
    sink_masses: ArrayLike,
    shift: float,
    T: float,
    n_sink: int,
    p: float | Sequence[float] = (1, 2),
    n_times: int = 2,
    method: str = "rk4",
    h: float | None = None,
    sup: bool = False,
):
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
    _as_ps(p)
    sup = as_flag("sup", sup)
    T = as_positive("T", T)
    n_sink = as_count("n_sink", n_sink)
    out = []
    for m in masses:  # one pair of simulations per mass (the tokens are vectorised inside)
        mu = with_sink(points, m, n_sink)
        res = sensitivity(
            att, mu, shift_prefix(mu, shift), T, p=p, n_times=n_times, method=method, h=h, sup=sup
        )
        out.append(_final_ratios(res, sup))
    return _stack(out, sup)


def prefix_sweep(
    att: Attention,
    mu: Empirical,
    s_max_values: ArrayLike,
    shift: float,
    T: float,
    p: float | Sequence[float] = (1, 2),
    method: str = "rk4",
    h: float | None = None,
    sup: bool = False,
):
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
    ps = _as_ps(p)
    sup = as_flag("sup", sup)
    as_empirical("mu", mu)
    end_mu = simulate(att, mu, [0.0, T], method=method, h=h).measure(1)
    out = []
    for value in s_max:
        nu = shift_prefix(mu, shift, s_max=value)
        cond0, sup0 = _both_distances(mu, nu, ps)
        if min(cond0) <= 0:
            raise ValueError(f"s_max = {value!r} moves no token of positive weight")
        condT, supT = _both_distances(end_mu, simulate(att, nu, [0.0, T], method=method, h=h).measure(1), ps)
        ratio, sup_ratio = np.divide(condT, cond0), np.divide(supT, sup0)
        if np.ndim(p) == 0:
            ratio, sup_ratio = ratio[0], sup_ratio[0]
        out.append((ratio, sup_ratio) if sup else ratio)
    return _stack(out, sup)


def fit_exponent(x: ArrayLike, y: ArrayLike) -> tuple[float, float]:
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
