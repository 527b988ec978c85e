r"""Clustering versus blow-up of Gaussian covariances under softmax attention: the analysis.

For a Gaussian :math:`\mathcal N(\alpha, \Sigma)` the softmax covariance solves the Riccati
equation :math:`\Sigma' = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top` (chapter "Gaussian
solutions"). This module holds what the chapter "Clustering versus blow-up" computes with it:

* ranks and limits: :func:`numerical_rank`, :func:`predicted_limit_rank`;
* Lyapunov functions: :func:`lyapunov`, :func:`lyapunov_matrix` ({eq}`eq-clustering-lyapunov`,
  {eq}`eq-clustering-lyapunov-general`);
* outcomes and phase pictures: :func:`classify_outcome`, :func:`phase_diagram`;
* general :math:`V`: random ensembles (:func:`random_value_matrices`,
  :func:`pairs_with_sign_condition`), a batched survey of their fates (:func:`blowup_survey`),
  a seeded counterexample search (:func:`sign_condition_counterexamples`), the universal lower
  bound on the blow-up time (:func:`blowup_time_lower_bound`) and the change of variables that
  leaves the dynamics invariant (:func:`congruence`).

Notation: :math:`A` is the score matrix (score :math:`\langle Ax, y\rangle`,
:math:`A = K^\top Q/\sqrt k`), :math:`V` the value matrix.

The 2×2 cone geometry moved to :mod:`tpde_lib.psd_cone`, the reproduction of the authors' code
(experiments E1–E6, the histogram protocol) to :mod:`tpde_lib.official`; their names stay
importable from here for one release.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import as_float_array, as_positive
from .attention import Softmax
from .gaussian import simulate_gaussian, simulate_gaussian_batch
from .measures import Gaussian

# moved names, importable from here for one release
from .official import (  # noqa: F401
    VARIANTS,
    EulerSettings,
    HistogramSetting,
    PaperExperiment,
    histogram_accurate,
    histogram_euler_budget,
    histogram_inits,
    histogram_setting,
    paper_attention,
    paper_experiment,
    paper_histogram_ranks,
    paper_parameters,
    paper_rhs,
    run_paper_euler,
)
from .psd_cone import from_3d, init_grid, rank_one_direction, to_3d, to_disk  # noqa: F401

__all__ = [
    "numerical_rank", "predicted_limit_rank", "lyapunov", "lyapunov_matrix",
    "CONVERGES", "BLOWS_UP", "GROWS", "OUTCOME_NAMES", "classify_outcome", "PhaseDiagram",
    "phase_diagram", "random_value_matrices", "pairs_with_sign_condition", "BlowupSurvey",
    "blowup_survey", "ensemble_survey", "Counterexamples", "sign_condition_counterexamples",
    "blowup_time_lower_bound", "congruence", "r5_counterexample",
]


# --------------------------------------------------------------------------------------------
# Ranks, limits, Lyapunov functions
# --------------------------------------------------------------------------------------------

def numerical_rank(cov, tol=1e-1, relative=False):
    r"""Number of eigenvalues above ``tol`` (batched).

    The histograms of the paper count eigenvalues :math:`> 0.1` (``tol_rank=1e-1``);
    with ``relative=True`` the threshold is ``tol * max(1, lambda_max)`` per matrix.

    Parameters
    ----------
    cov : array_like, shape (..., d, d)
        Symmetric matrices.
    tol : float
        Threshold (> 0).
    relative : bool

    Returns
    -------
    ndarray of int, shape (...)
    """
    cov = as_float_array("cov", cov)
    if cov.ndim < 2 or cov.shape[-1] != cov.shape[-2]:
        raise ValueError(f"cov must have shape (..., d, d), got {cov.shape}")
    tol = as_positive("tol", tol)
    lam = np.linalg.eigvalsh(0.5 * (cov + np.swapaxes(cov, -1, -2)))
    thr = tol * np.maximum(1.0, lam[..., -1:]) if relative else tol
    return np.sum(lam > thr, axis=-1)


def predicted_limit_rank(A, tol=1e-10):
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
    A = as_float_array("A", A)
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"A must have shape (..., d, d), got {A.shape}")
    lam = np.linalg.eigvalsh(A + np.swapaxes(A, -1, -2))
    scale = np.maximum(1.0, np.abs(lam).max(axis=-1, keepdims=True))
    if np.any(lam > tol * scale):
        raise ValueError("A + A^T must be negative semi-definite for a limit to exist "
                         f"(largest eigenvalue {lam[..., -1].max():.3g} > 0)")
    return A.shape[-1] - np.sum(np.abs(lam) > tol * scale, axis=-1)


def lyapunov(cov, V):
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
    cov = as_float_array("cov", cov)
    V = as_float_array("V", V)
    if cov.shape[-2:] != V.shape[-2:] or cov.shape[-1] != cov.shape[-2]:
        raise ValueError(f"cov and V must be (..., d, d) with the same d, got {cov.shape}, "
                         f"{V.shape}")
    return np.trace(np.linalg.solve(V, cov), axis1=-2, axis2=-1)


def lyapunov_matrix(V):
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
    V = as_float_array("V", V)
    if V.ndim < 2 or V.shape[-1] != V.shape[-2]:
        raise ValueError(f"V must have shape (..., d, d), got {V.shape}")
    lam, R = np.linalg.eig(V)
    scale = np.abs(lam).max(axis=-1, keepdims=True)
    if np.any(np.abs(lam.imag) > 1e-10 * scale) or np.any(lam.real <= 1e-12 * scale):
        raise ValueError("V must be diagonalisable with real positive eigenvalues")
    R = R.real
    return (R * lam.real[..., None, :]) @ np.swapaxes(R, -1, -2)



# --------------------------------------------------------------------------------------------
# Outcomes and the phase picture
# --------------------------------------------------------------------------------------------

CONVERGES, BLOWS_UP, GROWS = 0, 1, 2
OUTCOME_NAMES = {CONVERGES: "converges", BLOWS_UP: "blows up", GROWS: "grows"}


def classify_outcome(cov, blowup_time, valid=None, growth_factor=10.0, rank_tol=1e-2, status=None):
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
    B, T = cov.shape[:2]
    tstar = np.asarray(blowup_time, dtype=float).reshape(-1)
    if tstar.shape != (B,):
        raise ValueError(f"blowup_time must have shape ({B},), got {np.shape(blowup_time)}")
    valid = np.ones((B, T), bool) if valid is None else np.asarray(valid, bool)
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
        status = np.asarray(status).reshape(-1)
        if status.shape != (B,):
            raise ValueError(f"status must have shape ({B},), got {status.shape}")
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


def phase_diagram(a1, a2, V, cov0, theta=0.0, skew=0.0, horizon=50.0, n_times=201,
                  growth_factor=10.0, rank_tol=1e-2, **solver_options):
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
    cov0 = as_float_array("cov0", cov0, shape=(2, 2))
    R = _rotation(theta)
    J = np.array([[0.0, -1.0], [1.0, 0.0]])
    g1, g2 = np.meshgrid(a1, a2)  # (n2, n1)
    D = np.zeros(g1.shape + (2, 2))
    D[..., 0, 0], D[..., 1, 1] = g1, g2
    A = R @ D @ R.T + skew * J
    flatA = A.reshape(-1, 2, 2)
    atts = [Softmax(a, V) for a in flatA]
    times = np.linspace(0.0, horizon, n_times)
    batch = simulate_gaussian_batch(atts, np.broadcast_to(cov0, flatA.shape).copy(), times,
                                    **solver_options)
    outcome, rank = classify_outcome(batch.cov, batch.blowup_time, batch.valid, status=batch.status,
                                     growth_factor=growth_factor, rank_tol=rank_tol)
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
        pred_r = np.where(sym_eigs[:, -1] > 1e-12, -1,
                          2 - np.sum(np.abs(sym_eigs) > 1e-12, axis=-1)).reshape(shape)
    return PhaseDiagram(a1, a2, outcome.reshape(shape), rank.reshape(shape),
                        np.asarray(batch.blowup_time, float).reshape(shape), pred_t, pred_r)


# --------------------------------------------------------------------------------------------
# General V: ensembles, counterexamples, invariances
# --------------------------------------------------------------------------------------------


def _spectral(M):
    return np.linalg.norm(M, 2, axis=(-2, -1))


def random_value_matrices(rng, n, d, kind):
    r"""``n`` random value matrices of one ensemble, spectral norm 1.

    * ``"identity"``: :math:`V = I`;
    * ``"spd"``: :math:`V = BB^\top/d + 0.1 I` (``B`` standard normal), scaled to
      :math:`\|V\|_2 = 1`;
    * ``"general"``: ``V`` standard normal, scaled to :math:`\|V\|_2 = 1`.

    Parameters
    ----------
    rng : numpy.random.Generator
    n, d : int
    kind : {"identity", "spd", "general"}

    Returns
    -------
    ndarray, shape (n, d, d)
    """
    if kind == "identity":
        return np.broadcast_to(np.eye(d), (n, d, d)).copy()
    if kind == "spd":
        B = rng.standard_normal((n, d, d))
        V = B @ np.swapaxes(B, -1, -2) / d + 0.1 * np.eye(d)
    elif kind == "general":
        V = rng.standard_normal((n, d, d))
    else:
        raise ValueError(f"kind must be 'identity', 'spd' or 'general', got {kind!r}")
    return V / _spectral(V)[:, None, None]


def pairs_with_sign_condition(rng, V):
    r"""Score matrices with :math:`VA + A^\top V^\top \prec 0` and :math:`\|A\|_2 = 1`.

    :math:`A = cV^{-1}(N/2 + W)` with :math:`N = -GG^\top/d` and :math:`W = (S - S^\top)/2` skew
    (``G``, ``S`` standard normal) and :math:`c > 0` the factor giving :math:`\|A\|_2 = 1`, so
    that :math:`VA + A^\top V^\top = cN \preceq 0` (negative definite almost surely).

    Parameters
    ----------
    rng : numpy.random.Generator
    V : array_like, shape (n, d, d)
        Invertible value matrices.

    Returns
    -------
    ndarray, shape (n, d, d)
    """
    V = as_float_array("V", V, ndim=3)
    n, d = V.shape[:2]
    G = rng.standard_normal((n, d, d))
    S = rng.standard_normal((n, d, d))
    A = np.linalg.solve(V, -0.5 * G @ np.swapaxes(G, -1, -2) / d + 0.5 * (S - np.swapaxes(S, -1, -2)))
    return A / _spectral(A)[:, None, None]


def _sym_max(M):
    return np.linalg.eigvalsh(M + np.swapaxes(M, -1, -2))[..., -1]


@dataclass(frozen=True)
class BlowupSurvey:
    r"""Fates of a batch of softmax covariance ODEs (:func:`blowup_survey`).

    Attributes
    ----------
    A, V, cov0 : ndarray, shape (B, d, d)
    blowup_time : ndarray, shape (B,)
        ``inf`` where there is none before ``horizon``.
    status : ndarray of str, shape (B,)
        The solver's status (``"ok"``, ``"blowup"``, ``"growth_limit"``).
    va_max, sym_max : ndarray, shape (B,)
        :math:`\lambda_{\max}(VA + A^\top V^\top)` and :math:`\lambda_{\max}(A + A^\top)`.
    horizon : float
    """

    A: np.ndarray
    V: np.ndarray
    cov0: np.ndarray
    blowup_time: np.ndarray
    status: np.ndarray
    va_max: np.ndarray
    sym_max: np.ndarray
    horizon: float

    @property
    def blows_up(self):
        """Members with a detected (Riccati) blow-up before ``horizon``, shape (B,)."""
        return self.status == "blowup"


def blowup_survey(A, V, cov0, horizon=200.0, rtol=1e-8, atol=1e-10, max_growth=1e8,
                  switch_growth=1e3, stiff_method="LSODA"):
    r"""Integrate :math:`\Sigma' = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top` for a batch.

    One call of :func:`tpde_lib.gaussian.simulate_gaussian_batch` (vectorised Dormand–Prince,
    blow-up detection with its time) up to ``horizon``, with members stopped once their trace
    exceeds ``switch_growth`` times its initial value without a Riccati signature; those few
    (large covariances make the explicit method stiff: a small eigenvalue collapses while a
    large one grows) are then integrated one by one with :func:`tpde_lib.gaussian.
    simulate_gaussian` and the stiff method ``stiff_method``, with the same blow-up detection.

    Parameters
    ----------
    A, V : array_like, shape (B, d, d)
    cov0 : array_like, shape (B, d, d) or (d, d)
        Initial covariances (one shared, or one per member).
    horizon : float
    rtol, atol : float
    max_growth : float
        Growth cap of the second pass (a member whose trace exceeds ``max_growth`` times its
        initial trace without a Riccati signature ends with status ``"growth_limit"``).
    switch_growth : float
        Growth at which a member leaves the batch for the stiff solver.
    stiff_method : str
        Method of ``scipy.integrate.solve_ivp`` for the second pass.

    Returns
    -------
    BlowupSurvey
    """
    A = as_float_array("A", A, ndim=3)
    V = as_float_array("V", V, ndim=3)
    if A.shape != V.shape or A.shape[1] != A.shape[2]:
        raise ValueError(f"A and V must both have shape (B, d, d), got {A.shape}, {V.shape}")
    cov0 = as_float_array("cov0", cov0)
    if cov0.ndim == 2:
        cov0 = np.broadcast_to(cov0, A.shape)
    if cov0.shape != A.shape:
        raise ValueError(f"cov0 must have shape {A.shape[1:]} or {A.shape}, got {cov0.shape}")
    horizon = as_positive("horizon", horizon)
    batch = simulate_gaussian_batch([Softmax(a, v) for a, v in zip(A, V)], cov0.copy(),
                                    np.array([0.0, horizon]), rtol=rtol, atol=atol,
                                    max_growth=min(switch_growth, max_growth))
    tstar = np.asarray(batch.blowup_time, float).copy()
    status = np.asarray(batch.status).astype(object)
    d = A.shape[1]
    for b in np.flatnonzero(status == "growth_limit"):  # a loop over a few members, not tokens
        tr = simulate_gaussian(Softmax(A[b], V[b]), Gaussian(np.zeros(d), cov0[b]),
                               [0.0, horizon], rtol=rtol, atol=atol, method=stiff_method,
                               max_growth=max_growth)
        tstar[b] = np.inf if tr.blowup_time is None else tr.blowup_time
        status[b] = tr.status
    return BlowupSurvey(A, V, cov0.copy(), tstar, status.astype(str), _sym_max(V @ A),
                        _sym_max(A), horizon)


def ensemble_survey(V_kind, start="identity", n=200, d=2, seed=0, horizon=50.0):
    r"""Fates of ``n`` random pairs :math:`(A, V)` of one ensemble, from one kind of start.

    With ``np.random.default_rng(seed)``: :math:`V` from :func:`random_value_matrices`
    (``V_kind``), :math:`A` standard normal scaled to :math:`\|A\|_2 = 1`, and
    :math:`\Sigma_0 = I` (``start="identity"``) or :math:`\Sigma_0 = GG^\top/d + 0.1I` scaled to
    trace :math:`d` (``start="random"``, ``G`` standard normal). Integrated up to ``horizon``
    with :func:`blowup_survey` (rtol 1e-6).

    Returns
    -------
    BlowupSurvey
    """
    if start not in ("identity", "random"):
        raise ValueError(f"start must be 'identity' or 'random', got {start!r}")
    rng = np.random.default_rng(seed)
    V = random_value_matrices(rng, n, d, V_kind)
    A = rng.standard_normal((n, d, d))
    A /= _spectral(A)[:, None, None]
    if start == "identity":
        cov0 = np.eye(d)
    else:
        G = rng.standard_normal((n, d, d))
        cov0 = G @ np.swapaxes(G, -1, -2) / d + 0.1 * np.eye(d)
        cov0 *= d / np.trace(cov0, axis1=1, axis2=2)[:, None, None]
    return blowup_survey(A, V, cov0, horizon, rtol=1e-6, atol=1e-9)


@dataclass(frozen=True)
class Counterexamples:
    r"""Pairs with :math:`VA + A^\top V^\top \preceq -\mathrm{margin}\,I` that blow up from
    :math:`\Sigma_0 = I` (:func:`sign_condition_counterexamples`).

    Attributes
    ----------
    survey : BlowupSurvey
        All candidates.
    margin : float
    V_kind : str
    seed : int
    """

    survey: BlowupSurvey
    margin: float
    V_kind: str
    seed: int

    @property
    def hits(self):
        """Indices of the candidates that blow up, shape (m,)."""
        return np.flatnonzero(self.survey.blows_up)

    @property
    def fraction(self):
        """Share of the candidates that blow up before the horizon."""
        return self.hits.size / self.survey.A.shape[0]

    def example(self, k=0):
        """``(A, V, blowup_time)`` of the ``k``-th counterexample."""
        if self.hits.size <= k:
            raise IndexError(f"only {self.hits.size} counterexamples found")
        i = self.hits[k]
        return self.survey.A[i], self.survey.V[i], float(self.survey.blowup_time[i])


def sign_condition_counterexamples(V_kind="spd", d=2, margin=0.05, seed=0, n_candidates=200,
                                   horizon=200.0):
    r"""Seeded search for blow-ups under :math:`VA + A^\top V^\top \preceq -\mathrm{margin}\,I`.

    With ``np.random.default_rng(seed)``, draws value matrices of :func:`random_value_matrices`
    (``V_kind``) and score matrices of :func:`pairs_with_sign_condition` (both of spectral norm
    1), keeps the first ``n_candidates`` pairs with
    :math:`\lambda_{\max}(VA + A^\top V^\top) \le -\mathrm{margin}`, and integrates all of
    them from :math:`\Sigma_0 = I` up to ``horizon`` (:func:`blowup_survey`).

    Returns
    -------
    Counterexamples
    """
    rng = np.random.default_rng(seed)
    As, Vs, found = [], [], 0
    for _ in range(100):
        V = random_value_matrices(rng, 2 * n_candidates, d, V_kind)
        A = pairs_with_sign_condition(rng, V)
        keep = _sym_max(V @ A) <= -margin
        As.append(A[keep])
        Vs.append(V[keep])
        found += int(keep.sum())
        if found >= n_candidates:
            break
    else:
        raise RuntimeError(f"fewer than {n_candidates} pairs with margin {margin} in 100 rounds")
    A = np.concatenate(As)[:n_candidates]
    V = np.concatenate(Vs)[:n_candidates]
    return Counterexamples(blowup_survey(A, V, np.eye(d), horizon), float(margin), V_kind, seed)


def r5_counterexample(d=2, seed=0, n_candidates=100, horizon=10.0):
    """Deprecated name (one release): :func:`sign_condition_counterexamples` with general V."""
    return sign_condition_counterexamples("general", d, 1e-12, seed, n_candidates, horizon)


def blowup_time_lower_bound(A, V, cov0):
    r"""The universal lower bound :math:`t^* \ge 1/(2\|V\|_2\|A\|_2\lambda_{\max}(\Sigma_0))`.

    **Derived** ({eq}`eq-clustering-lower-bound`): :math:`s = \lambda_{\max}(\Sigma)` satisfies
    :math:`s' \le \|\Sigma'\|_2 \le 2\|V\|_2\|A\|_2 s^2`. Sharp: :math:`A = aI`, :math:`V = I`,
    :math:`\Sigma_0 = sI` blow up exactly at the bound.

    Parameters
    ----------
    A, V, cov0 : array_like, shape (..., d, d)

    Returns
    -------
    ndarray, shape (...)
    """
    A, V, cov0 = (as_float_array(n, x) for n, x in (("A", A), ("V", V), ("cov0", cov0)))
    top = np.linalg.eigvalsh(cov0)[..., -1]
    return 1.0 / (2.0 * _spectral(V) * _spectral(A) * top)


def congruence(A, V, P):
    r"""The pair :math:`(P^{-\top}AP^{-1},\ PVP^{-1})` whose covariance is :math:`P\Sigma_tP^\top`.

    **Derived** ({eq}`eq-clustering-congruence`): if :math:`\Sigma_t` solves the softmax
    covariance ODE for :math:`(A, V)`, then :math:`P\Sigma_tP^\top` solves it for the returned pair
    (same blow-up time). :math:`A + A^\top` changes by a congruence (its inertia is kept) and
    :math:`V` by a similarity (its eigenvalues are kept); :math:`VA + A^\top V^\top` is not
    transformed covariantly, so its sign is not a property of the dynamics.

    Parameters
    ----------
    A, V, P : array_like, shape (..., d, d)
        ``P`` invertible.

    Returns
    -------
    (ndarray, ndarray)
    """
    A, V, P = (as_float_array(n, x) for n, x in (("A", A), ("V", V), ("P", P)))
    Pinv = np.linalg.inv(P)
    return np.swapaxes(Pinv, -1, -2) @ A @ Pinv, P @ V @ Pinv
