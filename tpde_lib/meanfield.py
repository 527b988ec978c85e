r"""Mean-field experiments: samplers, quadratures, exact Gaussian flows and convergence-rate fits.

The chapters on the mean-field limit and on stability, and the tests, compare an :math:`n`-token
system with a limit and fit how the gap closes. This module holds the shared pieces, once:

* samplers and quadratures of the uniform disk (:func:`uniform_disk`, :func:`sunflower`);
* the exact characteristic flow :math:`x \mapsto \Phi_t x + c_t` of a Gaussian solution whose field
  is affine, :math:`\Gamma_{\mu_t}(x) = M(t)x + b(t)` (:func:`gaussian_affine_flow`);
* distances between two clouds of the same labelled tokens (:func:`coupling_distance`,
  :func:`moment_errors`);
* power-law fits with a confidence interval on the exponent (:func:`fit_rate` returning
  :class:`RateFit`), and the step-order experiment of a time integrator (:func:`step_order`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats
from scipy.integrate import solve_ivp

from ._checks import as_float_array, as_positive, as_times
from .measures import Empirical, Gaussian
from .particles import simulate

__all__ = [
    "uniform_disk", "sunflower",
    "AffineFlow", "gaussian_affine_flow",
    "coupling_distance", "moment_errors",
    "RateFit", "fit_rate",
    "StepOrder", "step_order",
]

_GOLDEN_ANGLE = np.pi * (3.0 - np.sqrt(5.0))


def _count(name, n, minimum=1):
    """A Python int ``>= minimum``."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(n).__name__}")
    if n < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {n}")
    return int(n)


# --------------------------------------------------------------------------------------------
# Samplers and quadratures of the uniform disk
# --------------------------------------------------------------------------------------------
def uniform_disk(n, radius=1.0, seed=0):
    r"""``n`` i.i.d. points uniform on the disk of radius ``radius`` centred at 0.

    Polar sampling: :math:`r = R\sqrt U`, :math:`\theta = 2\pi U'` with :math:`U, U'` independent
    uniform on [0, 1] (the square root makes :math:`P(|x| \le r) = r^2/R^2`, the area fraction).
    The radii are drawn first, then the angles, from ``np.random.default_rng(seed)``.

    Parameters
    ----------
    n : int
        Number of points, ``n >= 1``.
    radius : float, default 1
        Radius :math:`R > 0`.
    seed : int or numpy.random.Generator, default 0

    Returns
    -------
    ndarray, shape (n, 2)
    """
    n = _count("n", n)
    radius = as_positive("radius", radius)
    rng = np.random.default_rng(seed)
    r = radius * np.sqrt(rng.uniform(size=n))
    theta = rng.uniform(0.0, 2.0 * np.pi, n)
    return np.column_stack([r * np.cos(theta), r * np.sin(theta)])


def sunflower(n, radius=1.0):
    r"""Deterministic equal-weight quadrature of the uniform disk: ``n`` points on a Vogel spiral.

    .. math::
        x_k = R\sqrt{(k + 1/2)/n}\,(\cos k\vartheta, \sin k\vartheta),\qquad
        \vartheta = \pi(3 - \sqrt5)\ \text{(the golden angle)},\quad k = 0, \dots, n-1.

    Each point stands for an annulus of area :math:`\pi R^2/n`, and consecutive points turn by
    the golden angle, so the points are spread evenly at spacing about :math:`R\sqrt{\pi/n}`:
    integrals of smooth functions converge much faster than with ``n`` random samples (the
    tests measure errors below :math:`1/n`, irregular in ``n``, against :math:`n^{-1/2}` for
    Monte Carlo).

    Parameters
    ----------
    n : int
        Number of points, ``n >= 1``.
    radius : float, default 1

    Returns
    -------
    ndarray, shape (n, 2)
    """
    n = _count("n", n)
    radius = as_positive("radius", radius)
    k = np.arange(n) + 0.5
    r, theta = radius * np.sqrt(k / n), k * _GOLDEN_ANGLE
    return np.column_stack([r * np.cos(theta), r * np.sin(theta)])


# --------------------------------------------------------------------------------------------
# The exact flow of a Gaussian solution with an affine field
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AffineFlow:
    r"""The characteristic flow :math:`x \mapsto \Phi_t x + c_t` of a Gaussian solution.

    Attributes
    ----------
    times : ndarray, shape (T,)
    Phi : ndarray, shape (T, d, d)
        :math:`\Phi_t`, with :math:`\Phi_{t_0} = I`.
    c : ndarray, shape (T, d)
        :math:`c_t`, with :math:`c_{t_0} = 0`.
    mean : ndarray, shape (T, d)
        The mean :math:`\alpha_t` of the solution.
    cov : ndarray, shape (T, d, d)
        Its covariance :math:`\Sigma_t` (exactly symmetric).
    """

    times: np.ndarray
    Phi: np.ndarray
    c: np.ndarray
    mean: np.ndarray
    cov: np.ndarray

    def apply(self, points, k=-1):
        r"""Push ``points`` (shape (n, d)) from the initial time to ``times[k]``: :math:`\Phi x + c`."""
        x = as_float_array("points", points, ndim=2)
        if x.shape[1] != self.Phi.shape[-1]:
            raise ValueError(f"points must have shape (n, {self.Phi.shape[-1]}), got {x.shape}")
        return x @ self.Phi[k].T + self.c[k]

    def __len__(self):
        return self.times.size


def gaussian_affine_flow(affine, g0, times, rtol=1e-11, atol=1e-13):
    r"""Exact flow of the Transformer PDE from a Gaussian when the field of a Gaussian is affine.

    If the field of every Gaussian :math:`\mathcal N(\alpha, \Sigma)` is affine,
    :math:`\Gamma(x) = M(\alpha, \Sigma, t)\,x + b(\alpha, \Sigma, t)`, each token follows
    :math:`\dot x = M x + b` and the solution from :math:`\mathcal N(\alpha_0, \Sigma_0)` stays
    Gaussian. The tokens move by :math:`x_t = \Phi_t x_0 + c_t`, with

    .. math::
        \dot\Phi = M\Phi,\ \Phi_0 = I,\qquad \dot c = Mc + b,\ c_0 = 0,\qquad
        \dot\alpha = M\alpha + b,\qquad \dot\Sigma = M\Sigma + \Sigma M^\top,

    all integrated together (``scipy.integrate.solve_ivp``, DOP853), :math:`M, b` evaluated at
    the current :math:`(\alpha_t, \Sigma_t)`. Then :math:`\alpha_t = \Phi_t\alpha_0 + c_t` and
    :math:`\Sigma_t = \Phi_t\Sigma_0\Phi_t^\top` (the tests check both).

    Parameters
    ----------
    affine : callable
        ``affine(mean, cov, t) -> (M, b)`` with ``mean`` of shape (d,), ``cov`` (d, d); returns
        ``M`` of shape (d, d) and ``b`` of shape (d,). For softmax attention
        :math:`M = V\Sigma A`, :math:`b = V\alpha` (derived in the chapter "Mean-field limit").
    g0 : Gaussian
        The initial Gaussian, at ``times[0]``.
    times : array_like, shape (T,)
        Strictly increasing output times.
    rtol, atol : float
        Tolerances of ``solve_ivp``.

    Returns
    -------
    AffineFlow

    Raises
    ------
    TypeError
        ``affine`` not callable, ``g0`` not a Gaussian.
    ValueError
        ``affine`` returns the wrong shapes.
    FloatingPointError
        The solution blew up (or the integrator failed) before ``times[-1]``; the message gives
        the time reached.
    """
    if not callable(affine):
        raise TypeError(f"affine must be a callable (mean, cov, t) -> (M, b), got {type(affine).__name__}")
    if not isinstance(g0, Gaussian):
        raise TypeError(f"g0 must be a tpde_lib Gaussian, got {type(g0).__name__}")
    times = as_times("times", times)
    rtol, atol = as_positive("rtol", rtol), as_positive("atol", atol)
    d = g0.d
    M0, b0 = affine(g0.mean, g0.cov, float(times[0]))
    as_float_array("M returned by affine", M0, shape=(d, d))
    as_float_array("b returned by affine", b0, shape=(d,))
    sizes = np.cumsum([d * d, d, d, d * d])

    def rhs(t, y):
        Phi, c, mean, cov = np.split(y, sizes[:-1])
        Phi, cov = Phi.reshape(d, d), cov.reshape(d, d)
        cov = 0.5 * (cov + cov.T)
        M, b = affine(mean, cov, t)
        M, b = np.asarray(M, dtype=float), np.asarray(b, dtype=float)
        dcov = M @ cov
        return np.concatenate([(M @ Phi).ravel(), M @ c + b, M @ mean + b, (dcov + dcov.T).ravel()])

    y0 = np.concatenate([np.eye(d).ravel(), np.zeros(d), g0.mean, g0.cov.ravel()])
    if times.size == 1:
        Y = y0[None]
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            sol = solve_ivp(rhs, (times[0], times[-1]), y0, method="DOP853", t_eval=times,
                            rtol=rtol, atol=atol)
        if sol.status != 0 or not np.all(np.isfinite(sol.y)):
            raise FloatingPointError(f"gaussian_affine_flow: the solution did not reach "
                                     f"t={times[-1]:g} (stopped at t={sol.t[-1]:g}: {sol.message})")
        Y = sol.y.T
    Phi, c, mean, cov = np.split(Y, sizes[:-1], axis=1)
    cov = cov.reshape(-1, d, d)
    cov = 0.5 * (cov + np.swapaxes(cov, -1, -2))
    return AffineFlow(times, Phi.reshape(-1, d, d), c, mean, cov)


# --------------------------------------------------------------------------------------------
# Distances between two clouds of the same labelled tokens
# --------------------------------------------------------------------------------------------
def _pair(x, y, weights):
    x = as_float_array("x", x, ndim=2)
    y = as_float_array("y", y, shape=x.shape)
    if weights is None:
        w = np.full(x.shape[0], 1.0 / x.shape[0])
    else:
        w = Empirical(x, weights).weights
    return x, y, w


def coupling_distance(x, y, weights=None):
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


def moment_errors(x, y, weights=None):
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


# --------------------------------------------------------------------------------------------
# Power-law fits with a confidence interval
# --------------------------------------------------------------------------------------------
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
        """Whether ``value`` lies in the confidence interval."""
        return bool(self.ci[0] <= value <= self.ci[1])

    def __str__(self):
        pct = f"{100 * self.level:g}%"
        return (f"slope {self.slope:.3f} ± {self.stderr:.3f} (s.e.), {pct} CI "
                f"[{self.ci[0]:.3f}, {self.ci[1]:.3f}], {self.n_points} points")


def fit_rate(x, y, level=0.95):
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
    level = float(level)
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
        stderr = float(np.sqrt(np.sum(resid ** 2) / dof / suu))
        half = float(stats.t.ppf(0.5 + level / 2, dof)) * stderr
    else:
        stderr = half = np.inf
    return RateFit(slope, float(np.exp(intercept)), stderr, (slope - half, slope + half), level,
                   int(u.size))


# --------------------------------------------------------------------------------------------
# Order of a time integrator (a residual network is explicit Euler)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepOrder:
    """Errors of a fixed-step integrator against a reference, and the fitted order.

    Attributes
    ----------
    steps : ndarray, shape (M,)
    errors : ndarray, shape (M,)
        Distance at ``T`` between the tokens of the scheme and those of the reference.
    fit : RateFit
        ``fit.slope`` is the observed order.
    """

    steps: np.ndarray
    errors: np.ndarray
    fit: RateFit

    @property
    def order(self):
        """The fitted order (slope of log error against log step)."""
        return self.fit.slope


def step_order(att, mu0, steps, T=1.0, method="euler", reference_h=None, norm="rms",
               reference_rtol=1e-12):
    r"""Error at time ``T`` of the particle system integrated with each step, and its order.

    Runs :func:`~tpde_lib.particles.simulate` with ``method`` and each ``h`` in ``steps`` and
    compares token by token with a reference: RK4 with step ``reference_h`` when given, else
    the adaptive DOP853 integrator at ``rtol = atol = reference_rtol``. With ``method="euler"``
    this is the depth experiment (a residual network of depth :math:`T/h`): the order is 1.

    Parameters
    ----------
    att : attention
        Any object with ``velocity(mu, t)``.
    mu0 : Empirical
        Initial tokens, shape (n, d).
    steps : array_like, shape (M,)
        Steps, each dividing ``T``.
    T : float, default 1
    method : {"euler", "rk4"}
    reference_h : float, optional
        Step of an RK4 reference; None: adaptive reference.
    norm : {"rms", "max"}
        ``"rms"``: :func:`coupling_distance` of the two clouds (an upper bound of :math:`W_2`);
        ``"max"``: the largest coordinate difference.
    reference_rtol : float
        Tolerance of the adaptive reference.

    Returns
    -------
    StepOrder
    """
    steps = as_float_array("steps", steps, ndim=1)
    T = as_positive("T", T)
    if method not in ("euler", "rk4"):
        raise ValueError(f"method must be 'euler' or 'rk4', got {method!r}")
    if norm not in ("rms", "max"):
        raise ValueError(f"norm must be 'rms' or 'max', got {norm!r}")
    if not isinstance(mu0, Empirical):
        raise TypeError(f"mu0 must be an Empirical measure, got {type(mu0).__name__}")
    times = [0.0, T]
    if reference_h is None:
        ref = simulate(att, mu0, times, method="adaptive", rtol=reference_rtol,
                       atol=reference_rtol).points[-1]
    else:
        ref = simulate(att, mu0, times, method="rk4", h=reference_h).points[-1]
    errors = []
    for h in steps:
        x = simulate(att, mu0, times, method=method, h=float(h)).points[-1]
        if norm == "rms":
            errors.append(coupling_distance(x, ref, mu0.weights))
        else:
            errors.append(float(np.abs(x - ref).max()))
    errors = np.array(errors)
    return StepOrder(steps, errors, fit_rate(steps, errors))
