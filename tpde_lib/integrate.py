r"""A batched adaptive ODE integrator: B independent systems :math:`y_b' = f(t, y_b)` at once.

:func:`solve_batch` is the Dormand–Prince 5(4) method (the tableau of
``scipy.integrate.RK45``) vectorised over the members of a batch: each member has its own time,
its own adaptive step size (error control in the RMS norm with ``rtol`` and ``atol``, as
``solve_ivp``) and lands exactly on every requested output time. One call of ``f`` evaluates
all active members, so B small systems cost about as much as one. Nothing in it is specific to
Gaussians: :func:`tpde_lib.simulate_gaussian_batch` uses it with a stopping rule that detects
blow-up. Tested against ``scipy.integrate.solve_ivp`` (``tests/test_integrate.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ._checks import as_callable_of, as_count, as_float_array, as_positive, as_times, checked_result
from ._threads import single_blas

__all__ = ["BatchSolution", "STATUSES", "solve_batch"]


def _tableau():
    """scipy's Dormand-Prince tableau (A, B, C, E, error order), imported on first use.

    ``scipy.integrate`` takes about 0.3 s to import; ``import tpde_lib`` does not pay it.
    """
    from scipy.integrate import RK45

    return RK45.A, RK45.B, RK45.C, RK45.E, RK45.error_estimator_order


_SAFETY, _MIN_FACTOR, _MAX_FACTOR = 0.9, 0.2, 10.0


#: why each member of a batch ended (:attr:`BatchSolution.status`)
STATUSES = ("finished", "stopped", "max_steps", "step_underflow")


@dataclass(frozen=True)
class BatchSolution:
    """Output of :func:`solve_batch`.

    Attributes
    ----------
    times : ndarray, shape (T,)
    y : ndarray, shape (B, T, n)
        The states at the output times; a member that ended early is frozen at its last state
        (finite: a state is kept only when the step to it is accepted).
    valid : ndarray of bool, shape (B, T)
        False at the output times a member did not reach.
    status : ndarray of str, shape (B,)
        Why each member ended: ``"finished"`` (reached the last time), ``"stopped"`` (by the
        ``stop`` callback), ``"max_steps"`` (its step budget ran out) or ``"step_underflow"``
        (its step size fell below round-off of its time: a stiff or singular member).
    t_end : ndarray, shape (B,)
        The time each member reached (``times[-1]`` for the finished ones).
    n_steps : ndarray of int, shape (B,)
        Steps attempted by each member (accepted and rejected).
    """

    times: np.ndarray
    y: np.ndarray
    valid: np.ndarray
    status: np.ndarray
    t_end: np.ndarray
    n_steps: np.ndarray

    @property
    def stopped(self) -> np.ndarray:
        """Members that ended before the last time, for whatever reason, shape (B,)."""
        return self.status != "finished"


def solve_batch(
    f: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    y0: ArrayLike,
    times: ArrayLike,
    rtol: float = 1e-9,
    atol: float = 1e-12,
    max_steps: int = 200_000,
    stop: Callable[..., np.ndarray] | None = None,
) -> BatchSolution:
    r"""Integrate :math:`y_b' = f(t_b, y_b)` for every member ``b`` of a batch.

    Each member has its own time, adaptive step and step budget: a member that cannot go on
    (budget spent, step size underflow, ``stop``) ends there with its status, and the others
    go on. BLAS is held to one thread for the whole call (``threadpoolctl``, when installed;
    restored on return and on exceptions): the contractions of the stages are thin products
    that a second BLAS thread only slows down. Results do not depend on it (bitwise).

    Parameters
    ----------
    f : callable
        ``f(t, y, idx) -> dy`` with ``t`` of shape (b,) (each member's own time), ``y`` of shape
        (b, n) and ``idx`` (b,) the members' indices in the batch; ``dy`` of shape (b, n),
        real. A non-finite row of ``dy`` rejects that member's step (its step size shrinks).
    y0 : array_like, shape (B, n)
        Finite initial states.
    times : array_like, shape (T,)
        Strictly increasing finite output times; ``times[0]`` is the initial time.
    rtol, atol : float
        Relative and absolute tolerances of the local error (RMS norm, as ``solve_ivp``).
    max_steps : int
        Step budget of each member (accepted and rejected steps): a member that spends it ends
        with status ``"max_steps"``.
    stop : callable, optional
        ``stop(idx, t, y, dy) -> mask`` called after each accepted step with the members that
        took it (their new times, states and derivatives); members where the mask is True stop
        there (status ``"stopped"``, later values frozen and marked invalid).

    Returns
    -------
    BatchSolution

    Raises
    ------
    TypeError, ValueError
        Bad arguments, or ``f`` returning an array of the wrong shape or a complex one.

    Examples
    --------
    Two decays :math:`y' = -k y` with :math:`k = 1, 2`, the second with a budget too small:

    >>> import numpy as np, tpde_lib as tp
    >>> f = lambda t, y, idx: -(1.0 + idx)[:, None] * y
    >>> sol = tp.solve_batch(f, np.ones((2, 1)), [0.0, 1.0], max_steps=1000)
    >>> np.allclose(sol.y[:, -1, 0], np.exp([-1.0, -2.0]), rtol=1e-8)
    True
    >>> sol.status.tolist()
    ['finished', 'finished']
    >>> tight = tp.solve_batch(lambda t, y, idx: -y * (1 + 99 * idx[:, None]),
    ...                        np.ones((2, 1)), [0.0, 1.0], max_steps=40)
    >>> tight.status.tolist(), bool(tight.valid[1, -1]), bool(tight.t_end[1] < 1.0)
    (['finished', 'max_steps'], False, True)
    """
    y = as_float_array("y0", y0, ndim=2)
    times = as_times("times", times)
    rtol, atol = as_positive("rtol", rtol), as_positive("atol", atol)
    max_steps = as_count("max_steps", max_steps, 1)
    if not callable(f):
        raise TypeError(f"f must be a callable f(t, y, idx), got {type(f).__name__}")
    if stop is not None and not callable(stop):
        raise TypeError(f"stop must be None or a callable stop(idx, t, y, dy), got {type(stop).__name__}")
    idx = np.arange(y.shape[0])
    as_callable_of("f", f, "(t, y, idx)", times[0], y, idx)
    if stop is not None:
        as_callable_of("stop", stop, "(idx, t, y, dy)", idx, times[0], y, y)
    with single_blas():
        return _solve(f, y.copy(), times, rtol, atol, max_steps, stop)


def _checked(f, t, y, idx):
    """``f(t, y, idx)`` as a real float array of the shape of ``y`` (TypeError/ValueError);
    not checked for finiteness (a non-finite derivative rejects the step)."""
    return checked_result("f", f(t, y, idx), y.shape, finite=False)


def _solve(f, y, times, rtol, atol, max_steps, stop):
    """The step loop of :func:`solve_batch` (arguments validated)."""
    _A, _B, _C, _E, _ORDER = _tableau()
    B, n = y.shape
    T = times.size
    out = np.empty((B, T, n))
    out[:, 0] = y
    valid = np.ones((B, T), dtype=bool)
    status = np.full(B, "finished", dtype=object)
    taken = np.zeros(B, dtype=np.int64)
    t = np.full(B, float(times[0]))
    nxt = np.ones(B, dtype=int)
    k1 = _checked(f, t, y, np.arange(B))
    # initial step (Hairer-Norsett-Wanner heuristic, first part)
    scale = atol + rtol * np.abs(y)
    d0 = np.sqrt(np.mean((y / scale) ** 2, axis=1))
    d1 = np.sqrt(np.mean((k1 / scale) ** 2, axis=1))
    span = times[-1] - times[0]
    with np.errstate(invalid="ignore"):
        h = np.where((d0 < 1e-5) | ~(d1 >= 1e-5), 1e-6 * span, 0.01 * d0 / np.maximum(d1, 1e-300))
    h = np.minimum(h, span)

    def end(members, why):
        """Members ``members`` end now, at their current state: later outputs frozen, invalid."""
        for b in members:
            out[b, nxt[b] :] = y[b]
            valid[b, nxt[b] :] = False
            nxt[b] = T
            status[b] = why

    active = nxt < T
    while active.any():
        idx = np.flatnonzero(active)
        taken[idx] += 1
        yi, ti, ki = y[idx], t[idx], k1[idx]
        target = times[nxt[idx]]
        h_prop = h[idx]
        gap = target - ti
        land = h_prop >= gap * (1 - 1e-12)
        hi = np.where(land, gap, h_prop)
        K = np.empty((7,) + yi.shape)
        K[0] = ki
        with np.errstate(over="ignore", invalid="ignore"):
            for s in range(1, 6):
                dy = np.tensordot(_A[s, :s], K[:s], axes=(0, 0)) * hi[:, None]
                K[s] = _checked(f, ti + _C[s] * hi, yi + dy, idx)
            y_new = yi + hi[:, None] * np.tensordot(_B, K[:6], axes=(0, 0))
            t_new = np.where(land, target, ti + hi)
            K[6] = _checked(f, t_new, y_new, idx)
            err = hi[:, None] * np.tensordot(_E, K, axes=(0, 0))
            sc = atol + rtol * np.maximum(np.abs(yi), np.abs(y_new))
            err_norm = np.sqrt(np.mean((err / sc) ** 2, axis=1))
        ok = np.isfinite(err_norm) & np.isfinite(y_new).all(1) & np.isfinite(K[6]).all(1)
        accept = ok & (err_norm <= 1.0)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            fac = np.where(err_norm == 0, _MAX_FACTOR, _SAFETY * err_norm ** (-1.0 / (_ORDER + 1)))
        fac = np.where(ok, fac, _MIN_FACTOR)
        fac = np.where(accept, np.clip(fac, _MIN_FACTOR, _MAX_FACTOR), np.clip(fac, _MIN_FACTOR, 1.0))
        h_next = hi * fac
        h_next = np.where(accept & land, np.maximum(h_next, h_prop), h_next)
        h[idx] = h_next
        acc = idx[accept]
        if acc.size:
            ya, ka = y_new[accept], K[6][accept]
            y[acc], k1[acc], t[acc] = ya, ka, t_new[accept]
            landed_now = land[accept]
            landed = acc[landed_now]
            out[landed, nxt[landed]] = y[landed]
            nxt[landed] += 1
            if stop is not None:
                halt = np.asarray(stop(acc, t[acc], ya, ka))
                if halt.shape != acc.shape or halt.dtype.kind not in "biu":
                    raise TypeError(
                        f"solve_batch: stop must return a boolean mask of shape "
                        f"{acc.shape} (one per member given), got "
                        f"{halt.dtype} of shape {halt.shape}"
                    )
                halt = halt.astype(bool)
                for b, ld in zip(acc[halt], landed_now[halt]):
                    nxt[b] -= bool(ld)  # a time landed on now is past the stop: invalid
                end(acc[halt], "stopped")
        # a rejected step whose next size is below round-off of its time cannot progress
        tiny = ~accept & (h_next < 1e-14 * np.maximum(1.0, np.abs(ti)))
        end(idx[tiny & (nxt[idx] < T)], "step_underflow")
        end(idx[(taken[idx] >= max_steps) & (nxt[idx] < T)], "max_steps")
        active = nxt < T
    return BatchSolution(times, out, valid, status.astype(str), t, taken)
