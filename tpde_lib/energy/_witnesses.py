r"""Finite-difference witnesses of gradient-flow structure and of geodesic (non-)convexity.

Used by the chapter "Gradient flows": the Jacobian of a particle velocity field and its
symmetry defect (a gradient flow for a constant metric has a symmetric weighted Jacobian),
central-difference gradients of a function of a configuration or of a covariance, second
differences along a curve, and a search for non-convexity along (twisted) Bures–Wasserstein
geodesics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import (
    as_at_least,
    as_count,
    as_covariance,
    as_finite,
    as_float_array,
    as_instance,
    as_nonsingular,
    as_positive,
    as_square,
    checked_result,
)
from ..attention import Attention
from ..measures import Empirical, Gaussian, as_empirical
from ..transport import bures_wasserstein_geodesic, twisted_bures_wasserstein_geodesic


def configuration_gradient(
    fun: Callable[[Empirical], float], mu: Empirical, step: float = 1e-5
) -> NDArray[np.float64]:
    r"""Central-difference gradient of :math:`\Phi(X) = ` ``fun(mu.with_points(X))``, shape (n, d).

    :math:`\partial_{x_{ia}}\Phi \approx (\Phi(X + he_{ia}) - \Phi(X - he_{ia}))/2h`, error
    :math:`O(h^2)` plus round-off :math:`O(\epsilon_{\rm mach}|\Phi|/h)`. One call of ``fun``
    per perturbed configuration (2nd calls; meant for tens of tokens).

    Parameters
    ----------
    fun : callable
        ``fun(Empirical) -> float``, e.g. ``lambda m: interaction_energy(m, A)``.
    mu : Empirical
        Points (n, d); weights kept fixed.
    step : float, default 1e-5

    Returns
    -------
    ndarray, shape (n, d)
    """
    as_empirical("mu", mu)
    if not callable(fun):
        raise TypeError(f"fun must be a callable Empirical -> float, got {type(fun).__name__}")
    step = as_positive("step", step)
    X = mu.points
    grad = np.empty(X.size)
    for k in range(X.size):
        e = np.zeros(X.size)
        e[k] = step
        e = e.reshape(X.shape)
        grad[k] = (_value("fun", fun(mu.with_points(X + e))) - _value("fun", fun(mu.with_points(X - e)))) / (
            2.0 * step
        )
    return grad.reshape(X.shape)


def frobenius_gradient(
    fun: Callable[[NDArray[np.float64]], float], cov: ArrayLike, step: float = 1e-5
) -> NDArray[np.float64]:
    r"""Central-difference gradient of a function of a symmetric matrix, shape (d, d), symmetric.

    The gradient for the Frobenius product on symmetric matrices,
    :math:`\mathrm d f = \operatorname{tr}(\nabla f\,\mathrm d\Sigma)`: entry :math:`(i, j)` is
    the derivative along :math:`E_{ij} = (e_ie_j^\top + e_je_i^\top)/2`. Error :math:`O(h^2)`
    plus round-off :math:`O(\epsilon_{\rm mach}|f|/h)`.

    Parameters
    ----------
    fun : callable
        ``fun(cov (d, d)) -> float``.
    cov : array_like, shape (d, d)
        Symmetric; ``cov ± step E_ij`` must stay in ``fun``'s domain.
    step : float, default 1e-5

    Returns
    -------
    ndarray, shape (d, d)
    """
    S = as_covariance("cov", cov)
    if not callable(fun):
        raise TypeError(f"fun must be a callable (d, d) -> float, got {type(fun).__name__}")
    step = as_positive("step", step)
    d = S.shape[0]
    grad = np.empty((d, d))
    for i in range(d):
        for j in range(i, d):
            E = np.zeros((d, d))
            E[i, j] += 0.5
            E[j, i] += 0.5
            grad[i, j] = grad[j, i] = (
                _value("fun", fun(S + step * E)) - _value("fun", fun(S - step * E))
            ) / (2.0 * step)
    return grad


def _value(name, value):
    """A reader's callable returned ``value``: a real finite scalar, else an error naming it."""
    return float(checked_result(name, value, shape=()))


def energy_along_geodesic(
    energy: Callable[..., float],
    g0: Gaussian,
    g1: Gaussian,
    s: ArrayLike,
    P: ArrayLike | None = None,
    *,
    name: str = "energy",
) -> NDArray[np.float64]:
    r"""Energy :math:`\mathcal E(\mathcal N(\alpha_s,\Sigma_s))` along a (twisted) Bures–Wasserstein geodesic.

    Parameters
    ----------
    energy : callable
        ``energy(mean (d,), cov (d, d)) -> float``, e.g.
        ``lambda m, S: interaction_energy_gaussian(S, A, mean=m)``.
    g0, g1 : Gaussian
    s : array_like, shape (k,)
    P : array_like, shape (d, d), optional
        Mobility of the twisted distance :math:`d_P`
        (:func:`~tpde_lib.transport.twisted_bures_wasserstein_geodesic`); default: plain
        :math:`W_2` (:func:`~tpde_lib.transport.bures_wasserstein_geodesic`).
    name : str, default "energy"
        How errors call ``energy`` (its result must be a real finite number).

    Returns
    -------
    ndarray, shape (k,)
    """
    if not callable(energy):
        raise TypeError(f"{name} must be a callable (mean, cov) -> float, got {type(energy).__name__}")
    if P is None:
        means, covs = bures_wasserstein_geodesic(g0, g1, s)
    else:
        means, covs = twisted_bures_wasserstein_geodesic(g0, g1, P, s)
    return np.array([_value(name, energy(m, S)) for m, S in zip(means, covs)])


def second_differences(values: ArrayLike, s: ArrayLike) -> NDArray[np.float64]:
    r"""Second differences :math:`(v_{k+1}-2v_k+v_{k-1})/\Delta s^2` on a uniform grid, shape (k-2,).

    A negative value well beyond round-off (about :math:`10^{-16}\max|v|/\Delta s^2`) witnesses
    non-convexity along the curve. ``s`` must be uniformly spaced (checked to 1e-9 relative).
    """
    v = as_float_array("values", values, ndim=1)
    s = as_float_array("s", s, shape=(v.size,))
    if v.size < 3:
        raise ValueError(f"values must have at least 3 entries, got {v.size}")
    ds = np.diff(s)
    if np.any(ds <= 0) or np.abs(ds - ds[0]).max() > 1e-9 * ds[0]:
        raise ValueError("s must be uniformly spaced and increasing")
    return np.diff(v, 2) / ds[0] ** 2


def velocity_jacobian(
    att: Attention, mu: Empirical, step: float = 1e-4, t: float = 0.0
) -> NDArray[np.float64]:
    r"""Jacobian :math:`J_{(i,a),(j,b)} = \partial\Gamma_a(x_i)/\partial x_{j,b}`, shape (n d, n d).

    Central finite differences: :math:`J e_k \approx (\Gamma(X + h e_k) - \Gamma(X - h e_k))/2h`,
    error :math:`O(h^2)` plus round-off :math:`O(\epsilon_{\rm mach}/h)` (plus the solver
    tolerance divided by :math:`h` for Sinkhorn). Each of the :math:`2nd` perturbed
    configurations is one vectorised call of ``att.velocity``; the loop runs over perturbation
    directions, which a finite-difference Jacobian of a black-box field cannot avoid. Meant for
    small n (tens of tokens). Rows and columns are ordered as ``points.ravel()``.

    Parameters
    ----------
    att : attention
        Anything with ``velocity(mu, t)`` returning (n, d).
    mu : Empirical
        The configuration (points (n, d), weights kept fixed).
    step : float, default 1e-4
    t : float

    Returns
    -------
    ndarray, shape (n d, n d)
    """
    as_instance("att", att, Attention, "an Attention (e.g. tp.Softmax(A, V))")
    as_empirical("mu", mu)
    step = as_positive("step", step)
    t = as_finite("t", t)
    X = mu.points
    nd = X.size
    J = np.empty((nd, nd))
    for k in range(nd):
        e = np.zeros(nd)
        e[k] = step
        e = e.reshape(X.shape)
        up = att.velocity(mu.with_points(X + e), t)
        down = att.velocity(mu.with_points(X - e), t)
        J[:, k] = (up - down).ravel() / (2.0 * step)
    return J


def symmetry_defect(J: ArrayLike, weights: ArrayLike, mobility_matrix: ArrayLike | None = None) -> float:
    r"""Relative asymmetry :math:`\|S-S^\top\|_F/\|S\|_F`, :math:`S = (\mathrm{diag}(w)\otimes P^{-1})J`.

    If the particles follow a gradient flow :math:`\dot x_i = -w_i^{-1}P\nabla_{x_i}\Phi(X)` (the
    particle form of :math:`\Gamma = -P\nabla\frac{\delta\mathcal E}{\delta\mu}` with
    :math:`\Phi(X) = \mathcal E(\sum_i w_i\delta_{x_i})`), then :math:`S = -\nabla^2\Phi` is
    symmetric. A defect well above the finite-difference error proves that no such
    :math:`\Phi` exists near this configuration (chapter "Gradient flows").

    Parameters
    ----------
    J : array_like, shape (n d, n d)
        From :func:`velocity_jacobian`.
    weights : array_like, shape (n,)
    mobility_matrix : array_like, shape (d, d), optional
        :math:`P` (default identity: plain :math:`W_2`).

    Returns
    -------
    float
    """
    w = as_float_array("weights", weights, ndim=1)
    n = w.size
    J = as_float_array("J", J, ndim=2)
    if J.shape[0] != J.shape[1] or J.shape[0] % n:
        raise ValueError(f"J must be square of size n*d with n={n}, got {J.shape}")
    d = J.shape[0] // n
    Pinv = (
        np.eye(d)
        if mobility_matrix is None
        # a singular P has no inverse: ValueError naming it (numpy: "Singular matrix")
        else np.linalg.inv(
            as_nonsingular("mobility_matrix", as_square("mobility_matrix", mobility_matrix, d))
        )
    )
    S = np.kron(np.diag(w), Pinv) @ J
    norm = np.linalg.norm(S)
    if norm == 0:
        return 0.0
    return float(np.linalg.norm(S - S.T) / norm)


@dataclass(frozen=True)
class ConvexitySearch:
    """Result of :func:`search_geodesic_convexity`.

    Attributes
    ----------
    n_geodesics : int
        How many geodesics were tested.
    n_nonconvex : Mapping[str, int]
        Per energy, on how many geodesics a relative second difference fell below ``-threshold``.
    worst : Mapping[str, float]
        Per energy, the smallest relative second difference found.
    threshold : float
    """

    n_geodesics: int
    n_nonconvex: Mapping[str, int]
    worst: Mapping[str, float]
    threshold: float


def search_geodesic_convexity(
    energies: Mapping[str, Callable[..., float]],
    pairs: Sequence[tuple[Gaussian, Gaussian]],
    P: ArrayLike | None = None,
    n_points: int = 21,
    threshold: float = 1e-6,
) -> ConvexitySearch:
    r"""Look for non-convexity of energies along (twisted) Bures–Wasserstein geodesics.

    For each pair :math:`(g_0, g_1)` and each energy, the values along the geodesic at
    ``n_points`` uniform times give second differences; divided by :math:`\max|\mathcal E|`, a
    value below ``-threshold`` counts as non-convex (the relative round-off of a second difference
    at :math:`\Delta s = 1/20` is about :math:`10^{-13}`). A finite search: finding nothing is
    an observation, not a proof of convexity.

    Parameters
    ----------
    energies : Mapping[str, callable]
        ``name -> energy(mean (d,), cov (d, d))``.
    pairs : sequence of (Gaussian, Gaussian)
    P : array_like, shape (d, d), optional
        Mobility of the twisted distance (default: plain :math:`W_2`).
    n_points : int, default 21
    threshold : float, default 1e-6

    Returns
    -------
    ConvexitySearch
    """
    if not isinstance(energies, Mapping) or not energies:
        raise TypeError(
            f"energies must be a non-empty mapping name -> callable(mean, cov), got {type(energies).__name__}"
        )
    for k, f in energies.items():
        if not callable(f):
            raise TypeError(
                f"energies[{k!r}] must be a callable (mean, cov) -> float, got {type(f).__name__}"
            )
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence) or not pairs:
        raise TypeError(
            f"pairs must be a non-empty sequence of (Gaussian, Gaussian), got {type(pairs).__name__}"
        )
    for i, pair in enumerate(pairs):
        if not (
            isinstance(pair, tuple | list) and len(pair) == 2 and all(isinstance(g, Gaussian) for g in pair)
        ):
            raise TypeError(f"pairs[{i}] must be a pair (Gaussian, Gaussian), got {pair!r:.60}")
    n_points = as_count("n_points", n_points, 3)
    threshold = as_at_least("threshold", threshold, 0.0)
    s = np.linspace(0.0, 1.0, n_points)
    worst = {k: np.inf for k in energies}
    count = {k: 0 for k in energies}
    pairs = list(pairs)
    for g0, g1 in pairs:
        for k, f in energies.items():
            vals = energy_along_geodesic(f, g0, g1, s, P, name=f"energies[{k!r}]")
            rel = float(np.min(second_differences(vals, s)) / np.abs(vals).max())
            worst[k] = min(worst[k], rel)
            count[k] += rel < -threshold
    return ConvexitySearch(len(pairs), count, worst, float(threshold))
