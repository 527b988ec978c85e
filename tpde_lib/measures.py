r"""Probability measures on token space: empirical measures and Gaussians.

A sequence of :math:`n` tokens :math:`x_1, \dots, x_n \in \mathbb R^d` is the empirical measure
:math:`\mu^n = \sum_i w_i \delta_{x_i}` (uniform weights :math:`w_i = 1/n` by default). For masked
(causal) attention each token also carries a position :math:`s_i \in [0, 1]` and the measure lives
on :math:`\mathbb R^d \times [0, 1]`.

Holds the two validated containers, :class:`Empirical` and :class:`Gaussian` (with sampling and
moment matching), and :func:`as_empirical`, the one check that an argument is an empirical measure.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._checks import (
    as_count,
    as_covariance,
    as_float_array,
    as_instance,
    as_nonnegative_variances,
    as_rng,
    as_weights,
    unit_scale,
)

__all__ = ["Empirical", "Gaussian", "as_empirical"]


class Empirical:
    r"""A weighted empirical measure :math:`\mu = \sum_i w_i \delta_{x_i}` (optionally with positions).

    Parameters
    ----------
    points : array_like, shape (n, d)
        Token positions in :math:`\mathbb R^d`, one per row.
    weights : array_like, shape (n,), optional
        Non-negative masses summing to 1 (to within 1e-9). Default: uniform, :math:`1/n`.
    positions : array_like, shape (n,), optional
        Sequence positions :math:`s_i \in [0, 1]` used by masked (causal) attention.

    Raises
    ------
    TypeError
        An array that is not real numeric (bool, complex, strings, objects), naming it.
    ValueError
        Wrong shapes (n = 0 or d = 0 included), NaN or infinite values, negative weights, weights
        not summing to 1, positions outside [0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> import tpde_lib as tp
    >>> mu = tp.Empirical(np.array([[0.0, 0.0], [2.0, 0.0]]), weights=[0.25, 0.75])
    >>> mu
    Empirical(n=2, d=2)
    >>> mu.mean()
    array([1.5, 0. ])
    >>> float(mu.cov()[0, 0])
    0.75
    """

    def __init__(
        self, points: ArrayLike, weights: ArrayLike | None = None, positions: ArrayLike | None = None
    ) -> None:
        pts = as_float_array("points", points, ndim=2)  # n >= 1 tokens, d >= 1 (the input policy)
        n = pts.shape[0]
        if weights is None:
            w = np.full(n, 1.0 / n)
        else:
            w = as_weights("weights", weights, n)
        if positions is None:
            s = None
        else:
            s = as_float_array("positions", positions, shape=(n,))
            if np.any((s < 0) | (s > 1)):
                raise ValueError("positions must lie in [0, 1]")
        # private read-only copies: the caller's arrays stay writable and cannot change us
        self._points, self._weights, self._positions = (
            None if a is None else np.array(a, copy=True) for a in (pts, w, s)
        )
        for a in (self._points, self._weights, self._positions):
            if a is not None:
                a.setflags(write=False)

    # read-only views: a measure is a value, simulations build new ones
    points = property(lambda self: self._points, doc="(n, d) array of token positions.")
    weights = property(lambda self: self._weights, doc="(n,) array of masses summing to 1.")
    positions = property(
        lambda self: self._positions, doc="(n,) array of sequence positions in [0, 1], or None."
    )
    n = property(lambda self: self._points.shape[0], doc="Number of tokens.")
    d = property(lambda self: self._points.shape[1], doc="Dimension of token space.")

    @classmethod
    def _trusted(cls, points, weights, positions=None):
        """Internal: a measure on data already validated (the simulators' right-hand sides).

        No checks and no copies: read-only views of the given arrays, so an integrator can call
        a velocity field at every stage without re-validating the same weights and positions.
        """
        self = cls.__new__(cls)
        views = [None if a is None else a.view() for a in (points, weights, positions)]
        for v in views:
            if v is not None:
                v.setflags(write=False)
        self._points, self._weights, self._positions = views
        return self

    def with_points(self, points: ArrayLike) -> Empirical:
        """The same weights and positions carried by new points of the same shape (n, d)."""
        pts = as_float_array("points", points, shape=self._points.shape)
        return Empirical(pts, self._weights, self._positions)

    def _scaled(self):
        """Points divided by a power of two near their largest entry (exact), and that power."""
        scale = unit_scale(self._points)
        return self._points / scale, scale

    def mean(self) -> NDArray[np.float64]:
        r"""Mean :math:`\int y \, d\mu(y)`, shape (d,).

        Computed on the points scaled by a power of two, so that it cannot overflow even when
        the entries are near the largest float.
        """
        unit, scale = self._scaled()
        with np.errstate(over="ignore"):
            m = (self._weights @ unit) * scale
        if not np.all(np.isfinite(m)):  # only when weights summing to 1 + 1e-9 push past 1.8e308
            raise FloatingPointError("mean of this measure overflows float64; rescale the points")
        return m

    def cov(self) -> NDArray[np.float64]:
        r"""Covariance :math:`\int (y - m)(y - m)^\top d\mu(y)` (weighted, not Bessel-corrected), (d, d).

        Computed centred and scaled (points divided by a power of two near their largest entry,
        so no intermediate overflows or underflows needlessly).

        Raises
        ------
        FloatingPointError
            The covariance itself is not representable in float64 (e.g. points of size 1e200
            give variances of order 1e400).
        """
        unit, scale = self._scaled()
        c = unit - self._weights @ unit
        unit_cov = (c * self._weights[:, None]).T @ c
        with np.errstate(over="ignore", invalid="ignore"):
            out = (unit_cov * scale) * scale
        if not np.all(np.isfinite(out)):
            big = np.log10(np.abs(unit_cov).max()) + 2 * np.log10(scale)
            raise FloatingPointError(
                f"cov of this measure overflows float64 (entries of order 1e{big:.0f}); rescale the points"
            )
        return out

    def __len__(self):
        return self.n

    def __repr__(self):
        pos = "" if self._positions is None else ", with positions"
        return f"Empirical(n={self.n}, d={self.d}{pos})"


class Gaussian:
    r"""A Gaussian measure :math:`\mathcal N(\alpha, \Sigma)` on :math:`\mathbb R^d`.

    Parameters
    ----------
    mean : array_like, shape (d,)
        The mean :math:`\alpha`.
    cov : array_like, shape (d, d)
        The covariance :math:`\Sigma`, symmetric positive semi-definite (degenerate Gaussians are
        allowed: they are the low-rank limits of the clustering chapter).

    Raises
    ------
    TypeError
        ``mean`` or ``cov`` not real numeric (bool, complex, strings, objects).
    ValueError
        NaN/inf, d = 0, ``cov`` not square, not symmetric or indefinite, shapes that do not match.

    Examples
    --------
    >>> import numpy as np
    >>> import tpde_lib as tp
    >>> g = tp.Gaussian(np.zeros(2), np.diag([1.0, 4.0]))
    >>> g
    Gaussian(d=2, mean=[0. 0.])
    >>> mu = g.sample(20_000, seed=0)
    >>> np.round(np.diag(mu.cov()), 1)
    array([1., 4.])
    """

    def __init__(self, mean: ArrayLike, cov: ArrayLike) -> None:
        m = as_float_array("mean", mean, ndim=1)  # d >= 1 (the input policy)
        c = as_float_array("cov", cov, ndim=2)
        if c.shape != (m.size, m.size):
            raise ValueError(
                f"cov must have shape ({m.size}, {m.size}) to match mean of shape {m.shape}, got {c.shape}"
            )
        c = as_nonnegative_variances("cov", as_covariance("cov", c))
        m, c = np.array(m, copy=True), np.array(c, copy=True)
        m.setflags(write=False)
        c.setflags(write=False)
        self._mean, self._cov = m, c

    mean = property(lambda self: self._mean, doc="(d,) mean vector alpha.")
    cov = property(lambda self: self._cov, doc="(d, d) covariance matrix Sigma.")
    d = property(lambda self: self._mean.size, doc="Dimension.")

    def sample(
        self, n: int, seed: int | np.random.Generator = 0, positions: ArrayLike | None = None
    ) -> Empirical:
        """Draw ``n`` i.i.d. points into a uniformly weighted :class:`Empirical`.

        Parameters
        ----------
        n : int
            Number of tokens, ``n >= 1`` (an ``int``: ``2.0`` and ``True`` raise ``TypeError``).
        seed : int or numpy.random.Generator
            Seed for ``np.random.default_rng``: an ``int >= 0`` or a Generator.
        positions : array_like, shape (n,), optional
            Sequence positions attached to the sample (masked attention).

        Returns
        -------
        Empirical

        Raises
        ------
        FloatingPointError
            The drawn points overflow float64 (a mean or covariance near the largest float).
        """
        n = as_count("n", n, 1)
        rng = as_rng("seed", seed)
        # symmetric eigen-square-root: valid for degenerate (PSD) covariances too
        lam, U = np.linalg.eigh(self._cov)
        root = U * np.sqrt(np.clip(lam, 0.0, None))
        with np.errstate(over="ignore", invalid="ignore"):
            pts = self._mean + rng.standard_normal((n, self.d)) @ root.T
        if not np.all(np.isfinite(pts)):
            raise FloatingPointError("sample: the drawn points overflow float64 (mean or cov too large)")
        return Empirical(pts, positions=positions)

    @classmethod
    def from_empirical(cls, mu: Empirical) -> Gaussian:
        """The Gaussian with the same mean and covariance as ``mu`` (moment matching)."""
        as_instance("mu", mu, Empirical, "an Empirical measure")
        return cls(mu.mean(), mu.cov())

    def __repr__(self):
        return f"Gaussian(d={self.d}, mean={np.array2string(self._mean, precision=3)})"


def as_empirical(name: str, value: object) -> Empirical:
    """``value`` if it is an :class:`Empirical` measure, else ``TypeError`` naming ``name``."""
    return as_instance(name, value, Empirical, "an Empirical measure")
