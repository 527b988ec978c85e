r"""Probability measures on token space: empirical measures and Gaussians.

A sequence of :math:`n` tokens :math:`x_1, \dots, x_n \in \mathbb R^d` is the empirical measure
:math:`\mu^n = \sum_i w_i \delta_{x_i}` (uniform weights :math:`w_i = 1/n` by default). For masked
(causal) attention each token also carries a position :math:`s_i \in [0, 1]` and the measure lives
on :math:`\mathbb R^d \times [0, 1]` (paper notes §2.8).
"""

from __future__ import annotations

import numpy as np

from ._checks import as_covariance, as_float_array

__all__ = ["Empirical", "Gaussian"]

_WEIGHT_SUM_TOL = 1e-9


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
    ValueError
        Wrong shapes, NaN or infinite values, negative weights, weights not summing to 1,
        positions outside [0, 1].
    """

    def __init__(self, points, weights=None, positions=None):
        pts = as_float_array("points", points, ndim=2)
        n = pts.shape[0]
        if n == 0 or pts.shape[1] == 0:
            raise ValueError(f"points must have at least one token and one dimension, got {pts.shape}")
        if weights is None:
            w = np.full(n, 1.0 / n)
        else:
            w = as_float_array("weights", weights, shape=(n,))
            if np.any(w < 0):
                raise ValueError("weights must be non-negative")
            if abs(w.sum() - 1.0) > _WEIGHT_SUM_TOL:
                raise ValueError(f"weights must sum to 1, got {w.sum():.12g}")
        if positions is None:
            s = None
        else:
            s = as_float_array("positions", positions, shape=(n,))
            if np.any((s < 0) | (s > 1)):
                raise ValueError("positions must lie in [0, 1]")
        # private read-only copies: the caller's arrays stay writable and cannot change us
        self._points, self._weights, self._positions = (
            None if a is None else np.array(a, copy=True) for a in (pts, w, s))
        for a in (self._points, self._weights, self._positions):
            if a is not None:
                a.setflags(write=False)

    # read-only views: a measure is a value, simulations build new ones
    points = property(lambda self: self._points, doc="(n, d) array of token positions.")
    weights = property(lambda self: self._weights, doc="(n,) array of masses summing to 1.")
    positions = property(lambda self: self._positions,
                         doc="(n,) array of sequence positions in [0, 1], or None.")
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

    def with_points(self, points):
        """The same weights and positions carried by new points of the same shape (n, d)."""
        pts = as_float_array("points", points, shape=self._points.shape)
        return Empirical(pts, self._weights, self._positions)

    def mean(self):
        r"""Mean :math:`\int y \, d\mu(y)`, shape (d,)."""
        return self._weights @ self._points

    def cov(self):
        r"""Covariance :math:`\int (y - m)(y - m)^\top d\mu(y)` (weighted, not Bessel-corrected), (d, d)."""
        c = self._points - self.mean()
        return (c * self._weights[:, None]).T @ c

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
    ValueError
        NaN/inf, ``cov`` not square, not symmetric or indefinite, shapes that do not match.
    """

    def __init__(self, mean, cov):
        m = as_float_array("mean", mean, ndim=1)
        if m.size == 0:
            raise ValueError("mean must have at least one entry")
        c = as_float_array("cov", cov, ndim=2)
        if c.shape != (m.size, m.size):
            raise ValueError(f"cov must have shape ({m.size}, {m.size}) to match mean of shape "
                             f"{m.shape}, got {c.shape}")
        c = as_covariance("cov", c)
        m, c = np.array(m, copy=True), np.array(c, copy=True)
        m.setflags(write=False)
        c.setflags(write=False)
        self._mean, self._cov = m, c

    mean = property(lambda self: self._mean, doc="(d,) mean vector alpha.")
    cov = property(lambda self: self._cov, doc="(d, d) covariance matrix Sigma.")
    d = property(lambda self: self._mean.size, doc="Dimension.")

    def sample(self, n, seed=0, positions=None):
        """Draw ``n`` i.i.d. points into a uniformly weighted :class:`Empirical`.

        Parameters
        ----------
        n : int
            Number of tokens.
        seed : int or numpy.random.Generator
            Seed for ``np.random.default_rng``.
        positions : array_like, shape (n,), optional
            Sequence positions attached to the sample (masked attention).

        Returns
        -------
        Empirical
        """
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive integer, got {n!r}")
        rng = np.random.default_rng(seed)
        # symmetric eigen-square-root: valid for degenerate (PSD) covariances too
        lam, U = np.linalg.eigh(self._cov)
        root = U * np.sqrt(np.clip(lam, 0.0, None))
        pts = self._mean + rng.standard_normal((n, self.d)) @ root.T
        return Empirical(pts, positions=positions)

    @classmethod
    def from_empirical(cls, mu):
        """The Gaussian with the same mean and covariance as ``mu`` (moment matching)."""
        return cls(mu.mean(), mu.cov())

    def __repr__(self):
        return f"Gaussian(d={self.d}, mean={np.array2string(self._mean, precision=3)})"
