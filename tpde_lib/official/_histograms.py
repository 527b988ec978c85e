r"""The authors' rank-histogram experiment (the official ``histograms.py``), exactly.

Draws (legacy seeds), step sizes, stopping rules, the retry rule and the rank count of the
released code, run vectorised (:func:`paper_histogram_ranks`); and, for comparison, accurate
limits of the same draws from the same initial conditions (:func:`histogram_accurate`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..gaussian import covariance_rhs, simulate_gaussian_batch
from ._runs import EulerSettings, run_paper_euler
from ._variants import paper_attention, paper_parameters

__all__ = ["HistogramSetting", "histogram_setting", "histogram_inits", "HistogramRun",
           "paper_histogram_ranks", "EulerBudgetRun", "histogram_euler_budget",
           "AccurateLimits", "histogram_accurate", "PairedRanks", "paired_ranks"]


@dataclass(frozen=True)
class HistogramSetting:
    """One panel of the authors' rank histograms (the official ``histograms.py``).

    Attributes
    ----------
    variant : {"softmax", "L2"}
    V_kind : {"identity", "random"}
    d : int
    Q, K : ndarray, shape (n, d // 2, d)
        ``K = -Q``.
    V : ndarray, shape (n, d, d)
    euler : EulerSettings
    n_max : int
        Largest number of initial conditions tried (the code's ``n_max``).
    tol_rank : float
        Eigenvalues above it count in the rank.
    """

    variant: str
    V_kind: str
    d: int
    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    euler: EulerSettings
    n_max: int
    tol_rank: float = 1e-1

    def parameters(self):
        """Batched :func:`paper_parameters` (leading axis: the ``n`` draws)."""
        return paper_parameters(self.Q, self.K, self.V, self.variant)

    def attentions(self):
        """The ``n`` attentions of the draws (:func:`paper_attention`)."""
        return paper_attention(self.Q, self.K, self.V, self.variant)


def histogram_setting(variant, V_kind, d, n_per_dim=100):
    r"""The authors' parameters for one histogram panel, with their legacy draws.

    Legacy global-generator draws on purpose (they reproduce the authors' matrices; the global
    state is restored afterwards): ``np.random.seed(40)`` then ``Q = randn(d//2, d)`` for
    ``d = 3`` (100 times), ``4`` (100), ``5`` (100), in that order; ``K = -Q``. For ``V_kind =
    "random"``: ``np.random.seed(26)`` (softmax) or ``27`` (ℓ²), then ``B = randn(d, d)`` in the
    same order over all 300 draws and ``V = B^T B``.

    ===========  ==========  =====================  ======  =========  ======
    variant      V           h for d = 3 / 4 / 5    tol     max_iter   n_max
    ===========  ==========  =====================  ======  =========  ======
    softmax      identity    0.09 / 0.05 / 0.02     1e-4    60000      1000
    softmax      random      0.09 / 0.06 / 0.02     5e-5    90000      10000
    L2           identity    0.09 / 0.06 / 0.02     1e-4    60000      1000
    L2           random      0.15 / 0.15 / 0.15     5e-5    50000      1000
    ===========  ==========  =====================  ======  =========  ======

    Parameters
    ----------
    variant : {"softmax", "L2"}
    V_kind : {"identity", "random"}
    d : {3, 4, 5}
    n_per_dim : int
        Number of draws kept (the first ``n_per_dim`` of the authors' 100).

    Returns
    -------
    HistogramSetting
    """
    if variant not in ("softmax", "L2"):
        raise ValueError(f"variant must be 'softmax' or 'L2', got {variant!r}")
    if V_kind not in ("identity", "random"):
        raise ValueError(f"V_kind must be 'identity' or 'random', got {V_kind!r}")
    dims = (3, 4, 5)
    if d not in dims:
        raise ValueError(f"d must be 3, 4 or 5, got {d!r}")
    if not 1 <= n_per_dim <= 100:
        raise ValueError(f"n_per_dim must be in 1..100, got {n_per_dim!r}")
    j = dims.index(d)
    state = np.random.get_state()  # noqa: NPY002 (authors' legacy stream)
    try:
        np.random.seed(40)  # noqa: NPY002 (authors' legacy stream)
        Qs = [np.random.randn(dd // 2, dd) for dd in np.repeat(dims, 100)]  # noqa: NPY002
        if V_kind == "random":
            np.random.seed(26 if variant == "softmax" else 27)  # noqa: NPY002
            Bs = [np.random.randn(dd, dd) for dd in np.repeat(dims, 100)]  # noqa: NPY002
    finally:
        np.random.set_state(state)  # noqa: NPY002 (authors' legacy stream)
    sel = slice(100 * j, 100 * j + n_per_dim)
    Q = np.stack(Qs[sel])
    if V_kind == "random":
        V = np.stack([B.T @ B for B in Bs[sel]])
    else:
        V = np.broadcast_to(np.eye(d), (n_per_dim, d, d)).copy()
    table = {("softmax", "identity"): ((0.09, 0.05, 0.02), 1e-4, 60000, 1000),
             ("softmax", "random"): ((0.09, 0.06, 0.02), 5e-5, 90000, 10000),
             ("L2", "identity"): ((0.09, 0.06, 0.02), 1e-4, 60000, 1000),
             ("L2", "random"): ((0.15, 0.15, 0.15), 5e-5, 50000, 1000)}
    steps, tol, max_iter, n_max = table[(variant, V_kind)]
    return HistogramSetting(variant, V_kind, d, Q, -Q, V,
                            EulerSettings(steps[j], tol, max_iter=max_iter), n_max)


def histogram_inits(d, n, seed=41):
    r"""The authors' initial covariances :math:`\Sigma_0 = G G^\top`, ``G = randn(d, d)``.

    ``create_histograms`` calls ``np.random.seed(41)`` at the start of each dimension and draws
    one ``G`` per attempt; the ``i``-th attempt uses the ``i``-th matrix. Legacy global-generator
    draws on purpose (reproduction of the authors' stream; the global state is restored).

    Returns
    -------
    ndarray, shape (n, d, d)
    """
    state = np.random.get_state()  # noqa: NPY002 (authors' legacy stream)
    try:
        np.random.seed(seed)  # noqa: NPY002 (authors' legacy stream)
        G = np.stack([np.random.randn(d, d) for _ in range(n)])  # noqa: NPY002
    finally:
        np.random.set_state(state)  # noqa: NPY002 (authors' legacy stream)
    return G @ np.swapaxes(G, -1, -2)



class RankCounts:
    """What the authors' histogram reads from one panel's runs (shared by the live run and the
    cached one): needs ``euler_rank``, ``counted``, ``failed_draw``, ``failed_status`` and the
    dimension ``d``."""

    @property
    def ranks(self):
        """The ranks of the authors' histogram (converged, rank at most ``(d + 1) // 2``)."""
        return self.euler_rank[self.counted]

    @property
    def exceptions(self):
        """Converged limits of too high a rank (excluded by the authors)."""
        return int(np.sum(~self.counted))

    @property
    def failures(self):
        """Attempts that did not converge (retried with the next initial condition)."""
        return int(self.failed_draw.size)

    @property
    def diverged(self):
        """Failed attempts stopped by the trace threshold."""
        return int(np.sum(self.failed_status == "diverged"))

    def counts(self):
        """Rank counts ``[#rank 0, ..., #rank d]`` of the authors' histogram, shape (d + 1,)."""
        return np.bincount(self.ranks, minlength=self.d + 1)


@dataclass(frozen=True)
class HistogramRun(RankCounts):
    r"""The authors' histogram protocol on one panel (:func:`paper_histogram_ranks`).

    Attributes
    ----------
    draw_init : ndarray of int, shape (m,)
        For each parameter draw processed (``m = processed``, in order), the index of the initial
        condition (:func:`histogram_inits`) of its converged run.
    euler_rank : ndarray of int, shape (m,)
        Eigenvalues above ``tol_rank`` of the converged Euler iterate.
    counted : ndarray of bool, shape (m,)
        Rank at most ``(d + 1) // 2``: counted in the authors' histogram (the others are the
        code's "rank too high" exceptions).
    n_steps : ndarray of int, shape (m,)
        Euler iterations of the converged run.
    finals : ndarray, shape (m, d, d)
        The converged iterates.
    failed_draw, failed_init, failed_steps : ndarray of int, shape (f,)
        The attempts that did not converge: parameter draw, initial condition, iterations.
    failed_status : ndarray of str, shape (f,)
        ``"diverged"`` (trace above ``tol_high``) or ``"max_iter"``.
    attempts : int
        Initial conditions used (converged plus failed attempts).
    batches : int
        Batched Euler calls made (the vectorisation; no effect on the result).
    rank_margin : float
        Smallest distance of a converged iterate's eigenvalue to ``tol_rank``. The authors count
        the rank on the iterate before the last step, we on the one after it; the two differ by at
        most ``h * tol_low`` in norm, so the counts agree whenever ``rank_margin`` exceeds it.
    """

    draw_init: np.ndarray
    euler_rank: np.ndarray
    counted: np.ndarray
    n_steps: np.ndarray
    finals: np.ndarray
    failed_draw: np.ndarray
    failed_init: np.ndarray
    failed_steps: np.ndarray
    failed_status: np.ndarray
    attempts: int
    batches: int
    rank_margin: float

    @property
    def processed(self):
        """Number of parameter draws whose run converged (the authors stop at ``n``)."""
        return int(self.draw_init.size)

    @property
    def d(self):
        """The dimension."""
        return int(self.finals.shape[-1])


def _default_runner(rhs_for, cov0, settings, max_iter):
    return run_paper_euler(rhs_for, cov0, settings, record_every=10**9, chunk=400,
                           max_iter=max_iter)


def paper_histogram_ranks(setting, runner=None, max_iter=None, n_attempts=None, lookahead=4,
                          n_draws=None):
    r"""Run the authors' histogram protocol with their projected Euler scheme, vectorised.

    The official ``create_histograms`` goes through attempts ``k = 0, 1, ...`` with parameter
    index ``i`` (starting at 0) and initial condition ``k`` of :func:`histogram_inits`; ``i``
    advances only when the run converged (a failed run, diverged or out of iterations, is retried
    with the next initial condition and the same draw), until ``n`` draws converged or the
    ``n_max`` initial conditions are used up. A converged limit is counted only if its rank
    (eigenvalues above ``tol_rank``) is at most ``(d + 1) // 2``.

    We reproduce this sequence exactly, computing the runs in batches: draw ``i`` is run from
    initial condition ``i + s`` where ``s`` is the number of failures before it, so one batch
    runs the pending draws ``j > i`` at the current shift ``s`` and the ``lookahead - 1`` next
    ones, and the current draw on the next ``burst`` initial conditions (``burst`` grows by a
    factor 4 while the same draw keeps failing). The sequential walk then reads the outcomes and
    asks for a new batch only when a pair is missing. Every run is a run of the authors' scheme
    from the pair's initial condition, so the result does not depend on the batching.

    Parameters
    ----------
    setting : HistogramSetting
    runner : callable, optional
        ``runner(rhs_for, cov0, euler_settings, max_iter)`` returning an object with ``status``
        ((B,) str), ``last`` ((B, d, d)) and ``n_steps`` ((B,) int); default
        :func:`run_paper_euler` (no paths kept).
    max_iter : int, optional
        Override the authors' ``max_iter`` (a budget; say so where used).
    n_attempts : int, optional
        Override the authors' ``n_max`` (number of initial conditions available).
    lookahead : int
        Shifts computed per batch (speed only).
    n_draws : int, optional
        Stop after this many draws (the first ones; default all of the setting's).

    Returns
    -------
    HistogramRun
    """
    if not isinstance(setting, HistogramSetting):
        raise TypeError(f"setting must be a HistogramSetting, got {type(setting).__name__}")
    if not isinstance(lookahead, (int, np.integer)) or lookahead < 1:
        raise ValueError(f"lookahead must be a positive integer, got {lookahead!r}")
    runner = _default_runner if runner is None else runner
    s = setting
    n = s.Q.shape[0] if n_draws is None else min(int(n_draws), s.Q.shape[0])
    n_max = s.n_max if n_attempts is None else int(n_attempts)
    it = s.euler.max_iter if max_iter is None else int(max_iter)
    inits = histogram_inits(s.d, n_max)
    atts = s.attentions()
    table = {}  # (draw, init) -> (status, n_steps, last)
    batches = 0

    def compute(i0, k0, burst):
        shift = k0 - i0
        pairs = [(i0, k0 + m) for m in range(burst)]
        pairs += [(j, j + sh) for sh in range(shift, shift + lookahead) for j in range(i0 + 1, n)]
        pairs = [p for p in pairs if p[1] < n_max and p not in table]
        draws = np.array([p[0] for p in pairs])
        res = runner(lambda idx: covariance_rhs([atts[b] for b in draws[idx]]),
                     inits[[p[1] for p in pairs]], s.euler, it)
        for m, p in enumerate(pairs):
            table[p] = (str(res.status[m]), int(res.n_steps[m]), np.asarray(res.last[m]))

    i = k = 0
    ok_init, ok_steps, finals = [], [], []
    f_draw, f_init, f_steps, f_status = [], [], [], []
    last_i, burst = -1, lookahead
    while i < n and k < n_max:
        if (i, k) not in table:
            # a draw that keeps failing is retried on many initial conditions at once
            burst = min(4 * burst, 4096) if i == last_i else lookahead
            last_i = i
            compute(i, k, burst)
            batches += 1
        status, steps, last = table[(i, k)]
        if status == "converged":
            ok_init.append(k)
            ok_steps.append(steps)
            finals.append(last)
            i += 1
        else:
            f_draw.append(i)
            f_init.append(k)
            f_steps.append(steps)
            f_status.append(status)
        k += 1
    finals = np.array(finals).reshape(-1, s.d, s.d)
    lam = np.linalg.eigvalsh(finals) if finals.size else np.zeros((0, s.d))
    rank = np.sum(lam > s.tol_rank, axis=-1)
    margin = float(np.abs(lam - s.tol_rank).min()) if lam.size else np.inf
    as_int = lambda x: np.array(x, dtype=int)  # noqa: E731
    return HistogramRun(as_int(ok_init), rank, rank <= (s.d + 1) // 2, as_int(ok_steps), finals,
                        as_int(f_draw), as_int(f_init), as_int(f_steps),
                        np.array(f_status, dtype=str), k, batches, margin)


@dataclass(frozen=True)
class EulerBudgetRun:
    r"""Output of :func:`histogram_euler_budget` (one run per draw, on a step budget).

    Attributes
    ----------
    ranks : ndarray of int, shape (n,)
        Eigenvalues above ``tol_rank`` of the last iterate, whatever the status.
    status : ndarray of str, shape (n,)
    clipped : ndarray of bool, shape (n,)
        An eigenvalue below 1e-10 at the end: the mark of the projection's ``1e-14`` floor (the
        exact flow keeps :math:`\Sigma_t \succ 0`).
    last : ndarray, shape (n, d, d)
    """

    ranks: np.ndarray
    status: np.ndarray
    clipped: np.ndarray
    last: np.ndarray


def _draw_inits(setting, n_draws, init_index):
    """The number ``n`` of draws run and their initial covariances, shape (n, d, d): draw ``i``
    starts from initial condition ``init_index[i]`` (default ``i``)."""
    n = setting.Q.shape[0] if n_draws is None else int(n_draws)
    idx = np.arange(n) if init_index is None else np.asarray(init_index, dtype=int)[:n]
    return n, histogram_inits(setting.d, int(idx.max()) + 1)[idx]


def histogram_euler_budget(setting, max_iter, n_draws=None, init_index=None):
    r"""The authors' Euler runs for a histogram panel, one run per draw, on a budget.

    Draw ``i`` is run from initial condition ``init_index[i]`` (default ``i``, the authors'
    pairing as long as no run fails) for at most ``max_iter`` iterations, and nothing is retried.

    Returns
    -------
    EulerBudgetRun
    """
    s = setting
    n, inits = _draw_inits(s, n_draws, init_index)
    atts = s.attentions()[:n]
    res = run_paper_euler(lambda m: covariance_rhs([atts[b] for b in m]), inits, s.euler,
                          record_every=10**9, chunk=400, max_iter=max_iter)
    lam = np.linalg.eigvalsh(res.last)
    return EulerBudgetRun(np.sum(lam > s.tol_rank, axis=-1), res.status, lam[:, 0] < 1e-10,
                          res.last)


@dataclass(frozen=True)
class AccurateLimits:
    """Output of :func:`histogram_accurate`.

    Attributes
    ----------
    cov : ndarray, shape (n, d, d)
        Covariances at ``horizon``.
    blowup_time : ndarray, shape (n,)
        ``inf`` where there is none.
    ranks : ndarray of int, shape (n,)
        Eigenvalues above ``tol_rank``.
    """

    cov: np.ndarray
    blowup_time: np.ndarray
    ranks: np.ndarray


def histogram_accurate(setting, horizon=1e3, n_draws=None, init_index=None, rtol=1e-6,
                       atol=1e-9):
    r"""Accurate covariances at time ``horizon`` for the draws of a histogram panel.

    Draw ``i`` is integrated from initial condition ``init_index[i]`` (default ``i``) of
    :func:`histogram_inits` with :func:`tpde_lib.gaussian.simulate_gaussian_batch` (adaptive
    Dormand–Prince, one batch). For softmax with :math:`V = I` use
    :func:`tpde_lib.gaussian.softmax_limit_cov` instead: it is the exact limit.

    Returns
    -------
    AccurateLimits
    """
    s = setting
    n, inits = _draw_inits(s, n_draws, init_index)
    batch = simulate_gaussian_batch(s.attentions()[:n], inits, np.array([0.0, horizon]),
                                    rtol=rtol, atol=atol)
    cov = batch.cov[:, -1]
    return AccurateLimits(cov, np.asarray(batch.blowup_time),
                          np.sum(np.linalg.eigvalsh(cov) > s.tol_rank, axis=-1))


@dataclass(frozen=True)
class PairedRanks:
    r"""Per-draw comparison of the authors' Euler limit with an accurate limit (same draw, same
    initial condition), from :func:`paired_ranks`.

    Attributes
    ----------
    exact_rank : ndarray of int, shape (m,)
        Rank of the accurate limit (eigenvalues above ``1e-8`` times its largest).
    threshold_rank : ndarray of int, shape (m,)
        Eigenvalues of the accurate limit above ``tol_rank`` (the authors' count, on the exact
        limit).
    euler_rank : ndarray of int, shape (m,)
        Eigenvalues of the authors' converged Euler iterate above ``tol_rank``.
    reason : ndarray of str, shape (m,)
        Why ``euler_rank`` differs from ``threshold_rank``: ``"same"``; ``"clipped"`` (the Euler
        iterate has more eigenvalues below ``1e-10`` than the accurate limit has zero
        eigenvalues: the projection's ``1e-14`` floor removed a direction); ``"drift"`` (no
        clipping: the large-step Euler iteration converged to another equilibrium, every
        :math:`\Sigma` with :math:`(A + A^\top)\Sigma = 0` being a fixed point of both).
    top_ratio : ndarray, shape (m,)
        Largest eigenvalue of the Euler limit over that of the accurate limit.
    """

    exact_rank: np.ndarray
    threshold_rank: np.ndarray
    euler_rank: np.ndarray
    reason: np.ndarray
    top_ratio: np.ndarray


def paired_ranks(euler_eigenvalues, limits, tol_rank=0.1):
    r"""Compare, draw by draw, the authors' Euler limits with accurate limits.

    Parameters
    ----------
    euler_eigenvalues : array_like, shape (m, d)
        Eigenvalues of the converged Euler iterates (e.g. ``CachedPanel.eigenvalues``).
    limits : array_like, shape (m, d, d)
        Accurate limits of the same draws from the same initial conditions.
    tol_rank : float

    Returns
    -------
    PairedRanks
    """
    lam_e = np.asarray(euler_eigenvalues, dtype=float)
    lam_x = np.linalg.eigvalsh(np.asarray(limits, dtype=float))
    if lam_e.shape != lam_x.shape:
        raise ValueError(f"euler_eigenvalues has shape {lam_e.shape}, limits give {lam_x.shape}")
    exact = np.sum(lam_x > 1e-8 * np.maximum(1.0, lam_x[:, -1:]), axis=1)
    thr = np.sum(lam_x > tol_rank, axis=1)
    eul = np.sum(lam_e > tol_rank, axis=1)
    clipped = np.sum(lam_e < 1e-10, axis=1) > lam_x.shape[1] - exact
    reason = np.where(eul == thr, "same", np.where(clipped, "clipped", "drift"))
    return PairedRanks(exact, thr, eul, reason, lam_e[:, -1] / lam_x[:, -1])
