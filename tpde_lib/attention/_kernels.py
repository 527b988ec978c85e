r"""The blocked kernel engine shared by every attention variant.

All attention fields below are ratios or sums of kernel sums

.. math:: \Big(\sum_j \kappa(S_{ij})\,\mathrm{values}_j\Big)_i, \qquad S = \mathrm{queries}\,
          \mathrm{keys}^\top,

over the tokens ``j`` of the measure (their masses enter through ``values``). :func:`kernel_sums`
evaluates them in blocks of query rows, so that memory stays :math:`O(b\,m)` for blocks of ``b``
rows whatever the number ``n`` of queries, and applies the causal mask of masked attention.
A reader's variant gets bounded memory and masking by calling it with its own kernel.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

__all__ = ["kernel_sums", "KERNELS"]

#: numbers in one block of interactions (4e6 float64 = 32 MB): block rows b = max(1, this // m)
_BLOCK_ENTRIES = 4_000_000

#: the built-in kernels (see :func:`kernel_sums`)
KERNELS = ("softmax", "exp", "sigmoid")


def _check_2d(name, value, cols=None):
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f" or value.ndim != 2:
        got = (f"{value.dtype} array of shape {value.shape}" if isinstance(value, np.ndarray)
               else type(value).__name__)
        raise TypeError(f"{name} must be a 2-d float array, got {got}")
    if cols is not None and value.shape[1] != cols:
        raise ValueError(f"{name} must have {cols} columns, got shape {value.shape}")


def kernel_sums(queries, keys, values, kind, q_pos=None, k_pos=None):
    r"""Blocked kernel sums :math:`\sum_j \kappa(S_{ij})\,\mathrm{values}_j`, :math:`S = QK^\top`.

    Parameters
    ----------
    queries : ndarray of float, shape (n, p)
        Query features. The scores are ``S = queries @ keys.T``; an additive bias per key enters
        as a column of ones in ``queries`` and the bias column in ``keys``.
    keys : ndarray of float, shape (m, p)
    values : ndarray of float, shape (m, c)
        What is summed, e.g. ``[w_j y_j | w_j]`` (numerator and denominator of a normalised
        average in one matrix product).
    kind : {"softmax", "exp", "sigmoid"} or callable
        The kernel :math:`\kappa`.

        - ``"softmax"``: :math:`\sum_j e^{S_{ij}-M_i}\,\mathrm{values}_j` with the row maximum
          :math:`M_i` (it cancels when the caller divides a numerator by a denominator);
        - ``"exp"``: the same sums *and* ``M`` (shape (n,)), so that the unscaled sum is
          :math:`e^{M_i}` times row ``i``;
        - ``"sigmoid"``: :math:`\sigma(s) = 1/(1+e^{-s})`;
        - a callable ``kappa(S)`` that overwrites a block ``S`` (shape (b, m)) with
          :math:`\kappa(S)` in place and returns nothing (e.g. ``lambda S: np.maximum(S, 0,
          out=S)`` for ReLU attention). Masked entries are set to 0 after it is applied.
    q_pos, k_pos : ndarray, shape (n,) and (m,), optional
        Sequence positions (masked attention): query ``i`` sees key ``j`` only when
        ``k_pos[j] <= q_pos[i]``. Give both or neither.

    Returns
    -------
    sums : ndarray, shape (n, c)
    row_max : ndarray, shape (n,)
        Only for ``kind="exp"``.

    Notes
    -----
    Memory: one buffer of at most ``_BLOCK_ENTRIES`` (4e6) scores is reused by every block. With
    a mask, a query with no visible key gets a zero row for the callable and sigmoid kernels and
    ``nan`` for ``"softmax"``/``"exp"`` (an empty normalisation; the variants never ask for it).
    """
    _check_2d("queries", queries)
    _check_2d("keys", keys, queries.shape[1])
    _check_2d("values", values)
    if values.shape[0] != keys.shape[0]:
        raise ValueError(f"values must have one row per key ({keys.shape[0]}), got shape "
                         f"{values.shape}")
    if not (callable(kind) or kind in KERNELS):
        raise ValueError(f"kind must be one of {KERNELS} or a callable, got {kind!r}")
    if (q_pos is None) != (k_pos is None):
        raise ValueError("q_pos and k_pos must be given together (masked attention) or not at all")
    masked = q_pos is not None
    if masked:
        q_pos, k_pos = np.asarray(q_pos, dtype=float), np.asarray(k_pos, dtype=float)
        if q_pos.shape != (queries.shape[0],) or k_pos.shape != (keys.shape[0],):
            raise ValueError(f"q_pos and k_pos must have shapes ({queries.shape[0]},) and "
                             f"({keys.shape[0]},), got {q_pos.shape} and {k_pos.shape}")
    n, m = queries.shape[0], keys.shape[0]
    out = np.empty((n, values.shape[1]))
    row_max = np.empty(n)
    b = min(n, max(1, _BLOCK_ENTRIES // max(m, 1)))
    keys_t = np.ascontiguousarray(keys.T)
    buf = np.empty((b, m))   # one buffer reused by every block: no page faults per block
    for start in range(0, n, b):
        stop = min(n, start + b)
        S = buf[: stop - start]
        np.matmul(queries[start:stop], keys_t, out=S)      # (b, m) scores
        hidden = k_pos[None, :] > q_pos[start:stop, None] if masked else None
        if callable(kind):
            kind(S)
            if masked:
                S[hidden] = 0.0
        elif kind == "sigmoid":
            expit(S, out=S)
            if masked:
                S[hidden] = 0.0
        else:
            if masked:
                S[hidden] = -np.inf
            M = np.max(S, axis=1, out=row_max[start:stop])
            S -= M[:, None]
            np.exp(S, out=S)
        np.matmul(S, values, out=out[start:stop])
    return (out, row_max) if kind == "exp" else out


def weighted_values(points, weights):
    """``[w_j y_j | w_j]``, shape (m, d + 1): numerator and denominator of a normalised average."""
    return np.hstack([points * weights[:, None], weights[:, None]])


def support(points, weights, positions):
    """Keys of positive mass: (points (m, d), weights (m,), positions (m,) or None)."""
    keep = weights > 0
    if keep.all():
        return points, weights, positions
    return points[keep], weights[keep], None if positions is None else positions[keep]
