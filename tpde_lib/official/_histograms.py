r"""The authors' rank-histogram experiment (the official ``histograms.py``), exactly.

:func:`histogram_setting` (the draws with the legacy seeds, the step sizes and stopping rules of
each panel) and :func:`histogram_inits` (the initial covariances); :func:`paper_histogram_ranks`
(the sequential protocol with its retry rule, several of its runs in flight at once, and its
rank count); and, for comparison, runs on a step budget (:func:`histogram_euler_budget`),
accurate limits of the same draws from the same initial conditions
(:func:`histogram_accurate`) and their draw-by-draw comparison (:func:`paired_ranks`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .. import gaussian as closures  # the closures, recognised by identity below
from .._checks import (
    as_choice,
    as_count,
    as_float_array,
    as_instance,
    as_ndarray,
    as_positive,
    as_seed,
)
from .._closures import l2_factors, l2_slope, softmax_dcov, sym_part2
from ..attention import Attention
from ..gaussian import covariance_rhs, simulate_gaussian_batch
from ._projected_euler import _psd_projection_verbatim
from ._runs import EulerSettings, run_paper_euler
from ._variants import paper_attention, paper_parameters


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

    def __post_init__(self):
        as_choice("variant", self.variant, ("softmax", "L2"))
        as_choice("V_kind", self.V_kind, ("identity", "random"))
        d = as_count("d", self.d, 1)
        Q = as_float_array("Q", self.Q, ndim=3)
        if Q.shape[-1] != d:
            raise ValueError(f"Q must have shape (n, k, {d}), got {Q.shape}")
        as_float_array("K", self.K, shape=Q.shape)
        as_float_array("V", self.V, shape=(Q.shape[0], d, d))
        as_instance("euler", self.euler, EulerSettings, "an EulerSettings")
        as_count("n_max", self.n_max, 1)
        as_positive("tol_rank", self.tol_rank)

    def parameters(self) -> dict:
        """Batched :func:`paper_parameters` (leading axis: the ``n`` draws)."""
        return paper_parameters(self.Q, self.K, self.V, self.variant)

    def attentions(self) -> list[Attention]:
        """The ``n`` attentions of the draws (:func:`paper_attention`)."""
        return paper_attention(self.Q, self.K, self.V, self.variant)


def histogram_setting(variant: str, V_kind: str, d: int, n_per_dim: int = 100) -> HistogramSetting:
    r"""The authors' parameters for one histogram panel, with their legacy draws.

    Legacy draws on purpose (they reproduce the authors' matrices), from a private
    ``np.random.RandomState``, the stream of the authors' global generator, which is neither
    used nor changed: ``np.random.seed(40)`` then ``Q = randn(d//2, d)`` for
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

    Examples
    --------
    >>> import numpy as np
    >>> from tpde_lib.official import histogram_setting
    >>> s = histogram_setting("softmax", "random", 4, n_per_dim=10)
    >>> s.Q.shape, s.V.shape, s.euler.h, s.n_max
    ((10, 2, 4), (10, 4, 4), 0.06, 10000)
    >>> bool(np.array_equal(s.K, -s.Q)), bool(np.all(np.linalg.eigvalsh(s.V) > 0))
    (True, True)
    """
    as_choice("variant", variant, ("softmax", "L2"))
    as_choice("V_kind", V_kind, ("identity", "random"))
    dims = (3, 4, 5)
    d = as_count("d", d, 3, 5)
    n_per_dim = as_count("n_per_dim", n_per_dim, 1, 100)
    j = dims.index(d)
    # a private legacy generator: the stream of np.random.seed, the global one untouched
    rs = np.random.RandomState(40)  # noqa: NPY002 (authors' legacy stream)
    Qs = [rs.randn(dd // 2, dd) for dd in np.repeat(dims, 100)]
    if V_kind == "random":
        rs.seed(26 if variant == "softmax" else 27)
        Bs = [rs.randn(dd, dd) for dd in np.repeat(dims, 100)]
    sel = slice(100 * j, 100 * j + n_per_dim)
    Q = np.stack(Qs[sel])
    if V_kind == "random":
        V = np.stack([B.T @ B for B in Bs[sel]])
    else:
        V = np.broadcast_to(np.eye(d), (n_per_dim, d, d)).copy()
    table = {
        ("softmax", "identity"): ((0.09, 0.05, 0.02), 1e-4, 60000, 1000),
        ("softmax", "random"): ((0.09, 0.06, 0.02), 5e-5, 90000, 10000),
        ("L2", "identity"): ((0.09, 0.06, 0.02), 1e-4, 60000, 1000),
        ("L2", "random"): ((0.15, 0.15, 0.15), 5e-5, 50000, 1000),
    }
    steps, tol, max_iter, n_max = table[(variant, V_kind)]
    return HistogramSetting(
        variant, V_kind, d, Q, -Q, V, EulerSettings(steps[j], tol, max_iter=max_iter), n_max
    )


#: most numbers histogram_inits returns at once (1 GiB of float64)
_MAX_INIT_ENTRIES = 1 << 27


def histogram_inits(d: int, n: int, seed: int = 41) -> np.ndarray:
    r"""The authors' initial covariances :math:`\Sigma_0 = G G^\top`, ``G = randn(d, d)``.

    ``create_histograms`` calls ``np.random.seed(41)`` at the start of each dimension and draws
    one ``G`` per attempt; the ``i``-th attempt uses the ``i``-th matrix. Legacy draws on
    purpose (the authors' stream), from a private ``np.random.RandomState``: the global
    generator is neither used nor changed, so threads may call this at once.

    Parameters
    ----------
    d : int
        Dimension (>= 1).
    n : int
        Number of initial conditions (>= 1).
    seed : int
        The legacy seed (the authors' 41).

    Returns
    -------
    ndarray, shape (n, d, d)

    Examples
    --------
    The ``i``-th covariance is ``G G^T`` for the ``i``-th ``randn(d, d)`` after
    ``np.random.seed(41)``, and drawing more keeps the first ones:

    >>> import numpy as np
    >>> from tpde_lib.official import histogram_inits
    >>> S = histogram_inits(3, 5)
    >>> S.shape
    (5, 3, 3)
    >>> np.random.seed(41); G = np.random.randn(3, 3)
    >>> bool(np.array_equal(S[0], G @ G.T)), bool(np.array_equal(histogram_inits(3, 2), S[:2]))
    (True, True)
    """
    d = as_count("d", d, 1)
    n = as_count("n", n, 1)
    seed = as_seed("seed", seed)
    if n * d * d > _MAX_INIT_ENTRIES:
        raise ValueError(
            f"histogram_inits(d={d}, n={n}) would hold {n * d * d} numbers, more than the "
            f"{_MAX_INIT_ENTRIES} (1 GiB) allowed: draw fewer initial conditions"
        )
    rs = np.random.RandomState(seed)  # noqa: NPY002 (private legacy stream; global untouched)
    G = np.stack([rs.randn(d, d) for _ in range(n)])
    return G @ np.swapaxes(G, -1, -2)


class _RankCounts:
    """What the authors' histogram reads from one panel's runs (shared by the live run and the
    cached one): needs ``euler_rank``, ``counted``, ``failed_draw``, ``failed_status`` and the
    dimension ``d``."""

    @property
    def ranks(self) -> np.ndarray:
        """The ranks of the authors' histogram (converged, rank at most ``(d + 1) // 2``)."""
        return self.euler_rank[self.counted]

    @property
    def exceptions(self) -> int:
        """Converged limits of too high a rank (excluded by the authors)."""
        return int(np.sum(~self.counted))

    @property
    def failures(self) -> int:
        """Attempts that did not converge (retried with the next initial condition)."""
        return int(self.failed_draw.size)

    @property
    def diverged(self) -> int:
        """Failed attempts stopped by the trace threshold."""
        return int(np.sum(self.failed_status == "diverged"))

    def counts(self) -> np.ndarray:
        """Rank counts ``[#rank 0, ..., #rank d]`` of the authors' histogram, shape (d + 1,)."""
        return np.bincount(self.ranks, minlength=self.d + 1)


@dataclass(frozen=True)
class HistogramRun(_RankCounts):
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
        Times the batch of runs in flight was re-planned (speed only; no effect on the result).
    work : int
        Euler iterations computed, summed over all runs, those dropped included (the loop
        itself needs ``n_steps.sum() + failed_steps.sum()``; the excess is the speculation
        that did not pay).
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
    work: int
    rank_margin: float

    @property
    def processed(self) -> int:
        """Number of parameter draws whose run converged (the authors stop at ``n``)."""
        return int(self.draw_init.size)

    @property
    def d(self) -> int:
        """The dimension."""
        return int(self.finals.shape[-1])


def _covariance_only(rhs_fn, P):
    """The covariance part of the closure ``rhs_fn`` for the stacked parameters ``P``, by the
    closure's own covariance helpers (the same bits) without its mean ODE, for softmax and ℓ² (like the
    authors' ``rhs_softmax`` and ``rhs_L2``, which are covariance-only); ``None`` for another
    closure. A third of an iteration's calls at d <= 5 went to the mean's unused ODE."""
    if rhs_fn is closures.softmax_rhs:
        A, V = P
        return lambda S: softmax_dcov(A, V, S)
    if rhs_fn is closures.l2_rhs:
        Q, K, V, tau = P
        c, Kt, B = l2_factors(K, tau)

        def rhs(S):
            _, M = l2_slope(c, Kt, B, Q, V, S)
            return sym_part2(M @ S)

        return rhs
    return None


class _LazyInits:
    """:func:`histogram_inits` ``(d, n_max)`` drawn as far as asked, in doubling chunks: the same
    matrices (the same stream, drawn in the same order), without drawing ``n_max`` = 10^8
    initial conditions up front when a few are used."""

    def __init__(self, d, n_max, seed=41):
        self.d, self.n_max = d, n_max
        self.rs = np.random.RandomState(seed)  # noqa: NPY002 (private legacy stream)
        self.S = np.empty((0, d, d))

    def __getitem__(self, ks):
        ks = list(ks)
        need = max(ks, default=-1) + 1
        if need > self.n_max:
            raise IndexError(f"initial condition {need - 1} beyond the n_max = {self.n_max} available")
        if need > len(self.S):
            more = min(self.n_max, max(need, 2 * len(self.S), 64)) - len(self.S)
            G = np.stack([self.rs.randn(self.d, self.d) for _ in range(more)])
            self.S = np.concatenate([self.S, G @ np.swapaxes(G, -1, -2)])
        return self.S[ks]


class _Protocol:
    """The authors' sequential protocol, run on a batch of runs in flight (see
    :func:`paper_histogram_ranks`).

    ``table`` holds the finished runs, ``(draw, init) -> (status, n_steps, last)``; the runs in
    flight are ``pairs`` with their iterates ``S`` and the iteration ``start`` at which each
    joined (their step count is ``self.clock - start``).
    """

    def __init__(self, setting, n, n_max, max_iter, window):
        s = setting
        self.s, self.n, self.n_max, self.max_iter, self.window = s, n, n_max, max_iter, window
        self.inits = _LazyInits(s.d, n_max)  # drawn as the attempts reach them
        closures = [a.batched_closure() for a in s.attentions()[:n]]
        self.rhs_fn = closures[0].rhs
        per_draw = [tuple(np.asarray(p, dtype=float) for p in cl.params(0.0)) for cl in closures]
        self.params = [np.stack(vals) for vals in zip(*per_draw)]
        self.table = {}
        self.first = {}  # draw -> did the first of its runs to finish fail?
        self.converged = {}  # draw -> initial conditions from which its run converged
        self.pairs = []
        self.S = np.zeros((0, s.d, s.d))
        self.start = np.zeros(0, dtype=int)
        self.clock = 0
        self.batches = 0
        self.work = 0  # iterations computed, summed over the runs

    # -- the sequential walk -------------------------------------------------------------
    def head(self):
        """The first attempt of the sequential loop whose run is not known, with the number of
        failures of its draw just before it: ``(i, k, f)``; None when the loop has ended."""
        i = k = f = 0
        while i < self.n and k < self.n_max:
            out = self.table.get((i, k))
            if out is None:
                return i, k, f
            if out[0] == "converged":
                i, f = i + 1, 0
            else:
                f += 1
            k += 1
        return None

    def width(self):
        """Unknown pairs to run ahead of the head: those on the path with a chance >= 1/4 of
        being needed, the chance that a draw's first run fails estimated from the draws seen so
        far (prior 0.1 over two draws)."""
        p = (sum(self.first.values()) + 0.2) / (len(self.first) + 2)
        w = int(np.ceil(np.log(0.25) / np.log1p(-p)))
        return max(1, min(w, self.window))

    def plan(self, head):
        """The unknown pairs to run: a draw that keeps failing is retried on ``2**f``
        initial conditions at once; otherwise the next pairs of the path on which every
        unknown run converges."""
        i, k, f = head
        if f:
            return [
                (i, kk) for kk in range(k, min(k + 2 ** min(f, 6), self.n_max)) if (i, kk) not in self.table
            ]
        out, j, kk, w = [], i, k, self.width()
        while j < self.n and kk < self.n_max and len(out) < w:
            known = self.table.get((j, kk))
            if known is None:
                out.append((j, kk))
            if known is None or known[0] == "converged":
                j += 1
            kk += 1
        return out

    # -- the runs ------------------------------------------------------------------------
    def _keep(self, rows, new=()):
        """Keep the runs in flight ``rows`` and start the pairs ``new``."""
        new = list(new)
        self.pairs = [self.pairs[m] for m in rows] + new
        self.S = np.concatenate([self.S[rows], self.inits[[kk for _, kk in new]]])
        self.start = np.concatenate([self.start[rows], np.full(len(new), self.clock)])

    def advance(self):
        """Iterate the runs in flight until one of them stops (the iterations of
        :func:`projected_euler`: the same right-hand side, projection and tests, so the same
        bits; the stopping tests are read from the batch's extreme values)."""
        e, s = self.s.euler, self.s
        h, tol_low, tol_high = e.h, e.tol_low, e.tol_high
        draws = np.array([j for j, _ in self.pairs])
        P = [p[draws] for p in self.params]
        rhs = _covariance_only(self.rhs_fn, P)
        if rhs is None:
            mean = np.zeros((draws.size, s.d))
            rhs = lambda S: self.rhs_fn(*P, mean, S)[1]  # noqa: E731
        clock, until = self.clock, int((self.start + self.max_iter).min())
        S = self.S
        with np.errstate(over="ignore", invalid="ignore"):
            while True:
                r = rhs(S)
                norm_r = np.sqrt((r * r).sum(axis=(1, 2)))
                if not norm_r.max() < np.inf:
                    m = int(np.argmax(~np.isfinite(norm_r)))
                    raise FloatingPointError(
                        f"paper_histogram_ranks: the rhs is not finite for draw "
                        f"{self.pairs[m][0]} from initial condition {self.pairs[m][1]} at "
                        f"iteration {clock - self.start[m]}"
                    )
                S = _psd_projection_verbatim(S + h * r)
                trace = S.trace(axis1=1, axis2=2)
                clock += 1
                if norm_r.min() < tol_low or trace.max() > tol_high or clock == until:
                    break
        self.work += S.shape[0] * (clock - self.clock)
        self.S, self.clock = S, clock
        conv = norm_r < tol_low
        div = ~conv & (trace > tol_high)
        steps = clock - self.start
        status = np.where(conv, "converged", np.where(div, "diverged", "max_iter"))
        done = conv | div | (steps >= self.max_iter)
        for m in np.flatnonzero(done):
            j = self.pairs[m][0]
            self.table[self.pairs[m]] = (str(status[m]), int(steps[m]), S[m].copy())
            self.first.setdefault(j, status[m] != "converged")
            if status[m] == "converged":
                self.converged.setdefault(j, []).append(self.pairs[m][1])
        self._keep(np.flatnonzero(~done))

    def useful(self, pair, head):
        """Is ``pair`` (draw, init) worth running on, given the head ``(i, k)``?

        Draw ``j >= i`` is run from initial condition ``k + (j - i)`` at the earliest (every
        draw in between converging at its first try; the failures learnt later only push it
        further): a run before that is never needed. A run of draw ``j`` beyond an initial
        condition ``c >= k + (j - i)`` from which ``j`` is known to converge is dropped too: for
        the head's draw it is never needed; for a later draw it is needed only if failures not
        yet known move that draw past ``c``, and it is then run again (time, not results).
        """
        (j, kk), (i, k) = pair, head
        low = k + (j - i)
        return j >= i and kk >= low and not any(low <= c < kk for c in self.converged.get(j, ()))

    def run(self):
        """Walk the sequential loop, running what it needs; the runs that the walk can no
        longer reach are dropped as soon as that is known."""
        while (head := self.head()) is not None:
            rows = [m for m, p in enumerate(self.pairs) if self.useful(p, head[:2])]
            flying = set(self.pairs)
            self._keep(rows, [p for p in self.plan(head) if p not in flying])
            self.batches += 1
            self.advance()
        return self.walk()

    def walk(self):
        """The sequential loop's record, read from the finished runs."""
        i = k = 0
        ok, fail = [], []
        while i < self.n and k < self.n_max:
            status, steps, last = self.table[(i, k)]
            if status == "converged":
                ok.append((k, steps, last))
                i += 1
            else:
                fail.append((i, k, steps, status))
            k += 1
        return ok, fail, k


def paper_histogram_ranks(
    setting: HistogramSetting,
    *,
    max_iter: int | None = None,
    n_attempts: int | None = None,
    n_draws: int | None = None,
    window: int | None = None,
) -> HistogramRun:
    r"""Run the authors' histogram protocol with their projected Euler scheme.

    The official ``create_histograms`` goes through attempts ``k = 0, 1, ...`` with parameter
    index ``i`` (starting at 0) and initial condition ``k`` of :func:`histogram_inits`; ``i``
    advances only when the run converged (a failed run, diverged or out of iterations, is retried
    with the next initial condition and the same draw), until ``n`` draws converged or the
    ``n_max`` initial conditions are used up. A converged limit is counted only if its rank
    (eigenvalues above ``tol_rank``) is at most ``(d + 1) // 2``.

    We reproduce this sequence exactly, running several of its runs at once in one batch
    (every run is a run of the authors' scheme from its pair's initial condition, so the result
    does not depend on the batching). The first pair of the loop whose run is not known is
    always run; next to it, the pairs that the loop reaches if every pending run converges
    (draw ``j`` from initial condition ``j`` + the failures before it), as many as have a chance
    of at least 1/4 of being needed (the chance that a draw fails, estimated from the draws
    run so far), and no more than ``window``; a draw that has failed ``f`` times in a row is
    run on its next ``2**f`` initial conditions at once (at most 64). A run that the loop can
    no longer reach (a failure before it moved its draw to a later initial condition), or a
    draw's run beyond an initial condition it is known to converge from, is dropped as soon as
    that is known. The batch is re-planned each time a run stops. ``work`` in the result
    counts the iterations computed, dropped runs included: on the twelve panels of the
    authors' figures it is 1.00 to 2.10 times the iterations the loop needs (exactly 1 where no
    run fails), and every panel takes less CPU time than the authors' sequential loop, 1.45 to
    8.5 times less (``benchmarks/official_protocol.py``).

    Parameters
    ----------
    setting : HistogramSetting
    max_iter : int, optional
        Override the authors' ``max_iter`` (a budget; say so where used).
    n_attempts : int, optional
        Override the authors' ``n_max`` (number of initial conditions available).
    n_draws : int, optional
        Stop after this many draws (the first ones; default all of the setting's).
    window : int, optional
        Largest number of pairs run ahead (speed only; default: every pending draw).

    Returns
    -------
    HistogramRun

    Raises
    ------
    FloatingPointError
        If a run's right-hand side overflows (names the draw, initial condition, iteration).

    Examples
    --------
    The first three draws of the softmax, ``V = I``, ``d = 3`` panel: every run converges
    at its first try, and the ranks are those of the committed cache.

    >>> from tpde_lib import official as of
    >>> run = of.paper_histogram_ranks(of.histogram_setting("softmax", "identity", 3),
    ...                                n_draws=3)
    >>> run.draw_init.tolist(), run.failures
    ([0, 1, 2], 0)
    >>> cached = of.load_histogram_cache()[("softmax", "identity", 3)]
    >>> run.n_steps.tolist() == cached.n_steps[:3].tolist()
    True
    """
    s = as_instance("setting", setting, HistogramSetting, "a HistogramSetting (from histogram_setting)")
    n_all = s.Q.shape[0]
    n = n_all if n_draws is None else as_count("n_draws", n_draws, 1, n_all)
    n_max = s.n_max if n_attempts is None else as_count("n_attempts", n_attempts, 1)
    it = s.euler.max_iter if max_iter is None else as_count("max_iter", max_iter, 1)
    window = n if window is None else as_count("window", window, 1)
    prot = _Protocol(s, n, n_max, it, window)
    ok, fail, attempts = prot.run()
    finals = np.array([last for _, _, last in ok]).reshape(-1, s.d, s.d)
    lam = np.linalg.eigvalsh(finals) if finals.size else np.zeros((0, s.d))
    rank = np.sum(lam > s.tol_rank, axis=-1)
    margin = float(np.abs(lam - s.tol_rank).min()) if lam.size else np.inf
    ints = lambda rows, c: np.array([row[c] for row in rows], dtype=int)  # noqa: E731
    return HistogramRun(
        ints(ok, 0),
        rank,
        rank <= (s.d + 1) // 2,
        ints(ok, 1),
        finals,
        ints(fail, 0),
        ints(fail, 1),
        ints(fail, 2),
        np.array([row[3] for row in fail], dtype=str),
        attempts,
        prot.batches,
        prot.work,
        margin,
    )


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
    as_instance("setting", setting, HistogramSetting, "a HistogramSetting (from histogram_setting)")
    n_all = setting.Q.shape[0]
    n = n_all if n_draws is None else as_count("n_draws", n_draws, 1, n_all)
    if init_index is None:
        idx = np.arange(n)
    else:
        raw = as_ndarray("init_index", init_index)
        if raw.dtype.kind not in "iu" or raw.ndim != 1:
            raise TypeError(
                f"init_index must be a 1-D array of integers, got dtype {raw.dtype} and shape {raw.shape}"
            )
        if raw.size < n or (raw.size and raw.min() < 0):
            raise ValueError(
                f"init_index must hold at least n_draws = {n} indices >= 0, got "
                f"{raw.size} (min {raw.min() if raw.size else None})"
            )
        idx = raw[:n].astype(int)
    return n, histogram_inits(setting.d, int(idx.max()) + 1)[idx]


def histogram_euler_budget(
    setting: HistogramSetting, max_iter: int, n_draws: int | None = None, init_index: ArrayLike | None = None
) -> EulerBudgetRun:
    r"""The authors' Euler runs for a histogram panel, one run per draw, on a budget.

    Draw ``i`` is run from initial condition ``init_index[i]`` (default ``i``, the authors'
    pairing as long as no run fails) for at most ``max_iter`` iterations, and nothing is retried.

    Returns
    -------
    EulerBudgetRun
    """
    s = setting
    n, inits = _draw_inits(s, n_draws, init_index)
    max_iter = as_count("max_iter", max_iter, 1)
    atts = s.attentions()[:n]
    res = run_paper_euler(
        lambda m: covariance_rhs([atts[b] for b in m]),
        inits,
        s.euler,
        record_every=10**9,
        chunk=400,
        max_iter=max_iter,
    )
    lam = np.linalg.eigvalsh(res.last)
    return EulerBudgetRun(np.sum(lam > s.tol_rank, axis=-1), res.status, lam[:, 0] < 1e-10, res.last)


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


def histogram_accurate(
    setting: HistogramSetting,
    horizon: float = 1e3,
    n_draws: int | None = None,
    init_index: ArrayLike | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-9,
) -> AccurateLimits:
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
    horizon = as_positive("horizon", horizon)
    rtol, atol = as_positive("rtol", rtol), as_positive("atol", atol)
    batch = simulate_gaussian_batch(s.attentions()[:n], inits, np.array([0.0, horizon]), rtol=rtol, atol=atol)
    cov = batch.cov[:, -1]
    return AccurateLimits(
        cov, np.asarray(batch.blowup_time), np.sum(np.linalg.eigvalsh(cov) > s.tol_rank, axis=-1)
    )


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


def paired_ranks(euler_eigenvalues: ArrayLike, limits: ArrayLike, tol_rank: float = 0.1) -> PairedRanks:
    r"""Compare, draw by draw, the authors' Euler limits with accurate limits.

    Parameters
    ----------
    euler_eigenvalues : array_like, shape (m, d)
        Eigenvalues of the converged Euler iterates (e.g. ``CachedPanel.eigenvalues``), in
        any order.
    limits : array_like, shape (m, d, d)
        Accurate limits of the same draws from the same initial conditions: symmetric positive
        semi-definite (eigenvalues down to ``-1e-8`` times the largest; ``ValueError``
        otherwise).
    tol_rank : float

    Returns
    -------
    PairedRanks
    """
    lam_e = as_float_array("euler_eigenvalues", euler_eigenvalues, ndim=2)
    cov = as_float_array("limits", limits, shape=(lam_e.shape[0], lam_e.shape[1], lam_e.shape[1]))
    if not np.allclose(cov, np.swapaxes(cov, -1, -2), rtol=1e-8, atol=0):
        raise ValueError("limits must be symmetric matrices (covariances)")
    tol_rank = as_positive("tol_rank", tol_rank)
    lam_x = np.linalg.eigvalsh(cov)
    floor = -1e-8 * np.maximum(1.0, np.abs(lam_x).max(axis=1))
    bad = np.flatnonzero(lam_x[:, 0] < floor)
    if bad.size:
        k = int(bad[0])
        raise ValueError(
            f"limits must be positive semi-definite (covariances); limits[{k}] has the "
            f"eigenvalue {lam_x[k, 0]:.3g}"
        )
    exact = np.sum(lam_x > 1e-8 * np.maximum(1.0, lam_x[:, -1:]), axis=1)
    thr = np.sum(lam_x > tol_rank, axis=1)
    eul = np.sum(lam_e > tol_rank, axis=1)
    clipped = np.sum(lam_e < 1e-10, axis=1) > lam_x.shape[1] - exact
    reason = np.where(eul == thr, "same", np.where(clipped, "clipped", "drift"))
    # the largest of each row, in whatever order the eigenvalues were given
    return PairedRanks(exact, thr, eul, reason, lam_e.max(axis=1) / lam_x[:, -1])
