r"""The energies of the chapter "Gradient flows" restricted to Gaussian measures, in closed form.

On :math:`\mathcal N(\alpha,\Sigma)`: the entropic self-transport energy
:math:`F = \frac12\mathrm{OT}_\varepsilon(\mu,\mu)`, its gradient in :math:`\Sigma` and its
Bures–Wasserstein gradient flow; the interaction energy :math:`E`; and the inner product of two
affine velocity fields for the constant-mobility and the softmax (:math:`Z_\mu`-weighted)
metrics. Each formula is derived in the chapter "Gradient flows" and checked in the tests
against quantised Gaussians, quadrature, Monte Carlo or finite differences.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import (
    as_covariance,
    as_float_array,
    as_nonsingular,
    as_positive,
    as_square,
    unit_scale,
)
from .._linalg import psd_sqrt, sym_fn
from ..measures import Gaussian


def _h_sv(sigma):
    r"""Per-eigenvalue entropic self-transport value (ε = 1) from a singular value :math:`\sigma`.

    :math:`h(s) = -\tfrac12(r-1) + \tfrac12\log\tfrac{1+r}{2}` with :math:`s = \sigma^2`,
    :math:`r = \sqrt{1+4s}` and :math:`h' = -\varphi/2`. Evaluated without forming :math:`s`
    (no overflow for :math:`\sigma` up to the largest float) and with
    :math:`r - 1 = 2\sigma\cdot 2\sigma/(1+r)` (no cancellation for small :math:`\sigma`).
    """
    r = np.hypot(1.0, 2.0 * sigma)
    q = (2.0 * sigma) * (2.0 * sigma / (1.0 + r))
    return -0.5 * q + 0.5 * np.log1p(0.5 * q)


def _phi_times(c):
    r""":math:`\lambda \mapsto c\,\varphi(c^2\lambda) = 2/(1/c + \sqrt{1/c^2 + 4\lambda})`, written with
    ``hypot`` so that neither :math:`1/c^2` nor :math:`c^2\lambda` is formed (any scale ``c``)."""
    inv_c = 1.0 / c

    def phi(lam):
        return 2.0 / (inv_c + np.hypot(inv_c, 2.0 * np.sqrt(np.clip(lam, 0.0, None))))

    return phi


def _mean_or_zero(mean, d):
    if mean is None:
        return np.zeros(d)
    return as_float_array("mean", mean, shape=(d,))


def _gaussian_args(cov, A, eps):
    S = as_covariance("cov", cov)
    A = as_square("A", A, S.shape[0])
    eps = as_positive("eps", eps)
    return S, A, eps


def sinkhorn_energy_gaussian(
    cov: ArrayLike, A: ArrayLike, eps: float = 1.0, mean: ArrayLike | None = None
) -> float:
    r"""Closed form of :math:`F = \frac12\mathrm{OT}_\varepsilon(\mu,\mu)` for Gaussian :math:`\mu`.

    Derived in the chapter "Gradient flows" ({eq}`eq-gf-sinkhorn-gaussian-energy`): with
    :math:`s_i` the eigenvalues of :math:`\Sigma^{1/2}A\Sigma A^\top\Sigma^{1/2}/\varepsilon^2`,

    .. math::
        F = \frac{\varepsilon}{2}\sum_i h(s_i) - \frac12\alpha^\top A\alpha,\qquad
        h(s) = -\frac{\sqrt{1+4s}-1}{2} + \frac12\log\frac{1+\sqrt{1+4s}}{2},

    equal to :math:`\frac12[-\operatorname{tr}(A\Sigma G^\top)
    + \frac\varepsilon2\log\det\Sigma - \frac\varepsilon2\log\det(\Sigma - G\Sigma G^\top)]
    - \frac12\alpha^\top A\alpha`. :math:`F\le -\frac12\alpha^\top A\alpha` and it depends on
    :math:`A` only through :math:`A\Sigma A^\top` (so :math:`A` and :math:`-A` give the same
    centred energy).

    Parameters
    ----------
    cov : array_like, shape (d, d)
        :math:`\Sigma`, symmetric PSD.
    A : array_like, shape (d, d)
    eps : float, default 1
    mean : array_like, shape (d,), optional
        :math:`\alpha` (default 0).

    Returns
    -------
    float
    """
    S, A, eps = _gaussian_args(cov, A, eps)
    alpha = _mean_or_zero(mean, S.shape[0])
    # Sigma = c St (c a power of two); the singular values of Sigma^1/2 (A/eps) Sigma^1/2 are c
    # times those of M = St^1/2 (A/eps) St^1/2, the top half of the eigenvalues of the
    # symmetric [[0, M], [M^T, 0]] (no M M^T formed: no overflow, no squared round-off)
    d = S.shape[0]
    c = unit_scale(S)
    R = psd_sqrt(S / c)
    M = R @ (A / eps) @ R
    s = np.linalg.eigvalsh(np.block([[np.zeros((d, d)), M], [M.T, np.zeros((d, d))]]))
    with np.errstate(over="ignore"):
        value = 0.5 * eps * np.sum(_h_sv(c * np.abs(s[d:]))) - 0.5 * alpha @ A @ alpha
    if not np.isfinite(value):
        raise FloatingPointError(
            f"sinkhorn_energy_gaussian = {value} exceeds the float range (cov, A or mean too large)"
        )
    return float(value)


def sinkhorn_energy_gradient_gaussian(cov: ArrayLike, A: ArrayLike, eps: float = 1.0) -> NDArray[np.float64]:
    r"""Gradient :math:`\nabla_\Sigma F` of the centred :func:`sinkhorn_energy_gaussian`, shape (d, d).

    Derived in the chapter "Gradient flows" (envelope theorem on the Schrödinger potentials):

    .. math::
        \nabla_\Sigma F = -\frac{\varepsilon}{4}\big(B^\top RKRB + BRK'RB^\top\big),\quad
        K = \varphi(MM^\top),\ K' = \varphi(M^\top M),\ M = RBR,\ B = A/\varepsilon,

    symmetric, the gradient for the Frobenius inner product on symmetric matrices
    (:math:`\mathrm dF = \operatorname{tr}(\nabla F\,\mathrm d\Sigma)`). For symmetric :math:`A`
    it is :math:`-\frac12 AG`, with :math:`G\Sigma` of
    :func:`tpde_lib.gaussian.sinkhorn_gain`.

    Parameters
    ----------
    cov : array_like, shape (d, d)
    A : array_like, shape (d, d)
    eps : float, default 1

    Returns
    -------
    ndarray, shape (d, d), symmetric
    """
    S, A, eps = _gaussian_args(cov, A, eps)
    # Sigma = c St (c a power of two), R = St^1/2: Sigma^1/2 K Sigma^1/2 = R (c K) R with
    # c K = c phi(c^2 M M^T) = _phi(M M^T) for M = R B R, every factor representable
    c = unit_scale(S)
    R = psd_sqrt(S / c)
    B = A / eps
    M = R @ B @ R
    _phi = _phi_times(c)
    K, K2 = sym_fn(M @ M.T, _phi), sym_fn(M.T @ M, _phi)
    grad = -0.25 * eps * (B.T @ R @ K @ R @ B + B @ R @ K2 @ R @ B.T)
    return 0.5 * (grad + grad.T)


def bures_wasserstein_gradient_flow_rhs(
    cov: ArrayLike, A: ArrayLike, eps: float = 1.0
) -> NDArray[np.float64]:
    r"""Bures–Wasserstein gradient flow of :math:`F`: :math:`\Sigma' = -2(\nabla F\,\Sigma + \Sigma\nabla F)`.

    A linear velocity field :math:`x\mapsto Mx` moves :math:`\mathcal N(0,\Sigma)` by
    :math:`\Sigma' = M\Sigma + \Sigma M^\top`, and the :math:`W_2` gradient of a function of
    :math:`\Sigma` is the linear field :math:`M = -2\nabla_\Sigma F` (chapter "Gradient flows").
    With :math:`V = A = A^\top` this equals the Sinkhorn covariance ODE
    :math:`VG\Sigma + \Sigma G^\top V^\top` (checked in the chapter).

    Parameters
    ----------
    cov : array_like, shape (d, d)
    A : array_like, shape (d, d)
    eps : float, default 1

    Returns
    -------
    ndarray, shape (d, d), symmetric
    """
    S, A, eps = _gaussian_args(cov, A, eps)
    grad = sinkhorn_energy_gradient_gaussian(S, A, eps)
    out = -2.0 * (grad @ S + S @ grad)
    return 0.5 * (out + out.T)


def interaction_energy_gaussian(cov: ArrayLike, A: ArrayLike, mean: ArrayLike | None = None) -> float:
    r"""Closed form of :func:`~tpde_lib.energy.interaction_energy` for a Gaussian :math:`\mu`.

    Derived in the chapter "Gradient flows" (Gaussian integral of :math:`e^{y^\top Ax}` over
    :math:`x, y` i.i.d.): with :math:`R = \Sigma^{1/2}` and :math:`C = RAR`, the energy is finite
    iff :math:`\|C\|_2 < 1`, and then

    .. math::
        E = \frac12\det(I - C^\top C)^{-1/2}
            \exp\Big(\alpha^\top A\alpha + \tfrac12 b^\top
            \begin{pmatrix} I & -C^\top\\ -C & I\end{pmatrix}^{-1} b\Big),\qquad
        b = \begin{pmatrix}RA^\top\alpha\\ RA\alpha\end{pmatrix}.

    For :math:`\alpha = 0`: :math:`E = \frac12\det(I - \Sigma A^\top\Sigma A)^{-1/2}`; for
    :math:`A = -I`: :math:`\frac12\det(I-\Sigma^2)^{-1/2}`.

    Parameters
    ----------
    cov : array_like, shape (d, d)
    A : array_like, shape (d, d)
    mean : array_like, shape (d,), optional

    Returns
    -------
    float
        ``inf`` when :math:`\|\Sigma^{1/2}A\Sigma^{1/2}\|_2 \ge 1` (the integral diverges).
    """
    S = as_covariance("cov", cov)
    d = S.shape[0]
    A = as_square("A", A, d)
    alpha = _mean_or_zero(mean, d)
    R = psd_sqrt(S)
    C = R @ A @ R
    sv = np.linalg.svd(C, compute_uv=False)
    if sv.max() >= 1.0:
        return float("inf")
    eye = np.eye(d)
    block = np.block([[eye, -C.T], [-C, eye]])
    b = np.concatenate([R @ A.T @ alpha, R @ A @ alpha])
    expo = alpha @ A @ alpha + 0.5 * b @ np.linalg.solve(block, b)
    return float(0.5 * np.prod(1.0 - sv**2) ** -0.5 * np.exp(expo))


# --------------------------------------------------------------------------------------------
# the metrics on affine velocity fields
# --------------------------------------------------------------------------------------------


def gaussian_metric(
    g: Gaussian,
    u1: tuple[ArrayLike, ArrayLike],
    u2: tuple[ArrayLike, ArrayLike],
    P: ArrayLike | None = None,
    A: ArrayLike | None = None,
) -> float:
    r"""Inner product of two affine velocity fields at a Gaussian, for a (weighted) mobility metric.

    For :math:`\mu = \mathcal N(\alpha,\Sigma)` and :math:`u_k(x) = b_k + M_k(x-\alpha)`,

    .. math::
        g_\mu(u_1, u_2) = \int \rho(x)\,\langle u_1(x), P^{-1}u_2(x)\rangle\,\mathrm d\mu(x),

    with :math:`\rho = 1` (``A`` None: the constant-mobility metric :math:`d_P`) or
    :math:`\rho = Z_\mu` (``A`` given: softmax's metric, chapter "Gradient flows",
    {eq}`eq-gf-softmax-metric`). Closed form (derived in the chapter): :math:`Z_\mu(x) =
    e^{\alpha^\top Ax + \frac12 x^\top A^\top\Sigma Ax}`, so :math:`Z_\mu\mu = c\,\mathcal N(m, S)`
    with :math:`S^{-1} = \Sigma^{-1} - A^\top\Sigma A`, :math:`m = S(\Sigma^{-1} + A^\top)\alpha`,
    :math:`c = 2E(\mu)` (:func:`interaction_energy_gaussian`), and

    .. math::
        g_\mu(u_1, u_2) = c\,\big[u_1(m)^\top P^{-1}u_2(m)
            + \operatorname{tr}(M_1^\top P^{-1}M_2 S)\big].

    Parameters
    ----------
    g : Gaussian
        Mean (d,), positive definite covariance (d, d).
    u1, u2 : tuple (b, M)
        Offsets (d,) and slopes (d, d) of the two fields.
    P : array_like, shape (d, d), optional
        Symmetric positive definite mobility (default identity).
    A : array_like, shape (d, d), optional
        Score matrix of the weight :math:`Z_\mu`; requires
        :math:`\|\Sigma^{1/2}A\Sigma^{1/2}\|_2 < 1` (else the weighted integral diverges).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Wrong shapes; ``P`` not SPD; the weighted integral diverges.
    """
    if not isinstance(g, Gaussian):
        raise TypeError(f"g must be a Gaussian, got {type(g).__name__}")
    d = g.d
    for k, u in ((1, u1), (2, u2)):
        if not isinstance(u, tuple | list) or len(u) != 2:
            raise TypeError(
                f"u{k} must be a pair (b (d,), M (d, d)) of an affine field, got {type(u).__name__} {u!r:.40}"
            )
    (b1, M1), (b2, M2) = [
        (as_float_array(f"u{k}[0]", u[0], shape=(d,)), as_square(f"u{k}[1]", u[1], d))
        for k, u in ((1, u1), (2, u2))
    ]
    Pinv = np.eye(d) if P is None else np.linalg.inv(as_nonsingular("P", as_covariance("P", P, d)))
    if P is not None and np.linalg.eigvalsh(Pinv)[0] <= 0:
        raise ValueError("P must be symmetric positive definite")
    alpha, Sigma = g.mean, g.cov
    if A is None:
        c, m, S = 1.0, alpha, Sigma
    else:
        A = as_square("A", A, d)
        as_nonsingular("g.cov", Sigma)  # the weighted metric needs Sigma^-1
        prec = np.linalg.inv(Sigma) - A.T @ Sigma @ A
        if np.linalg.eigvalsh(0.5 * (prec + prec.T))[0] <= 0:
            raise ValueError("the weight Z_mu is not integrable: ||Sigma^1/2 A Sigma^1/2||_2 >= 1")
        S = np.linalg.inv(prec)
        m = S @ (np.linalg.solve(Sigma, alpha) + A.T @ alpha)
        c = 2.0 * interaction_energy_gaussian(Sigma, A, mean=alpha)
    v1, v2 = b1 + M1 @ (m - alpha), b2 + M2 @ (m - alpha)
    return float(c * (v1 @ Pinv @ v2 + np.trace(M1.T @ Pinv @ M2 @ S)))
