r"""The authors' projected Euler runs: their settings, and a batch runner that drops finished members.

:func:`run_paper_euler` calls :func:`tpde_lib.official.projected_euler` (the scheme as released)
in chunks on a shrinking batch; the iterates are identical to one uninterrupted run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_count, as_float_array, as_instance, as_positive
from ._projected_euler import projected_euler


@dataclass(frozen=True)
class EulerSettings:
    """One run of the authors' projected explicit Euler scheme.

    Attributes
    ----------
    h : float
        Step size. ``tol_low``: stop as converged when the Frobenius norm of the right-hand side
        (before the step) is below it; ``tol_high``: stop as diverged when the trace (after the
        step) exceeds it; ``max_iter``: at most this many steps; ``H``: number of heads passed.
    """

    h: float
    tol_low: float = 1e-5
    tol_high: float = 1e3
    max_iter: int = 50000
    H: int = 1

    def __post_init__(self):
        for name in ("h", "tol_low", "tol_high"):
            object.__setattr__(self, name, as_positive(name, getattr(self, name)))
        object.__setattr__(self, "max_iter", as_count("max_iter", self.max_iter, 1))
        object.__setattr__(self, "H", as_count("H", self.H, 1))


@dataclass(frozen=True)
class EulerRun:
    """Output of :func:`run_paper_euler` for a batch of B initial covariances.

    Attributes
    ----------
    paths : list of ndarray
        ``paths[b]`` of shape (n_b, d, d): the recorded iterates (before each step).
    status : ndarray of str, shape (B,)
        ``"converged"``, ``"diverged"`` or ``"max_iter"``.
    n_steps : ndarray of int, shape (B,)
        Iterations performed.
    last : ndarray, shape (B, d, d)
        The iterate after the last step.
    """

    paths: list
    status: np.ndarray
    n_steps: np.ndarray
    last: np.ndarray


def run_paper_euler(
    rhs_for: Callable[[np.ndarray], Callable],
    cov0: ArrayLike,
    settings: EulerSettings,
    record_every: int = 1,
    chunk: int = 500,
    max_iter: int | None = None,
) -> EulerRun:
    r"""The authors' projected Euler scheme, run in chunks on a shrinking batch.

    Calls :func:`tpde_lib.official.projected_euler` for ``chunk`` iterations at a time, then
    restarts it from the last iterate of the members still running only. The scheme is memoryless
    (each iteration depends on the current iterate alone), so the result is identical to one
    uninterrupted run; the saving is that finished members stop costing anything
    (``projected_euler`` evaluates the whole batch at every iteration).

    Parameters
    ----------
    rhs_for : callable
        ``rhs_for(idx)`` returns the batched right-hand side (a callable, see
        :func:`projected_euler`) for the members ``idx`` (int array); for parameters shared by
        the batch it may ignore ``idx``.
    cov0 : array_like, shape (B, d, d)
    settings : EulerSettings
    record_every : int
        Keep one iterate in ``record_every`` in the paths (``chunk`` is rounded to a multiple of
        it, so the record is regular; 1 keeps all, as the authors).
    chunk : int
        Iterations per call.
    max_iter : int, optional
        Overrides ``settings.max_iter`` (a budget; say so where used).

    Returns
    -------
    EulerRun
    """
    as_instance("settings", settings, EulerSettings, "an EulerSettings")
    if not callable(rhs_for):
        raise TypeError(f"rhs_for must be a callable idx -> rhs, got {type(rhs_for).__name__}")
    S = as_float_array("cov0", cov0, ndim=3).copy()
    B = S.shape[0]
    total = settings.max_iter if max_iter is None else as_count("max_iter", max_iter, 1)
    record_every = as_count("record_every", record_every, 1)
    chunk = as_count("chunk", chunk, 1)
    if chunk % record_every:
        chunk = record_every * max(1, chunk // record_every)
    paths = [[] for _ in range(B)]
    status = np.full(B, "max_iter", dtype=object)
    n_steps = np.zeros(B, dtype=int)
    idx = np.arange(B)
    done = 0
    while idx.size and done < total:
        n = min(chunk, total - done)
        rhs = rhs_for(idx)
        if not callable(rhs):
            raise TypeError(f"rhs_for must return a callable S -> rhs(S), got {type(rhs).__name__}")
        res = projected_euler(
            rhs,
            S[idx],
            settings.h,
            tol_low=settings.tol_low,
            tol_high=settings.tol_high,
            max_iter=n,
            record_every=record_every,
        )
        for j, b in enumerate(idx):
            paths[b].append(res.paths[j])
        S[idx] = res.last
        n_steps[idx] += res.n_steps
        stopped = res.status != "max_iter"
        status[idx[stopped]] = res.status[stopped]
        idx = idx[~stopped]
        done += n
    return EulerRun([np.concatenate(p) for p in paths], status.astype(str), n_steps, S)
