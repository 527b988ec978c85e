r"""Gaussian solutions of the Transformer PDE: ODE solvers, blow-up detection and closed forms.

For the attention variants whose field is affine on Gaussians (softmax, multi-head, ℓ², Sinkhorn,
linear; paper notes §5) the solution started from :math:`\mathcal N(\alpha_0, \Sigma_0)` stays
Gaussian, and the mean :math:`\alpha_t` and covariance :math:`\Sigma_t` solve the ODEs of
:mod:`tpde_lib.gaussian_odes`. This module integrates them:

- :func:`simulate_gaussian`: one trajectory, adaptive (``scipy.integrate.solve_ivp``), with a
  terminal event that detects finite-time blow-up and reports its time;
- :func:`simulate_gaussian_batch`: many trajectories at once (a vectorised Dormand–Prince 5(4)
  method with one adaptive step size and one blow-up detection per member);
- :func:`projected_euler`: the authors' published projected explicit Euler scheme (§7.2), batched;
- closed forms for softmax with :math:`V = vI` (§6.3 R2, R3).

**Blow-up detection.** Both solvers watch :math:`q = \operatorname{tr}\Sigma` (:math:`|\alpha|^2`
when :math:`\Sigma_0 = 0`: linear attention's mean can blow up on its own). When
:math:`q` has grown by a factor ``1e3`` (and then at each further factor 10) they compute the
remaining-time estimate :math:`\rho = q/\dot q` (the linear extrapolation of :math:`1/q` to 0).
A Riccati blow-up, :math:`q \approx c/(t^* - t)`, gives
:math:`\rho \approx t^* - t`, tiny compared with the elapsed time; exponential or polynomial
growth (ℓ², Sinkhorn, paper notes §6.3 R6) gives :math:`\rho` comparable to it. If
:math:`\rho < 10^{-3}\times` (elapsed time) the blow-up time is reported as :math:`t^* = t + \rho`
(the error is second order in :math:`\rho`, below ``1e-6`` relative in tests); otherwise the
integration goes on to the next threshold. Beyond ``max_growth`` (default ``1e8``) times the
initial :math:`q`, the member is stopped whatever the growth law (status ``"growth_limit"``, with
the same extrapolated time as an *estimate*): this bounds the work in the stiff near-blow-ups of
general :math:`V` (a small eigenvalue of :math:`\Sigma` collapses while a large one explodes),
in the spirit of the authors' trace threshold (§7.2). Values are never NaN or infinite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.integrate import RK45, solve_ivp

from . import gaussian_odes as _odes
from ._checks import as_covariance, as_finite, as_float_array, as_positive, as_square, as_times
from ._linalg import psd_sqrt
from .measures import Gaussian

__all__ = [
    "GaussianTrajectory",
    "GaussianBatch",
    "ProjectedEulerResult",
    "simulate_gaussian",
    "simulate_gaussian_batch",
    "covariance_rhs",
    "projected_euler",
    "softmax_identity_V_closed_form",
    "softmax_blowup_time",
    "softmax_limit_cov",
    "scalar_closed_form",
]

_GROWTH_FIRST = 1e3  # q must grow by this factor before the first blow-up test
_GROWTH_NEXT = 10.0  # then the test is repeated each time q grows by this factor
_RICCATI_RATIO = 1e-3  # remaining-time estimate / elapsed time below which q blows up
_MAX_GROWTH = 1e8  # default cap on q / q0 (growth beyond it stops the member)
_ROUNDOFF = 1e-12  # relative level of round-off in eigenvalues
_METHODS = ("RK45", "DOP853", "RK23", "Radau", "BDF", "LSODA")


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------
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
    """

    times: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    blowup_time: float | None
    status: str = "ok"

    def gaussian(self, k):
        """The Gaussian at the ``k``-th stored time (a :class:`~tpde_lib.measures.Gaussian`)."""
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
        ``"ok"``, ``"blowup"`` or ``"growth_limit"``, as :attr:`GaussianTrajectory.status`.
    """

    times: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    blowup_time: np.ndarray
    valid: np.ndarray
    status: np.ndarray = None

    def gaussian(self, b, k):
        """The Gaussian of member ``b`` at the ``k``-th time."""
        return Gaussian(self.mean[b, k], _psd_clip(self.cov[b, k]))


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


def _psd_clip(S):
    S = 0.5 * (S + S.T)
    lam, U = np.linalg.eigh(S)
    if lam[0] >= 0:
        return S
    return (U * np.clip(lam, 0, None)) @ U.T


# --------------------------------------------------------------------------------------------
# From an attention to a vectorised right-hand side
# --------------------------------------------------------------------------------------------
def _getter(p):
    """(is_constant, t -> array) for a Param, a callable or a constant."""
    if callable(p):
        return bool(getattr(p, "is_constant", False)), p
    val = np.asarray(p, dtype=float)
    return True, lambda t: val


def _stack_getter(getters):
    const = all(c for c, _ in getters)
    return const, lambda t: np.stack([np.asarray(g(t), dtype=float) for _, g in getters])


def _raise_not_gaussian(att, d):
    name = getattr(att, "name", type(att).__name__)
    if not hasattr(att, "gaussian_rhs"):
        raise TypeError(f"att must be an attention with a gaussian_rhs method, got "
                        f"{type(att).__name__}")
    att.gaussian_rhs(np.zeros(d), np.eye(d), 0.0)  # propagates the variant's error
    raise NotImplementedError(f"{name} attention does not preserve Gaussians")


def _spec(att):
    """Describe ``att`` as (kind, getters, fn) with ``fn(*values, mean, cov)`` batched.

    ``kind`` identifies the variant (members of a batch must share it). Unknown attention types
    that implement ``gaussian_rhs`` get kind ``("generic", type)`` and no getters.
    """
    from . import attention as at  # lazy: attention.py imports gaussian_odes, not this module

    d = getattr(att, "d", None)
    if getattr(att, "causal", False):
        _raise_not_gaussian(att, d)
    t = type(att)
    if t is at.Softmax:
        return ("softmax",), [_getter(att.A), _getter(att.V)], _odes.softmax_rhs
    if t is at.Linear:
        return ("linear",), [_getter(att.A), _getter(att.V)], _odes.linear_rhs
    if t is at.MultiHead:
        heads = list(att.heads)
        if any(type(h) is not at.Softmax for h in heads):
            return ("generic", t), [], None
        gA = _stack_getter([_getter(h.A) for h in heads])
        gV = _stack_getter([_getter(h.V) for h in heads])

        def fn(As, Vs, mean, cov):
            return _odes.multihead_rhs(np.moveaxis(As, -3, 0), np.moveaxis(Vs, -3, 0), mean, cov)

        return ("multihead", len(heads)), [gA, gV], fn
    if t is at.L2:
        return (("l2",), [_getter(att.Q), _getter(att.K), _getter(att.V), _getter(att.tau)],
                _odes.l2_rhs)
    if t is at.Sinkhorn:
        return ("sinkhorn",), [_getter(att.A), _getter(att.V), _getter(att.eps)], _odes.sinkhorn_rhs
    if t in (at.Sigmoid, at.Unnormalised):
        _raise_not_gaussian(att, d)
    if not hasattr(att, "gaussian_rhs"):
        raise TypeError(f"att must be an attention with a gaussian_rhs method, got {t.__name__}")
    return ("generic", t), [], None


class _BatchRhs:
    """Vectorised ``(t, mean (B, d), cov (B, d, d), idx) -> (dmean, dcov)`` for B attentions.

    Constant parameters are stacked once (and re-indexed only when the active set ``idx``
    changes); time-dependent ones are evaluated at each member's own time.
    """

    def __init__(self, atts):
        specs = [_spec(a) for a in atts]
        kinds = {s[0] for s in specs}
        if len(kinds) != 1:
            raise ValueError("att: all attentions of a batch must be of the same variant (and, "
                             f"for multi-head, the same number of heads), got {sorted(map(str, kinds))}")
        self.atts = list(atts)
        self.kind = specs[0][0]
        self.fn = specs[0][2]
        self.generic = self.kind[0] == "generic"
        self.getters = list(zip(*[s[1] for s in specs])) if not self.generic else []
        self.const = all(c for g in self.getters for c, _ in g)
        self._stacked = None
        self._idx_key = None
        self._sub = None
        if self.const and not self.generic:
            self._stacked = [np.stack([np.asarray(f(0.0), dtype=float) for _, f in g])
                             for g in self.getters]
            # a single attention shared by the batch: broadcast instead of indexing
            self._shared = len(atts) == 1

    def values(self, t, idx):
        if self.const:
            if self._shared:
                return [v[0] for v in self._stacked]
            key = (idx.size, idx[0] if idx.size else -1, idx[-1] if idx.size else -1,
                   hash(idx.tobytes()))
            if key != self._idx_key:
                self._idx_key, self._sub = key, [v[idx] for v in self._stacked]
            return self._sub
        tt = np.broadcast_to(np.asarray(t, dtype=float), idx.shape)
        members = idx if len(self.atts) > 1 else np.zeros_like(idx)
        return [np.stack([np.asarray(g[b][1](float(tb)), dtype=float)
                          for b, tb in zip(members, tt)]) for g in self.getters]

    def __call__(self, t, mean, cov, idx):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if self.generic:
                return self._loop(t, mean, cov, idx)
            try:
                return self.fn(*self.values(t, idx), mean, cov)
            except np.linalg.LinAlgError:
                return self._loop(t, mean, cov, idx)

    def _loop(self, t, mean, cov, idx):
        """Member by member (generic variants, or a failed batched linear solve)."""
        tt = np.broadcast_to(np.asarray(t, dtype=float), idx.shape)
        dm, dc = np.full_like(mean, np.nan), np.full_like(cov, np.nan)
        for i, (b, tb) in enumerate(zip(idx, tt)):
            att = self.atts[b if len(self.atts) > 1 else 0]
            try:
                dm[i], dc[i] = att.gaussian_rhs(mean[i], cov[i], float(tb))
            except (np.linalg.LinAlgError, ValueError):
                pass  # non-finite stage state: NaN derivative, the step is rejected
        return dm, dc


def covariance_rhs(att):
    r"""The covariance right-hand side :math:`\Sigma \mapsto \Sigma'` of an attention, batched.

    The mean is set to 0 (softmax, multi-head, ℓ² and Sinkhorn covariance ODEs do not involve
    the mean; for linear attention this is the :math:`\alpha = 0` case). Parameters are evaluated
    at ``t = 0``. Meant for :func:`projected_euler`.

    Parameters
    ----------
    att : attention or sequence of B attentions of the same variant

    Returns
    -------
    callable
        ``rhs(S)`` with ``S`` of shape (B, d, d) (or (d, d) for one attention), returning the
        same shape. With a sequence, member ``b`` of ``S`` uses ``att[b]``.
    """
    atts = _as_att_list(att)
    f = _BatchRhs(atts)

    def rhs(S):
        S = np.asarray(S, dtype=float)
        single = S.ndim == 2
        Sb = S[None] if single else S
        idx = np.arange(Sb.shape[0])
        out = f(0.0, np.zeros(Sb.shape[:-1]), Sb, idx)[1]
        return out[0] if single else out

    return rhs


def _as_att_list(att):
    if isinstance(att, (list, tuple)):
        if len(att) == 0:
            raise ValueError("att must be an attention or a non-empty sequence of attentions")
        return list(att)
    return [att]


def _att_dim(att):
    d = getattr(att, "d", None)
    return None if d is None else int(d)


# --------------------------------------------------------------------------------------------
# Blow-up test shared by both solvers
# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
# One trajectory
# --------------------------------------------------------------------------------------------
def simulate_gaussian(att, g0, times, rtol=1e-9, atol=1e-12, method="DOP853", max_step=np.inf,
                      max_growth=_MAX_GROWTH):
    r"""Integrate the mean/covariance ODE of ``att`` from ``g0`` (paper notes §5).

    Solves :math:`\alpha' = b + M\alpha`, :math:`\Sigma' = M\Sigma + \Sigma M^\top` (the
    variant's right-hand side, :mod:`tpde_lib.gaussian_odes`) with ``scipy.integrate.solve_ivp``
    on the state :math:`(\alpha, \Sigma)`; the right-hand side is exactly symmetric, so
    :math:`\Sigma` stays exactly symmetric. Time-dependent parameters are evaluated at each
    time. Blow-up is detected as described in the module docstring.

    Parameters
    ----------
    att : Softmax, MultiHead, L2, Sinkhorn or Linear
        Variants that do not preserve Gaussians (Sigmoid, Unnormalised, causal) raise the
        variant's ``NotImplementedError``.
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
        Largest step of ``solve_ivp``.
    max_growth : float
        Integration stops (``status="growth_limit"``) when :math:`q = \operatorname{tr}\Sigma`
        (module docstring) exceeds ``max_growth`` times its initial value without a Riccati signature
        (e.g. exponential growth of ℓ²/Sinkhorn, or the stiff near-blow-ups of general
        :math:`V`); raise it to follow exponential growth further.

    Returns
    -------
    GaussianTrajectory
        With ``times`` truncated to those reached before the blow-up detection (all
        ``< blowup_time``; the detection happens within 1e-3 of the elapsed time before ``t*``).

    Raises
    ------
    TypeError, ValueError
        Bad ``g0``, ``times``, tolerances, method, or a dimension mismatch.
    NotImplementedError
        ``att`` does not preserve Gaussians.
    RuntimeError
        The integrator failed (message from ``solve_ivp``).
    """
    if not isinstance(g0, Gaussian):
        raise TypeError(f"g0 must be a tpde_lib Gaussian, got {type(g0).__name__}")
    times = as_times("times", times)
    rtol, atol = as_positive("rtol", rtol), as_positive("atol", atol)
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    d = g0.d
    da = _att_dim(att)
    if da is not None and da != d:
        raise ValueError(f"g0 has dimension {d} but att acts on dimension d={da}")
    rhs = _BatchRhs([att])
    idx0 = np.zeros(1, dtype=int)
    const = rhs.const and not rhs.generic
    if const:  # cheap path: parameters evaluated once, no validation inside the integrator
        vals = rhs.values(0.0, idx0)
        fn = rhs.fn

        def f(t, y):
            with np.errstate(over="ignore", invalid="ignore"):
                if not np.isfinite(y).all():
                    return np.full_like(y, np.nan)
                dm, dc = fn(*vals, y[:d], y[d:].reshape(d, d))
            return np.concatenate([dm, dc.ravel()])
    else:
        def f(t, y):
            if not np.isfinite(y).all():
                return np.full_like(y, np.nan)
            dm, dc = rhs(t, y[None, :d], y[None, d:].reshape(1, d, d), idx0)
            return np.concatenate([dm[0], dc[0].ravel()])

    y0 = np.concatenate([g0.mean, g0.cov.ravel()])
    f(times[0], y0)  # surfaces shape and NotImplementedError problems before integrating
    use_mean = bool(np.trace(g0.cov) == 0)
    q0 = float(g0.mean @ g0.mean if use_mean else np.trace(g0.cov))
    threshold = _GROWTH_FIRST * q0 if q0 > 0 else np.inf
    max_growth = as_positive("max_growth", max_growth)
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
        sol = solve_ivp(f, (t_start, remaining[-1]), y_start, method=method, t_eval=remaining,
                        rtol=rtol, atol=atol, events=event, max_step=max_step)
        if sol.status == -1:
            raise RuntimeError(f"simulate_gaussian: integration failed at t={sol.t[-1]:g}: "
                               f"{sol.message}")
        if len(sol.t):
            out.append(np.asarray(sol.y).T)
            t_out.append(np.asarray(sol.t))
        if sol.status == 0:
            break
        t_e, y_e = float(sol.t_events[0][0]), sol.y_events[0][0]
        dy = f(t_e, y_e)
        q, dq = _growth(y_e[:d], y_e[d:].reshape(d, d), dy[:d], dy[d:].reshape(d, d),
                        use_mean)
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
# A batch of trajectories: vectorised Dormand-Prince 5(4), one step size per member
# --------------------------------------------------------------------------------------------
_DP_A, _DP_B, _DP_C, _DP_E = RK45.A, RK45.B, RK45.C, RK45.E  # scipy's Dormand-Prince tableau
_SAFETY, _MIN_FACTOR, _MAX_FACTOR = 0.9, 0.2, 10.0


def simulate_gaussian_batch(att, cov0, times, mean0=None, rtol=1e-9, atol=1e-12,
                            max_growth=_MAX_GROWTH, max_steps=200_000):
    r"""Integrate B Gaussian trajectories at once (paper notes §5, §6).

    A vectorised Dormand–Prince 5(4) method (the tableau of ``scipy.integrate.RK45``): every
    member has its own adaptive step size (error control in the RMS norm with ``rtol``,
    ``atol``, as ``solve_ivp``), its own blow-up detection (module docstring), and lands exactly
    on each requested time. Slowly converging members (:math:`\Sigma_t - \Sigma_\infty = O(1/t)`)
    take steps proportional to ``t``, so long windows (``t ~ 1e3``) cost a few hundred steps.
    Constant parameters are stacked once; time-dependent ones are evaluated per member.

    Parameters
    ----------
    att : attention or sequence of B attentions
        One attention shared by the batch, or one per member (same variant and dimension;
        multi-head: same number of heads).
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
        Cap on the number of iterations (``RuntimeError`` beyond it).

    Returns
    -------
    GaussianBatch

    Raises
    ------
    TypeError, ValueError
        Bad shapes, non-PSD covariances, mixed variants, dimension mismatch.
    NotImplementedError
        The variant does not preserve Gaussians.
    RuntimeError
        The step size of some member underflowed, or ``max_steps`` was exceeded.
    """
    atts = _as_att_list(att)
    cov0 = as_float_array("cov0", cov0, ndim=3)
    B, d = cov0.shape[0], cov0.shape[-1]
    if cov0.shape[1] != d or B == 0:
        raise ValueError(f"cov0 must have shape (B, d, d) with B >= 1, got {cov0.shape}")
    cov0 = np.stack([as_covariance(f"cov0[{b}]", c) for b, c in enumerate(cov0)])
    if len(atts) not in (1, B):
        raise ValueError(f"att: got {len(atts)} attentions for a batch of B={B} covariances")
    for a in atts:
        da = _att_dim(a)
        if da is not None and da != d:
            raise ValueError(f"cov0 has dimension {d} but att acts on dimension d={da}")
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
    rhs = _BatchRhs(atts)
    n = d + d * d
    T = times.size

    def f(t, y, idx):
        m, S = y[:, :d], y[:, d:].reshape(-1, d, d)
        fin = np.isfinite(y).all(1)
        if fin.all():
            dm, dc = rhs(t, m, S, idx)
        else:
            dm, dc = np.full_like(m, np.nan), np.full_like(S, np.nan)
            if fin.any():
                tt = t[fin] if np.ndim(t) else t
                dm[fin], dc[fin] = rhs(tt, m[fin], S[fin], idx[fin])
        return np.concatenate([dm, dc.reshape(-1, d * d)], axis=1)

    y = np.concatenate([mean0, cov0.reshape(B, d * d)], axis=1)
    out = np.empty((B, T, n))
    out[:, 0] = y
    valid = np.ones((B, T), dtype=bool)
    blowup = np.full(B, np.inf)
    t = np.full(B, times[0])
    nxt = np.ones(B, dtype=int)
    all_idx = np.arange(B)
    k1 = f(t, y, all_idx)
    use_mean = np.trace(cov0, axis1=1, axis2=2) == 0
    q0, _ = _growth(mean0, cov0, mean0, cov0, use_mean)
    thr = np.where(q0 > 0, _GROWTH_FIRST * q0, np.inf)
    q_cap = np.where(q0 > 0, as_positive("max_growth", max_growth) * q0, np.inf)
    status = np.full(B, "ok", dtype=object)
    # initial step (Hairer-Norsett-Wanner heuristic, first part)
    scale = atol + rtol * np.abs(y)
    d0 = np.sqrt(np.mean((y / scale) ** 2, axis=1))
    d1 = np.sqrt(np.mean((k1 / scale) ** 2, axis=1))
    span = times[-1] - times[0]
    h = np.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6 * span, 0.01 * d0 / np.maximum(d1, 1e-300))
    h = np.minimum(h, span)
    active = nxt < T
    A_, B_, C_, E_ = _DP_A, _DP_B, _DP_C, _DP_E
    steps = 0
    while active.any():
        steps += 1
        if steps > max_steps:
            raise RuntimeError(f"simulate_gaussian_batch: more than max_steps={max_steps} steps")
        idx = np.flatnonzero(active)
        yi, ti, ki = y[idx], t[idx], k1[idx]
        target = times[nxt[idx]]
        h_prop = h[idx]
        gap = target - ti
        land = h_prop >= gap * (1 - 1e-12)
        hi = np.where(land, gap, h_prop)
        K = np.empty((7,) + yi.shape)
        K[0] = ki
        for s in range(1, 6):
            dy = np.tensordot(A_[s, :s], K[:s], axes=(0, 0)) * hi[:, None]
            K[s] = f(ti + C_[s] * hi, yi + dy, idx)
        with np.errstate(over="ignore", invalid="ignore"):
            y_new = yi + hi[:, None] * np.tensordot(B_, K[:6], axes=(0, 0))
            t_new = np.where(land, target, ti + hi)
            K[6] = f(t_new, y_new, idx)
            err = hi[:, None] * np.tensordot(E_, K, axes=(0, 0))
            sc = atol + rtol * np.maximum(np.abs(yi), np.abs(y_new))
            err_norm = np.sqrt(np.mean((err / sc) ** 2, axis=1))
        ok = np.isfinite(err_norm) & np.isfinite(y_new).all(1) & np.isfinite(K[6]).all(1)
        accept = ok & (err_norm <= 1.0)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            fac = np.where(err_norm == 0, _MAX_FACTOR,
                           _SAFETY * err_norm ** (-1.0 / (RK45.error_estimator_order + 1)))
        fac = np.where(ok, fac, _MIN_FACTOR)
        fac = np.where(accept, np.clip(fac, _MIN_FACTOR, _MAX_FACTOR),
                       np.clip(fac, _MIN_FACTOR, 1.0))
        h_next = hi * fac
        h_next = np.where(accept & land, np.maximum(h_next, h_prop), h_next)
        if np.any(h_next < 1e-14 * np.maximum(1.0, np.abs(ti))):
            b = idx[np.argmax(h_next < 1e-14 * np.maximum(1.0, np.abs(ti)))]
            raise RuntimeError(f"simulate_gaussian_batch: step size underflow for member {b} at "
                               f"t={t[b]:g}")
        h[idx] = h_next
        acc = idx[accept]
        if acc.size:
            ya, ka = y_new[accept], K[6][accept]
            y[acc], k1[acc], t[acc] = ya, ka, t_new[accept]
            landed_now = land[accept]
            landed = acc[landed_now]
            out[landed, nxt[landed]] = y[landed]
            nxt[landed] += 1
            # blow-up test for members whose q crossed their threshold
            m, S = ya[:, :d], ya[:, d:].reshape(-1, d, d)
            q, dq = _growth(m, S, ka[:, :d], ka[:, d:].reshape(-1, d, d), use_mean[acc])
            cross = q >= thr[acc]
            if cross.any():
                bc = acc[cross]
                ric, cap, t_star = _is_blowup(q[cross], dq[cross], t[bc], times[0], q_cap[bc])
                for b, r_b, c_b, ts, qb, ld in zip(bc, ric, cap, t_star, q[cross],
                                                   landed_now[cross]):
                    if r_b or c_b:
                        blowup[b] = ts
                        status[b] = "blowup" if r_b else "growth_limit"
                        # a time landed on in this step lies past the threshold crossing: invalid
                        first = nxt[b] - 1 if ld else nxt[b]
                        out[b, first:] = y[b]
                        valid[b, first:] = False
                        nxt[b] = T
                    else:
                        thr[b] = _GROWTH_NEXT * qb
        active = nxt < T
    cov = out[:, :, d:].reshape(B, T, d, d)
    cov = 0.5 * (cov + np.swapaxes(cov, -1, -2))
    return GaussianBatch(times, out[:, :, :d].copy(), cov, blowup, valid, status.astype(str))


# --------------------------------------------------------------------------------------------
# The authors' projected Euler scheme
# --------------------------------------------------------------------------------------------
def _psd_projection_verbatim(S, floor=1e-14):
    """eigh; eigenvalues < 0 replaced by ``floor`` (the authors' ``psd_projection``), batched."""
    lam, U = np.linalg.eigh(S)
    lam = np.where(lam < 0, floor, lam)
    return (U * lam[..., None, :]) @ np.swapaxes(U, -1, -2)


def projected_euler(rhs, cov0, h, tol_low=1e-5, tol_high=1e3, max_iter=50000, record_every=1):
    r"""The authors' projected explicit Euler scheme for the covariance ODE (paper notes §7.2).

    Per iteration, verbatim from the official code (``utils.evolution``), for every member still
    running: record :math:`S`; :math:`r = \mathrm{rhs}(S)`; :math:`S \leftarrow S + h r`;
    :math:`S \leftarrow` ``psd_projection`` :math:`(S)` (``eigh``, eigenvalues :math:`< 0` set
    to :math:`10^{-14}`); then stop with ``"converged"`` if :math:`\|r\|_F <` ``tol_low``
    (the rhs *before* the step), else ``"diverged"`` if :math:`\operatorname{tr}S >` ``tol_high``
    (*after* the step); ``"max_iter"`` after ``max_iter`` iterations. Members stop independently
    (frozen afterwards). Use :func:`covariance_rhs` to get ``rhs`` from an attention.

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
    for name, v in (("max_iter", max_iter), ("record_every", record_every)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
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


# --------------------------------------------------------------------------------------------
# Closed forms (softmax, V = v I; paper notes §6.3 R2, R3)
# --------------------------------------------------------------------------------------------
def _whitened(cov0, A):
    """R = Sigma0^{1/2} and P = R (A + A^T) R with its eigen-decomposition (batched)."""
    R = psd_sqrt(cov0)
    P = R @ (A + np.swapaxes(A, -1, -2)) @ R
    p, U = np.linalg.eigh(0.5 * (P + np.swapaxes(P, -1, -2)))
    return R, p, U


def _check_cov_A(cov0, A):
    cov0 = as_float_array("cov0", cov0)
    if cov0.ndim < 2 or cov0.shape[-1] != cov0.shape[-2]:
        raise ValueError(f"cov0 must have shape (..., d, d), got {cov0.shape}")
    flat = cov0.reshape(-1, *cov0.shape[-2:])
    cov0 = np.stack([as_covariance("cov0", c) for c in flat]).reshape(cov0.shape)
    d = cov0.shape[-1]
    A = as_float_array("A", A)
    if A.ndim < 2 or A.shape[-2:] != (d, d):
        raise ValueError(f"A must have shape (..., {d}, {d}) to match cov0, got {A.shape}")
    return cov0, A


def softmax_blowup_time(cov0, A, v=1.0):
    r"""Blow-up time of softmax attention with :math:`V = vI` (paper notes §6.3 R2).

    .. math::
        t^* = \frac{1}{\max_i v\,p_i},\qquad p_i \text{ the eigenvalues of }
        \Sigma_0^{1/2}(A+A^\top)\Sigma_0^{1/2},

    and :math:`t^* = \infty` when no :math:`v p_i` is positive (a rate below ``1e-12`` times
    :math:`\max_i |v p_i|` is round-off of a zero eigenvalue and counts as zero). For
    :math:`v > 0` this is :math:`1/(v\lambda_{\max})`.

    Parameters
    ----------
    cov0 : array_like, shape (..., d, d)
    A : array_like, shape (..., d, d)
        Broadcast against ``cov0``.
    v : float
        Scalar value matrix :math:`V = vI` (any sign).

    Returns
    -------
    float or ndarray of shape (...)
    """
    cov0, A = _check_cov_A(cov0, A)
    v = as_finite("v", v)
    _, p, _ = _whitened(cov0, A)
    rate = (v * p).max(axis=-1)
    # a rate at round-off level of the spectrum is a zero eigenvalue (e.g. rank-deficient A+A^T)
    pos = rate > _ROUNDOFF * np.abs(v * p).max(axis=-1)
    out = np.where(pos, 1.0 / np.where(pos, rate, 1.0), np.inf)
    return float(out) if out.ndim == 0 else out


def softmax_identity_V_closed_form(cov0, A, times, v=1.0):
    r"""Exact covariance of softmax attention with :math:`V = vI` (paper notes §6.3 R2).

    :math:`(\Sigma^{-1})' = -v(A+A^\top)`, so :math:`\Sigma_t = (\Sigma_0^{-1} - vt(A+A^\top))^{-1}`.
    Evaluated in the stable form

    .. math::
        \Sigma_t = R\,U\operatorname{diag}\big(1/(1 - vt\,p_i)\big)U^\top R,\qquad
        R = \Sigma_0^{1/2},\quad R(A+A^\top)R = U\operatorname{diag}(p)U^\top,

    which needs no inverse and also holds for singular :math:`\Sigma_0` (rank is preserved).

    Parameters
    ----------
    cov0 : array_like, shape (d, d)
    A : array_like, shape (d, d)
    times : array_like, shape (T,)
        Times measured from the initial time 0; all must be before the blow-up time.
    v : float

    Returns
    -------
    ndarray, shape (T, d, d)

    Raises
    ------
    ValueError
        Some time is at or after the blow-up time :math:`t^*` (named in the message).
    """
    cov0 = as_covariance("cov0", cov0)
    A = as_square("A", A, cov0.shape[0])
    times = as_float_array("times", times, ndim=1)
    v = as_finite("v", v)
    R, p, U = _whitened(cov0, A)
    denom = 1.0 - v * times[:, None] * p[None, :]
    if np.any(denom <= 0):
        raise ValueError(f"times reach the blow-up time t* = {softmax_blowup_time(cov0, A, v):.6g}"
                         f" (largest time {times.max():.6g})")
    RU = R @ U
    out = (RU[None] / denom[:, None, :]) @ RU.T[None]
    return 0.5 * (out + np.swapaxes(out, -1, -2))


def softmax_limit_cov(cov0, A, rank_tol=1e-10):
    r"""Limit :math:`\Sigma_\infty` of softmax attention with :math:`V = I` and :math:`A+A^\top \preceq 0`.

    (Paper notes §6.3 R2.) With :math:`-(A+A^\top) = UU^\top`,
    :math:`\Sigma_\infty = \Sigma_0 - \Sigma_0U(U^\top\Sigma_0U)^{-1}U^\top\Sigma_0`
    (Woodbury on :math:`\Sigma_t = (\Sigma_0^{-1} + tUU^\top)^{-1}`). Computed in the equivalent,
    inverse-free form :math:`\Sigma_\infty = R\,\Pi\,R`, where :math:`R = \Sigma_0^{1/2}` and
    :math:`\Pi` is the orthogonal projector onto the kernel of :math:`P = -R(A+A^\top)R`
    (the limit of :math:`R(I + tP)^{-1}R`); this also holds for singular :math:`\Sigma_0`.
    Eigenvalues of :math:`P` below ``rank_tol * max(1, max eig P)`` count as zero.

    Parameters
    ----------
    cov0 : array_like, shape (..., d, d)
    A : array_like, shape (..., d, d)
    rank_tol : float
        Relative rank tolerance for :math:`P`.

    Returns
    -------
    ndarray, shape (..., d, d)
        Of rank :math:`d - \operatorname{rank}(A+A^\top)` when :math:`\Sigma_0 \succ 0`.

    Raises
    ------
    ValueError
        :math:`A + A^\top` has a positive eigenvalue (beyond ``rank_tol``): no limit (blow-up).
    """
    cov0, A = _check_cov_A(cov0, A)
    rank_tol = as_positive("rank_tol", rank_tol)
    Ssym = A + np.swapaxes(A, -1, -2)
    ev = np.linalg.eigvalsh(Ssym)
    if np.any(ev[..., -1] > rank_tol * np.maximum(1.0, np.abs(ev).max(axis=-1))):
        raise ValueError("softmax_limit_cov needs A + A^T negative semi-definite; its largest "
                         f"eigenvalue is {ev[..., -1].max():.3g} > 0 (the covariance blows up)")
    R, p, U = _whitened(cov0, A)
    P_eig = -p  # eigenvalues of P = -R (A + A^T) R, ascending order reversed
    keep = P_eig <= rank_tol * np.maximum(1.0, P_eig.max(axis=-1, keepdims=True))
    Uk = U * keep[..., None, :]
    out = R @ Uk @ np.swapaxes(Uk, -1, -2) @ R
    return 0.5 * (out + np.swapaxes(out, -1, -2))


def scalar_closed_form(sigma0, a, v, times):
    r"""One-dimensional softmax variance :math:`\sigma_t = \sigma_0/(1 - 2va\sigma_0 t)` (§6.3 R3).

    Parameters
    ----------
    sigma0 : float
        Initial variance, >= 0.
    a, v : float
        Scalar score and value.
    times : array_like, shape (T,)
        Times from 0, before the blow-up time :math:`1/(2va\sigma_0)` when :math:`va > 0`.

    Returns
    -------
    ndarray, shape (T,)

    Raises
    ------
    ValueError
        Negative ``sigma0``, or a time at or after the blow-up time.
    """
    sigma0 = float(sigma0)
    if not np.isfinite(sigma0) or sigma0 < 0:
        raise ValueError(f"sigma0 must be a finite variance >= 0, got {sigma0!r}")
    times = as_float_array("times", times, ndim=1)
    a, v = as_finite("a", a), as_finite("v", v)
    denom = 1.0 - 2.0 * v * a * sigma0 * times
    if np.any(denom <= 0):
        raise ValueError(f"times reach the blow-up time t* = {1 / (2 * v * a * sigma0):.6g}")
    return sigma0 / denom
