r"""The masked mean-field limit: n tokens at positions k/n against a continuum of positions.

The conditional distance :math:`W_p^{\mathrm{cond}}` of :mod:`tpde_lib.transport` compares two
measures with the *same* position marginal. The mean-field limit of masked attention compares
:math:`n` tokens at the positions :math:`k/n` with a measure whose position marginal has a
density, so the two marginals differ and :math:`W_p^{\mathrm{cond}}` is not defined. This
module couples the marginals explicitly: positions are matched by their monotone (quantile)
coupling, the optimal coupling of two measures on :math:`[0, 1]` for every convex cost, and the
values are compared along it (:func:`coupled_wasserstein`). For two measures with the same
marginal it is :math:`W_p^{\mathrm{cond}}`; for measures with one token per position (the
tokens of a sequence, or a curve :math:`s \mapsto X(s)` of a continuum) it is the
:math:`L^p` distance of the two value curves, both parametrised by the quantile of their
positions. The book states the limit, derives its rate :math:`O(1/n)` for tokens placed on a
Lipschitz curve, and measures it in the chapter "Masked attention" (section "The masked
mean-field limit"; derivation in the appendix "Derivations").
"""

from __future__ import annotations

import numpy as np

from .._checks import as_weights, unit_scale
from ..measures import Empirical

#: quantile levels closer than this are one cut (masses are probabilities, rounded to ~1e-16)
_CUT_TOL = 1e-12


def _dirac_fibres(mu, name):
    if not isinstance(mu, Empirical):
        raise TypeError(f"{name} must be an Empirical measure, got {type(mu).__name__}")
    if mu.positions is None:
        raise ValueError(f"{name} must carry positions (Empirical(..., positions=...))")
    order = np.argsort(mu.positions, kind="stable")
    s = mu.positions[order]
    if np.any(np.diff(s) == 0):
        raise ValueError(
            f"{name} must hold one token per position (Dirac fibres): "
            "coupled_wasserstein compares value curves, not fibres of several tokens"
        )
    return s, mu.weights[order], mu.points[order]


def position_quantile_pieces(w_mu, w_nu):
    r"""The monotone coupling of two discrete position marginals, as pieces of quantile levels.

    With the tokens of each measure sorted by position and cumulative masses
    :math:`F_\mu, F_\nu`, the unit interval of quantile levels is cut at every
    :math:`F_\mu(k)` and :math:`F_\nu(l)`; on each piece both quantile functions are constant,
    equal to one token of each measure.

    Levels closer than ``1e-12`` are merged (cumulative sums of equal masses differ by rounding).

    Parameters
    ----------
    w_mu, w_nu : ndarray, shapes (n,) and (N,)
        The masses of the tokens sorted by position (each summing to 1).

    Returns
    -------
    mass : ndarray, shape (K,)
        The mass of each piece (summing to 1).
    i, j : ndarray of int, shape (K,)
        The token of each measure on that piece.
    """
    w_mu, w_nu = as_weights("w_mu", w_mu), as_weights("w_nu", w_nu)
    F_mu, F_nu = np.cumsum(w_mu), np.cumsum(w_nu)
    cuts = np.unique(np.concatenate([[0.0], F_mu[:-1], F_nu[:-1], [1.0]]))
    # cumulative sums of equal masses differ by rounding (0.2 vs 0.2 + 4e-17): one cut, not a
    # piece of mass 1e-17 between two tokens that the coupling does not pair
    cuts = cuts[np.r_[True, np.diff(cuts) > _CUT_TOL]]
    cuts[-1] = 1.0
    mass = np.diff(cuts)
    mid = 0.5 * (cuts[1:] + cuts[:-1])
    i = np.minimum(np.searchsorted(F_mu, mid, side="right"), w_mu.size - 1)
    j = np.minimum(np.searchsorted(F_nu, mid, side="right"), w_nu.size - 1)
    return mass, i, j


def coupled_wasserstein(mu, nu, p=2.0):
    r"""Distance of two sequences with different position marginals, positions coupled monotonically.

    .. math::
        \widetilde W_p(\mu, \nu) = \Big(\int_0^1 \big|x_\mu(F_\mu^{-1}(u))
        - x_\nu(F_\nu^{-1}(u))\big|^p\,\mathrm du\Big)^{1/p},

    where :math:`F_\mu^{-1}` is the quantile function of the position marginal of :math:`\mu` and
    :math:`x_\mu(s)` the value of its token at position :math:`s` (one token per position); for
    ``p = inf`` the essential supremum. It is the :math:`W_p` cost on
    :math:`\mathbb R^d \times [0, 1]` of the coupling whose position part is the monotone
    coupling of the two marginals (the optimal one on the line) and which pairs the values
    accordingly. With equal marginals it is the conditional distance
    :math:`W_p^{\mathrm{cond}}` (one token per fibre); a continuum :math:`\mu` with a position
    density is approached by a fine grid of positions (the chapter "Masked attention").

    Parameters
    ----------
    mu, nu : Empirical
        With ``positions``, one token per position (shapes (n, d) and (N, d), the same d).
    p : float, default 2
        ``p >= 1`` or ``np.inf``.

    Returns
    -------
    float

    Raises
    ------
    TypeError
        ``mu`` or ``nu`` not an Empirical measure.
    ValueError
        Positions missing, two tokens at one position, dimensions differ, ``p < 1``.

    Examples
    --------
    With equal position marginals it is :math:`W_p^{\mathrm{cond}}`: every value moved by 1.

    >>> import numpy as np, tpde_lib as tp
    >>> s = np.linspace(0, 1, 4)
    >>> mu = tp.Empirical(np.zeros((4, 1)), positions=s)
    >>> float(tp.coupled_wasserstein(mu, tp.Empirical(np.ones((4, 1)), positions=s)))
    1.0
    """
    _, w_mu, x_mu = _dirac_fibres(mu, "mu")
    _, w_nu, x_nu = _dirac_fibres(nu, "nu")
    if x_mu.shape[1] != x_nu.shape[1]:
        raise ValueError(f"mu and nu must have the same dimension, got {x_mu.shape[1]} and {x_nu.shape[1]}")
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise TypeError(f"p must be a real number >= 1 or np.inf, got {type(p).__name__} {p!r:.40}")
    p = float(p)
    if not p >= 1.0:
        raise ValueError(f"p must be >= 1 (or np.inf), got {p!r}")
    mass, i, j = position_quantile_pieces(w_mu, w_nu)
    # values divided by a power of two near their largest entry (exact): gaps of 1e200 do not
    # overflow in the norm's squares (NaN before), nor gaps of 1e-200 underflow (0 before)
    scale = unit_scale(x_mu, x_nu)
    gap = np.linalg.norm(x_mu[i] / scale - x_nu[j] / scale, axis=1)
    if np.isinf(p):
        return _unscaled(float(gap[mass > 0].max()), scale)
    top = gap.max()
    if top == 0.0:
        return 0.0
    with np.errstate(under="ignore"):
        return _unscaled(float(top * np.sum(mass * (gap / top) ** p) ** (1.0 / p)), scale)


def _unscaled(value, scale):
    """``value * scale``, ValueError if beyond float64."""
    with np.errstate(over="ignore"):
        out = value * scale
    if not np.isfinite(out):
        raise ValueError(f"coupled_wasserstein exceeds float64 ({value:.6g} x {scale:.6g})")
    return float(out)
