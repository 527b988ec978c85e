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

from dataclasses import dataclass

import numpy as np
from scipy.integrate import RK45

__all__ = ["BatchSolution", "solve_batch"]

_A, _B, _C, _E = RK45.A, RK45.B, RK45.C, RK45.E   # scipy's Dormand-Prince tableau
_ORDER = RK45.error_estimator_order
_SAFETY, _MIN_FACTOR, _MAX_FACTOR = 0.9, 0.2, 10.0


@dataclass(frozen=True)
class BatchSolution:
    """Output of :func:`solve_batch`.

    Attributes
    ----------
    times : ndarray, shape (T,)
    y : ndarray, shape (B, T, n)
        The states at the output times; a stopped member is frozen at its state when stopped.
    valid : ndarray of bool, shape (B, T)
        False from the step in which a member was stopped on.
    stopped : ndarray of bool, shape (B,)
        Members stopped by ``stop`` before the last time.
    n_steps : int
        Number of (batched) steps taken.
    """

    times: np.ndarray
    y: np.ndarray
    valid: np.ndarray
    stopped: np.ndarray
    n_steps: int


def solve_batch(f, y0, times, rtol=1e-9, atol=1e-12, max_steps=200_000, stop=None):
    r"""Integrate :math:`y_b' = f(t_b, y_b)` for every member ``b`` of a batch.

    Parameters
    ----------
    f : callable
        ``f(t, y, idx) -> dy`` with ``t`` of shape (b,) (each member's own time), ``y`` of shape
        (b, n) and ``idx`` (b,) the members' indices in the batch. A non-finite ``dy`` rejects the
        step (the step size shrinks).
    y0 : ndarray, shape (B, n)
    times : ndarray, shape (T,)
        Strictly increasing output times; ``times[0]`` is the initial time.
    rtol, atol : float
        Relative and absolute tolerances of the local error (RMS norm, as ``solve_ivp``).
    max_steps : int
        Cap on the number of batched steps: ``RuntimeError`` beyond it.
    stop : callable, optional
        ``stop(idx, t, y, dy) -> mask`` called after each accepted step with the members that
        took it (their new times, states and derivatives); members where the mask is True stop
        there (their later values are frozen and marked invalid).

    Returns
    -------
    BatchSolution

    Raises
    ------
    RuntimeError
        A member's step size underflowed, or more than ``max_steps`` steps.
    """
    y = np.array(y0, dtype=float)
    B, n = y.shape
    T = times.size
    out = np.empty((B, T, n))
    out[:, 0] = y
    valid = np.ones((B, T), dtype=bool)
    stopped = np.zeros(B, dtype=bool)
    t = np.full(B, float(times[0]))
    nxt = np.ones(B, dtype=int)
    k1 = f(t, y, np.arange(B))
    # initial step (Hairer-Norsett-Wanner heuristic, first part)
    scale = atol + rtol * np.abs(y)
    d0 = np.sqrt(np.mean((y / scale) ** 2, axis=1))
    d1 = np.sqrt(np.mean((k1 / scale) ** 2, axis=1))
    span = times[-1] - times[0]
    with np.errstate(invalid="ignore"):
        h = np.where((d0 < 1e-5) | ~(d1 >= 1e-5), 1e-6 * span, 0.01 * d0 / np.maximum(d1, 1e-300))
    h = np.minimum(h, span)
    active = nxt < T
    steps = 0
    while active.any():
        steps += 1
        if steps > max_steps:
            raise RuntimeError(f"solve_batch: more than max_steps={max_steps} steps (raise "
                               "max_steps, or loosen rtol/atol)")
        idx = np.flatnonzero(active)
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
                K[s] = f(ti + _C[s] * hi, yi + dy, idx)
            y_new = yi + hi[:, None] * np.tensordot(_B, K[:6], axes=(0, 0))
            t_new = np.where(land, target, ti + hi)
            K[6] = f(t_new, y_new, idx)
            err = hi[:, None] * np.tensordot(_E, K, axes=(0, 0))
            sc = atol + rtol * np.maximum(np.abs(yi), np.abs(y_new))
            err_norm = np.sqrt(np.mean((err / sc) ** 2, axis=1))
        ok = np.isfinite(err_norm) & np.isfinite(y_new).all(1) & np.isfinite(K[6]).all(1)
        accept = ok & (err_norm <= 1.0)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            fac = np.where(err_norm == 0, _MAX_FACTOR, _SAFETY * err_norm ** (-1.0 / (_ORDER + 1)))
        fac = np.where(ok, fac, _MIN_FACTOR)
        fac = np.where(accept, np.clip(fac, _MIN_FACTOR, _MAX_FACTOR),
                       np.clip(fac, _MIN_FACTOR, 1.0))
        h_next = hi * fac
        h_next = np.where(accept & land, np.maximum(h_next, h_prop), h_next)
        tiny = h_next < 1e-14 * np.maximum(1.0, np.abs(ti))
        if tiny.any():
            b = idx[np.argmax(tiny)]
            raise RuntimeError(f"solve_batch: step size underflow for member {b} at t={t[b]:g}")
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
                halt = np.asarray(stop(acc, t[acc], ya, ka), dtype=bool)
                for b, ld in zip(acc[halt], landed_now[halt]):
                    first = nxt[b] - 1 if ld else nxt[b]   # a time landed on now is past it
                    out[b, first:] = y[b]
                    valid[b, first:] = False
                    nxt[b] = T
                    stopped[b] = True
        active = nxt < T
    return BatchSolution(times, out, valid, stopped, steps)
