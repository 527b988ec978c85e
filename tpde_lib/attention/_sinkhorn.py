r"""Sinkhorn attention and its solver, the entropic self-transport of a measure.

With :math:`L(x,y)=\langle Ax,y\rangle` the plan

.. math::
    \pi(\mathrm dx,\mathrm dy) = e^{f(x)+g(y)+L(x,y)/\varepsilon}\,\mu(\mathrm dx)\mu(\mathrm dy)
    \in \Pi(\mu,\mu)

is the entropic optimal transport of :math:`\mu` to itself for the cost :math:`-\langle Ax,y\rangle`
and regularisation :math:`\varepsilon`. :func:`sinkhorn_potentials` computes its potentials
(a pure function: warm start in, potentials and a POT-style ``log`` out); :class:`Sinkhorn` is the
attention :math:`\Gamma_\mu(x) = V\,\mathbb E_\pi[y\mid x]`.

Algorithm (log-domain stabilised Sinkhorn, our implementation): the potentials are kept in the
log domain; a log-sum-exp pass computes a row half-step, which bounds the stabilised kernel
:math:`\tilde K_{ij} = e^{L_{ij}/\varepsilon + f_i + g_j}`; iterations then run on scalings
:math:`a=e^{f-f_0}`, :math:`b=e^{g-g_0}` (one matrix–vector product each) and are absorbed
into the potentials (a new log-domain pass, counted as an iteration) as soon as
:math:`|\log a|` or :math:`|\log b|` exceeds ``_ABSORB``. For symmetric :math:`A` both
potentials coincide, :math:`f=g=\varphi`, and the averaged symmetric update
:math:`\varphi\leftarrow\frac12(T\varphi+T^2\varphi)` is used (:math:`T` is the log-domain
half-step :math:`T\varphi_i=-\log\int e^{L(x_i,y)/\varepsilon+\varphi(y)}\mathrm d\mu(y)`; the
average removes the oscillating constant mode of plain Sinkhorn), for at most
``_SYMMETRIC_ITERS`` updates. Otherwise (or after that) alternating row/column updates,
over-relaxed when they are slow: the linear rate :math:`\lambda` of plain Sinkhorn is measured
and the updates become :math:`\log b\leftarrow(1-\omega)\log b-\omega\log(\tilde K^\top(w a))`
(and likewise for :math:`a`) with :math:`\omega=2/(1+\sqrt{1-\lambda})\le 1.99`, the optimal SOR
factor of a two-block iteration; a diverging over-relaxation falls back to :math:`\omega=1`.
Where an m × m factorisation is affordable (m <= ``_NEWTON_MAX``) the alternating phase instead runs
plain sweeps until their measured rate says they need more passes than a Newton step costs,
then damped Newton steps on the concave semi-dual :math:`h(g)=\langle w,g\rangle+\langle w,
T(g)\rangle` (its Hessian, shifted by a multiple of the gradient's norm (Levenberg-Marquardt),
inverted at the current plan, kept for the next steps and the next
call while they at least halve the violation; a step that reduces it by less than 10 % hands
back to the over-relaxed sweeps). Clustered tokens make plain Sinkhorn slow (weakly coupled
blocks of the kernel); Newton's steps move those blocks' potentials at once.

Convergence: the marginal violation :math:`\sum_i|(\pi\mathbf 1)_i-w_i|` (L1, over the
support) is compared with ``tol``, always on a plan whose rows are exact. It bounds the L2
violation used by POT's ``stopThr``. Every pass over the kernel counts towards ``max_iter``, so
a run always ends; non-finite logits or potentials raise ``RuntimeError``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from numpy.typing import ArrayLike

from .. import _closures as closures  # the Gaussian closures' right-hand sides
from .._checks import as_at_least, as_count, as_finite, as_flag, as_float_array, as_positive
from .._threads import held_blas, single_blas
from ._base import GaussianClosure, MatrixLike, as_measure
from ._bilinear import _Bilinear, _norm, _symmetric_mobility
from ._dense import dense_kernel, matvec
from ._kernels import engine_sums, normalised, weighted_values

_ABSORB = 30.0
#: kernel entries below this fraction of their row's largest are set to 0 (subnormals are slow)
_FLOOR = 1e-200
#: entries of the Hessian's factor P~ below this are set to 0: no product of two underflows
_FLOOR_HESSIAN = 1e-150
#: Levenberg-Marquardt shift of the scaled Hessian, in units of the scaled gradient's norm
_LM = 1.0
#: solves whose (points, potential) pairs predict the next warm start
_HISTORY = 4
#: largest weight of a previous potential in that prediction (else the latest is used)
_HISTORY_COEF = 4.0
_SYMMETRIC_ITERS = 100
#: alternating potentials whose weighted mean exceeds this are shifted back to mean zero: their
#: round-off (1e-16 of it) would otherwise reach the scores (the solver's own stay far below it)
_GAUGE = 1e4
#: Newton steps for at most this many tokens (an m x m product and LU factorisation per fresh Hessian)
_NEWTON_MAX = 2000
#: a fresh Hessian costs about m / _NEWTON_SWEEPS plain sweeps (measured, m = 200)
_NEWTON_SWEEPS = 8.0
#: plain sweeps still needed below which no Hessian is computed
_NEWTON_MIN_SWEEPS = 20
#: halvings of a fresh Newton step before Newton is given up for the solve
_NEWTON_HALVINGS = 30


def _load_linalg(m):
    """Import scipy.linalg where Newton may run (m <= ``_NEWTON_MAX``) before BLAS is held: it
    loads its own BLAS, which a hold entered before the import would not limit."""
    if m <= _NEWTON_MAX:
        import scipy.linalg  # noqa: F401


def _lu_solve(*args, **kwargs):
    import scipy.linalg

    return scipy.linalg.lu_solve(*args, **kwargs)


def _predicted(history, Y):
    """A start for the column potential at the support ``Y``: the affine combination of the
    potentials of ``history`` ((points, g) pairs, the last one latest) whose points best match
    ``Y`` (least squares on the displacements from the latest points), a first-order Taylor
    expansion of the potential in the positions. The latest potential where there is one pair,
    or the fit is singular, not finite, or needs a weight above ``_HISTORY_COEF``. The weights
    sum to one, so the gauge (an additive constant) of the potentials does not matter."""
    Y1, g1 = history[-1]
    if len(history) < 2:
        return g1
    D = np.stack([(Yk - Y1).ravel() for Yk, _ in history[:-1]], axis=1)
    r = (Y - Y1).ravel()
    with single_blas():  # small products: one BLAS thread, bitwise results
        G, b = D.T @ D, D.T @ r
        scale = max(float(np.trace(G)), np.finfo(float).tiny)
        try:
            c = np.linalg.solve(G + 1e-12 * scale * np.eye(G.shape[0]), b)
        except np.linalg.LinAlgError:
            return g1
        if not (np.all(np.isfinite(c)) and np.abs(c).max() <= _HISTORY_COEF):
            return g1
        g = g1 + sum(ck * (gk - g1) for ck, (_, gk) in zip(c, history[:-1]))
    return g if np.all(np.isfinite(g)) else g1


def _gauged(name, g, w):
    """A potential shifted to weighted mean zero, ``g - <w, g>`` (a change of gauge: the plan is
    the same). The potentials returned start from it, so that an offset in a warm start (1e12,
    1e300) does not become an offset of f and g whose round-off, about 1e-16 |f|, would exceed
    the marginals' tolerance (g0 = 1e12 gave plans 6e-5 off their marginals)."""
    c = float(w @ (0.5 * g))  # halves: no overflow near the largest float
    out = 0.5 * g - c
    if np.abs(out).max() > 0.5 * np.finfo(float).max:
        raise ValueError(
            f"{name} spans more than float64 holds once centred (max |{name}| = {np.abs(g).max():.3g})"
        )
    return out + out


def _is_symmetric(A):
    scale = max(np.abs(A).max(), np.finfo(float).tiny)
    return bool(np.abs(A - A.T).max() <= 1e-12 * scale)


class _Run:
    """The state of one solve (the kernel buffer, counters); not kept after the call."""

    def __init__(self, Y, w, A, eps, tol, max_iter, hessian=None):
        self.Y, self.w, self.logw = Y, w, np.log(w)
        self.AT = A.T / eps
        self.tol, self.max_iter = tol, max_iter
        self.buf = np.empty((Y.shape[0],) * 2)
        self.it, self.err, self.errs = 0, np.inf, []
        self.extent = None  # (min, max) of the scores / eps, read in the first row pass
        # Newton on the semi-dual where a dense m x m factorisation is affordable
        self.newton = Y.shape[0] <= _NEWTON_MAX
        self.hessian = hessian if self.newton else None  # LU factors of the scaled Hessian

    def logits(self, out):
        """L / eps on the support, (m, m), written into ``out``; RuntimeError if not finite."""
        if not dense_kernel(self.Y @ self.AT, self.Y, out):  # threaded (speed)
            raise RuntimeError(
                "Sinkhorn: the scores <Ax, y> / eps are not finite (eps too small, or the scores overflow)"
            )
        return out

    def row_pass(self, g):
        """T(g)_i = -LSE_j(L_ij/eps + g_j + log w_j); leaves in ``buf`` the row-normalised kernel
        exp(L_ij/eps + T_i + g_j) (entries <= 1/w_j)."""
        extent = np.empty(2) if self.extent is None else None  # the scores: read once
        out = self._half_step(self.Y @ self.AT, g, extent)
        if extent is not None:
            self.extent = extent
        return out

    def _half_step(self, left, h, extent=None):
        """-LSE_j(S_ij + h_j + log w_j) for the scores S = ``left`` Y^T (L/eps for a row pass,
        its transpose for a column pass), leaving the normalised kernel in ``buf``: threaded, one
        cache-sized row block at a time (speed), entries below ``_FLOOR`` of their row's largest
        set to 0. RuntimeError if the scores are not finite."""
        finite, c, s = dense_kernel(
            left,
            self.Y,
            self.buf,
            "softmax",
            col_add=h + self.logw,
            col_div=self.w,
            extent=extent,
            floor=_FLOOR,
        )
        if not finite:
            self.logits(self.buf)  # raises the RuntimeError
        return -(c + np.log(s))

    def done(self):
        return self.err <= self.tol or self.it >= self.max_iter

    def exact_pass(self, g):
        """The plan (T(g), g), whose rows are exact: sets ``err`` to its L1 column violation (at
        most 2, two probability vectors, whatever g) and returns T(g)."""
        f = self.row_pass(g)  # buf: exp(L_ij/eps + T(g)_i + g_j)
        Ka = matvec(self.buf, self.w, transpose=True)  # column sums / w_j
        self.err = float(np.sum(self.w * np.abs(Ka - 1.0)))
        return f

    def symmetric_sweeps(self, g, T):
        """Averaged symmetric updates phi <- (T phi + T T phi) / 2 from phi = g (T = T(g)).

        Returns the new potential and whether the run is over (converged or out of iterations).
        """
        w = self.w
        with np.errstate(over="ignore"):  # row sums of the plan with f = g = phi
            self.err = float(np.sum(w * np.abs(np.expm1(g - T))))
        if self.done():
            return g, True
        g = 0.5 * (g + T)
        self.it += 1
        buf = self.buf  # exp(L/eps + phi_i + phi_j) <= 1/sqrt(w_i w_j)
        if not dense_kernel(self.Y @ self.AT, self.Y, buf, "exp", row_add=g, col_add=g):
            self.logits(buf)  # raises the RuntimeError (speed: threaded)
        u = np.ones(g.size)
        while True:
            Ku = matvec(buf, w * u)
            self.err = float(np.sum(w * np.abs(u * Ku - 1.0)))
            if self.done():
                return g + np.log(u), True
            if self.it >= _SYMMETRIC_ITERS:
                return g + np.log(u), False
            v1 = 1.0 / Ku  # T(phi)
            v2 = 1.0 / matvec(buf, w * v1)  # T(T(phi))
            u_new = np.sqrt(v1 * v2)  # phi <- (T phi + T T phi) / 2
            self.it += 1
            if not np.all(np.isfinite(u_new)):
                return g + np.log(u), False
            u = u_new
            if np.abs(np.log(u)).max() > _ABSORB:
                return g + np.log(u), False

    def alternating_sweeps(self, g):
        """Alternating (over-relaxed) updates on the stabilised kernel ``buf`` (rows exact).

        Plain Sinkhorn (omega = 1) measures its linear rate lambda; when it is slow the updates
        are over-relaxed with omega = 2 / (1 + sqrt(1 - lambda)) (the optimal SOR factor of a
        2-cyclic iteration), capped at 1.99, with lambda re-estimated every 10 sweeps from the
        observed rate rho through Young's relation (rho + omega - 1)^2 = rho omega^2 lambda.
        Convergence is confirmed on the plan (T(g), g) with exact rows. Returns (g, done).
        """
        w, buf = self.w, self.buf
        la, lb = np.zeros(g.size), np.zeros(g.size)
        exact, best = True, np.inf
        omega = self.omega
        while True:
            Ka = matvec(buf, w * np.exp(la), transpose=True)  # column sums / w_j
            col = float(np.sum(w * np.abs(np.exp(lb) * Ka - 1.0)))
            if exact:
                self.err = col
                if self.done():
                    return g + lb, True
            elif col <= self.tol or self.it >= self.max_iter:
                return g + lb, False  # confirm with an exact row pass
            stalled = omega > 1.0 and len(self.errs) > 200 and col > 0.99 * self.errs[-200]
            if not np.isfinite(col) or col > 100.0 * best or stalled:
                # over-relaxation diverged or stalls: back to plain Sinkhorn, never this far again
                self.cap = 0.5 * (1.0 + omega)
                self.omega, self.errs = 1.0, []
                return g, False
            best = min(best, col)
            self.errs.append(col)
            n = len(self.errs)
            if n % 10 == 1 and n > 20:
                rho = (self.errs[-1] / self.errs[-21]) ** 0.05
                if 0.0 < rho < 1.0:
                    lam = min((rho + omega - 1.0) ** 2 / (rho * omega**2), 0.99999)
                    new = min(self.cap, 2.0 / (1.0 + math.sqrt(1.0 - lam)))
                    if new > omega * 1.01:
                        omega = self.omega = new
            lb = (1.0 - omega) * lb - omega * np.log(Ka)
            Kb = matvec(buf, w * np.exp(lb))
            la = (1.0 - omega) * la - omega * np.log(Kb)
            exact = omega == 1.0
            self.it += 1
            if max(np.abs(la).max(), np.abs(lb).max()) > _ABSORB:
                return g + lb, False
            if not (np.all(np.isfinite(la)) and np.all(np.isfinite(lb))):
                return None, False  # the scalings under/overflow: an exact log-domain half-step

    def slow(self, cols):
        """Whether plain sweeps, at the rate of the last two (``cols``: their column violations),
        still need more than a Newton step costs, about ``m / _NEWTON_SWEEPS`` sweeps (and at
        least ``_NEWTON_MIN_SWEEPS``)."""
        if len(cols) < 3:
            return False
        rate = math.sqrt(cols[-1] / cols[-3]) if cols[-3] > 0.0 else 0.0
        if not 0.0 < rate < 1.0:
            return rate >= 1.0
        need = math.log(self.tol / cols[-1]) / math.log(rate)
        return need > max(_NEWTON_MIN_SWEEPS, self.w.size / _NEWTON_SWEEPS)

    def inverse_hessian(self, a, b, r):
        r"""The LU factors (``scipy.linalg.lu_factor``: a quarter of an inverse's work) of the
        semi-dual's Hessian at the plan ``buf`` scaled by ``a`` (rows) and
        ``b`` (columns), ``r`` its column sums / w: :math:`D_r - \tilde P^\top\tilde P +
        ss^\top` with :math:`\tilde P_{ij} = \pi_{ij}/\sqrt{w_iw_j}` and :math:`s=\sqrt w`.
        Without the last term the matrix is :math:`W^{-1/2}` times minus the Hessian times
        :math:`W^{-1/2}`: positive semi-definite (Cauchy-Schwarz on the exact rows), with null
        vector s, which the last term maps to itself. A Levenberg-Marquardt shift
        :math:`\mu I`, :math:`\mu` = ``_LM`` times the norm of the scaled gradient
        :math:`W^{-1/2}(w - c)`, bounds the step where the Hessian is near-singular (weakly
        coupled blocks of tokens) and vanishes at the solution. Entries of :math:`\tilde P`
        below ``_FLOOR_HESSIAN`` are taken as 0 (their products would be subnormal, slow).
        None if singular. Counted as the plain sweeps it costs, ``m / _NEWTON_SWEEPS``."""
        import scipy.linalg  # (not at import: tpde_lib's import stays light)

        self.it += max(1, round(self.w.size / _NEWTON_SWEEPS))
        sw = np.sqrt(self.w)
        with single_blas():  # a dense product and factorisation: BLAS on one thread, bitwise results
            P = self.buf * (sw * a)[:, None]
            P *= (sw * b)[None, :]
            np.putmask(P, P < _FLOOR_HESSIAN, 0.0)  # (P~_ij <= 1): no subnormal products
            H = np.outer(sw, sw)
            H -= P.T @ P
            # Levenberg-Marquardt: + _LM |W^{-1/2}(w - c)| I (scores spanning over ~1500: blocks of
            # tokens decouple, the Hessian is singular to round-off and an unshifted step moved
            # the potentials by 1e5-1e18; near the solution the shift vanishes with the gradient)
            H.flat[:: r.size + 1] += r + _LM * float(np.linalg.norm(sw * (1.0 - r)))
            with warnings.catch_warnings():  # a zero pivot: checked below
                warnings.simplefilter("ignore")
                lu, piv = scipy.linalg.lu_factor(H, check_finite=False)
        if not (np.all(np.isfinite(lu)) and np.all(np.diag(lu) != 0.0)):
            return None
        return lu, piv

    def newton_sweeps(self, g, T):
        r"""Plain Sinkhorn sweeps and Newton steps on the semi-dual, on the stabilised kernel
        ``buf`` of (T, g) scaled by :math:`a = e^{l_a}` (rows, exact) and :math:`b = e^{l_b}`.

        The semi-dual :math:`h(g) = \langle w, g\rangle + \langle w, T(g)\rangle` is concave
        and its gradient is :math:`w - c`, c the column sums of the plan with exact rows. While
        no Hessian is factorised, plain sweeps run; when they are slow (:meth:`slow`) the
        Hessian is factorised (LU) at the current plan (:meth:`inverse_hessian`), and then each step
        moves :math:`l_b` by the Hessian solved against the gradient, then the rows are made
        exact (one pass of two products, counted). A step is halved until the semi-dual rises
        (Armijo, 1e-4) or, where that rise is at round-off level, the violation falls. An
        factorisation is kept across steps (and calls) while a step at least halves the violation
        (a chord step), and computed again otherwise; where a step at a fresh one reduces
        the violation by less than 10 %, the solve goes on with over-relaxed sweeps
        (:meth:`alternating_sweeps`). Returns (g, f, done), f the exact row half-step of g when
        ``done``.
        """
        w, buf = self.w, self.buf
        sw = np.sqrt(w)
        la, lb = np.zeros(g.size), np.zeros(g.size)
        a, b = np.ones(g.size), np.ones(g.size)
        Ka = matvec(buf, w, transpose=True)  # column sums / w_j of the plan (a, b)
        cols, fresh = [], False
        while True:
            r = b * Ka
            self.err = float(np.sum(w * np.abs(r - 1.0)))
            if self.done():
                return g + lb, T + la, True
            if not np.isfinite(self.err) or max(np.abs(la).max(), np.abs(lb).max()) > _ABSORB:
                g = g + lb  # absorb into the potentials (a row pass); None: the scalings
                return (g if np.all(np.isfinite(g)) else None), None, False  # under/overflowed
            if self.hessian is None and self.slow(cols):
                self.hessian, fresh = self.inverse_hessian(a, b, r), True
                if self.hessian is None:
                    self.newton = False  # singular: over-relaxed sweeps from here
                    return g + lb, T + la, False
            if self.hessian is None:  # a plain sweep
                cols.append(self.err)
                lb = -np.log(Ka)
                Kb = matvec(buf, w / Ka)
                la = -np.log(Kb)
                a, b = 1.0 / Kb, 1.0 / Ka
                Ka = matvec(buf, w * a, transpose=True)
                self.it += 1
                continue
            rhs = sw * (1.0 - r)  # W^{-1/2} (w - c)
            with single_blas():
                y = _lu_solve(self.hessian, rhs, check_finite=False)
            slope = float(rhs @ y)
            h = float(w @ (lb + la))  # the semi-dual, up to the constant <w, g + T>
            step, accepted = 1.0, False
            if slope > 0.0:
                dg = y / sw
                for _ in range(_NEWTON_HALVINGS):
                    self.it += 1
                    lb1 = lb + step * dg
                    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                        b1 = np.exp(lb1)  # a step too long overflows: it is halved
                        Kb = matvec(buf, w * b1)
                        la1 = -np.log(Kb)
                        Ka1 = matvec(buf, w / Kb, transpose=True)
                        err1 = float(np.sum(w * np.abs(b1 * Ka1 - 1.0)))
                        rise = float(w @ (lb1 + la1)) - h - 1e-4 * step * slope
                    if (
                        np.isfinite(err1)
                        and np.isfinite(rise)
                        and (rise >= 0.0 or (slope < 1e-12 and err1 < self.err))
                    ):
                        accepted = True
                        break
                    if self.it >= self.max_iter or not fresh:
                        break  # (a chord step is not halved: the inverse is renewed instead)
                    step *= 0.5
            if fresh and (not accepted or err1 > 0.9 * self.err):
                # a Newton step at a fresh Hessian that does not reduce the violation (the
                # kernel near-singular, its scores spanning hundreds): over-relaxed sweeps
                self.newton, self.hessian = False, None
                return g + lb, None, False  # (from before that step)
            if accepted:
                stale = err1 > 0.5 * self.err
                la, lb, a, b, Ka = la1, lb1, 1.0 / Kb, b1, Ka1
            else:
                stale = True
            if stale and self.it < self.max_iter:  # the inverse again, at the current plan
                self.hessian, fresh = self.inverse_hessian(a, b, b * Ka), True
                if self.hessian is None:
                    self.newton = False
                    return g + lb, None, False
            else:
                fresh = False

    def solve(self, g, omega, symmetric):
        """Iterate from the column potential ``g``; returns (g, f), f the exact row half-step
        of g when the loop knows it (its plan's column violation then in ``err``), else None."""
        self.omega, self.cap = omega, 1.99
        self.mode = "symmetric" if symmetric else "alternating"
        first = True
        while True:
            if not first:
                self.it += 1  # every log-domain pass counts: the loop always ends
            first = False
            T = self.row_pass(g)
            f = None
            if self.mode == "symmetric":
                g, done = self.symmetric_sweeps(g, T)
                if not done and self.it >= _SYMMETRIC_ITERS:
                    # slow: switch to over-relaxed alternation (Newton, measured there at
                    # eps = 0.03, made no progress and left a worse start)
                    self.mode, self.newton = "alternating", False
            else:
                if self.newton:
                    g_new, f, done = self.newton_sweeps(g, T)
                else:
                    g_new, done = self.alternating_sweeps(g)
                # scalings out of range (a warm start far from the solution: whole columns of the
                # stabilised kernel underflow), an exact log-domain column half-step instead
                g = self.column_pass(T) if g_new is None else g_new
                if self.mode != "symmetric" and abs(c := float(self.w @ g)) > _GAUGE:
                    # an offset the scores drown in (a warm start far off): the gauge f + c,
                    # g - c is the same plan, and the next row pass computes f afresh
                    g = g - c
            if not np.all(np.isfinite(g)):
                raise RuntimeError(
                    f"Sinkhorn potentials are not finite after {self.it} "
                    "iterations (eps too small for these scores?)"
                )
            if done or self.it >= self.max_iter:
                return g, f if done else None

    def column_pass(self, f):
        """The exact log-domain column half-step -LSE_i(L_ij/eps + f_i + log w_i) (counted as an
        iteration); finite whatever ``f``, so a run from any warm start progresses."""
        self.it += 1
        return self._half_step(self.Y @ self.AT.T, f)


def sinkhorn_potentials(
    points: ArrayLike,
    weights: ArrayLike,
    A: ArrayLike,
    eps: float = 1.0,
    tol: float = 1e-9,
    max_iter: int = 10_000,
    g0: ArrayLike | None = None,
    omega0: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, dict]:
    r"""Potentials of the entropic self-transport plan of :math:`\mu = \sum_j w_j\delta_{y_j}`.

    The plan is :math:`\pi_{ij} = w_iw_j e^{f_i+g_j+\langle Ay_i, y_j\rangle/\varepsilon}` with
    both marginals equal to ``weights`` (module docstring for the algorithm).

    Parameters
    ----------
    points : ndarray, shape (m, d)
        The support (tokens of positive weight only).
    weights : ndarray, shape (m,)
        Positive masses.
    A : ndarray, shape (d, d)
    eps : float
        Entropic regularisation, > 0.
    tol : float
        Marginal violation (L1) at which the iterations stop.
    max_iter : int
        Cap on the number of passes over the kernel (every pass counts).
    g0 : ndarray, shape (m,), optional
        Warm start for the column potential (default 0), finite. Used up to an additive
        constant (shifted to weighted mean zero, which does not change the plan); a warm solve
        that does not converge is followed by a cold one, whose result is returned.
    omega0 : float
        Warm start for the over-relaxation factor, in [1, 2) (1: plain Sinkhorn).

    Returns
    -------
    f, g : ndarray, shape (m,)
        Row and column potentials (``f = g`` for symmetric ``A``; otherwise ``f`` is the exact
        row half-step from ``g``).
    log : dict
        ``"n_iter"``, ``"err"`` (final L1 marginal violation), ``"converged"`` (err <= tol),
        ``"symmetric"``, ``"omega"`` (the over-relaxation factor reached), ``"span"`` (max - min
        of the scores / eps), as POT's ``log=True`` outputs, and ``"warm_fallback"`` (a warm
        start did not converge and a cold solve was run: ``n_iter`` counts both).

    Raises
    ------
    TypeError, ValueError
        An argument of the wrong kind, shape or range (the message names it).
    RuntimeError
        Non-finite scores or potentials.

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> f, g, log = tp.sinkhorn_potentials(x, np.full(3, 1 / 3), np.eye(2))
    >>> log["converged"], log["symmetric"], bool(np.allclose(f, g))
    (True, True, True)
    """
    points = as_float_array("points", points, ndim=2)
    m = points.shape[0]
    weights = as_float_array("weights", weights, shape=(m,))
    if np.any(weights <= 0):
        raise ValueError("weights must be positive (pass the support: tokens of positive mass)")
    d = points.shape[1]
    A = as_float_array("A", A, shape=(d, d))
    eps, tol = as_positive("eps", eps), as_positive("tol", tol)
    max_iter = as_count("max_iter", max_iter, minimum=0)
    omega0 = as_at_least("omega0", omega0, 1.0)
    if omega0 >= 2.0:
        raise ValueError(f"omega0 must be in [1, 2) (an over-relaxation factor), got {omega0!r}")
    g0 = None if g0 is None else _gauged("g0", as_float_array("g0", g0, shape=(m,)), weights)
    _load_linalg(m)
    with single_blas():  # BLAS on one thread for the whole solve (_potentials)
        return _potentials(points, weights, A, eps, tol, max_iter, g0, omega0)[:3]


def _potentials(points, weights, A, eps, tol, max_iter, g0, omega0, hessian=None):
    """:func:`sinkhorn_potentials` on validated arguments (the Sinkhorn field's own calls), with
    the LU factors of a Hessian to start Newton from (``hessian``, returned as the fourth output).

    A warm start (``g0``, ``omega0 != 1`` or ``hessian``) cannot change the outcome: a warm solve
    that does not converge within ``max_iter`` passes, or whose potentials under/overflow
    (``RuntimeError``), is followed by a cold solve (``g0 = 0``, ``omega0 = 1``, no Hessian)
    with a budget of its own, whose result is returned: the one a fresh start gives, bitwise
    (its ``n_iter`` counts the passes of both solves; ``log["warm_fallback"]`` says it
    happened). A clustered cloud's warm start stalled at 5.8e-6 after 10 000 passes where a
    cold start converges in about 600.
    """
    if g0 is None and omega0 == 1.0 and hessian is None:
        out = _solve_once(points, weights, A, eps, tol, max_iter, None, 1.0, None)
        out[2]["warm_fallback"] = False
        return out
    try:
        out = _solve_once(points, weights, A, eps, tol, max_iter, g0, omega0, hessian)
    except RuntimeError:
        out, spent = None, max_iter
    else:
        spent = out[2]["n_iter"]
        f, g, log = out[:3]
        # potentials far beyond the scores' span (a warm start of +-1e300) hide the scores in
        # their round-off, and the solver's own violation cannot see it: a cold solve instead
        bound = 2.0 * _GAUGE + 4.0 * (log["span"] + float(np.abs(np.log(weights)).max()))
        if log["converged"] and max(np.abs(f).max(), np.abs(g).max()) <= bound:
            log["warm_fallback"] = False
            return out
    out = _solve_once(points, weights, A, eps, tol, max_iter, None, 1.0, None)
    out[2]["n_iter"] += spent
    out[2]["warm_fallback"] = True
    return out


def _solve_once(points, weights, A, eps, tol, max_iter, g0, omega0, hessian):
    """One solve of :func:`_potentials` from the given start (no fallback).

    Callers hold BLAS to one thread (:func:`single_blas`): the solver's products are threaded by
    :mod:`._dense` where large, and too small to gain from BLAS threads otherwise (OpenBLAS threads
    a 200 x 200 matrix-vector product, and its threads' spinning doubled the CPU time of a
    solve); the results then do not depend on BLAS's thread count either."""
    m = points.shape[0]
    g = np.zeros(m) if g0 is None else np.array(g0, dtype=float)
    symmetric = _is_symmetric(A)
    run = _Run(points, weights, A, eps, tol, max_iter, hessian)
    # far from the solution the scalings may overflow: detected and handled (finite checks),
    # so numpy's warnings are not the reader's business
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        g, f = run.solve(g, float(omega0), symmetric)
    if symmetric and run.mode == "symmetric" and run.err <= tol:
        f = g.copy()  # err is the row (= column) violation of the symmetric plan (g, g)
    elif f is None:
        # f is the exact row half-step of g, and err the column violation of that plan (f, g):
        # what is returned, not an iterate of the loop
        f = run.exact_pass(g)
    if symmetric and run.mode != "symmetric" and run.err <= tol:
        # converged by alternation: f = g + c for a constant c (up to tol), and (f + g) / 2 on
        # both sides gives the same plan with the symmetric gauge f = g
        f = g = 0.5 * (f + g)
    log = {
        "n_iter": run.it,
        "err": run.err,
        "converged": run.err <= tol,
        "symmetric": symmetric,
        "omega": run.omega,
        "span": float(run.extent[1] - run.extent[0]),
    }
    return f, g, log, run.hessian


class Sinkhorn(_Bilinear):
    r"""Sinkhorn attention: :math:`\Gamma_\mu(x) = V\,\mathbb E_\pi[y\mid x]` for the entropic
    self-transport plan :math:`\pi` of :math:`\mu` (module docstring).

    .. math::
        \Gamma_\mu(x) = V\,\frac{\int e^{L(x,y)/\varepsilon+g(y)}\,y\,\mathrm d\mu(y)}
                               {\int e^{L(x,y)/\varepsilon+g(y)}\,\mathrm d\mu(y)}

    (the conditional is normalised row by row; with :math:`g=0` this is softmax attention with
    :math:`A/\varepsilon`).

    Warm start: ``self.warm_start`` caches the over-relaxation factor, the LU factors of the
    Newton steps' Hessian, if any, and the supports and column potentials of the last
    ``_HISTORY`` solves, converged or not, the latest last (a dict with keys ``"m"``,
    ``"symmetric"``, ``"omega"``, ``"hessian"``, ``"history"``), used for the next call
    on as many tokens with the same symmetry of A: it starts from the affine combination of
    those potentials whose supports best match its own (a first-order prediction in the
    positions, which across the stages of a Runge-Kutta step halved the sweeps of chapter 1's
    panel), so the steps of a simulation start near their solution; :meth:`reset` forgets it.
    The converged result does not depend on the start (up to ``tol``): a warm solve that does
    not converge within ``max_iter`` passes, or under/overflows, is followed by a cold one
    (a fresh instance's solve, bitwise), and the history is then forgotten. It is the only
    state kept.

    Parameters
    ----------
    A, V : array_like (d, d) or callable
        The code of the paper uses ``A = K.T @ Q`` (no 1/sqrt(k)) and ``eps = 1``.
    eps : float
        Entropic regularisation, > 0.
    tol : float
        Marginal violation (L1) at which the iterations stop, > 0.
    max_iter : int
        Maximum number of passes. ``max_iter=0``: no update, so a cold start gives one row
        normalisation of the kernel, i.e. softmax attention with ``A / eps``.
    strict : bool
        If True (default) a run that does not reach ``tol`` raises ``RuntimeError`` stating the
        achieved violation; if False it warns (``RuntimeWarning``) and returns the last iterate.
    causal : bool
        Must be False: masked Sinkhorn attention is not defined (``ValueError``).

    Notes
    -----
    The full kernel of the tokens of positive weight is stored (8 m² bytes), so at most
    ``max_tokens = 10_000`` such tokens are accepted (``ValueError`` above).

    Examples
    --------
    Both marginals of the plan are the weights; the field is V times its barycentres:

    >>> import numpy as np, tpde_lib as tp
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> sk = tp.Sinkhorn(np.eye(2), np.eye(2))
    >>> P = sk.plan(x)
    >>> bool(np.allclose(P.sum(axis=0), 1 / 3) and np.allclose(P.sum(axis=1), 1 / 3))
    True
    >>> bool(np.allclose(sk.velocity(x), 3 * P @ x))
    True
    """

    #: the solver warm-starts from the potentials of the previous call
    stateful = True

    max_tokens = 10_000

    def __init__(
        self,
        A: MatrixLike,
        V: MatrixLike,
        eps: float = 1.0,
        tol: float = 1e-9,
        max_iter: int = 10_000,
        strict: bool = True,
        causal: bool = False,
    ) -> None:
        if as_flag("causal", causal):
            raise ValueError(
                "causal Sinkhorn attention is not defined (causal=True): the doubly "
                "stochastic normalisation uses every token"
            )
        super().__init__(A, V, causal=False)
        self.eps = as_positive("eps", eps)
        self.tol = as_positive("tol", tol)
        if (
            isinstance(max_iter, (bool, np.bool_))
            or not isinstance(max_iter, (int, np.integer))
            or max_iter < 0
        ):
            raise TypeError(f"max_iter must be a non-negative int, got {max_iter!r}")
        self.max_iter = int(max_iter)
        self.strict = as_flag("strict", strict)
        self.warm_start = None
        self.last_log = None

    def reset(self):
        """Forget the warm-start potentials."""
        self.warm_start = None

    @property
    def last_iterations(self):
        """Number of iterations of the last solve (None before the first)."""
        return None if self.last_log is None else self.last_log["n_iter"]

    @property
    def last_error(self):
        """Marginal violation of the last solve (None before the first)."""
        return None if self.last_log is None else self.last_log["err"]

    def _prepare(self, points, weights, t):
        if points.shape[1] != self.d:
            raise ValueError(
                f"mu has dimension {points.shape[1]} but the Sinkhorn parameters act on dimension d={self.d}"
            )
        keep = weights > 0
        m = int(keep.sum())
        if m > self.max_tokens:
            raise ValueError(
                f"Sinkhorn attention stores the full kernel: at most "
                f"{self.max_tokens} tokens of positive weight (mu has {m})"
            )
        return points[keep], weights[keep], self.A(t), keep

    def _solve(self, Y, w, A, t):
        warm = self.warm_start
        fits = warm is not None and warm["m"] == Y.shape[0] and warm["symmetric"] == _is_symmetric(A)
        _load_linalg(Y.shape[0])
        with single_blas():  # BLAS on one thread for the whole solve (_potentials)
            f, g, log, hessian = _potentials(
                Y,
                w,
                A,
                self.eps,
                self.tol,
                self.max_iter,
                _predicted(warm["history"], Y) if fits else None,
                warm["omega"] if fits else 1.0,
                warm["hessian"] if fits else None,
            )
        self.last_log = log
        # (g is finite: the solver raises otherwise), kept whether or not it converged
        # after a fallback to a cold start the old supports predicted badly: forgotten
        history = warm["history"][-_HISTORY + 1 :] if fits and not log["warm_fallback"] else ()
        self.warm_start = {
            "m": Y.shape[0],
            "symmetric": log["symmetric"],
            "omega": log["omega"],
            "hessian": hessian,
            "history": (*history, (Y.copy(), g.copy())),
        }
        if not log["converged"]:
            msg = (
                f"Sinkhorn did not converge at t={t:g}: marginal violation {log['err']:.3g} > "
                f"tol={self.tol:g} after max_iter={self.max_iter} iterations (the scores / eps "
                f"span {log['span']:.3g}; convergence slows as this span grows: raise "
                f"eps, tol or max_iter)"
            )
            if self.strict:
                raise RuntimeError(msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=4)
        return f, g

    def potentials(self, mu, t=0.0):
        r"""Converged potentials on the support of ``mu``.

        Returns
        -------
        f, g : ndarray, shape (m,)
            Row and column potentials of :math:`\pi_{ij} = w_iw_j e^{f_i+g_j+L_{ij}/\varepsilon}`
            for the m tokens of positive weight (``f = g`` for symmetric A).
        support : ndarray of bool, shape (n,)
        """
        mu, t = as_measure(mu), as_finite("t", t)
        Y, w, A, keep = self._prepare(mu.points, mu.weights, t)
        f, g = self._solve(Y, w, A, t)
        return f, g, keep

    def plan(self, mu, t=0.0):
        r"""The entropic self-transport plan :math:`\pi` on the tokens of ``mu``, shape (n, n).

        Rows and columns of zero-weight tokens are zero; both marginals are the weights up to
        ``tol`` (L1). ``velocity`` is ``V`` times this plan's row-normalised barycentres.
        """
        mu, t = as_measure(mu), as_finite("t", t)
        f, g, keep = self.potentials(mu, t)
        Y, w = mu.points[keep], mu.weights[keep]
        logits = Y @ (self.A(t).T / self.eps) @ Y.T + f[:, None] + g[None, :]
        P = np.zeros((mu.n, mu.n))
        P[np.ix_(keep, keep)] = np.exp(logits) * np.outer(w, w)
        return P

    def field(
        self, points: np.ndarray, weights: np.ndarray, positions: np.ndarray | None, t: float
    ) -> np.ndarray:
        Y, w, A, _ = self._prepare(points, weights, t)
        with held_blas(Y.shape[0] * Y.shape[0]):  # BLAS on one thread for the call
            _, g = self._solve(Y, w, A, t)
            queries = np.hstack([points @ (A.T / self.eps), np.ones((points.shape[0], 1))])
            keys = np.hstack([Y, g[:, None]])
            nd = engine_sums(queries, keys, weighted_values(Y, w), "softmax")
            return normalised(nd, self.V(t))

    def gaussian_rhs(self, mean: ArrayLike, cov: ArrayLike, t: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Sinkhorn Gaussian closure (:func:`tpde_lib.gaussian.sinkhorn_rhs`)."""
        m, c = self.check_gaussian(mean, cov, t)
        return closures.sinkhorn_rhs(self.A(t), self.V(t), self.eps, m, c)

    def batched_closure(self) -> GaussianClosure:
        eps = np.asarray(self.eps)
        return GaussianClosure(
            key=(closures.sinkhorn_rhs,),
            params=lambda t: (self.A(t), self.V(t), eps),
            rhs=closures.sinkhorn_rhs,
            constant=not self.time_dependent,
        )

    def growth_rate(self, t: float = 0.0) -> float:
        r""":math:`\|V\|`: the field is :math:`V` times a conditional expectation of the plan."""
        return _norm(self.V(t))

    def log_lipschitz(self, R: float, t: float = 0.0) -> tuple[float, float]:
        raise NotImplementedError(
            "Lipschitz constants of Sinkhorn attention are not derived here: they need a "
            "W_1-stability estimate of the entropic potentials, which the book does not derive"
        )

    def mobility(self, t: float = 0.0) -> np.ndarray:
        r"""Mobility :math:`P = VA^{-1}` of the entropic self-transport energy
        (:func:`tpde_lib.energy.sinkhorn_energy`); ``A`` symmetric invertible, ``P`` symmetric."""
        return _symmetric_mobility(self.A(t), self.V(t), 1.0)
