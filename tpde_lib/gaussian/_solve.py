r"""Gaussian solutions of the Transformer PDE: ODE solvers, blow-up detection and closed forms.

For the attention variants whose field is affine on Gaussians (softmax, multi-head, ℓ², Sinkhorn,
linear; appendix "Derivations", :eq:`eq-closure`) the solution started from
:math:`\mathcal N(\alpha_0, \Sigma_0)` stays Gaussian, and the mean :math:`\alpha_t` and
covariance :math:`\Sigma_t` solve the ODEs of :mod:`tpde_lib.gaussian`. This module integrates them:

- :func:`simulate_gaussian`: one trajectory, adaptive (``scipy.integrate.solve_ivp``), with a
  terminal event that detects finite-time blow-up and reports its time;
- :func:`simulate_gaussian_batch`: many trajectories at once (a vectorised Dormand–Prince 5(4)
  method with one adaptive step size and one blow-up detection per member);
- the closed forms for softmax with :math:`V = vI` are in :mod:`._closed_forms`, the authors'
  projected Euler scheme in :mod:`tpde_lib.official`.

**Blow-up detection.** Both solvers watch :math:`q = \operatorname{tr}\Sigma` (:math:`|\alpha|^2`
when :math:`\Sigma_0 = 0`: linear attention's mean can blow up on its own). When
:math:`q` has grown by a factor ``1e3`` (and then at each further factor 10) they compute the
remaining-time estimate :math:`\rho = q/\dot q` (the linear extrapolation of :math:`1/q` to 0).
A Riccati blow-up, :math:`q \approx c/(t^* - t)`, gives
:math:`\rho \approx t^* - t`, tiny compared with the elapsed time; exponential or polynomial
growth (ℓ², Sinkhorn: appendix "Derivations", section "Global existence") gives :math:`\rho`
comparable to it. If
:math:`\rho < 10^{-3}\times` (elapsed time) the blow-up time is reported as :math:`t^* = t + \rho`
(the error is second order in :math:`\rho`, below ``1e-6`` relative in tests); otherwise the
integration goes on to the next threshold. Beyond ``max_growth`` (default ``1e8``) times the
initial :math:`q`, the member is stopped whatever the growth law (status ``"growth_limit"``, with
the same extrapolated time as an *estimate*): this bounds the work in the stiff near-blow-ups of
general :math:`V` (a small eigenvalue of :math:`\Sigma` collapses while a large one explodes),
in the spirit of the trace threshold of the authors' code (``tpde_lib.official``). Values are
never NaN or infinite.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_covariance, as_float_array, as_index, as_positive, as_times, checked_result
from ..attention import Attention
from ..integrate import solve_batch
from ..measures import Gaussian
from ._closure import BatchRhs, as_attention_list

_GROWTH_FIRST = 1e3  # q must grow by this factor before the first blow-up test
_GROWTH_NEXT = 10.0  # then the test is repeated each time q grows by this factor
_RICCATI_RATIO = 1e-3  # remaining-time estimate / elapsed time below which q blows up
_MAX_GROWTH = 1e8  # default cap on q / q0 (growth beyond it stops the member)
_ROUNDOFF = 1e-12  # relative level of round-off in eigenvalues
_METHODS = ("RK45", "DOP853", "RK23", "Radau", "BDF", "LSODA")


def _solve_ivp(*args, **kwargs):
    from scipy.integrate import solve_ivp  # about 0.3 s to import: on the first solve only

    return solve_ivp(*args, **kwargs)


@dataclass(frozen=True)
class GaussianTrajectory:
    """Gaussian solution :math:`\\mathcal N(\\alpha_t, \\Sigma_t)` at the requested times.

    Attributes
    ----------
    times : ndarray, shape (T,)
        The requested times that were reached (truncated before a blow-up).
    mean : ndarray, shape (T, d)
        :math:`\\alpha_t`.
    cov : ndarray, shape (T, d, d)
        :math:`\\Sigma_t`, exactly symmetric.
    blowup_time : float or None
        Estimated blow-up time :math:`t^*`, or None if there is none within the window.
    status : str
        ``"ok"`` (reached the last time), ``"blowup"`` (Riccati blow-up detected, accurate
        ``blowup_time``) or ``"growth_limit"`` (:math:`q` exceeded ``max_growth`` times its
        initial value without a Riccati signature: integration stopped, ``blowup_time`` is the
        extrapolation :math:`t + q/q'`, a blow-up *estimate*).

    Examples
    --------
    Softmax with :math:`A = -I/2`, :math:`V = I`: :math:`\\Sigma' = -\\Sigma^2`, so
    :math:`\\Sigma_t = I/(1+t)` from :math:`\\Sigma_0 = I`.

    >>> import numpy as np, tpde_lib as tp
    >>> att = tp.Softmax(-0.5 * np.eye(2), np.eye(2))
    >>> tr = tp.simulate_gaussian(att, tp.Gaussian([0, 0], np.eye(2)), [0.0, 1.0])
    >>> round(float(tr.cov[-1, 0, 0]), 6), tr.blowup_time, tr.status
    (0.5, None, 'ok')
    """

    times: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    blowup_time: float | None
    status: str = "ok"

    def __post_init__(self):
        _check_result(self, batch=False)

    def gaussian(self, k):
        """The Gaussian at the ``k``-th stored time (a :class:`~tpde_lib.measures.Gaussian`).

        Raises ``TypeError`` unless ``k`` is an integer and ``IndexError`` (giving the valid
        range) unless ``-T <= k < T``.
        """
        k = as_index("k", k, self.times.size, what="times in this trajectory")
        return Gaussian(self.mean[k], _psd_clip(self.cov[k]))

    def __len__(self):
        return self.times.size


@dataclass(frozen=True)
class GaussianBatch:
    """A batch of B Gaussian trajectories on common times.

    Attributes
    ----------
    times : ndarray, shape (T,)
    mean : ndarray, shape (B, T, d)
    cov : ndarray, shape (B, T, d, d)
    blowup_time : ndarray, shape (B,)
        Estimated blow-up time per member, ``np.inf`` for "no blow-up within the window".
    valid : ndarray of bool, shape (B, T)
        False at the times from a member's blow-up detection on (a little before t*: at most
        1e-3 of the elapsed time); there the values are frozen at the last finite state
        (never NaN/inf).
    status : ndarray of str, shape (B,)
        Why each member ended: ``"ok"`` (reached the last time), ``"blowup"`` or
        ``"growth_limit"`` (as :attr:`GaussianTrajectory.status`, with ``blowup_time``),
        ``"max_steps"`` (its step budget ran out, typically a stiff member: a small eigenvalue
        of :math:`\\Sigma` collapsing while a large one grows) or ``"step_underflow"`` (its step
        size fell below round-off without a blow-up signature). The other members are not
        affected by one that ends early.
    t_end : ndarray, shape (B,)
        The time each member reached (``times[-1]`` for ``"ok"``; the detection time for a
        blow-up, a little before ``blowup_time``).

    Examples
    --------
    :math:`\\Sigma' = \\mp\\Sigma^2` from :math:`\\Sigma_0 = I` (softmax, :math:`A = \\mp I/2`,
    :math:`V = I`): the first member shrinks as :math:`1/(1+t)`, the second blows up at
    :math:`t^* = 1`; the first finishes all the same.

    >>> import numpy as np, tpde_lib as tp
    >>> atts = [tp.Softmax(-0.5 * np.eye(2), np.eye(2)), tp.Softmax(0.5 * np.eye(2), np.eye(2))]
    >>> gb = tp.simulate_gaussian_batch(atts, np.stack([np.eye(2)] * 2), [0.0, 0.5, 2.0])
    >>> gb.cov[:, 1, 0, 0].round(6).tolist(), gb.blowup_time.round(3).tolist(), gb.status.tolist()
    ([0.666667, 2.0], [inf, 1.0], ['ok', 'blowup'])
    """

    times: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    blowup_time: np.ndarray
    valid: np.ndarray
    status: np.ndarray
    t_end: np.ndarray

    def __post_init__(self):
        _check_result(self, batch=True)

    def gaussian(self, b, k):
        """The Gaussian of member ``b`` at the ``k``-th time.

        Raises ``TypeError`` unless ``b`` and ``k`` are integers and ``IndexError`` (giving the
        valid range) when either is out of range (negative indices count from the end).
        """
        b = as_index("b", b, self.cov.shape[0], what="members in this batch")
        k = as_index("k", k, self.times.size, what="times in this batch")
        return Gaussian(self.mean[b, k], _psd_clip(self.cov[b, k]))


_STATUSES = ("ok", "blowup", "growth_limit")
_BATCH_STATUSES = _STATUSES + ("max_steps", "step_underflow")


def _check_result(res, batch):
    """Validate a result container's fields (shapes, dtypes, statuses)."""
    name = type(res).__name__
    for field in ("times", "mean", "cov"):
        v = getattr(res, field)
        if not isinstance(v, np.ndarray) or v.dtype.kind != "f":
            raise TypeError(f"{name}.{field} must be a float ndarray, got {type(v).__name__}")
    T = res.times.shape[0] if res.times.ndim == 1 else -1
    lead = (res.mean.shape[0],) if batch else ()
    if res.times.ndim != 1 or res.mean.shape[len(lead) : len(lead) + 1] != (T,):
        raise ValueError(
            f"{name}: times (T,) and mean {lead + (T, 'd')} do not match: {res.times.shape}, {res.mean.shape}"
        )
    d = res.mean.shape[-1]
    if res.cov.shape != res.mean.shape + (d,):
        raise ValueError(f"{name}: cov must have shape {res.mean.shape + (d,)}, got {res.cov.shape}")
    allowed = _BATCH_STATUSES if batch else _STATUSES
    statuses = np.atleast_1d(np.asarray(res.status, dtype=object))
    bad = [s for s in statuses if s not in allowed]
    if bad:
        raise ValueError(f"{name}.status must be one of {allowed}, got {bad[0]!r}")


def _psd_clip(S):
    S = 0.5 * (S + S.T)
    lam, U = np.linalg.eigh(S)
    if lam[0] >= 0:
        return S
    return (U * np.clip(lam, 0, None)) @ U.T


def _checked_pair(name, res, d, lead=()):
    """``res`` as ``(dmean, dcov)`` of shapes ``lead + (d,)``, ``lead + (d, d)``, real.

    The results of a variant's ``gaussian_rhs`` (or batched closure) are checked where they
    come back, before any assignment could broadcast them or drop an imaginary part.
    """
    if not isinstance(res, (tuple, list)) or len(res) != 2:
        raise TypeError(f"{name} must return a pair (dmean, dcov), got {type(res).__name__}")
    dmean = checked_result(name, res[0], lead + (d,), part="the mean derivative", finite=False)
    dcov = checked_result(name, res[1], lead + (d, d), part="the covariance derivative", finite=False)
    return dmean, dcov


def _evaluator(rhs):
    """``(t, mean (b, d), cov (b, d, d), idx) -> (dmean, dcov)`` for the batch ``rhs``, with the
    members' results checked (:func:`_checked_pair`), and the name of what is called. Variants
    without a batched closure are called member by member through their ``gaussian_rhs``; a
    ``LinAlgError`` there (a singular stage state) gives a NaN derivative, so the step is
    rejected."""
    d = rhs.d
    if not rhs.generic:
        name = f"{rhs.atts[0].name}.batched_closure().rhs"

        def batched(t, mean, cov, idx):
            return _checked_pair(name, rhs(t, mean, cov, idx), d, (idx.size,))

        return batched, name

    def loop(t, mean, cov, idx):
        tt = np.broadcast_to(np.asarray(t, dtype=float), idx.shape)
        dm, dc = np.full_like(mean, np.nan), np.full_like(cov, np.nan)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for i, (b, tb) in enumerate(zip(idx, tt)):
                att = rhs.atts[b if len(rhs.atts) > 1 else 0]
                try:
                    res = att.gaussian_rhs(mean[i], cov[i], float(tb))
                except np.linalg.LinAlgError:
                    continue
                dm[i], dc[i] = _checked_pair(f"{att.name}.gaussian_rhs", res, d)
        return dm, dc

    return loop, f"{rhs.atts[0].name}.gaussian_rhs"


def _not_finite_at_start(name, t0, member=""):
    return ValueError(
        f"{name} returned non-finite values (NaN or inf) at the initial state"
        f"{member}, t={t0:g}: expected finite derivatives (an overflow of its "
        "formula with these parameters, or a NaN it produces)"
    )


def _as_max_step(max_step):
    """``max_step``: a finite positive float or ``np.inf`` (NaN, 0, negatives rejected)."""
    if isinstance(max_step, (float, np.floating)) and max_step == np.inf:
        return np.inf
    return as_positive("max_step", max_step)


def _as_max_steps(max_steps):
    if (
        isinstance(max_steps, (bool, np.bool_))
        or not isinstance(max_steps, (int, np.integer))
        or max_steps < 1
    ):
        raise TypeError(f"max_steps must be a positive int, got {max_steps!r}")
    return int(max_steps)


def _growth(mean, cov, dmean, dcov, use_mean):
    """q = tr Sigma (|alpha|^2 where ``use_mean``, i.e. Sigma0 = 0) and dq/dt (batched)."""
    q = np.where(use_mean, (mean * mean).sum(-1), np.trace(cov, axis1=-2, axis2=-1))
    dq = np.where(use_mean, 2 * (mean * dmean).sum(-1), np.trace(dcov, axis1=-2, axis2=-1))
    return q, dq


def _is_blowup(q, dq, t, t0, q_cap):
    """Blow-up test at a threshold crossing.

    Returns (riccati, capped, t_star): Riccati signature (remaining-time estimate q/q' small
    compared with the elapsed time), growth beyond the cap, and the estimate t + q/q'.
    """
    rho = np.where(dq > 0, q / np.where(dq > 0, dq, 1.0), np.inf)
    riccati = rho < _RICCATI_RATIO * (t - t0)
    capped = ~riccati & (q >= q_cap)
    return riccati, capped, t + np.where(np.isfinite(rho), rho, 0.0)


def simulate_gaussian(
    att: Attention,
    g0: Gaussian,
    times: ArrayLike,
    rtol: float = 1e-9,
    atol: float = 1e-12,
    method: str = "DOP853",
    max_step: float = np.inf,
    max_growth: float = _MAX_GROWTH,
    max_steps: int = 10_000,
) -> GaussianTrajectory:
    r"""Integrate the mean/covariance ODE of ``att`` from ``g0`` (appendix "Derivations", :eq:`eq-closure`).

    Solves :math:`\alpha' = b + M\alpha`, :math:`\Sigma' = M\Sigma + \Sigma M^\top` (the
    variant's right-hand side, :mod:`tpde_lib.gaussian`) with ``scipy.integrate.solve_ivp``
    on the state :math:`(\alpha, \Sigma)`; the right-hand side is exactly symmetric, so
    :math:`\Sigma` stays exactly symmetric. Time-dependent parameters are evaluated at each
    time. Blow-up is detected as described in the module docstring.

    Parameters
    ----------
    att : Attention
        A variant with a Gaussian closure (Softmax, MultiHead, L2, Sinkhorn, Linear, or a
        reader's variant that defines ``gaussian_rhs``). Variants without one (Sigmoid,
        Unnormalised, causal, a subclass that changed the field) raise ``NotImplementedError``.
    g0 : Gaussian
        The initial Gaussian, at time ``times[0]``.
    times : array_like, shape (T,)
        Strictly increasing output times; ``times[0]`` is the initial time.
    rtol, atol : float
        Tolerances of ``solve_ivp``.
    method : {"DOP853", "RK45", "RK23", "Radau", "BDF", "LSODA"}
        Default DOP853: at ``rtol=1e-9`` it takes ~3x fewer right-hand side evaluations than
        RK45 (benchmarks/gaussian.py).
    max_step : float
        Largest step of ``solve_ivp``: finite and > 0, or ``np.inf`` (NaN is rejected).
    max_growth : float
        Integration stops (``status="growth_limit"``) when :math:`q = \operatorname{tr}\Sigma`
        (module docstring) exceeds ``max_growth`` times its initial value without a Riccati signature
        (e.g. exponential growth of ℓ²/Sinkhorn, or the stiff near-blow-ups of general
        :math:`V`); raise it to follow exponential growth further.
    max_steps : int
        Cap on the work: at most ``20 * max_steps`` right-hand side evaluations
        (``RuntimeError`` beyond, saying so).

    Returns
    -------
    GaussianTrajectory
        With ``times`` truncated to those reached before the blow-up detection (all
        ``< blowup_time``; the detection happens within 1e-3 of the elapsed time before ``t*``).

    Raises
    ------
    TypeError, ValueError
        Bad ``g0``, ``times``, tolerances, method, ``max_step``, ``max_steps``, a dimension
        mismatch; the variant's ``gaussian_rhs`` (or batched closure) returning something other
        than real arrays of shapes (d,) and (d, d), or non-finite values at the initial state
        (the message names it and what was expected).
    NotImplementedError
        ``att`` does not preserve Gaussians.
    RuntimeError
        The integrator failed (message from ``solve_ivp``; it names ``gaussian_rhs`` and the
        time when the variant returned non-finite values at finite states), or more than
        ``max_steps`` steps.

    Examples
    --------
    Softmax with :math:`A = V = I` from :math:`\mathcal N(0, I)`: :math:`\Sigma_t =
    (1 - 2t)^{-1} I` blows up at :math:`t^* = 1/2`.

    >>> import numpy as np, tpde_lib as tp
    >>> att = tp.Softmax(np.eye(2), np.eye(2))
    >>> traj = tp.simulate_gaussian(att, tp.Gaussian(np.zeros(2), np.eye(2)), [0.0, 0.25, 1.0])
    >>> traj.status, round(traj.blowup_time, 6), traj.times.tolist()
    ('blowup', 0.5, [0.0, 0.25])
    >>> np.allclose(traj.cov[1], 2 * np.eye(2), rtol=1e-8)
    True
    """
    if not isinstance(g0, Gaussian):
        raise TypeError(f"g0 must be a tpde_lib Gaussian, got {type(g0).__name__}")
    times = as_times("times", times)
    rtol, atol = as_positive("rtol", rtol), as_positive("atol", atol)
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    max_step = _as_max_step(max_step)
    max_steps = _as_max_steps(max_steps)
    max_growth = as_positive("max_growth", max_growth)
    d = g0.d
    rhs = BatchRhs([att])
    if rhs.d != d:
        raise ValueError(f"g0 has dimension {d} but att acts on dimension d={rhs.d}")
    idx0 = np.zeros(1, dtype=int)
    evaluate, name = _evaluator(rhs)
    if rhs.const:  # cheap path: parameters evaluated once, no validation inside the integrator
        vals = rhs.values(0.0, idx0)
        fn = rhs.rhs_fn

        def f(t, y):
            with np.errstate(over="ignore", invalid="ignore"):
                if not np.isfinite(y).all():
                    return np.full_like(y, np.nan)
                dm, dc = _checked_pair(name, fn(*vals, y[:d], y[d:].reshape(d, d)), d)
            return np.concatenate([dm, dc.ravel()])
    else:

        def f(t, y):
            if not np.isfinite(y).all():
                return np.full_like(y, np.nan)
            dm, dc = evaluate(t, y[None, :d], y[None, d:].reshape(1, d, d), idx0)
            return np.concatenate([dm[0], dc[0].ravel()])

    budget = [20 * max_steps]
    reached = [float(times[0])]  # the last time at which the state was finite
    bad_at = []  # times where a finite state gave a non-finite derivative
    f_plain = f

    def f(t, y):
        budget[0] -= 1
        if budget[0] < 0:
            raise RuntimeError(
                f"simulate_gaussian: more than max_steps={max_steps} steps "
                f"(t = {t:g}); raise max_steps, or loosen rtol/atol"
            )
        out = f_plain(t, y)
        if np.isfinite(out).all():
            reached[0] = max(reached[0], float(t))
        elif np.isfinite(y).all():
            bad_at.append(float(t))
        return out

    y0 = np.concatenate([g0.mean, g0.cov.ravel()])
    # surfaces shape and NotImplementedError problems before integrating
    if not np.isfinite(f(times[0], y0)).all():
        raise _not_finite_at_start(name, times[0])
    use_mean = bool(np.trace(g0.cov) == 0)
    q0 = float(g0.mean @ g0.mean if use_mean else np.trace(g0.cov))
    threshold = _GROWTH_FIRST * q0 if q0 > 0 else np.inf
    q_cap = max_growth * q0 if q0 > 0 else np.inf
    status = "ok"

    out = [y0[None]]
    t_out = [times[:1]]
    t_start, y_start = times[0], y0
    remaining = times[1:]
    blowup = None
    while remaining.size:
        thr = threshold

        def event(t, y, thr=thr):
            q = y[:d] @ y[:d] if use_mean else np.trace(y[d:].reshape(d, d))
            return q / thr - 1.0

        event.terminal, event.direction = True, 1.0
        sol = _solve_ivp(
            f,
            (t_start, remaining[-1]),
            y_start,
            method=method,
            t_eval=remaining,
            rtol=rtol,
            atol=atol,
            events=event,
            max_step=max_step,
        )
        if sol.status == -1:
            # the step size collapsed: a blow-up faster than the solver can follow is reported
            # as one (remaining-time estimate q/q' below 1e-9 of the window), anything else raises
            t_fail = float(sol.t[-1]) if len(sol.t) else float(t_start)
            y_fail = np.asarray(sol.y)[:, -1] if len(sol.t) else y_start
            dy = f_plain(t_fail, y_fail)
            q, dq = _growth(y_fail[:d], y_fail[d:].reshape(d, d), dy[:d], dy[d:].reshape(d, d), use_mean)
            rho = float(q / dq) if dq > 0 else np.inf
            if rho < 1e-9 * max(times[-1] - times[0], 1e-300):
                if len(sol.t):
                    out.append(np.asarray(sol.y).T)
                    t_out.append(np.asarray(sol.t))
                blowup, status = t_fail + rho, "blowup"
                break
            why = (
                f"{name} returned non-finite values at finite states from t={bad_at[0]:g}"
                if bad_at
                else "the state overflows there"
            )
            raise RuntimeError(
                f"simulate_gaussian: integration failed near t={reached[0]:g} "
                f"({why}: {sol.message}); max_growth watches tr Sigma only, "
                "not the mean"
            )
        if len(sol.t):
            out.append(np.asarray(sol.y).T)
            t_out.append(np.asarray(sol.t))
        if sol.status == 0:
            break
        t_e, y_e = float(sol.t_events[0][0]), sol.y_events[0][0]
        dy = f(t_e, y_e)
        q, dq = _growth(y_e[:d], y_e[d:].reshape(d, d), dy[:d], dy[d:].reshape(d, d), use_mean)
        riccati, capped, t_star = _is_blowup(q, dq, t_e, times[0], q_cap)
        if riccati or capped:
            blowup = float(t_star)
            status = "blowup" if riccati else "growth_limit"
            break
        threshold = _GROWTH_NEXT * float(q)
        t_start, y_start = t_e, y_e
        remaining = remaining[remaining > t_e]
    Y = np.concatenate(out)
    tt = np.concatenate(t_out)
    cov = Y[:, d:].reshape(-1, d, d)
    cov = 0.5 * (cov + np.swapaxes(cov, -1, -2))
    return GaussianTrajectory(tt, Y[:, :d].copy(), cov, blowup, status)


# --------------------------------------------------------------------------------------------
# A batch of trajectories: the generic batched Dormand-Prince integrator + a blow-up rule
# --------------------------------------------------------------------------------------------
class _BlowupRule:
    """``stop`` callback of :func:`tpde_lib.integrate.solve_batch`: the module's blow-up test."""

    def __init__(self, d, q0, use_mean, t0, max_growth):
        self.d, self.use_mean, self.t0 = d, use_mean, t0
        self.thr = np.where(q0 > 0, _GROWTH_FIRST * q0, np.inf)
        self.q_cap = np.where(q0 > 0, max_growth * q0, np.inf)
        self.blowup = np.full(q0.shape, np.inf)
        self.status = np.full(q0.shape, "ok", dtype=object)

    def __call__(self, idx, t, y, dy):
        d = self.d
        q, dq = _growth(
            y[:, :d], y[:, d:].reshape(-1, d, d), dy[:, :d], dy[:, d:].reshape(-1, d, d), self.use_mean[idx]
        )
        halt = np.zeros(idx.size, dtype=bool)
        cross = q >= self.thr[idx]
        if cross.any():
            bc = idx[cross]
            ric, cap, t_star = _is_blowup(q[cross], dq[cross], t[cross], self.t0, self.q_cap[bc])
            stop = ric | cap
            self.blowup[bc[stop]] = t_star[stop]
            self.status[bc[ric]] = "blowup"
            self.status[bc[cap]] = "growth_limit"
            self.thr[bc[~stop]] = _GROWTH_NEXT * q[cross][~stop]
            halt[np.flatnonzero(cross)[stop]] = True
        return halt


def simulate_gaussian_batch(
    att: Attention | Sequence[Attention],
    cov0: ArrayLike,
    times: ArrayLike,
    mean0: ArrayLike | None = None,
    rtol: float = 1e-9,
    atol: float = 1e-12,
    max_growth: float = _MAX_GROWTH,
    max_steps: int = 200_000,
) -> GaussianBatch:
    r"""Integrate B Gaussian trajectories at once.

    Uses :func:`tpde_lib.integrate.solve_batch` (Dormand–Prince 5(4) vectorised over the batch):
    every member has its own adaptive step size, its own step budget, its own blow-up
    detection (module docstring), and lands exactly on each requested time. A member that
    cannot go on (budget spent, step size underflow) ends with its status and time
    (:attr:`GaussianBatch.status`, :attr:`GaussianBatch.t_end`; a ``RuntimeWarning`` lists
    such members) while the others finish: one stiff member does not sink the ensemble.
    Slowly converging members (:math:`\Sigma_t - \Sigma_\infty = O(1/t)`) take steps
    proportional to ``t``, so long windows (``t ~ 1e3``) cost a few hundred steps.
    Constant parameters are stacked once; time-dependent ones are evaluated per member.

    Parameters
    ----------
    att : Attention or sequence of B Attentions
        One attention shared by the batch, or one per member (same variant and dimension;
        multi-head: the same heads).
    cov0 : array_like, shape (B, d, d)
        Initial covariances (symmetric PSD).
    times : array_like, shape (T,)
        Strictly increasing output times; ``times[0]`` is the initial time.
    mean0 : array_like, shape (d,) or (B, d), optional
        Initial means (default 0).
    rtol, atol : float
        Tolerances.
    max_growth : float
        Growth cap per member, as in :func:`simulate_gaussian`.
    max_steps : int
        Step budget of each member (accepted and rejected steps); a member that spends it ends
        with status ``"max_steps"``.

    Returns
    -------
    GaussianBatch
        Values at the times a member did not reach are frozen at its last state (finite) and
        marked False in ``valid``.

    Raises
    ------
    TypeError, ValueError
        Bad shapes, non-PSD covariances, dimension mismatch, bad tolerances or caps; a
        variant's ``gaussian_rhs`` (or batched closure) returning something other than real
        arrays of shapes (d,) and (d, d), or non-finite values at the initial state (the
        message names it, the member and what was expected).
    NotImplementedError
        The variant does not preserve Gaussians.

    Examples
    --------
    Two members from :math:`\mathcal N(0, I)`: softmax with :math:`V = I` and :math:`A = -I`
    (:math:`\Sigma_t = I/(1 + 2t)`) and :math:`A = I` (blow-up at :math:`t^* = 1/2`).

    >>> import numpy as np, tpde_lib as tp
    >>> atts = [tp.Softmax(-np.eye(2), np.eye(2)), tp.Softmax(np.eye(2), np.eye(2))]
    >>> gb = tp.simulate_gaussian_batch(atts, np.stack([np.eye(2)] * 2), [0.0, 0.25, 1.0])
    >>> gb.status.tolist(), gb.valid.tolist()
    (['ok', 'blowup'], [[True, True, True], [True, True, False]])
    >>> np.round(gb.blowup_time, 6).tolist()
    [inf, 0.5]
    >>> np.allclose(gb.cov[0, -1], np.eye(2) / 3, rtol=1e-8)
    True
    """
    atts = as_attention_list(att)
    cov0 = as_float_array("cov0", cov0, ndim=3)
    B, d = cov0.shape[0], cov0.shape[-1]
    if cov0.shape[1] != d or B == 0 or d == 0:
        raise ValueError(f"cov0 must have shape (B, d, d) with B, d >= 1, got {cov0.shape}")
    cov0 = np.stack([as_covariance(f"cov0[{b}]", c) for b, c in enumerate(cov0)])
    if len(atts) not in (1, B):
        raise ValueError(f"att: got {len(atts)} attentions for a batch of B={B} covariances")
    for a in atts:
        if a.d != d:
            raise ValueError(f"cov0 has dimension {d} but att acts on dimension d={a.d}")
    if mean0 is None:
        mean0 = np.zeros((B, d))
    else:
        mean0 = as_float_array("mean0", mean0)
        if mean0.shape == (d,):
            mean0 = np.broadcast_to(mean0, (B, d)).copy()
        elif mean0.shape != (B, d):
            raise ValueError(f"mean0 must have shape ({d},) or ({B}, {d}), got {mean0.shape}")
    times = as_times("times", times)
    rtol, atol = as_positive("rtol", rtol), as_positive("atol", atol)
    max_growth = as_positive("max_growth", max_growth)
    max_steps = _as_max_steps(max_steps)
    rhs = BatchRhs(atts)
    evaluate, name = _evaluator(rhs)

    def f(t, y, idx):
        m, S = y[:, :d], y[:, d:].reshape(-1, d, d)
        fin = np.isfinite(y).all(1)
        if fin.all():
            dm, dc = evaluate(t, m, S, idx)
        else:
            dm, dc = np.full_like(m, np.nan), np.full_like(S, np.nan)
            if fin.any():
                dm[fin], dc[fin] = evaluate(t[fin], m[fin], S[fin], idx[fin])
        return np.concatenate([dm, dc.reshape(-1, d * d)], axis=1)

    use_mean = np.trace(cov0, axis1=1, axis2=2) == 0
    q0, _ = _growth(mean0, cov0, mean0, cov0, use_mean)
    rule = _BlowupRule(d, q0, use_mean, times[0], max_growth)
    y0 = np.concatenate([mean0, cov0.reshape(B, d * d)], axis=1)
    k0 = f(np.full(B, times[0]), y0, np.arange(B))
    if not np.isfinite(k0).all():
        b = int(np.argmax(~np.isfinite(k0).all(axis=1)))
        raise _not_finite_at_start(name, times[0], f" of member {b}")
    sol = solve_batch(f, y0, times, rtol=rtol, atol=atol, max_steps=max_steps, stop=rule)
    status, blowup = rule.status.copy(), rule.blowup.copy()
    window = max(times[-1] - times[0], 1e-300)
    for b in np.flatnonzero(sol.status == "step_underflow"):
        # as in simulate_gaussian: a blow-up faster than the solver can follow (remaining-time
        # estimate q/q' below 1e-9 of the window) is one; anything else keeps its status
        yb = sol.y[b, -1]  # the last state reached (frozen there)
        dy = f(sol.t_end[b : b + 1], yb[None], np.array([b]))[0]
        q, dq = _growth(yb[:d], yb[d:].reshape(d, d), dy[:d], dy[d:].reshape(d, d), use_mean[b])
        rho = q / dq if dq > 0 else np.inf
        if rho < 1e-9 * window:
            status[b], blowup[b] = "blowup", sol.t_end[b] + rho
        else:
            status[b] = "step_underflow"
    status[sol.status == "max_steps"] = "max_steps"
    short = np.flatnonzero(np.isin(status, ("max_steps", "step_underflow")))
    if short.size:
        first = ", ".join(f"{b} ({status[b]}, t={sol.t_end[b]:.6g})" for b in short[:5])
        warnings.warn(
            f"simulate_gaussian_batch: {short.size} of {B} members ended before "
            f"t={times[-1]:g} without a blow-up: {first}"
            f"{', ...' if short.size > 5 else ''}. Their later values are invalid "
            "(see .status, .t_end, .valid); raise max_steps, or solve them with "
            "simulate_gaussian and a stiff method (method='LSODA' or 'Radau').",
            RuntimeWarning,
            stacklevel=2,
        )
    cov = sol.y[:, :, d:].reshape(B, times.size, d, d)
    cov = 0.5 * (cov + np.swapaxes(cov, -1, -2))
    return GaussianBatch(
        times, sol.y[:, :, :d].copy(), cov, blowup, sol.valid, status.astype(str), sol.t_end.copy()
    )
