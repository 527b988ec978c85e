"""Input validation shared by the public constructors and functions.

Every public entry point validates its arguments here once and then trusts them; each error names
the argument and says what was expected.
"""

from __future__ import annotations

import numpy as np


def as_float_array(name, value, ndim=None, shape=None):
    """Return ``value`` as a finite float64 array, checking its dimension and shape.

    Parameters
    ----------
    name : str
        Argument name used in error messages.
    value : array_like
    ndim : int, optional
        Required number of dimensions.
    shape : tuple of (int or None), optional
        Required shape; ``None`` entries match any length.
    """
    if callable(value):
        raise TypeError(f"{name} must be an array, got a callable")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be an array of real numbers, got {type(value).__name__}") from exc
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    if shape is not None:
        if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name} must have shape {want}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def as_square(name, value, d=None):
    """A finite square matrix, of size ``d`` when given."""
    arr = as_float_array(name, value, ndim=2)
    if arr.shape[0] != arr.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {arr.shape}")
    if d is not None and arr.shape[0] != d:
        raise ValueError(f"{name} must have shape ({d}, {d}) to match dimension d={d}, got {arr.shape}")
    return arr


def as_covariance(name, value, d=None, rtol=1e-8):
    """A symmetric positive semi-definite matrix (returned exactly symmetrised).

    Symmetry is checked to relative tolerance ``rtol`` of the largest entry; positive
    semi-definiteness allows eigenvalues down to ``-rtol * max|eig|`` (round-off).
    """
    S = as_square(name, value, d)
    scale = max(np.abs(S).max(), np.finfo(float).tiny)
    if np.abs(S - S.T).max() > rtol * scale:
        raise ValueError(f"{name} must be symmetric (max |{name} - {name}^T| = "
                         f"{np.abs(S - S.T).max():.3g})")
    S = 0.5 * (S + S.T)
    eig_min = np.linalg.eigvalsh(S)[0] if S.size else 0.0
    if eig_min < -rtol * scale:
        raise ValueError(f"{name} must be positive semi-definite (smallest eigenvalue {eig_min:.3g})")
    return S


def as_times(name, value):
    """A 1-D array of strictly increasing, finite times (at least one)."""
    t = as_float_array(name, value, ndim=1)
    if t.size == 0:
        raise ValueError(f"{name} must contain at least one time")
    if np.any(np.diff(t) <= 0):
        raise ValueError(f"{name} must be strictly increasing")
    return t


def _as_real(name, value, accept, expected):
    """``float(value)``, raising TypeError if it is not a number, ValueError unless ``accept``."""
    try:
        x = float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__}") from exc
    if not (np.isfinite(x) and accept(x)):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return x


def as_positive(name, value):
    """A finite, strictly positive float."""
    return _as_real(name, value, lambda x: x > 0, "a finite positive number")


def as_at_least(name, value, minimum, why=""):
    """A finite float ``>= minimum``; ``why`` is appended to the error message."""
    return _as_real(name, value, lambda x: x >= minimum, f"a finite number >= {minimum:g}{why}")


def as_finite(name, value):
    """A finite float (any sign)."""
    return _as_real(name, value, lambda x: True, "finite (a real number)")
