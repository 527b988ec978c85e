r"""Interacting particle systems of the Transformer PDE: deep residual attention as an ODE.

The tokens of a sequence move under their own attention field (paper notes §1.1),

.. math::
    \dot x_i(t) = \Gamma_{\mu^n(t)}(t, x_i(t)),\qquad \mu^n(t)=\sum_j w_j\delta_{x_j(t)},

and the empirical measure :math:`\mu^n(t)` is an exact weak solution of the Transformer PDE.
One residual layer :math:`x\leftarrow x+h\,\Gamma_\mu(x)` is one explicit Euler step of size
:math:`h`, so ``simulate(..., method="euler", h=h)`` *is* a residual attention-only Transformer of
depth :math:`T/h`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp

from ._checks import as_positive, as_times
from .measures import Empirical

__all__ = ["Trajectory", "simulate", "depth"]

#: default largest step when ``h`` is None (each interval of ``times`` is cut into equal steps)
DEFAULT_STEP = {"euler": 0.01, "rk4": 0.05}
_MULTIPLE_RTOL = 1e-9


@dataclass(frozen=True)
class Trajectory:
    """Particles at the requested times.

    Attributes
    ----------
    times : ndarray, shape (T,)
    points : ndarray, shape (T, n, d)
        ``points[k]`` are the token positions at ``times[k]``.
    weights : ndarray, shape (n,)
        The masses, carried unchanged by the flow.
    positions : ndarray, shape (n,), or None
        Sequence positions (masked attention), carried unchanged.
    blowup_time : float or None
        With ``simulate(..., on_blowup="stop")``: the end of the step during which the particles
        or the field stopped being finite (the blow-up happened before it); the trajectory then
        holds only the requested times reached before. None otherwise.
    """

    times: np.ndarray
    points: np.ndarray
    weights: np.ndarray
    positions: np.ndarray | None = None
    blowup_time: float | None = None

    def measure(self, k):
        """The :class:`~tpde_lib.measures.Empirical` measure at time index ``k`` (``-1``: last)."""
        return Empirical(self.points[k], self.weights, self.positions)

    @property
    def n(self):
        """Number of tokens."""
        return self.points.shape[1]

    @property
    def d(self):
        """Dimension of token space."""
        return self.points.shape[2]

    def __len__(self):
        return self.times.size


def _step_counts(times, h, method):
    """Number of equal steps in each interval of ``times`` and their sizes."""
    gaps = np.diff(times)
    if h is None:
        counts = np.maximum(1, np.ceil(gaps / DEFAULT_STEP[method] - _MULTIPLE_RTOL)).astype(int)
        return counts, gaps / np.maximum(counts, 1)
    h = as_positive("h", h)
    counts = np.rint(gaps / h).astype(int)
    bad = (counts < 1) | (np.abs(counts * h - gaps) > _MULTIPLE_RTOL * np.maximum(1.0, gaps))
    if np.any(bad):
        k = int(np.argmax(bad))
        raise ValueError(f"h={h:g} must divide every interval of times: "
                         f"times[{k + 1}] - times[{k}] = {gaps[k]:g} is not a multiple of h")
    return counts, np.full(gaps.size, h)


def simulate(att, mu0, times, method="rk4", h=None, rtol=1e-6, atol=1e-9,
             ivp_method="DOP853", on_blowup="raise"):
    r"""Integrate the particle system :math:`\dot x_i=\Gamma_{\mu^n(t)}(t,x_i)` (paper notes §1.1).

    Parameters
    ----------
    att : attention
        Any object with ``velocity(mu, t) -> (n, d)`` (e.g. :class:`~tpde_lib.attention.Softmax`).
        Sinkhorn attention warm-starts each step from the previous step's potentials (kept on
        the instance).
    mu0 : Empirical
        Initial tokens (n, d) with weights (n,) and optional positions (n,) (masked attention);
        weights and positions travel unchanged with the points.
    times : array_like, shape (T,)
        Strictly increasing output times; ``times[0]`` is the initial time of ``mu0``.
    method : {"rk4", "euler", "adaptive"}
        ``"euler"``: explicit Euler, :math:`x\leftarrow x+h\,\Gamma_\mu(t,x)`, i.e. exactly one
        residual attention layer per step. ``"rk4"``: classical Runge–Kutta of order 4.
        ``"adaptive"``: :func:`scipy.integrate.solve_ivp` (``ivp_method``) with ``rtol``, ``atol``.
    h : float, optional
        Step of ``"euler"``/``"rk4"``. Given, it must divide every interval of ``times``
        (``ValueError`` otherwise): the scheme takes exactly those steps, depth
        :math:`(t_{k+1}-t_k)/h` per interval. None: every interval is cut into the fewest equal
        steps not larger than ``DEFAULT_STEP[method]`` (0.01 for Euler, 0.05 for RK4), which
        suits fields of size O(1); pass ``h`` (or use ``"adaptive"``) for larger parameters.
    rtol, atol : float
        Tolerances of ``"adaptive"``.
    ivp_method : str
        ``solve_ivp`` method for ``"adaptive"`` (``"DOP853"`` or ``"RK45"``).
    on_blowup : {"raise", "stop"}
        ``"raise"``: a blow-up raises ``FloatingPointError`` giving its time. ``"stop"``: return
        the times reached so far, with ``Trajectory.blowup_time`` set.

    Returns
    -------
    Trajectory
        ``points`` of shape (T, n, d) (fewer times if stopped by a blow-up).

    Raises
    ------
    ValueError
        Times not strictly increasing, ``h`` not dividing them, unknown ``method``.
    FloatingPointError
        The particles blew up (non-finite positions or field); the message gives the time
        (``on_blowup="raise"``).
    """
    if not callable(getattr(att, "velocity", None)):
        raise TypeError(f"att must be an attention with a velocity(mu, t) method, "
                        f"got {type(att).__name__}")
    if isinstance(mu0, np.ndarray):
        mu0 = Empirical(mu0)
    if not isinstance(mu0, Empirical):
        raise TypeError(f"mu0 must be an Empirical measure, got {type(mu0).__name__}")
    times = as_times("times", times)
    if method not in ("euler", "rk4", "adaptive"):
        raise ValueError(f"method must be 'euler', 'rk4' or 'adaptive', got {method!r}")
    if on_blowup not in ("raise", "stop"):
        raise ValueError(f"on_blowup must be 'raise' or 'stop', got {on_blowup!r}")
    shape = mu0.points.shape
    last_t = [times[0]]

    def field(x, t):
        last_t[0] = t
        if not np.all(np.isfinite(x)):
            raise FloatingPointError(f"particles blew up (non-finite positions) at t={t:g}")
        # validated once (mu0, finiteness above): no per-stage re-validation of the measure
        return att.velocity(Empirical._trusted(np.reshape(x, shape), mu0.weights, mu0.positions), t)

    out = np.empty((times.size,) + shape)
    out[0] = mu0.points
    reached, blowup = times.size, None
    if times.size > 1 and method == "adaptive":
        filled = [1]
        try:
            _adaptive(field, out, times, rtol, atol, ivp_method, filled)
        except FloatingPointError:
            if on_blowup == "raise":
                raise
            reached, blowup = filled[0], float(max(last_t[0], times[filled[0] - 1]))
    elif times.size > 1:
        counts, steps = _step_counts(times, h, method)
        step = _euler_step if method == "euler" else _rk4_step
        x = mu0.points.copy()
        for k in range(times.size - 1):
            try:
                for j in range(counts[k]):
                    t = times[k] + j * steps[k]
                    x = step(field, x, t, steps[k])
                    if not np.all(np.isfinite(x)):
                        raise FloatingPointError(f"particles blew up (non-finite positions) "
                                                 f"before t={t + steps[k]:g}")
            except FloatingPointError:
                if on_blowup == "raise":
                    raise
                reached, blowup = k + 1, float(t + steps[k])
                break
            out[k + 1] = x
    out = out[:reached]
    out.setflags(write=False)
    return Trajectory(times[:reached], out, mu0.weights, mu0.positions, blowup)


def _euler_step(field, x, t, h):
    """One residual layer: x + h Gamma(t, x)."""
    return x + h * field(x, t)


def _rk4_step(field, x, t, h):
    """Classical fourth-order Runge–Kutta step."""
    k1 = field(x, t)
    k2 = field(x + 0.5 * h * k1, t + 0.5 * h)
    k3 = field(x + 0.5 * h * k2, t + 0.5 * h)
    k4 = field(x + h * k3, t + h)
    return x + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


def _adaptive(field, out, times, rtol, atol, ivp_method, filled):
    """Integrate interval by interval, writing ``out[k]``; ``filled[0]`` counts the times done."""
    shape = out.shape[1:]
    rtol, atol = as_positive("rtol", rtol), as_positive("atol", atol)

    def rhs(t, y):
        return field(y.reshape(shape), t).ravel()

    y = out[0].ravel()
    for k in range(times.size - 1):
        sol = solve_ivp(rhs, (times[k], times[k + 1]), y, method=ivp_method, rtol=rtol,
                        atol=atol)
        if sol.status != 0:
            raise FloatingPointError(f"adaptive integration stopped at t={sol.t[-1]:g}: "
                                     f"{sol.message}")
        y = sol.y[:, -1]
        if not np.all(np.isfinite(y)):
            raise FloatingPointError(f"particles blew up before t={times[k + 1]:g}")
        out[k + 1] = y.reshape(shape)
        filled[0] = k + 2


def depth(times, h):
    """Number of residual layers (Euler steps of size ``h``) between ``times[0]`` and ``times[-1]``."""
    times = as_times("times", times)
    return int(math.fsum(_step_counts(times, h, "euler")[0]))
