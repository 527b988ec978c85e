"""Ranks, limits, Lyapunov functions, outcomes and the phase picture (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import (
    as_blowup_times,
    as_count,
    as_covariance,
    as_finite,
    as_float_array,
    as_nonsingular,
    as_positive,
    as_square_batch,
)
from ..attention import Softmax
from ..gaussian import simulate_gaussian_batch

# --------------------------------------------------------------------------------------------
# Ranks, limits, Lyapunov functions
# --------------------------------------------------------------------------------------------


def predicted_limit_rank(A: ArrayLike, tol: float = 1e-10) -> NDArray[np.int_]:
    r"""Rank of the limit covariance predicted for :math:`V = I` and :math:`A + A^\top \preceq 0`.

    **Derived** (chapter "Clustering versus blow-up", {eq}`eq-clustering-identity`): with :math:`V = I`,
    :math:`\Sigma_t = (\Sigma_0^{-1} - t(A+A^\top))^{-1} \to \Sigma_\infty` with
    :math:`\operatorname{range}\Sigma_\infty = \ker(A+A^\top)`, so for every full-rank
    :math:`\Sigma_0`

    .. math:: \operatorname{rank}\Sigma_\infty = d - \operatorname{rank}(A + A^\top).

    Parameters
    ----------
    A : array_like, shape (..., d, d)
    tol : float
        Eigenvalues of :math:`A + A^\top` with modulus below ``tol * max(1, |A + A^T|)`` count as 0.

    Returns
    -------
    ndarray of int, shape (...)

    Raises
    ------
    ValueError
        If some :math:`A + A^\top` has a positive eigenvalue (then :math:`\Sigma` blows up).
    """
    A = as_square_batch("A", A)
    tol = as_positive("tol", tol)
    lam = np.linalg.eigvalsh(A + np.swapaxes(A, -1, -2))
    scale = np.maximum(1.0, np.abs(lam).max(axis=-1, keepdims=True))
    if np.any(lam > tol * scale):
        raise ValueError(
            "A + A^T must be negative semi-definite for a limit to exist "
            f"(largest eigenvalue {lam[..., -1].max():.3g} > 0)"
        )
    return A.shape[-1] - np.sum(np.abs(lam) > tol * scale, axis=-1)


def lyapunov(cov: ArrayLike, V: ArrayLike) -> NDArray[np.float64]:
    r""":math:`\mathcal L = \operatorname{tr}(V^{-1}\Sigma)` batched.

    The Lyapunov function of {eq}`eq-clustering-lyapunov` (chapter "Clustering versus blow-up").

    **Derived**: for softmax with :math:`V` symmetric positive definite,
    :math:`\mathcal L' = \operatorname{tr}(\Sigma(A+A^\top)\Sigma)`, which is :math:`\le 0` when
    :math:`A + A^\top \preceq 0`.

    Parameters
    ----------
    cov : array_like, shape (..., d, d)
    V : array_like, shape (..., d, d)
        Invertible (symmetric positive definite for the monotonicity statement).

    Returns
    -------
    ndarray, shape (...)
    """
    cov = as_square_batch("cov", cov)
    V = as_nonsingular("V", as_square_batch("V", V, cov.shape[-1]))
    return np.trace(np.linalg.solve(V, cov), axis1=-2, axis2=-1)


def lyapunov_matrix(V: ArrayLike) -> NDArray[np.float64]:
    r"""An SPD matrix :math:`M` with :math:`\operatorname{tr}(M^{-1}\Sigma)` non-increasing.

    **Derived** ({eq}`eq-clustering-lyapunov-general`): if :math:`V = RDR^{-1}` is diagonalisable
    with real positive eigenvalues (:math:`D` diagonal), then :math:`M = RDR^\top` satisfies
    :math:`\frac{d}{dt}\operatorname{tr}(M^{-1}\Sigma) = \operatorname{tr}\big(R^{-1}\Sigma
    (A + A^\top)\Sigma R^{-\top}\big)`, which is :math:`\le 0` when :math:`A + A^\top \preceq 0`.
    For symmetric :math:`V` (orthogonal :math:`R`) this is :math:`M = V`.

    Parameters
    ----------
    V : array_like, shape (..., d, d)

    Returns
    -------
    ndarray, shape (..., d, d)

    Raises
    ------
    ValueError
        If some :math:`V` has a non-real or non-positive eigenvalue.
    """
    V = as_square_batch("V", V)
    lam, R = np.linalg.eig(V)
    scale = np.abs(lam).max(axis=-1, keepdims=True)
    if np.any(np.abs(lam.imag) > 1e-10 * scale) or np.any(lam.real <= 1e-12 * scale):
        raise ValueError(
            "V must be diagonalisable with real positive eigenvalues, got "
            f"eigenvalues {np.round(lam.reshape(-1, lam.shape[-1])[0], 6)} (first)"
        )
    R = R.real
    # a Jordan block (defective V) has (numerically) parallel eigenvectors: R singular, and
    # R D R^T would be a singular "Lyapunov matrix"
    cond = np.linalg.cond(R)
    if np.any(~(cond < 1e8)):
        raise ValueError(
            f"V must be diagonalisable with real positive eigenvalues: its "
            f"eigenvector matrix has condition number {np.max(cond):.3g} "
            "(a Jordan block, or nearly one)"
        )
    return (R * lam.real[..., None, :]) @ np.swapaxes(R, -1, -2)


# --------------------------------------------------------------------------------------------
# Outcomes and the phase picture
# --------------------------------------------------------------------------------------------

CONVERGES, BLOWS_UP, GROWS = 0, 1, 2
OUTCOME_NAMES = {CONVERGES: "converges", BLOWS_UP: "blows up", GROWS: "grows"}


def classify_outcome(
    cov: ArrayLike,
    blowup_time: ArrayLike,
    valid: ArrayLike | None = None,
    growth_factor: float = 10.0,
    rank_tol: float = 1e-2,
    status: ArrayLike | None = None,
) -> NDArray[np.int_]:
    r"""Classify accurate covariance trajectories: converge to rank r, blow up at t*, or grow.

    * **blows up**: the integrator reported a finite blow-up time (with ``status`` given: only
      where it is ``"blowup"``; a ``"growth_limit"`` stop is growth, not a detected blow-up);
    * **grows**: no blow-up within the horizon, and the trace at the last valid time exceeds
      ``growth_factor`` times the initial trace (growth without finite-time blow-up, e.g. ℓ² and
      Sinkhorn where softmax blows up);
    * **converges**: otherwise; the rank is :func:`numerical_rank` of the last covariance with the
      relative threshold ``rank_tol * tr(Sigma_0)`` (a limit approached like :math:`O(1/t)`
      needs ``rank_tol`` above the remaining :math:`1/t` tail).

    Parameters
    ----------
    cov : array_like, shape (B, T, d, d)
        Trajectories on a common time grid.
    blowup_time : array_like, shape (B,)
        ``np.inf`` where there is no blow-up.
    valid : array_like of bool, shape (B, T), optional
        Which times are before blow-up (default: all).
    growth_factor, rank_tol : float
    status : array_like of str, shape (B,), optional
        The solver's status per member (:class:`~tpde_lib.gaussian.GaussianBatch`).

    Returns
    -------
    outcome : ndarray of int, shape (B,)
        :data:`CONVERGES`, :data:`BLOWS_UP` or :data:`GROWS`.
    rank : ndarray of int, shape (B,)
        Numerical rank of the last valid covariance (``-1`` unless converging).
    """
    cov = as_float_array("cov", cov, ndim=4)
    if cov.shape[-1] != cov.shape[-2]:
        raise ValueError(f"cov must have shape (B, T, d, d), got {cov.shape}")
    B, T = cov.shape[:2]
    tstar = as_blowup_times("blowup_time", blowup_time, shape=(B,))
    growth_factor = as_positive("growth_factor", growth_factor)
    rank_tol = as_positive("rank_tol", rank_tol)
    if valid is None:
        valid = np.ones((B, T), bool)
    else:
        try:
            valid = np.asarray(valid)
        except ValueError as exc:
            raise ValueError(f"valid must be a bool array of shape ({B}, {T}) ({exc})") from exc
        if valid.dtype != bool:
            raise TypeError(f"valid must be a bool array of shape ({B}, {T}), got dtype {valid.dtype}")
        if valid.shape != (B, T):
            raise ValueError(f"valid must have shape ({B}, {T}), got {valid.shape}")
    last = np.maximum(T - 1 - np.argmax(valid[:, ::-1], axis=1), 0)
    final = cov[np.arange(B), last]
    tr0 = np.trace(cov[:, 0], axis1=-2, axis2=-1)
    trT = np.trace(final, axis1=-2, axis2=-1)
    outcome = np.full(B, CONVERGES)
    outcome[trT > growth_factor * tr0] = GROWS
    blows = np.isfinite(tstar)
    if status is not None:
        try:
            status = np.asarray(status)
        except ValueError as exc:
            raise ValueError(
                f"status must be an array of shape ({B},) of the solver's statuses ({exc})"
            ) from exc
        if status.shape != (B,):
            raise ValueError(f"status must have shape ({B},), got {status.shape}")
        allowed = ("ok", "blowup", "growth_limit", "max_steps", "step_underflow")
        if not all(isinstance(x, str) and x in allowed for x in status.tolist()):
            raise ValueError(f"status must hold the solver's statuses {allowed}, got {status.tolist()[:5]}")
        blows &= status == "blowup"
        outcome[(status == "growth_limit") & ~blows] = GROWS
    outcome[blows] = BLOWS_UP
    lam = np.linalg.eigvalsh(final)
    rank = np.sum(lam > rank_tol * tr0[:, None], axis=-1)
    rank[outcome != CONVERGES] = -1
    return outcome, rank


@dataclass(frozen=True)
class PhaseDiagram:
    r"""Outcome of softmax dynamics over a two-parameter family (see :func:`phase_diagram`).

    Attributes
    ----------
    a1, a2 : ndarray, shape (n1,), (n2,)
        Eigenvalues of the symmetric part of :math:`A` on the axes.
    outcome, rank : ndarray of int, shape (n2, n1)
        From :func:`classify_outcome` (rows follow ``a2``).
    blowup_time : ndarray, shape (n2, n1)
        Measured blow-up time (``inf`` if none).
    predicted_blowup_time : ndarray, shape (n2, n1) or None
        Closed form :math:`t^* = 1/(v\lambda_{\max}(\Sigma_0^{1/2}(A+A^\top)\Sigma_0^{1/2}))` when
        :math:`V = vI` ({eq}`eq-clustering-identity`), ``inf`` if no blow-up; ``None`` otherwise.
    predicted_rank : ndarray of int, shape (n2, n1) or None
        :math:`d - \operatorname{rank}(A+A^\top)` where the limit exists and :math:`V = vI`.
    """

    a1: np.ndarray
    a2: np.ndarray
    outcome: np.ndarray
    rank: np.ndarray
    blowup_time: np.ndarray
    predicted_blowup_time: np.ndarray | None
    predicted_rank: np.ndarray | None


def _rotation(theta):
    c, s = np.cos(theta), np.sin(theta)
    return np.array([[c, -s], [s, c]])


def phase_diagram(
    a1: ArrayLike,
    a2: ArrayLike,
    V: ArrayLike,
    cov0: ArrayLike,
    theta: float = 0.0,
    skew: float = 0.0,
    horizon: float = 50.0,
    n_times: int = 201,
    growth_factor: float = 10.0,
    rank_tol: float = 1e-2,
    **solver_options,
) -> PhaseDiagram:
    r"""Outcome of 2-D softmax dynamics over the family :math:`A = R_\theta\,\mathrm{diag}(a_1,
    a_2)\,R_\theta^\top + s J`.

    :math:`R_\theta` is the rotation by ``theta`` and :math:`J = \begin{pmatrix}0&-1\\1&0
    \end{pmatrix}` adds a skew part ``skew`` (which changes nothing when :math:`V = I`, since
    only :math:`A + A^\top` enters the closed form). All grid points are integrated as one batch
    with :func:`tpde_lib.gaussian.simulate_gaussian_batch` up to ``horizon`` and classified with
    :func:`classify_outcome`.

    Parameters
    ----------
    a1, a2 : array_like, shape (n1,), (n2,)
    V : array_like, shape (2, 2)
    cov0 : array_like, shape (2, 2)
        Initial covariance (positive definite).
    theta, skew : float
    horizon : float
        Integration time; limits are read at this time.
    n_times : int
        Number of output times.
    growth_factor, rank_tol : float
        See :func:`classify_outcome`.
    **solver_options
        Passed to ``simulate_gaussian_batch``.

    Returns
    -------
    PhaseDiagram
    """
    a1 = as_float_array("a1", a1, ndim=1)
    a2 = as_float_array("a2", a2, ndim=1)
    V = as_float_array("V", V, shape=(2, 2))
    cov0 = as_covariance("cov0", cov0, 2)
    theta, skew = as_finite("theta", theta), as_finite("skew", skew)
    horizon = as_positive("horizon", horizon)
    n_times = as_count("n_times", n_times, 2)
    R = _rotation(theta)
    J = np.array([[0.0, -1.0], [1.0, 0.0]])
    g1, g2 = np.meshgrid(a1, a2)  # (n2, n1)
    D = np.zeros(g1.shape + (2, 2))
    D[..., 0, 0], D[..., 1, 1] = g1, g2
    A = R @ D @ R.T + skew * J
    flatA = A.reshape(-1, 2, 2)
    atts = [Softmax(a, V) for a in flatA]
    times = np.linspace(0.0, horizon, n_times)
    batch = simulate_gaussian_batch(atts, np.broadcast_to(cov0, flatA.shape).copy(), times, **solver_options)
    outcome, rank = classify_outcome(
        batch.cov,
        batch.blowup_time,
        batch.valid,
        status=batch.status,
        growth_factor=growth_factor,
        rank_tol=rank_tol,
    )
    shape = g1.shape
    pred_t = pred_r = None
    if np.allclose(V, V[0, 0] * np.eye(2)) and V[0, 0] > 0:
        v = V[0, 0]
        lam, U = np.linalg.eigh(cov0)
        root = (U * np.sqrt(lam)) @ U.T
        top = np.linalg.eigvalsh(root @ (flatA + np.swapaxes(flatA, -1, -2)) @ root)[:, -1]
        top = np.where(top > 1e-12, top, 0.0)  # round-off of an exactly zero eigenvalue
        pred_t = np.where(top > 0, 1.0 / (v * np.where(top > 0, top, 1.0)), np.inf)
        pred_t = pred_t.reshape(shape)
        sym_eigs = np.linalg.eigvalsh(flatA + np.swapaxes(flatA, -1, -2))
        pred_r = np.where(sym_eigs[:, -1] > 1e-12, -1, 2 - np.sum(np.abs(sym_eigs) > 1e-12, axis=-1)).reshape(
            shape
        )
    return PhaseDiagram(
        a1,
        a2,
        outcome.reshape(shape),
        rank.reshape(shape),
        np.asarray(batch.blowup_time, float).reshape(shape),
        pred_t,
        pred_r,
    )
