"""General V: random ensembles, batched surveys of their fates, counterexamples, invariances."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import (
    as_at_least,
    as_choice,
    as_count,
    as_covariance,
    as_float_array,
    as_generator,
    as_index,
    as_nonsingular,
    as_positive,
    as_seed,
    as_square_batch,
)
from ..attention import Softmax
from ..gaussian import simulate_gaussian, simulate_gaussian_batch
from ..measures import Gaussian

# --------------------------------------------------------------------------------------------
# General V: ensembles, counterexamples, invariances
# --------------------------------------------------------------------------------------------


def _spectral(M):
    return np.linalg.norm(M, 2, axis=(-2, -1))


def random_value_matrices(rng: np.random.Generator, n: int, d: int, kind: str) -> NDArray[np.float64]:
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
    as_generator("rng", rng)
    n, d = as_count("n", n), as_count("d", d)
    kind = as_choice("kind", kind, ("identity", "spd", "general"))
    if kind == "identity":
        return np.broadcast_to(np.eye(d), (n, d, d)).copy()
    if kind == "spd":
        B = rng.standard_normal((n, d, d))
        V = B @ np.swapaxes(B, -1, -2) / d + 0.1 * np.eye(d)
    else:
        V = rng.standard_normal((n, d, d))
    return V / _spectral(V)[:, None, None]


def pairs_with_sign_condition(rng: np.random.Generator, V: ArrayLike) -> NDArray[np.float64]:
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
    as_generator("rng", rng)
    V = as_float_array("V", V, ndim=3)
    as_nonsingular("V", as_square_batch("V", V))
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


def blowup_survey(
    A: ArrayLike,
    V: ArrayLike,
    cov0: ArrayLike,
    horizon: float = 200.0,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_growth: float = 1e8,
    switch_growth: float = 1e3,
    stiff_method: str = "LSODA",
) -> BlowupSurvey:
    r"""Integrate :math:`\Sigma' = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top` for a batch.

    One call of :func:`tpde_lib.gaussian.simulate_gaussian_batch` (vectorised Dormand–Prince,
    blow-up detection with its time) up to ``horizon``, with members stopped once their trace
    exceeds ``switch_growth`` times its initial value without a Riccati signature; those few
    (large covariances make the explicit method stiff: a small eigenvalue collapses while a
    large one grows) are then integrated one by one with
    :func:`tpde_lib.gaussian.simulate_gaussian` and the stiff method ``stiff_method``, with the
    same blow-up detection.

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
        Growth at which a member leaves the batch for the stiff solver; members that end the
        batch with status ``"max_steps"`` or ``"step_underflow"`` (stiff) are re-solved the
        same way.
    stiff_method : {"LSODA", "BDF", "Radau"}
        Implicit method of ``scipy.integrate.solve_ivp`` for the second pass.

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
    for b in range(cov0.shape[0]):
        as_covariance(f"cov0[{b}]", cov0[b])
    horizon = as_positive("horizon", horizon)
    max_growth = as_at_least("max_growth", max_growth, 1.0, " (a growth factor)")
    switch_growth = as_at_least("switch_growth", switch_growth, 1.0, " (a growth factor)")
    stiff_method = as_choice("stiff_method", stiff_method, ("LSODA", "BDF", "Radau"))
    batch = simulate_gaussian_batch(
        [Softmax(a, v) for a, v in zip(A, V)],
        cov0.copy(),
        np.array([0.0, horizon]),
        rtol=rtol,
        atol=atol,
        max_growth=min(switch_growth, max_growth),
    )
    tstar = np.asarray(batch.blowup_time, float).copy()
    status = np.asarray(batch.status).astype(object)
    d = A.shape[1]
    # members the explicit batch could not finish: stopped at switch_growth, out of steps or
    # with an underflowing step (stiff), re-solved one by one with the stiff method
    redo = np.isin(status, ("growth_limit", "max_steps", "step_underflow"))
    for b in np.flatnonzero(redo):  # a loop over a few members, not tokens
        tr = simulate_gaussian(
            Softmax(A[b], V[b]),
            Gaussian(np.zeros(d), cov0[b]),
            [0.0, horizon],
            rtol=rtol,
            atol=atol,
            method=stiff_method,
            max_growth=max_growth,
        )
        tstar[b] = np.inf if tr.blowup_time is None else tr.blowup_time
        status[b] = tr.status
    return BlowupSurvey(A, V, cov0.copy(), tstar, status.astype(str), _sym_max(V @ A), _sym_max(A), horizon)


def ensemble_survey(
    V_kind: str, start: str = "identity", n: int = 200, d: int = 2, seed: int = 0, horizon: float = 50.0
) -> BlowupSurvey:
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
    V_kind = as_choice("V_kind", V_kind, ("identity", "spd", "general"))
    start = as_choice("start", start, ("identity", "random"))
    n, d = as_count("n", n), as_count("d", d)
    horizon = as_positive("horizon", horizon)
    rng = np.random.default_rng(as_seed("seed", seed))
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
        """``(A, V, blowup_time)`` of the ``k``-th counterexample (``k`` an integer index,
        negative from the end; ``IndexError`` giving how many were found otherwise)."""
        k = as_index("k", k, self.hits.size, what="counterexamples found")
        i = self.hits[k]
        return self.survey.A[i], self.survey.V[i], float(self.survey.blowup_time[i])


def sign_condition_counterexamples(
    V_kind: str = "spd",
    d: int = 2,
    margin: float = 0.05,
    seed: int = 0,
    n_candidates: int = 200,
    horizon: float = 200.0,
) -> Counterexamples:
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
    V_kind = as_choice("V_kind", V_kind, ("identity", "spd", "general"))
    d, n_candidates = as_count("d", d), as_count("n_candidates", n_candidates)
    margin = as_at_least("margin", margin, 0.0)
    horizon = as_positive("horizon", horizon)
    rng = np.random.default_rng(as_seed("seed", seed))
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


def blowup_time_lower_bound(A: ArrayLike, V: ArrayLike, cov0: ArrayLike) -> NDArray[np.float64]:
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
    A = as_square_batch("A", A)
    d = A.shape[-1]
    V, cov0 = as_square_batch("V", V, d), as_square_batch("cov0", cov0, d)
    lam = np.linalg.eigvalsh(0.5 * (cov0 + np.swapaxes(cov0, -1, -2)))
    asym = np.abs(cov0 - np.swapaxes(cov0, -1, -2)).max()
    big = np.abs(cov0).max()
    if asym > 1e-8 * big or np.any(lam[..., 0] < -1e-8 * big):
        raise ValueError(
            f"cov0 must hold symmetric positive semi-definite covariances (smallest "
            f"eigenvalue {lam[..., 0].min():.3g}, asymmetry {asym:.3g}): a bound "
            "from an indefinite matrix would be meaningless (negative)"
        )
    with np.errstate(divide="ignore", over="ignore"):  # inf where A, V or cov0 vanish
        return 1.0 / (2.0 * _spectral(V) * _spectral(A) * np.maximum(lam[..., -1], 0.0))


def congruence(A: ArrayLike, V: ArrayLike, P: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
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
    A = as_square_batch("A", A)
    d = A.shape[-1]
    V, P = as_square_batch("V", V, d), as_nonsingular("P", as_square_batch("P", P, d))
    Pinv = np.linalg.inv(P)
    return np.swapaxes(Pinv, -1, -2) @ A @ Pinv, P @ V @ Pinv
