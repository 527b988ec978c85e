r"""Explicit constants of the Wasserstein stability estimate (appendix "Derivations", :eq:`eq-stability`).

For compactly supported data the paper proves (**paper's claim**; its constants are not available
to us) a stability estimate :math:`W_p(\mu_t, \nu_t) \le C(t, R_0)\, W_p(\mu_0, \nu_0)`. This module
computes one explicit admissible constant per attention variant, **derived here** from the
Dobrushin-type template of the paper's well-posedness proof:

* (H1) support growth: :math:`|\Gamma_\mu(x)| \le c\,R` when :math:`\operatorname{supp}\mu
  \subset B_R` and :math:`|x| \le R`, so every support stays in :math:`B_{R(t)}`,
  :math:`R(t) = R_0 e^{c t}`;
* (H2) Lipschitz in space: :math:`|\Gamma_\mu(x) - \Gamma_\mu(x')| \le L_x(R)\,|x - x'|`;
* (H3) Lipschitz in the measure: :math:`|\Gamma_\mu(x) - \Gamma_\nu(x)| \le L_\mu(R)\,W_1(\mu, \nu)`
  for :math:`|x| \le R` and :math:`\mu, \nu` supported in :math:`B_R`.

Grönwall then gives (**derived here**, appendix "Derivations", section "Stability constants"):
couple :math:`\mu_0, \nu_0` optimally for :math:`W_p`, follow both along their characteristics
:math:`X_t, Y_t`; then
:math:`\frac{d}{dt}\|X_t - Y_t\|_{L^p} \le L_x \|X_t - Y_t\|_{L^p} + L_\mu W_1(\mu_t, \nu_t)` and
:math:`W_1 \le W_p \le \|X_t - Y_t\|_{L^p}`, so

.. math::
    W_p(\mu_t, \nu_t) \le C(T, R_0)\, W_p(\mu_0, \nu_0), \qquad
    C(T, R_0) = \exp\big(T\,[L_x(R_T) + L_\mu(R_T)]\big),\quad t \le T,

with :math:`R_T = R_0 e^{cT}` and :math:`R_0` bounding both initial supports.

Norms :math:`\|\cdot\|` of matrices are spectral norms. Derivations of the constants, with
:math:`a = \|A\|`, :math:`v = \|V\|`:

**Softmax** (appendix "Derivations", :eq:`eq-softmax-lipschitz`).
:math:`\Gamma_\mu(x) = V\,\mathbb E_{\pi_x}[y]`, where
:math:`\pi_x \propto e^{\langle Ax, y\rangle}\mu(dy)`, is a convex combination of the
:math:`Vy`: :math:`c = v`. :math:`\nabla_x\Gamma_\mu = V\operatorname{Cov}_{\pi_x}(y)A` and
:math:`\|\operatorname{Cov}\| \le R^2`: :math:`L_x = v a R^2` (valid for every :math:`x`).
:math:`\Gamma_\mu - \Gamma_\nu = Z_\mu^{-1}\int e^{\langle Ax, y\rangle}(Vy - \Gamma_\nu(x))\,
d(\mu - \nu)(y)` with :math:`Z_\mu \ge e^{-aR^2}` and an integrand of Lipschitz constant
:math:`e^{aR^2}(v + 2vR\cdot aR)`; Kantorovich–Rubinstein gives
:math:`L_\mu = v(1 + 2aR^2)e^{2aR^2}`. The factor :math:`e^{2aR^2}` is attained up to the
polynomial prefactor: for :math:`A = V = I`, :math:`x = Re` and two atoms at :math:`\pm Re`
carrying masses :math:`1-p, p`, the derivative of :math:`\Gamma` in :math:`W_1` is
:math:`v e^{2R^2}` at :math:`p = 0` (tested).

**Multi-head**: the field is a sum of softmax heads; every constant is the sum of the
heads' constants (:math:`c = \sum_h \|V_h\|`, etc.).

**ℓ²** (kernel :math:`k(x, y) = e^{-|Qx - Ky|^2/\tau}`; :math:`q = \|Q\|`, :math:`\kappa = \|K\|`).
Again a convex combination: :math:`c = v`. The logits in :math:`x` are
:math:`2\langle Qx, Ky\rangle/\tau` up to :math:`x`-only terms, so
:math:`\nabla_x\Gamma = V\operatorname{Cov}_{\pi_x}(y)\,\tfrac2\tau K^\top Q` and
:math:`L_x = \tfrac2\tau v\|K^\top Q\| R^2`. For :math:`L_\mu` the same splitting with
:math:`Z_\mu \ge \inf_y k(x, y)`, :math:`|\nabla_y k| = k\,\tfrac2\tau|K^\top(Qx - Ky)| \le
k\,\tfrac2\tau\kappa(q + \kappa)R` and :math:`\sup_y k/\inf_y k \le e^{(q+\kappa)^2R^2/\tau}`
(for :math:`|x|, |y| \le R`) give
:math:`L_\mu = v\,(1 + \tfrac4\tau\kappa(q + \kappa)R^2)\,e^{(q + \kappa)^2R^2/\tau}`.

**Sigmoid** (with a fixed bias, chapter "The Transformer PDE":
:math:`\Gamma_\mu(x) = \int\sigma(\langle Ax, y\rangle + b) Vy\,d\mu`). No denominator.
:math:`0 < \sigma < 1`: :math:`c = v`.
:math:`\nabla_x\Gamma = \int\sigma'\,Vyy^\top A\,d\mu` with :math:`\sigma' \le 1/4`:
:math:`L_x = vaR^2/4`. The integrand :math:`g(y) = \sigma(\cdot)Vy` has
:math:`\|\nabla g\| \le v + vR\cdot aR/4`: :math:`L_\mu = v(1 + aR^2/4)`. Polynomial in
:math:`R`: no :math:`e^{cR^2}`.

**Linear** ( :math:`\Gamma_\mu(x) = V(\int yy^\top d\mu)Ax`). :math:`L_x = vaR^2`,
:math:`L_\mu = 2vaR^2` (the integrand :math:`\langle Ax, y\rangle Vy` has Jacobian
:math:`\langle Ax, y\rangle V + Vy(Ax)^\top`). The growth is superlinear:
:math:`|\Gamma_\mu(x)| \le vaR^3`, so :math:`R' = vaR^3` and
:math:`R(t) = R_0(1 - 2vaR_0^2t)^{-1/2}`, finite only for :math:`t < 1/(2vaR_0^2)`.

**Sinkhorn**: :math:`c = v` (a conditional expectation of the plan); the Lipschitz constants need
a quantitative stability of the entropic potentials in :math:`W_1` (which result the paper uses could not
be checked here): not derived, :func:`lipschitz_constants` raises ``NotImplementedError``.
**Unnormalised** attention and **causal** (masked) variants are not covered here (masked: the
constant also depends on the mass at position 0, chapter "Masked attention").

**Time-dependent parameters.** With :math:`c(t)`, :math:`L(t)` the constants at time
:math:`t`, the argument gives :math:`R(t) = R_0 e^{\int_0^t c}` and
:math:`C = \exp\int_0^T (L_x + L_\mu)`. We bound both integrals by :math:`T` times the
supremum over a uniform grid of ``n_grid`` times in :math:`[0, T]` (endpoints included). This is
exact for constant parameters; for continuous ones it is a grid approximation of the supremum
(it would miss a spike narrower than the grid spacing), which is why the grid is a parameter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import as_at_least, as_count, as_finite, as_positive
from .attention import Attention

__all__ = ["StabilityBound", "support_radius", "lipschitz_constants", "stability_bound", "stability_constant"]


def _check_att(att):
    if not isinstance(att, Attention):
        raise TypeError(f"att must be a tpde_lib Attention, got {type(att).__name__}")
    if att.causal:
        raise NotImplementedError(
            "causal (masked) attention: the constants also depend on the "
            "mass at position 0 (chapter 'Masked attention'); not covered here"
        )


def _grid(T, n_grid):
    n_grid = as_count("n_grid", n_grid, 1)
    return np.linspace(0.0, T, int(n_grid)) if T > 0 else np.zeros(1)


def support_radius(att: Attention, T: float, R0: float, n_grid: int = 201) -> float:
    r"""Radius :math:`R(T)` of a ball that contains every support up to time ``T`` (H1).

    .. math:: R(T) = R_0\,e^{T\sup_{t\le T} c(t)}, \qquad c = \|V\|
              \ (\text{multi-head: } \textstyle\sum_h\|V_h\|)

    Linear attention: :math:`R(T) = R_0(1 - 2\sup(\|V\|\|A\|)R_0^2T)^{-1/2}`. Computed by the
    variant's :meth:`~tpde_lib.Attention.support_radius` from its ``growth_rate``.

    Parameters
    ----------
    att : Attention
        A variant with a growth bound (Softmax, MultiHead, L2, Sinkhorn, Sigmoid, Linear).
    T : float
        Final time, >= 0.
    R0 : float
        Radius of a ball centred at 0 containing the initial support(s), > 0.
    n_grid : int
        Grid size for the supremum of time-dependent parameters (module docstring).

    Returns
    -------
    float

    Raises
    ------
    NotImplementedError
        The variant has no growth bound (unnormalised attention, a reader's variant without
        ``growth_rate``), or is causal.
    ValueError
        Linear attention when the bound blows up before ``T`` (the message gives its time).
    """
    _check_att(att)
    T, R0 = _as_time(T), as_positive("R0", R0)
    return float(att.support_radius(T, R0, _grid(T, n_grid)))


def _as_time(T):
    return as_at_least("T", T, 0.0)


def _log_lipschitz(att, R, t):
    """(log L_x, log L_mu) at time t for supports in B_R (logs: L_mu overflows for large R)."""
    return tuple(float(v) for v in att.log_lipschitz(R, t))


def lipschitz_constants(att: Attention, R: float, t: float = 0.0) -> tuple[float, float]:
    r"""The Lipschitz constants :math:`(L_x(R), L_\mu(R))` of (H2), (H3) at time ``t``.

    Parameters
    ----------
    att : Attention
        A variant with Lipschitz constants (Softmax, MultiHead, L2, Sigmoid, Linear).
    R : float
        Radius of the ball containing the supports and the evaluation points, > 0.
    t : float
        Time at which time-dependent parameters are evaluated.

    Returns
    -------
    (float, float)
        ``L_x`` and ``L_mu`` (``L_mu`` is ``inf`` when it exceeds the float range; see
        :func:`stability_bound` for its logarithm).

    Raises
    ------
    NotImplementedError
        Sinkhorn (constants not derived), unnormalised, causal attention, or a variant that
        does not define ``log_lipschitz``.
    """
    _check_att(att)
    R = as_positive("R", R)
    log_lx, log_lmu = _log_lipschitz(att, R, as_finite("t", t))
    with np.errstate(over="ignore"):
        return float(np.exp(log_lx)), float(np.exp(log_lmu))


@dataclass(frozen=True)
class StabilityBound:
    r"""The pieces of :math:`C(T, R_0) = \exp(T[L_x(R_T) + L_\mu(R_T)])`.

    Attributes
    ----------
    T, R0 : float
        Horizon and initial support radius.
    R_T : float
        Support radius at time T (H1).
    L_x, L_mu : float
        Suprema over the time grid of the Lipschitz constants at radius ``R_T`` (``L_mu`` may be
        ``inf`` when it exceeds the float range).
    log_L : float
        :math:`\log(L_x + L_\mu)`, always finite.
    log_C : float
        :math:`T(L_x + L_\mu) = \log C` (``inf`` beyond the float range, i.e. log C > 1.8e308).
    """

    T: float
    R0: float
    R_T: float
    L_x: float
    L_mu: float
    log_L: float
    log_C: float

    @property
    def C(self):
        """The constant itself; ``OverflowError`` when it exceeds the float range (use log_C)."""
        if self.log_C > np.log(np.finfo(float).max):
            raise OverflowError(
                f"C(T={self.T:g}, R0={self.R0:g}) = exp({self.log_C:.4g}) exceeds the float range: use log_C"
            )
        return float(np.exp(self.log_C))


def stability_bound(att: Attention, T: float, R0: float, n_grid: int = 201) -> StabilityBound:
    r"""Support radius, Lipschitz constants and :math:`\log C(T, R_0)` for ``att``.

    .. math::
        C(T, R_0) = \exp\big(T\,[L_x(R_T) + L_\mu(R_T)]\big), \quad R_T = \text{support\_radius}

    Parameters
    ----------
    att : Attention
        Softmax, MultiHead, L2, Sigmoid, Linear, or any variant with ``growth_rate`` and
        ``log_lipschitz``. Time-dependent parameters: suprema over ``n_grid`` times in
        [0, T] (module docstring).
    T : float
        Horizon, >= 0.
    R0 : float
        Radius of a ball centred at 0 containing both initial supports, > 0.
    n_grid : int, default 201

    Returns
    -------
    StabilityBound

    Used in the chapter "Well-posedness and stability".
    """
    _check_att(att)
    T = _as_time(T)
    R_T = support_radius(att, T, R0, n_grid)
    logs = np.array([_log_lipschitz(att, R_T, t) for t in _grid(T, n_grid)])
    log_lx, log_lmu = logs.max(axis=0)
    log_L = float(np.logaddexp(log_lx, log_lmu))
    with np.errstate(over="ignore"):
        L_x, L_mu = float(np.exp(log_lx)), float(np.exp(log_lmu))
        log_C = float(T * np.exp(log_L)) if T > 0 else 0.0
    return StabilityBound(T=T, R0=float(R0), R_T=float(R_T), L_x=L_x, L_mu=L_mu, log_L=log_L, log_C=log_C)


def stability_constant(att: Attention, T: float, R0: float, n_grid: int = 201) -> float:
    r"""The explicit constant :math:`C(T, R_0)` of :math:`W_p(\mu_t, \nu_t) \le C\,W_p(\mu_0, \nu_0)`.

    Shorthand for ``stability_bound(att, T, R0, n_grid).C``; raises ``OverflowError`` when
    :math:`C` exceeds the float range (it grows like :math:`\exp(T e^{2\|A\|R_T^2})` for softmax),
    in which case use :func:`stability_bound` and its ``log_C``.

    Returns
    -------
    float
    """
    return stability_bound(att, T, R0, n_grid).C
