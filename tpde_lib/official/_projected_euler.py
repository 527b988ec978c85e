r"""The authors' projected explicit Euler scheme for the covariance ODE, as published.

The released code of the paper integrates the covariance ODE with explicit Euler steps followed
by a projection onto the PSD cone, with convergence and divergence thresholds. This module
reproduces that loop verbatim (batched over initial covariances) so that the book can show the
paper's figures next to accurate integrations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import as_count, as_covariance, as_float_array, as_positive

__all__ = ["ProjectedEulerResult", "projected_euler"]


@dataclass(frozen=True)
class ProjectedEulerResult:
    """Output of :func:`projected_euler` for a batch of B initial covariances.

    Attributes
    ----------
    paths : list of ndarray
        ``paths[b]`` has shape (n_b, d, d): the recorded iterates :math:`S_0, S_{r}, S_{2r}, \\dots`
        (``r = record_every``) taken before each step, as the authors' ``S_list``.
    status : ndarray of str, shape (B,)
        ``"converged"``, ``"diverged"`` or ``"max_iter"``.
    n_steps : ndarray of int, shape (B,)
        Number of iterations performed (each evaluates the rhs and takes one step); the authors'
        printed count is ``n_steps - 1``.
    last : ndarray, shape (B, d, d)
        The iterate after the last step (not part of the path, as in the authors' code).
    """

    paths: list
    status: np.ndarray
    n_steps: np.ndarray
    last: np.ndarray


# --------------------------------------------------------------------------------------------
def _psd_projection_verbatim(S, floor=1e-14):
    """eigh; eigenvalues < 0 replaced by ``floor`` (the authors' ``psd_projection``), batched."""
    lam, U = np.linalg.eigh(S)
    lam = np.where(lam < 0, floor, lam)
    return (U * lam[..., None, :]) @ np.swapaxes(U, -1, -2)


def projected_euler(rhs, cov0, h, tol_low=1e-5, tol_high=1e3, max_iter=50000, record_every=1):
    r"""The authors' projected explicit Euler scheme for the covariance ODE.

    Per iteration, verbatim from the official code (``utils.evolution``), for every member still
    running: record :math:`S`; :math:`r = \mathrm{rhs}(S)`; :math:`S \leftarrow S + h r`;
    :math:`S \leftarrow` ``psd_projection`` :math:`(S)` (``eigh``, eigenvalues :math:`< 0` set
    to :math:`10^{-14}`); then stop with ``"converged"`` if :math:`\|r\|_F <` ``tol_low``
    (the rhs *before* the step), else ``"diverged"`` if :math:`\operatorname{tr}S >` ``tol_high``
    (*after* the step); ``"max_iter"`` after ``max_iter`` iterations. Members stop independently
    (frozen afterwards). Use :func:`tpde_lib.gaussian.covariance_rhs` to get ``rhs`` from an
    attention.

    Parameters
    ----------
    rhs : callable
        ``rhs(S)`` for ``S`` of shape (B, d, d) (the whole batch, frozen members included),
        returning the same shape.
    cov0 : array_like, shape (d, d) or (B, d, d)
        Initial covariances (a (d, d) input is a batch of one).
    h : float
        Step size.
    tol_low, tol_high : float
        Convergence and divergence thresholds.
    max_iter : int
    record_every : int
        Keep one iterate in ``record_every`` in the paths (1: all, as the authors).

    Returns
    -------
    ProjectedEulerResult
    """
    h = as_positive("h", h)
    tol_low, tol_high = as_positive("tol_low", tol_low), as_positive("tol_high", tol_high)
    max_iter = as_count("max_iter", max_iter, 1)
    record_every = as_count("record_every", record_every, 1)
    if not callable(rhs):
        raise TypeError("rhs must be a callable S (B, d, d) -> (B, d, d); use covariance_rhs(att)")
    S = as_float_array("cov0", cov0)
    if S.ndim == 2:
        S = S[None]
    if S.ndim != 3 or S.shape[1] != S.shape[2]:
        raise ValueError(f"cov0 must have shape (d, d) or (B, d, d), got {S.shape}")
    S = np.stack([as_covariance(f"cov0[{b}]", c) for b, c in enumerate(S)])
    B = S.shape[0]
    running = np.ones(B, dtype=bool)
    status = np.full(B, "max_iter", dtype=object)
    n_steps = np.zeros(B, dtype=int)
    records, rec_running = [], []
    for i in range(max_iter):
        if i % record_every == 0:
            records.append(S.copy())
            rec_running.append(running.copy())
        r = np.asarray(rhs(S), dtype=float)
        if r.shape != S.shape:
            raise ValueError(f"rhs returned shape {r.shape}, expected {S.shape}")
        bad = running & ~np.isfinite(r).all(axis=(1, 2))
        if bad.any():
            raise FloatingPointError(f"projected_euler: the rhs is not finite for member "
                                     f"{int(np.argmax(bad))} at iteration {i} (t = {i * h:g}); "
                                     "the covariance overflowed: lower tol_high or h")
        norm_r = np.sqrt((r * r).sum(axis=(1, 2)))
        S_new = _psd_projection_verbatim(S + h * r)
        S = np.where(running[:, None, None], S_new, S)
        n_steps[running] += 1
        conv = running & (norm_r < tol_low)
        div = running & ~conv & (np.trace(S, axis1=1, axis2=2) > tol_high)
        status[conv], status[div] = "converged", "diverged"
        running &= ~(conv | div)
        if not running.any():
            break
    rec = np.stack(records)
    alive = np.stack(rec_running)
    paths = [rec[alive[:, b], b] for b in range(B)]
    return ProjectedEulerResult(paths, status.astype(str), n_steps, S)


