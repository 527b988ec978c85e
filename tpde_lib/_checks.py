"""Input validation shared by the public constructors and functions: the library's input policy.

Every public entry point validates its arguments here once, at the boundary, and then trusts
them. The policy, applied by the small helpers below (call them from anywhere; each takes the
argument's *name* first, so that every error names it):

Arrays (:func:`as_float_array`, :func:`as_square`, :func:`as_covariance`, :func:`as_times`)
    Real numeric only: int or float dtypes (and object arrays holding only Python ints and
    floats), returned as float64. Bool, complex, string, bytes, datetime and other object arrays
    raise ``TypeError``, as do callables and ``None``. Every entry must be finite (``ValueError``).
    Shapes are checked against the expected shape, which the message spells out (``*`` for any
    length); every axis must have length >= 1 (no d = 0 or n = 0 arrays) unless the caller
    allows empty arrays explicitly.
Real scalars (:func:`as_finite`, :func:`as_positive`, :func:`as_at_least`)
    Times, tolerances, step sizes, exponents: Python/NumPy ints and floats or 0-d real arrays;
    ``bool``, ``str``, ``complex`` and other objects raise ``TypeError``; the value must be finite
    and have the documented sign (``ValueError``).
Flags (:func:`as_flag`)
    Exactly ``bool`` (or ``numpy.bool_``): ``causal="False"`` or ``1`` raise ``TypeError``.
Counts, iteration caps and seeds (:func:`as_count`, :func:`as_seed`)
    Python or NumPy integers, not ``bool`` and not floats (``TypeError``), at least the documented
    minimum (``ValueError``); seeds are >= 0 (a ``numpy.random.Generator`` is accepted only where
    the docstring says so).
Weights (:func:`as_weights`)
    Masses of a measure: non-negative, summing to 1 to within ``WEIGHT_SUM_TOL`` (1e-9), one
    message wherever they enter (``Empirical``, the sphere's energies, the coupled distance, the
    masked bounds and the figures, which only need them non-negative).
Choices (:func:`as_choice`), indices (:func:`as_index`), types (:func:`as_instance`)
    A string option must be one of the listed values (``ValueError`` listing them); an index is
    an integer in range (``IndexError`` giving the range); an object of the wrong class raises
    ``TypeError`` saying what was expected.

Batches, inverses, blow-up times (:func:`as_square_batch`, :func:`as_nonsingular`, :func:`as_blowup_times`)
    Stacks of square matrices ``(..., d, d)``; a matrix to be inverted must have a condition
    number below 1e13 (``ValueError`` naming it, never numpy's bare "Singular matrix"); blow-up
    times are ``>= 0`` or ``inf`` (a NaN is not "no blow-up").
What a reader's callables return (:func:`checked_result`)
    Checked where it comes back: real dtype, the expected shape (a scalar is not broadcast), no
    NaN (nor inf unless allowed); the error names the callable and what was expected.

Arguments that the chosen method ignores are still validated (``rtol=-1`` with a fixed-step
method raises). Messages start with the argument's name and say what was expected and what was
got, e.g. ``"h must be a finite positive number, got -1"``.
"""

from __future__ import annotations

import numbers
import operator

import numpy as np


def _describe_shape(shape):
    inner = ", ".join("*" if s is None else str(s) for s in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def as_ndarray(name, value):
    """``np.asarray(value)``, with a ragged nested sequence reported as a ``ValueError`` naming
    ``name`` (numpy's own message names nothing). No dtype or shape check."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} must be a rectangular array ({exc})") from exc


def as_real_array(name, value):
    """``value`` as a float64 array if it is real numeric, else ``TypeError`` naming ``name``."""
    if callable(value):
        raise TypeError(f"{name} must be an array of real numbers, got a callable")
    if value is None or isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be an array of real numbers, got {type(value).__name__}")
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:  # ragged nested sequences
        raise ValueError(f"{name} must be a rectangular array of real numbers ({exc})") from exc
    kind = arr.dtype.kind
    if kind == "O":
        flat = arr.ravel()
        for item in flat:
            if isinstance(item, (bool, np.bool_)) or not isinstance(item, numbers.Real):
                raise TypeError(
                    f"{name} must be an array of real numbers (int or float), got an "
                    f"element of type {type(item).__name__}"
                )
        try:
            return np.array([float(v) for v in flat], dtype=float).reshape(arr.shape)
        except OverflowError as exc:
            raise ValueError(f"{name} contains a number too large for float64") from exc
    if kind == "b":
        raise TypeError(f"{name} must be an array of real numbers (int or float), got a bool array")
    if kind == "c":
        raise TypeError(
            f"{name} must be an array of real numbers (int or float), got a complex array "
            "(pass the real part explicitly if that is what you mean)"
        )
    if kind not in "iuf":
        raise TypeError(f"{name} must be an array of real numbers (int or float), got dtype {arr.dtype}")
    return arr.astype(float, copy=False)


def as_float_array(name, value, ndim=None, shape=None, allow_empty=False):
    """Return ``value`` as a finite float64 array, checking its dtype, dimension and shape.

    Parameters
    ----------
    name : str
        Argument name used in error messages.
    value : array_like
        Real numeric (int or float); bool, complex, string and object arrays are rejected.
    ndim : int, optional
        Required number of dimensions.
    shape : tuple of (int or None), optional
        Required shape; ``None`` entries match any length.
    allow_empty : bool, default False
        Accept arrays with a zero-length axis (by default every axis must have length >= 1).

    Returns
    -------
    ndarray of float64 (the input itself when it already is one)

    Raises
    ------
    TypeError
        Not real numeric (names ``name``).
    ValueError
        Wrong dimension or shape (the expected shape is in the message), an empty axis, NaN or
        infinite entries.
    """
    arr = as_real_array(name, value)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    if shape is not None:
        if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape)):
            raise ValueError(f"{name} must have shape {_describe_shape(shape)}, got {arr.shape}")
    if not allow_empty and arr.size == 0:
        raise ValueError(
            f"{name} must have length >= 1 along every axis (dimensions >= 1), got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        where = "" if arr.ndim == 0 else f" (first at index {tuple(int(i) for i in bad)})"
        raise ValueError(f"{name} contains NaN or infinite values{where}")
    return arr


def unit_scale(*arrays):
    """A power of two ``s`` with ``max|entry| / s`` in [1, 2) (1.0 if every entry is 0).

    Dividing by it is exact (barring subnormals) and never overflows: the scaling used to compute
    moments, distances and eigenvalues at any magnitude (1e-300 ... 1e300).
    """
    big = max(float(np.abs(a).max()) if np.size(a) else 0.0 for a in arrays)
    return float(np.ldexp(1.0, int(np.frexp(big)[1]) - 1)) if big > 0 else 1.0


def as_square(name, value, d=None):
    """A finite square matrix of size >= 1, of size ``d`` when given."""
    arr = as_float_array(name, value, ndim=2)
    if arr.shape[0] != arr.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {arr.shape}")
    if d is not None and arr.shape[0] != d:
        raise ValueError(f"{name} must have shape ({d}, {d}) to match dimension d={d}, got {arr.shape}")
    return arr


def as_covariance(name, value, d=None, rtol=1e-8):
    """A symmetric positive semi-definite matrix (returned exactly symmetrised).

    Symmetry is checked to relative tolerance ``rtol`` of the largest entry; positive
    semi-definiteness allows eigenvalues down to ``-rtol * max|entry|`` (round-off). The test is
    scale-free: the matrix is divided by a power of two near its largest entry first, so that
    entries near 1e300 or 1e-300 neither overflow nor underflow.
    """
    S = as_square(name, value, d)
    scale = unit_scale(S)
    U = S / scale
    asym = np.abs(U - U.T).max()
    if asym > rtol * max(np.abs(U).max(), np.finfo(float).tiny):
        raise ValueError(f"{name} must be symmetric (max |{name} - {name}^T| = {asym * scale:.3g})")
    S = 0.5 * S + 0.5 * S.T  # halves first: no overflow near the largest float
    eig_min = np.linalg.eigvalsh(0.5 * (U + U.T))[0]
    if eig_min < -rtol * np.abs(U).max():
        raise ValueError(f"{name} must be positive semi-definite (smallest eigenvalue {eig_min * scale:.3g})")
    return S


def as_times(name, value):
    """A 1-D array of strictly increasing, finite times (at least one) with a finite span."""
    t = as_float_array(name, value, ndim=1)
    with np.errstate(over="ignore"):
        gaps = np.diff(t)
    if np.any(gaps <= 0):
        k = int(np.argmax(gaps <= 0))
        raise ValueError(
            f"{name} must be strictly increasing, got {name}[{k}]={t[k]:g} >= {name}[{k + 1}]={t[k + 1]:g}"
        )
    with np.errstate(over="ignore"):
        span = t[-1] - t[0]
    if not np.isfinite(span):
        raise ValueError(f"{name} must span a finite interval: {name}[-1] - {name}[0] overflows float64")
    return t


def _as_real(name, value, accept, expected):
    """A real scalar as float: ``TypeError`` unless int/float (not bool), ``ValueError`` unless ``accept``."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be {expected} (an int or float), got {type(value).__name__} {value!r:.40}"
        )
    try:
        x = float(value)
    except OverflowError as exc:
        raise ValueError(f"{name} must be {expected}, got a number too large for float64") from exc
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


def as_flag(name, value):
    """A ``bool`` flag (``numpy.bool_`` accepted); strings, ints and None raise ``TypeError``."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False (a bool), got {type(value).__name__} {value!r:.40}")


def _as_int(name, value, expected):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(
            f"{name} must be {expected} (an int, not a {type(value).__name__}), got {value!r:.40}"
        )
    return operator.index(value)


def as_count(name, value, minimum=1, maximum=None):
    """An ``int`` count or iteration cap with ``minimum <= value`` (``<= maximum`` when given).

    ``bool`` and floats (even integral ones such as ``10.0``) raise ``TypeError``.
    """
    expected = f"an integer >= {minimum}" + ("" if maximum is None else f" and <= {maximum}")
    k = _as_int(name, value, expected)
    if k < minimum or (maximum is not None and k > maximum):
        raise ValueError(f"{name} must be {expected}, got {k}")
    return k


def as_seed(name, value, allow_generator=False):
    """A seed for ``numpy.random.default_rng``: an ``int >= 0`` (or a Generator if allowed)."""
    if allow_generator and isinstance(value, np.random.Generator):
        return value
    expected = "a non-negative integer seed" + (" or a numpy.random.Generator" if allow_generator else "")
    k = _as_int(name, value, expected)
    if k < 0:
        raise ValueError(f"{name} must be {expected}, got {k}")
    return k


def as_rng(name, value):
    """``numpy.random.default_rng(value)`` for a validated seed (int >= 0 or a Generator)."""
    return np.random.default_rng(as_seed(name, value, allow_generator=True))


def as_choice(name, value, choices):
    """``value`` if it is one of the strings ``choices``, else ``ValueError`` listing them."""
    if isinstance(value, str) and value in choices:
        return value
    listed = ", ".join(repr(c) for c in choices)
    raise ValueError(f"{name} must be one of {listed}, got {value!r:.60}")


#: how far from 1 the masses of a probability measure may sum (round-off of their computation)
WEIGHT_SUM_TOL = 1e-9


def as_weights(name, value, n=None, normalised=True):
    """Masses: a finite 1-D float64 array of ``n`` entries (any length >= 1 when ``n`` is None),
    non-negative and, when ``normalised``, summing to 1 to within :data:`WEIGHT_SUM_TOL`.

    ``TypeError`` unless real numeric; ``ValueError`` (one message, naming ``name``) for a wrong
    shape, a negative mass or another sum.
    """
    w = as_float_array(name, value, ndim=1) if n is None else as_float_array(name, value, shape=(n,))
    expected = "non-negative masses" + (f" summing to 1 (within {WEIGHT_SUM_TOL:g})" if normalised else "")
    if np.any(w < 0):
        raise ValueError(f"{name} must be {expected}, got a negative mass {w.min():.12g}")
    if normalised and abs(w.sum() - 1.0) > WEIGHT_SUM_TOL:
        raise ValueError(f"{name} must be {expected}, got masses summing to {w.sum():.12g}")
    return w


def as_index(name, value, length, what="entries"):
    """An integer index into ``length`` items (negative counts from the end), made non-negative.

    ``TypeError`` for non-integers (including ``bool``), ``IndexError`` giving the valid range.
    """
    k = _as_int(name, value, "an integer index")
    if not -length <= k < length:
        raise IndexError(
            f"{name}={k} is out of range: there are {length} {what}, so {name} must lie "
            f"in [{-length}, {length - 1}]"
        )
    return k % length


def as_instance(name, value, cls, what):
    """``value`` if it is an instance of ``cls``, else ``TypeError`` saying it must be ``what``."""
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    return value


def as_sink_mass(value, allow_zero=False):
    r"""The sink mass :math:`m(\{0\}) \in (0, 1)` (``[0, 1)`` with ``allow_zero``), else ValueError."""
    m = as_at_least("sink_mass", value, 0.0) if allow_zero else as_positive("sink_mass", value)
    if m >= 1.0:
        raise ValueError(
            f"sink_mass must lie in {'[0' if allow_zero else '(0'}, 1) (the mass m({{0}}) "
            f"of the sink; 1 would put every token at s = 0, i.e. unmasked attention), "
            f"got {value!r}"
        )
    return m


def as_square_batch(name, value, d=None):
    """A finite array of square matrices, shape ``(..., d, d)`` (``d`` checked when given)."""
    arr = as_float_array(name, value)
    if arr.ndim < 2 or arr.shape[-1] != arr.shape[-2]:
        raise ValueError(f"{name} must have shape (..., d, d) (square matrices), got {arr.shape}")
    if d is not None and arr.shape[-1] != d:
        raise ValueError(f"{name} must have shape (..., {d}, {d}) to match d={d}, got {arr.shape}")
    return arr


def as_generator(name, value):
    """``value`` if it is a ``numpy.random.Generator``, else ``TypeError``."""
    if not isinstance(value, np.random.Generator):
        raise TypeError(
            f"{name} must be a numpy.random.Generator (np.random.default_rng(seed)), "
            f"got {type(value).__name__}"
        )
    return value


def as_nonsingular(name, value, rcond=1e-13):
    """Square matrices (..., d, d) whose condition numbers are below ``1/rcond``, else ValueError.

    The error names the argument and gives the condition number, where numpy would raise a bare
    ``LinAlgError("Singular matrix")`` or return round-off.
    """
    arr = as_square_batch(name, value)
    scale = unit_scale(arr)
    sv = np.linalg.svd(arr / scale, compute_uv=False)
    smax, smin = sv[..., 0], sv[..., -1]
    bad = ~(smin > rcond * smax)
    if np.any(bad):
        where = "" if arr.ndim == 2 else f" (first at index {tuple(int(i) for i in np.argwhere(bad)[0])})"
        cond = np.inf if not np.any(smin[bad]) else float((smax / np.where(smin > 0, smin, 1))[bad].max())
        raise ValueError(
            f"{name} must be invertible, got a singular or numerically singular "
            f"matrix{where} (condition number {cond:.3g} > {1 / rcond:.0e})"
        )
    return arr


def as_blowup_times(name, value, shape=None):
    """Blow-up times: an array of numbers >= 0 or ``+inf`` (none); NaN and negatives raise ValueError."""
    arr = as_real_array(name, value)
    if shape is not None and (
        arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape))
    ):
        raise ValueError(f"{name} must have shape {_describe_shape(shape)}, got {arr.shape}")
    if np.any(np.isnan(arr)) or np.any(arr < 0):
        raise ValueError(
            f"{name} must hold times >= 0 or inf (no blow-up); a NaN or negative "
            f"time is neither, got {arr[np.isnan(arr) | (arr < 0)][0]!r}"
        )
    return arr


def checked_result(
    name, value, shape=None, *, part=None, when="", finite=True, allow_inf=False, nonfinite=ValueError
):
    """What a reader's callable (or a variant's field) ``name`` returned, checked where it comes
    back: the one check of results, with one message for each way it can be wrong.

    Real numbers (int or float; ``TypeError`` otherwise), returned as float64 (the value itself
    when it already is); of ``shape`` when given, a scalar not broadcast (``ValueError``); with
    ``finite``, no NaN and no infinity (``allow_inf``: no NaN), else ``nonfinite`` is raised
    (``ValueError``; ``FloatingPointError`` where a non-finite field means a blow-up). ``part``
    names the part of a result that is checked (``"M"``, ``"the mean derivative"``), ``when``
    is appended to every message (``" at t=0.5"``).
    """
    obj = "an array" if part is None else part
    want = f"{obj} of real numbers" + ("" if shape is None else f" of shape {tuple(shape)}")
    if value is None or isinstance(value, (str, bytes)) or callable(value):
        raise TypeError(f"{name} must return {want}{when}, got {type(value).__name__}")
    try:
        arr = value if type(value) is np.ndarray else np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must return {want}{when} ({exc})") from exc
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must return {want}{when}, got dtype {arr.dtype}")
    arr = arr.astype(float, copy=False)
    if shape is not None and arr.shape != tuple(shape):
        raise ValueError(f"{name} must return {obj} of shape {tuple(shape)}{when}, got shape {arr.shape}")
    if finite and not (np.isfinite(arr).all() if not allow_inf else not np.isnan(arr).any()):
        where = "" if part is None else f" in {part}"
        raise nonfinite(f"{name} returned NaN{'' if allow_inf else ' or infinite'} values{where}{when}")
    return arr


def as_callable_of(name, func, expected, *args):
    """``func`` if its signature accepts the positional ``args`` (a sample call, not made), else
    ``TypeError`` naming ``name`` and the ``expected`` signature, e.g. ``"(t, y, idx)"``, where
    Python would raise a bare TypeError from deep inside the library. Callables whose signature
    cannot be read (some builtins) pass."""
    import inspect

    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return func
    try:
        sig.bind(*args)
    except TypeError as exc:
        label = getattr(func, "__name__", type(func).__name__)
        raise TypeError(f"{name} must be a callable {name}{expected}, got {label}{sig} ({exc})") from None
    return func


def as_nonnegative_variances(name, S, rtol=1e-12):
    """``S`` (a covariance, already checked by :func:`as_covariance`) if no diagonal entry (a
    variance) is below ``-rtol`` times its largest entry, else ``ValueError`` naming ``name``.

    The eigenvalue test of :func:`as_covariance` allows ``-1e-8`` (round-off of computed
    matrices, e.g. integrated covariances of low rank); a variance is a single entry whose
    round-off is about ``d`` 2^-52 of the largest, so ``-1e-9`` of it is a negative variance,
    not round-off, and a ``Gaussian`` with it is refused."""
    diag = np.diagonal(S)
    scale = unit_scale(S)
    low = float((diag / scale).min())
    if low < -rtol * float(np.abs(S / scale).max()):
        k = int(np.argmin(diag))
        raise ValueError(
            f"{name} must have non-negative variances (diagonal entries), got "
            f"{name}[{k}, {k}] = {diag[k]:.3g}"
        )
    return S
