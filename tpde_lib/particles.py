r"""Interacting particle systems of the Transformer PDE: deep residual attention as an ODE.

The tokens of a sequence move under their own attention field,

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
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike

from ._checks import (
    as_choice,
    as_count,
    as_finite,
    as_float_array,
    as_index,
    as_instance,
    as_positive,
    as_times,
    checked_result,
)
from .attention import Attention
from .measures import Empirical

__all__ = ["Trajectory", "simulate", "depth", "HasVelocity"]

#: default largest step when ``h`` is None (each interval of ``times`` is cut into equal steps)
DEFAULT_STEP = {"euler": 0.01, "rk4": 0.05}
_MULTIPLE_RTOL = 1e-9
#: default cap on the number of steps of one ``simulate`` call (all intervals together); an
#: adaptive step costs about ten field evaluations and more Python overhead, hence its lower cap
MAX_STEPS = {"euler": 100_000, "rk4": 100_000, "adaptive": 10_000}
_IVP_METHODS = ("DOP853", "RK45", "RK23")  # scipy.integrate's solvers, imported when used


def _ivp_solver(name):
    import scipy.integrate  # about 0.3 s to import: only when an adaptive run asks for it

    return getattr(scipy.integrate, name)


class HasVelocity(Protocol):
    """What :func:`simulate` needs of ``att``: a velocity field of a measure (n, d)."""

    def velocity(self, mu: Empirical, t: float = 0.0) -> np.ndarray: ...


@dataclass(frozen=True)
class Trajectory:
    """Particles at the requested times (validated: a Trajectory always holds consistent data).

    Attributes
    ----------
    times : ndarray, shape (T,)
        Strictly increasing, finite, ``T >= 1``.
    points : ndarray, shape (T, n, d)
        ``points[k]`` are the token positions at ``times[k]`` (finite).
    weights : ndarray, shape (n,)
        The masses, carried unchanged by the flow.
    positions : ndarray, shape (n,), or None
        Sequence positions (masked attention), carried unchanged.
    blowup_time : float or None
        With ``simulate(..., on_blowup="stop")``: the end of the step during which the particles
        or the field stopped being finite (the blow-up happened before it); the trajectory then
        holds only the requested times reached before. None otherwise.

    Raises
    ------
    TypeError, ValueError
        Fields that are not real arrays of consistent shapes (``points`` must be (T, n, d) with T
        the number of ``times`` and n the number of ``weights``), or a non-finite ``blowup_time``.

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> traj = tp.Trajectory(times=[0.0, 1.0], points=np.zeros((2, 3, 2)),
    ...                      weights=np.full(3, 1 / 3))
    >>> traj.n, traj.d, len(traj), traj.blowup_time
    (3, 2, 2, None)
    >>> traj.measure(-1).points.shape
    (3, 2)
    """

    times: np.ndarray
    points: np.ndarray
    weights: np.ndarray
    positions: np.ndarray | None = None
    blowup_time: float | None = None

    def __post_init__(self):
        times = as_times("times", self.times)
        points = as_float_array("points", self.points, ndim=3)
        if points.shape[0] != times.size:
            raise ValueError(
                f"points must have shape ({times.size}, n, d) to match the {times.size} "
                f"times, got {points.shape}"
            )
        # weights and positions: the same checks as the Empirical measures they come from
        mu = Empirical(points[0], self.weights, self.positions)
        blowup = None if self.blowup_time is None else as_finite("blowup_time", self.blowup_time)
        for field, value in (
            ("times", times),
            ("points", points),
            ("weights", mu.weights),
            ("positions", mu.positions),
            ("blowup_time", blowup),
        ):
            if isinstance(value, np.ndarray) and value.flags.writeable:
                value = value.copy()
                value.setflags(write=False)
            object.__setattr__(self, field, value)

    def measure(self, k):
        """The :class:`~tpde_lib.measures.Empirical` measure at time index ``k`` (``-1``: last).

        Raises ``TypeError`` unless ``k`` is an integer and ``IndexError`` (giving the valid
        range) unless ``-T <= k < T``.
        """
        k = as_index("k", k, self.times.size, what="times in this trajectory")
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
    """Number of equal steps in each interval of ``times`` (as exact integer-valued floats) and
    their sizes. Floats, not int64: a count such as 1e18 / 1e-3 must not wrap around."""
    gaps = np.diff(times)
    if h is None:
        counts = np.maximum(1.0, np.ceil(gaps / DEFAULT_STEP[method] - _MULTIPLE_RTOL))
        return counts, gaps / counts
    h = as_positive("h", h)
    with np.errstate(over="ignore"):
        counts = np.rint(gaps / h)
    bad = (counts < 1) | (np.abs(counts * h - gaps) > _MULTIPLE_RTOL * np.maximum(1.0, gaps))
    if np.any(bad):
        k = int(np.argmax(bad))
        raise ValueError(
            f"h={h:g} must divide every interval of times: "
            f"times[{k + 1}] - times[{k}] = {gaps[k]:g} is not a multiple of h"
        )
    return counts, np.full(gaps.size, h)


def _check_step_budget(total, max_steps, method, h):
    if not total <= max_steps:  # also catches an infinite count
        how = "h" if h is not None else "the default step"
        raise ValueError(
            f"simulate with method={method!r} and {how} needs {total:.4g} steps, more than "
            f"max_steps={max_steps}: pass max_steps={int(min(total, 1e18)):d} (or larger) "
            "to run them, a larger h, or method='adaptive'"
        )


def simulate(
    att: Attention | HasVelocity,
    mu0: Empirical | np.ndarray,
    times: ArrayLike,
    method: str = "rk4",
    h: float | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    ivp_method: str = "DOP853",
    on_blowup: str = "raise",
    max_steps: int | None = None,
) -> Trajectory:
    r"""Integrate the particle system :math:`\dot x_i=\Gamma_{\mu^n(t)}(t,x_i)`.

    Parameters
    ----------
    att : Attention or any object with ``velocity(mu, t) -> (n, d)``
        E.g. :class:`~tpde_lib.attention.Softmax`. The first evaluation goes through
        ``att.velocity`` (which validates ``mu0`` against ``att``); later ones call the
        :meth:`~tpde_lib.Attention.field` hook of an :class:`~tpde_lib.Attention` directly
        (the weights and positions do not change), each result checked (real, shape (n, d),
        finite). Sinkhorn attention warm-starts each step from the previous step's potentials
        (kept on the instance). Exceptions it raises propagate unchanged. When
        ``att.normalise`` is a callable (a :class:`~tpde_lib.Layer` with
        ``normalisation="sphere"``), the points are mapped by it after every step (``"adaptive"``:
        at every time of ``times``), and ``mu0`` must be a fixed point of it (``ValueError``).
    mu0 : Empirical
        Initial tokens (n, d) with weights (n,) and optional positions (n,) (masked attention);
        weights and positions travel unchanged with the points.
    times : array_like, shape (T,)
        Strictly increasing finite output times; ``times[0]`` is the initial time of ``mu0``.
    method : {"rk4", "euler", "adaptive"}
        ``"euler"``: explicit Euler, :math:`x\leftarrow x+h\,\Gamma_\mu(t,x)`, i.e. exactly one
        residual attention layer per step. ``"rk4"``: classical Runge–Kutta of order 4.
        ``"adaptive"``: scipy's embedded Runge–Kutta pair ``ivp_method`` with ``rtol``, ``atol``.
    h : float, optional
        Step of ``"euler"``/``"rk4"``. Given, it must divide every interval of ``times``
        (``ValueError`` otherwise): the scheme takes exactly those steps, depth
        :math:`(t_{k+1}-t_k)/h` per interval. None: every interval is cut into the fewest equal
        steps not larger than ``DEFAULT_STEP[method]`` (0.01 for Euler, 0.05 for RK4), which
        suits fields of size O(1); pass ``h`` (or use ``"adaptive"``) for larger parameters.
        Validated (finite, > 0) for every method.
    rtol, atol : float
        Tolerances of ``"adaptive"``, finite and > 0 (validated for every method).
    ivp_method : {"DOP853", "RK45", "RK23"}
        Runge–Kutta pair for ``"adaptive"`` (validated for every method).
    on_blowup : {"raise", "stop"}
        ``"raise"``: a blow-up raises ``FloatingPointError`` giving its time. ``"stop"``: return
        the times reached so far, with ``Trajectory.blowup_time`` set.
    max_steps : int, optional
        Cap on the total number of steps (accepted steps for ``"adaptive"``); default
        ``MAX_STEPS[method]`` (100000 for ``"euler"`` and ``"rk4"``, 10000 for ``"adaptive"``).
        Fixed-step methods check it before starting; the error says how many steps the call needs
        and how to allow them.

    Returns
    -------
    Trajectory
        ``points`` of shape (T, n, d) (fewer times if stopped by a blow-up).

    Raises
    ------
    TypeError
        ``att`` without ``velocity``, ``mu0`` not an Empirical, arguments of the wrong type.
    ValueError
        Times not strictly increasing, ``h`` not dividing them, unknown ``method``, more than
        ``max_steps`` steps needed, the field returning the wrong shape (the message names
        ``att``'s field and the time; ``TypeError`` for a complex one).
    FloatingPointError
        The particles blew up (non-finite positions or field); the message gives the time
        (``on_blowup="raise"``).

    Examples
    --------
    With :math:`A = 0` the softmax weights are uniform and :math:`V = -I` pulls every token by
    minus the mean :math:`m_t = m_0 e^{-t}`: :math:`x_i(t) = x_i(0) - m_0(1 - e^{-t})`.

    >>> import numpy as np, tpde_lib as tp
    >>> x0 = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5]])
    >>> att = tp.Softmax(np.zeros((2, 2)), -np.eye(2))
    >>> traj = tp.simulate(att, tp.Empirical(x0), [0.0, 0.5, 1.0], h=0.01)
    >>> traj.points.shape, traj.blowup_time
    ((3, 3, 2), None)
    >>> exact = x0 - x0.mean(axis=0) * (1 - np.exp(-1.0))
    >>> np.allclose(traj.points[-1], exact, rtol=1e-9, atol=1e-12)
    True
    """
    if not callable(getattr(att, "velocity", None)):
        raise TypeError(f"att must be an attention with a velocity(mu, t) method, got {type(att).__name__}")
    if isinstance(mu0, np.ndarray):
        mu0 = Empirical(mu0)
    as_instance("mu0", mu0, Empirical, "an Empirical measure (or an (n, d) array of points)")
    times = as_times("times", times)
    method = as_choice("method", method, ("euler", "rk4", "adaptive"))
    if h is not None:
        h = as_positive("h", h)
    rtol, atol = as_positive("rtol", rtol), as_positive("atol", atol)
    ivp_method = as_choice("ivp_method", ivp_method, _IVP_METHODS)
    on_blowup = as_choice("on_blowup", on_blowup, ("raise", "stop"))
    max_steps = MAX_STEPS[method] if max_steps is None else as_count("max_steps", max_steps, 1)
    shape = mu0.points.shape
    last_t = [times[0]]
    evaluate = _field_path(att, mu0)
    normalise = _normaliser(att, mu0)

    def field(x, t):
        last_t[0] = t
        if not np.isfinite(x).all():
            raise FloatingPointError(f"particles blew up (non-finite positions) at t={t:g}")
        return evaluate(x.reshape(shape), t)

    out = np.empty((times.size,) + shape)
    out[0] = mu0.points
    reached, blowup = times.size, None
    if times.size > 1 and method == "adaptive":
        filled = [1]
        try:
            _adaptive(field, out, times, rtol, atol, _ivp_solver(ivp_method), filled, max_steps, normalise)
        except FloatingPointError:
            if on_blowup == "raise":
                raise
            reached, blowup = filled[0], float(max(last_t[0], times[filled[0] - 1]))
    elif times.size > 1:
        counts, steps = _step_counts(times, h, method)
        _check_step_budget(math.fsum(counts), max_steps, method, h)
        counts = counts.astype(np.int64)  # <= max_steps now: no overflow
        step = _euler_step if method == "euler" else _rk4_step
        x = mu0.points.copy()
        for k in range(times.size - 1):
            try:
                for j in range(counts[k]):
                    t = times[k] + j * steps[k]
                    x = step(field, x, t, steps[k])
                    if normalise is not None:
                        x = normalise(x)
                    if not np.isfinite(x).all():
                        raise FloatingPointError(
                            f"particles blew up (non-finite positions) before t={t + steps[k]:g}"
                        )
            except FloatingPointError:
                if on_blowup == "raise":
                    raise
                reached, blowup = k + 1, float(t + steps[k])
                break
            out[k + 1] = x
    out = out[:reached]
    out.setflags(write=False)
    return Trajectory(times[:reached], out, mu0.weights, mu0.positions, blowup)


def _normaliser(att, mu0):
    """``att.normalise`` (a map of the points (n, d) back onto a manifold after every step, e.g.
    the unit sphere of a :class:`~tpde_lib.Layer` with ``normalisation="sphere"``), or None.

    ``mu0`` must already lie on that manifold: ValueError otherwise (the flow would start with a
    jump)."""
    normalise = getattr(att, "normalise", None)
    if normalise is None:
        return None
    if not callable(normalise):
        raise TypeError(f"att.normalise must be None or a callable (n, d) -> (n, d), got {normalise!r}")
    gap = np.abs(np.asarray(normalise(mu0.points), dtype=float) - mu0.points).max()
    if not gap <= 1e-10:
        raise ValueError(
            f"mu0 must lie where att.normalise maps it (e.g. unit vectors for a Layer on the "
            f"sphere): max |normalise(x0) - x0| = {gap:.3g} > 1e-10; pass tp.to_sphere(x0)"
        )
    return normalise


def _field_path(att, mu0):
    """``(x, t) -> Gamma`` for the particles ``x`` (n, d) carrying ``mu0``'s weights and positions.

    The first call goes through the public protocol ``att.velocity``, which validates the
    measure against the attention (dimension, causal positions) and the field's result. The
    weights and positions never change and the integrator checks that the points are finite,
    so later calls of an :class:`~tpde_lib.Attention` whose ``velocity`` is the protocol's go
    straight to its ``field`` hook, with a cheap check of the result (real, shape (n, d),
    finite): no re-validation of the measure at each stage. A built-in variant's prepared
    field (:meth:`~tpde_lib.Attention._prepared_field`: the same arithmetic, its set-up done
    once for the run) replaces ``field`` where it has one, its result checked for finiteness
    only. Other objects (a reader's class with a ``velocity`` method, or a variant overriding
    it) are called through ``velocity`` every time.
    """
    shape = mu0.points.shape
    w, pos = mu0.weights, mu0.positions

    def via_velocity(x, t):
        v = att.velocity(Empirical._trusted(x, w, pos), t)
        return checked_result("att.velocity", v, shape, when=f" at t={t:g}", nonfinite=FloatingPointError)

    raw = (
        isinstance(att, Attention)
        and "velocity" not in getattr(att, "__dict__", {})
        and type(att).velocity is Attention.velocity
    )
    if not raw:
        return via_velocity
    name = f"{att.name}.field"
    positions = pos if att.causal else None
    validated = []
    prepared = att._prepared_field(w, positions)

    def via_field(x, t):
        if not validated:  # the first call: the whole protocol, its result checked there once
            validated.append(True)
            return att.velocity(Empirical._trusted(x, w, pos), t)
        points = x.view()
        points.flags.writeable = False
        if prepared is None:
            v = att.field(points, w, positions, t)
        else:
            v = prepared(points, t)
            if np.isfinite(v).all():
                return v  # a built-in field: an (n, d) float array by construction
        return checked_result(name, v, shape, when=f" at t={t:g}", nonfinite=FloatingPointError)

    return via_field


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


def _adaptive(field, out, times, rtol, atol, solver_cls, filled, max_steps, normalise=None):
    """Integrate interval by interval, writing ``out[k]``; ``filled[0]`` counts the times done.

    The solver is stepped here (as ``solve_ivp`` does, without dense output) so that accepted
    steps are counted against ``max_steps``; exceptions from the field propagate unchanged.
    """
    shape = out.shape[1:]

    def rhs(t, y):
        return field(y.reshape(shape), t).ravel()

    y = out[0].ravel()
    taken = 0
    for k in range(times.size - 1):
        solver = solver_cls(rhs, times[k], y, times[k + 1], rtol=rtol, atol=atol)
        while solver.status == "running":
            if taken >= max_steps:
                raise ValueError(
                    f"simulate with method='adaptive' took max_steps={max_steps} steps and "
                    f"reached only t={solver.t:g} of {times[-1]:g}: pass a larger "
                    "max_steps, or looser rtol/atol (the problem may be stiff)"
                )
            message = solver.step()
            taken += 1
            if solver.status == "failed":
                raise FloatingPointError(f"adaptive integration stopped at t={solver.t:g}: {message}")
        y = solver.y if normalise is None else normalise(solver.y.reshape(shape)).ravel()
        if not np.all(np.isfinite(y)):
            raise FloatingPointError(f"particles blew up before t={times[k + 1]:g}")
        out[k + 1] = y.reshape(shape)
        filled[0] = k + 2


def depth(times: ArrayLike, h: float | None) -> int:
    """Number of residual layers (Euler steps of size ``h``) between ``times[0]`` and ``times[-1]``.

    ``h=None`` counts the steps :func:`simulate` takes by default with ``method="euler"``.
    """
    times = as_times("times", times)
    return sum(int(c) for c in _step_counts(times, h, "euler")[0])
