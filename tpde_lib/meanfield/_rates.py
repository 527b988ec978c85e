r"""Gaps between two clouds of the same labelled tokens, and power-law fits of how they close.

:func:`coupling_distance` and :func:`moment_errors` compare token :math:`i` of one cloud with
token :math:`i` of another; :func:`fit_rate` fits :math:`y \approx C x^s` with a confidence
interval on the exponent (:class:`RateFit`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_finite, as_float_array
from ..measures import Empirical


def _pair(x, y, weights):
    x = as_float_array("x", x, ndim=2)
    y = as_float_array("y", y, shape=x.shape)
    if weights is None:
        w = np.full(x.shape[0], 1.0 / x.shape[0])
    else:
        w = Empirical(x, weights).weights
    return x, y, w


def coupling_distance(x: ArrayLike, y: ArrayLike, weights: ArrayLike | None = None) -> float:
    r"""Root-mean-square distance between token ``i`` of ``x`` and token ``i`` of ``y``.

    .. math::
        D(x, y) = \Big(\sum_i w_i\,|x_i - y_i|^2\Big)^{1/2} \;\ge\; W_2\Big(\sum_i w_i\delta_{x_i},
        \sum_i w_i\delta_{y_i}\Big),

    the cost of the coupling that matches equal labels; it is an **upper bound** of
    :math:`W_2` (the optimal coupling can only do better), computed in O(n d) time, so it is the
    distance to use beyond the few thousand tokens where exact optimal transport is affordable.

    Parameters
    ----------
    x, y : array_like, shape (n, d)
    weights : array_like, shape (n,), optional
        Masses summing to 1; default uniform.

    Returns
    -------
    float
    """
    x, y, w = _pair(x, y, weights)
    return float(np.sqrt(w @ np.sum((x - y) ** 2, axis=1)))


def moment_errors(x: ArrayLike, y: ArrayLike, weights: ArrayLike | None = None) -> tuple[float, float]:
    r"""Distance between the means and between the covariances of two weighted clouds.

    Parameters
    ----------
    x, y : array_like, shape (n, d)
    weights : array_like, shape (n,), optional
        Masses summing to 1 (the same for both clouds); default uniform.

    Returns
    -------
    mean_error : float
        :math:`|\bar x - \bar y|` (Euclidean).
    cov_error : float
        :math:`\|\mathrm{Cov}(x) - \mathrm{Cov}(y)\|_2` (spectral norm), with the weighted
        covariance :math:`\sum_i w_i (x_i - \bar x)(x_i - \bar x)^\top`.
    """
    x, y, w = _pair(x, y, weights)
    mx, my = w @ x, w @ y
    cx = (x - mx).T @ ((x - mx) * w[:, None])
    cy = (y - my).T @ ((y - my) * w[:, None])
    return float(np.linalg.norm(mx - my)), float(np.linalg.norm(cx - cy, 2))


@dataclass(frozen=True)
class RateFit:
    r"""Least-squares power law :math:`y \approx C x^{s}` with a confidence interval on ``s``.

    Attributes
    ----------
    slope : float
        The fitted exponent :math:`s`.
    prefactor : float
        :math:`C`.
    stderr : float
        Least-squares standard error of the slope (``inf`` with only two points).
    ci : tuple of float
        ``(low, high)``: the two-sided confidence interval ``slope ± t * stderr`` with ``t`` the
        Student quantile at ``level`` for ``n_points - 2`` degrees of freedom.
    level : float
        Confidence level of ``ci``.
    n_points : int
        Number of (x, y) pairs fitted.
    """

    slope: float
    prefactor: float
    stderr: float
    ci: tuple
    level: float
    n_points: int

    def contains(self, value):
        """Whether ``value`` (a finite real number, else ``TypeError``/``ValueError``) lies in the
        confidence interval."""
        value = as_finite("value", value)
        return bool(self.ci[0] <= value <= self.ci[1])

    def __str__(self):
        pct = f"{100 * self.level:g}%"
        return (
            f"slope {self.slope:.3f} ± {self.stderr:.3f} (s.e.), {pct} CI "
            f"[{self.ci[0]:.3f}, {self.ci[1]:.3f}], {self.n_points} points"
        )


def fit_rate(x: ArrayLike, y: ArrayLike, level: float = 0.95) -> RateFit:
    r"""Fit :math:`\log y = \log C + s\log x` by least squares, with a confidence interval on ``s``.

    Every (x, y) pair is one observation; pass several seeds as columns of ``y`` so that the
    scatter between seeds enters the standard error. With residuals :math:`r_k` and
    :math:`u_k = \log x_k`,

    .. math::
        \mathrm{se}(s) = \Big(\frac{\sum_k r_k^2/(N-2)}{\sum_k (u_k - \bar u)^2}\Big)^{1/2},
        \qquad \text{CI} = s \pm t_{N-2,\,(1+\text{level})/2}\,\mathrm{se}(s),

    the textbook interval for independent, equal-variance errors in :math:`\log y` (seeds are
    independent; the equal variance is an assumption: the scatter of :math:`\log y` between seeds
    is roughly constant when :math:`y` is a relative error).

    Parameters
    ----------
    x : array_like, shape (M,)
        Positive abscissae (e.g. numbers of tokens, or steps).
    y : array_like, shape (M,) or (M, S)
        Positive values; column ``j`` of a 2-D ``y`` is seed ``j`` (every seed at every ``x``).
    level : float, default 0.95
        Confidence level, in (0, 1).

    Returns
    -------
    RateFit

    Raises
    ------
    ValueError
        Non-positive values, mismatched shapes, fewer than two distinct ``x``, ``level``
        outside (0, 1).
    """
    x = as_float_array("x", x, ndim=1)
    y = as_float_array("y", y)
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2 or y.shape[0] != x.size:
        raise ValueError(f"y must have shape ({x.size},) or ({x.size}, S), got {y.shape}")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("x and y must be positive (they are fitted in log-log coordinates)")
    if np.unique(x).size < 2:
        raise ValueError("x must hold at least two distinct values")
    level = as_finite("level", level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    u = np.repeat(np.log(x), y.shape[1])
    v = np.log(y).ravel()
    u_bar, v_bar = u.mean(), v.mean()
    suu = np.sum((u - u_bar) ** 2)
    slope = float(np.sum((u - u_bar) * (v - v_bar)) / suu)
    intercept = v_bar - slope * u_bar
    dof = u.size - 2
    if dof > 0:
        resid = v - intercept - slope * u
        stderr = float(np.sqrt(np.sum(resid**2) / dof / suu))
        from scipy import stats  # imported on first use: import tpde_lib stays light

        half = float(stats.t.ppf(0.5 + level / 2, dof)) * stderr
    else:
        stderr = half = np.inf
    return RateFit(slope, float(np.exp(intercept)), stderr, (slope - half, slope + half), level, int(u.size))
