r"""Gaussian dynamics of a Transformer layer: softmax attention plus an affine feed-forward.

With the feed-forward field :math:`F(x) = Wx + b` the Gaussian closure is the attention's plus
:math:`(W\alpha + b, W\Sigma + \Sigma W^\top)` (appendix "Derivations", :eq:`eq-affine-ff-closure`).
For :math:`V = vI` and :math:`W = wI` the covariance solves
:math:`\Sigma' = v\,\Sigma(A + A^\top)\Sigma + 2w\Sigma`, which the precision linearises
(:eq:`eq-layer-closed-form`): closed form, blow-up time and equilibrium. With a time-varying
:math:`W(t)` the layer can steer the covariance: :func:`steer_covariance` computes a
piecewise-constant :math:`W` that reaches a target covariance of the same rank.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import as_count, as_covariance, as_finite, as_float_array, as_positive, as_seed, as_square
from .._linalg import numerical_rank
from ._closed_forms import _ROUNDOFF, _unwhiten, _whitened


class _OverBudget(Exception):
    """Raised inside :func:`steer_covariance`'s ODE solves when ``max_evals`` is spent."""


def _gain(w, t):
    """g(t) = (1 - e^{-2wt}) / (2w), and t at w = 0 (computed without cancellation)."""
    return t if w == 0 else -np.expm1(-2.0 * w * t) / (2.0 * w)


def layer_blowup_time(cov0: ArrayLike, A: ArrayLike, w: float, v: float = 1.0) -> float:
    r"""Blow-up time of softmax attention with :math:`V = vI` plus the feed-forward :math:`W = wI`.

    With :math:`p_i` the eigenvalues of :math:`v\,\Sigma_0^{1/2}(A+A^\top)\Sigma_0^{1/2}` and
    :math:`p = \max_i p_i` (:eq:`eq-layer-blowup`),

    .. math::
        t^* = \frac{1}{2w}\log\Big(1 + \frac{2w}{p}\Big) \quad\text{if } p > \max(0, -2w),
        \qquad t^* = \infty \text{ otherwise}

    (:math:`t^* = 1/p` at :math:`w = 0`, the attention's own blow-up time).

    Parameters
    ----------
    cov0 : array_like, shape (d, d)
        Initial covariance (positive semi-definite).
    A : array_like, shape (d, d)
    w : float
        The feed-forward's scale: :math:`W = wI` expands (:math:`w > 0`) or contracts.
    v : float
        The value matrix :math:`V = vI`.

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> I = np.eye(2)
    >>> round(tp.gaussian.layer_blowup_time(I, I, 0.0), 6)          # 1/p, p = 2
    0.5
    >>> round(tp.gaussian.layer_blowup_time(I, I, 1.0), 6)          # log(2)/2
    0.346574
    >>> tp.gaussian.layer_blowup_time(I, I, -1.5)                   # p < -2w: none
    inf
    """
    cov0 = as_covariance("cov0", cov0)
    A = as_square("A", A, cov0.shape[0])
    w, v = as_finite("w", w), as_finite("v", v)
    _, p, _ = _whitened(cov0, A)
    with np.errstate(over="ignore"):
        p = v * p
    top = float(p.max())
    if top == np.inf:
        # v p beyond float64 (v = 1e300, A = 1e300 I): t* <= 1/p underflows, the blow-up is
        # immediate to float64 precision (never "no blow-up")
        return 0.0
    if top <= max(0.0, -2.0 * w) + _ROUNDOFF * max(1.0, float(np.abs(p[np.isfinite(p)]).max(initial=0.0))):
        return float("inf")
    return 1.0 / top if w == 0 else float(np.log1p(2.0 * w / top) / (2.0 * w))


def layer_closed_form(
    cov0: ArrayLike, A: ArrayLike, w: float, times: ArrayLike, v: float = 1.0
) -> NDArray[np.float64]:
    r"""Exact covariance of softmax attention with :math:`V = vI` plus the feed-forward :math:`W = wI`.

    The precision solves the linear ODE :math:`P' = -v(A+A^\top) - 2wP`, hence
    (:eq:`eq-layer-closed-form`)

    .. math::
        \Sigma_t = R\,U\operatorname{diag}\Big(\frac{1}{e^{-2wt} - p_i\,g(t)}\Big)U^\top R,
        \qquad g(t) = \frac{1 - e^{-2wt}}{2w},

    with :math:`R = \Sigma_0^{1/2}` and :math:`vR(A+A^\top)R = U\operatorname{diag}(p)U^\top`:
    no inverse, valid for singular :math:`\Sigma_0` (its rank is kept).

    Parameters
    ----------
    cov0 : array_like, shape (d, d)
    A : array_like, shape (d, d)
    w : float
    times : array_like, shape (T,)
        Times from 0, all before the blow-up time.
    v : float

    Returns
    -------
    ndarray, shape (T, d, d)

    Raises
    ------
    ValueError
        A time at or after the blow-up time (named in the message).

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> S = tp.gaussian.layer_closed_form(np.eye(2), -np.eye(2), 1.0, [0.0, 50.0])
    >>> np.round(S[-1], 6)            # the equilibrium -2w (A + A^T)^{-1} = I
    array([[1., 0.],
           [0., 1.]])
    """
    cov0 = as_covariance("cov0", cov0)
    A = as_square("A", A, cov0.shape[0])
    w, v = as_finite("w", w), as_finite("v", v)
    times = as_float_array("times", times, ndim=1)
    if np.any(times < 0):
        raise ValueError(f"times must be >= 0 (measured from the initial time), got min {times.min():g}")
    R, p, U = _whitened(cov0, A)
    p = v * p
    if w < 0 and -2.0 * w * float(times.max()) > 700.0:
        # e^{-2wt} overflows (w = -400): numerator and denominator times e^{2wt}, i.e.
        # 1 / (e^{-2wt} - p g) = e^{2wt} / (1 - p expm1(2wt) / (2w)), same sign, no overflow
        grow = np.exp(2.0 * w * times)[:, None]
        denom = 1.0 - p[None, :] * (np.expm1(2.0 * w * times) / (2.0 * w))[:, None]
        scale = grow
    else:
        denom = np.exp(-2.0 * w * times)[:, None] - p[None, :] * _gain(w, times)[:, None]
        scale = None
    if not np.all(np.isfinite(denom)):
        raise ValueError(
            f"layer_closed_form: the covariance exceeds float64 range at these times (w={w:g}, v={v:g})"
        )
    if np.any(denom <= 0):
        raise ValueError(
            f"times reach the blow-up time t* = {layer_blowup_time(cov0, A, w, v):.6g}"
            f" (largest time {times.max():.6g})"
        )
    return _unwhiten(R, U, 1.0 / denom if scale is None else scale / denom)


def layer_equilibrium(A: ArrayLike, w: float, v: float = 1.0) -> NDArray[np.float64]:
    r"""The positive-definite equilibrium :math:`\Sigma^* = -2w\,(v(A+A^\top))^{-1}` of the layer.

    It exists when :math:`w\,v(A+A^\top) \prec 0`, and attracts every :math:`\Sigma_0 \succ 0`
    when moreover :math:`w > 0` (:eq:`eq-layer-equilibrium`).

    Parameters
    ----------
    A : array_like, shape (d, d)
    w, v : float

    Returns
    -------
    ndarray, shape (d, d)

    Raises
    ------
    ValueError
        When :math:`-2w\,(v(A+A^\top))^{-1}` is not positive definite (no such equilibrium).

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> tp.gaussian.layer_equilibrium(-np.eye(2), 0.5)
    array([[0.5, 0. ],
           [0. , 0.5]])
    """
    A = as_float_array("A", A, ndim=2)
    A = as_square("A", A, A.shape[0])
    w, v = as_finite("w", w), as_finite("v", v)
    lam_s, U = np.linalg.eigh(v * (A + A.T))
    lam = -w * lam_s  # the eigenvalues of -w v (A + A^T)
    if not lam.min() > _ROUNDOFF * max(1.0, float(np.abs(lam).max())):
        raise ValueError(
            "no positive-definite equilibrium: -w v (A + A^T) must be positive definite "
            f"(its eigenvalues are {np.round(np.sort(lam), 6).tolist()})"
        )
    out = (U * (-2.0 * w / lam_s)) @ U.T
    return 0.5 * (out + out.T)


def steer_covariance(
    attention,
    cov0: ArrayLike,
    target: ArrayLike,
    T: float,
    pieces: int = 4,
    mean0: ArrayLike | None = None,
    tol: float = 1e-7,
    seed: int = 0,
    max_evals: int = 500_000,
) -> NDArray[np.float64]:
    r"""A piecewise-constant feed-forward :math:`W(t)` that steers the covariance to ``target``.

    Finds matrices :math:`W_1, \dots, W_K` (:math:`K` = ``pieces``), :math:`W(t) = W_k` on the
    :math:`k`-th of :math:`K` equal intervals of :math:`[0, T]`, such that the Gaussian closure of
    ``attention`` plus the feed-forward :math:`F(t, x) = W(t)x` moves :math:`\Sigma_0` to
    :math:`\Sigma_T =` ``target`` (the mean moves freely). It solves the :math:`d(d+1)/2`
    equations :math:`\Sigma_T(W) = ` ``target`` by least squares (scipy's
    ``least_squares``, trust region), each interval integrated on its own by the closure's
    ODE (scipy's DOP853, rtol ``1e-11``), with a small penalty on :math:`\|W\|` that picks a
    moderate control among the many that reach the target. The target must have the rank of
    :math:`\Sigma_0` (:eq:`eq-rank-invariance`: no control changes the rank).

    Parameters
    ----------
    attention : Attention
        A variant with a Gaussian closure (``batched_closure``).
    cov0, target : array_like, shape (d, d)
        Positive semi-definite, of the same rank.
    T : float
        Final time, > 0.
    pieces : int
        Number of constant pieces of :math:`W`.
    mean0 : array_like, shape (d,), optional
        Initial mean (default zero); it matters only for closures whose covariance equation
        depends on the mean (linear attention).
    tol : float
        Largest accepted entry of :math:`|\Sigma_T - \text{target}|`, relative to
        :math:`\max|\text{target}|`.
    seed : int
        Seed of the random start of the least-squares iteration (``np.random.default_rng``).
    max_evals : int
        Budget of evaluations of the closure's right-hand side over the whole search (the
        work of the ODE solves): past it the search stops with ``ValueError`` (a stiff
        target such as ``1e6 * I`` otherwise ran for minutes). The chapter's four pieces in
        d = 2 use about 100 000.

    Returns
    -------
    ndarray, shape (pieces, d, d)
        The matrices :math:`W_k`.

    Raises
    ------
    ValueError
        Ranks differ, or the iteration did not reach ``tol`` (the residual is in the message).

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> att = tp.Softmax(-np.eye(2), np.eye(2))
    >>> target = np.array([[2.0, 0.5], [0.5, 1.0]])
    >>> Ws = tp.gaussian.steer_covariance(att, np.eye(2), target, T=1.0, pieces=2)
    >>> Ws.shape
    (2, 2, 2)
    """
    from scipy.integrate import solve_ivp
    from scipy.optimize import least_squares

    cov0 = as_covariance("cov0", cov0)
    d = cov0.shape[0]
    target = as_covariance("target", target)
    if target.shape != (d, d):
        raise ValueError(f"target must have shape ({d}, {d}) like cov0, got {target.shape}")
    T = as_positive("T", T)
    pieces = as_count("pieces", pieces)
    tol = as_positive("tol", tol)
    seed = as_seed("seed", seed)
    max_evals = as_count("max_evals", max_evals)
    try:
        closure = attention.batched_closure()
    except (AttributeError, NotImplementedError) as err:
        raise TypeError(
            f"attention must have a Gaussian closure (batched_closure), got {type(attention).__name__}"
        ) from err
    mean0 = np.zeros(d) if mean0 is None else as_float_array("mean0", mean0, shape=(d,))

    r0, r1 = (int(numerical_rank(S, tol=1e-10, relative=True)) for S in (cov0, target))
    if r0 != r1:
        raise ValueError(
            f"target has rank {r1}, cov0 rank {r0}: the rank of the covariance "
            "is invariant (Sigma_t = Phi_t Sigma_0 Phi_t^T), no control changes it"
        )
    iu = np.triu_indices(d)
    scale = float(np.abs(target).max())
    edges = np.linspace(0.0, T, pieces + 1)

    def final(Ws):
        state = np.concatenate([mean0, cov0.ravel()])
        for k in range(pieces):
            W = Ws[k]

            def rhs(t, y, W=W):
                evals[0] += 1
                if evals[0] > max_evals:
                    raise _OverBudget
                m, c = y[:d], y[d:].reshape(d, d)
                dm, dc = closure.rhs(*closure.params(t), m, c)
                WS = W @ c
                return np.concatenate([dm + W @ m, (dc + WS + WS.T).ravel()])

            sol = solve_ivp(rhs, (edges[k], edges[k + 1]), state, method="DOP853", rtol=1e-11, atol=1e-13)
            if not sol.success or not np.all(np.isfinite(sol.y[:, -1])):
                return None
            state = sol.y[:, -1]
        return state[d:].reshape(d, d)

    penalty = 1e-4

    def residual(x):
        Ws = x.reshape(pieces, d, d)
        S = final(Ws)
        miss = np.full(iu[0].size, 1e3) if S is None else (S - target)[iu] / scale
        return np.concatenate([miss, penalty * x])

    rng = np.random.default_rng(seed)
    x0 = 0.1 * rng.standard_normal(pieces * d * d)
    evals = [0]
    try:
        fit = least_squares(residual, x0, method="trf", xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=400)
        # polish without the penalty: the equations alone, from the penalised solution
        fit = least_squares(lambda x: residual(x)[: iu[0].size], fit.x, method="trf", xtol=1e-15, ftol=1e-15)
        Ws = fit.x.reshape(pieces, d, d)
        S = final(Ws)
    except _OverBudget:
        raise ValueError(
            f"steer_covariance did not reach the target within max_evals={max_evals} evaluations "
            "of the closure (raise max_evals, T or pieces, or a target closer to cov0)"
        ) from None
    miss = np.inf if S is None else float(np.abs(S - target).max() / scale)
    if not miss <= tol:
        raise ValueError(
            f"steer_covariance did not reach the target: relative residual {miss:.3g} > tol {tol:g}"
        )
    return Ws
