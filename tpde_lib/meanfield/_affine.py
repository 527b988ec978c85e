r"""The exact characteristic flow of a Gaussian solution whose field is affine.

If :math:`\Gamma_{\mu_t}(x) = M(t)x + b(t)` on the Gaussian solution, the tokens move by
:math:`x_t = \Phi_t x_0 + c_t` (:func:`gaussian_affine_flow`, returning an :class:`AffineFlow`):
the mean-field limit of a sample, exactly, to compare particle systems with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.integrate import solve_ivp

from .._checks import as_float_array, as_index, as_positive, as_times, checked_result
from ..measures import Gaussian


@dataclass(frozen=True)
class AffineFlow:
    r"""The characteristic flow :math:`x \mapsto \Phi_t x + c_t` of a Gaussian solution.

    Attributes
    ----------
    times : ndarray, shape (T,)
    Phi : ndarray, shape (T, d, d)
        :math:`\Phi_t`, with :math:`\Phi_{t_0} = I`.
    c : ndarray, shape (T, d)
        :math:`c_t`, with :math:`c_{t_0} = 0`.
    mean : ndarray, shape (T, d)
        The mean :math:`\alpha_t` of the solution.
    cov : ndarray, shape (T, d, d)
        Its covariance :math:`\Sigma_t` (exactly symmetric).
    """

    times: np.ndarray
    Phi: np.ndarray
    c: np.ndarray
    mean: np.ndarray
    cov: np.ndarray

    def apply(self, points, k=-1):
        r"""Push ``points`` (shape (n, d)) from the initial time to ``times[k]``: :math:`\Phi x + c`.

        ``k`` is an integer index into ``times`` (``IndexError`` giving the range otherwise).
        """
        k = as_index("k", k, self.times.size, what="times in this flow")
        x = as_float_array("points", points, ndim=2)
        if x.shape[1] != self.Phi.shape[-1]:
            raise ValueError(f"points must have shape (n, {self.Phi.shape[-1]}), got {x.shape}")
        return x @ self.Phi[k].T + self.c[k]

    def __len__(self):
        return self.times.size


def gaussian_affine_flow(
    affine: Callable[..., Any], g0: Gaussian, times: ArrayLike, rtol: float = 1e-11, atol: float = 1e-13
) -> AffineFlow:
    r"""Exact flow of the Transformer PDE from a Gaussian when the field of a Gaussian is affine.

    If the field of every Gaussian :math:`\mathcal N(\alpha, \Sigma)` is affine,
    :math:`\Gamma(x) = M(\alpha, \Sigma, t)\,x + b(\alpha, \Sigma, t)`, each token follows
    :math:`\dot x = M x + b` and the solution from :math:`\mathcal N(\alpha_0, \Sigma_0)` stays
    Gaussian. The tokens move by :math:`x_t = \Phi_t x_0 + c_t`, with

    .. math::
        \dot\Phi = M\Phi,\ \Phi_0 = I,\qquad \dot c = Mc + b,\ c_0 = 0,\qquad
        \dot\alpha = M\alpha + b,\qquad \dot\Sigma = M\Sigma + \Sigma M^\top,

    all integrated together (``scipy.integrate.solve_ivp``, DOP853), :math:`M, b` evaluated at
    the current :math:`(\alpha_t, \Sigma_t)`. Then :math:`\alpha_t = \Phi_t\alpha_0 + c_t` and
    :math:`\Sigma_t = \Phi_t\Sigma_0\Phi_t^\top` (the tests check both).

    Parameters
    ----------
    affine : callable
        ``affine(mean, cov, t) -> (M, b)`` with ``mean`` of shape (d,), ``cov`` (d, d); returns
        ``M`` of shape (d, d) and ``b`` of shape (d,). For softmax attention
        :math:`M = V\Sigma A`, :math:`b = V\alpha` (derived in the chapter "Mean-field limit").
    g0 : Gaussian
        The initial Gaussian, at ``times[0]``.
    times : array_like, shape (T,)
        Strictly increasing output times.
    rtol, atol : float
        Tolerances of ``solve_ivp``.

    Returns
    -------
    AffineFlow

    Raises
    ------
    TypeError
        ``affine`` not callable, ``g0`` not a Gaussian.
    ValueError
        ``affine`` returns the wrong shapes.
    FloatingPointError
        The solution blew up (or the integrator failed) before ``times[-1]``; the message gives
        the time reached.
    """
    if not callable(affine):
        raise TypeError(f"affine must be a callable (mean, cov, t) -> (M, b), got {type(affine).__name__}")
    if not isinstance(g0, Gaussian):
        raise TypeError(f"g0 must be a tpde_lib Gaussian, got {type(g0).__name__}")
    times = as_times("times", times)
    rtol, atol = as_positive("rtol", rtol), as_positive("atol", atol)
    d = g0.d

    def call(mean, cov, t):
        """``affine``'s (M, b), checked: a pair, real, shapes (d, d) and (d,)."""
        out = affine(mean, cov, t)
        if not isinstance(out, tuple | list) or len(out) != 2:
            raise TypeError(
                f"affine must return a pair (M (d, d), b (d,)), got {type(out).__name__} {out!r:.60}"
            )
        M, b = (
            checked_result("affine", v, shape=s, allow_inf=True, part=k)
            for k, v, s in (("M", out[0], (d, d)), ("b", out[1], (d,)))
        )
        return M, b

    M0, b0 = call(g0.mean, g0.cov, float(times[0]))
    as_float_array("M returned by affine", M0)  # finite at the start
    as_float_array("b returned by affine", b0)
    sizes = np.cumsum([d * d, d, d, d * d])

    def rhs(t, y):
        Phi, c, mean, cov = np.split(y, sizes[:-1])
        Phi, cov = Phi.reshape(d, d), cov.reshape(d, d)
        cov = 0.5 * (cov + cov.T)
        M, b = call(mean, cov, t)
        dcov = M @ cov
        return np.concatenate([(M @ Phi).ravel(), M @ c + b, M @ mean + b, (dcov + dcov.T).ravel()])

    y0 = np.concatenate([np.eye(d).ravel(), np.zeros(d), g0.mean, g0.cov.ravel()])
    if times.size == 1:
        Y = y0[None]
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            sol = solve_ivp(
                rhs, (times[0], times[-1]), y0, method="DOP853", t_eval=times, rtol=rtol, atol=atol
            )
        if sol.status != 0 or not np.all(np.isfinite(sol.y)):
            raise FloatingPointError(
                f"gaussian_affine_flow: the solution did not reach "
                f"t={times[-1]:g} (stopped at t={sol.t[-1]:g}: {sol.message})"
            )
        Y = sol.y.T
    Phi, c, mean, cov = np.split(Y, sizes[:-1], axis=1)
    cov = cov.reshape(-1, d, d)
    cov = 0.5 * (cov + np.swapaxes(cov, -1, -2))
    return AffineFlow(times, Phi.reshape(-1, d, d), c, mean, cov)
