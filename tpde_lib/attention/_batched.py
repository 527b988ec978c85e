r"""Softmax fields of many small clouds at once: the kernel sums vectorised over a batch.

A batch of ``B`` clouds of ``n`` tokens each (``points`` of shape (B, n, d)) whose score matrices
are small (at most ``_SMALL_ENTRIES`` scores per member, the size below which the engine
computes a member as one dense matrix, :func:`._kernels._small_sums`) is computed here chunk by
chunk of members, each chunk by the same numpy operations as one member, stacked: stacked matrix
products (``np.matmul`` multiplies each member's matrices with the same BLAS call as a single
product of those shapes), row maxima, shifts and exponentials element by element. Every member's
result is therefore bitwise the one :func:`._kernels.engine_sums` gives it alone (tested), and the
chunks, spread over the engine's threads, do not depend on the thread count.

Chunks hold about ``_CHUNK_ENTRIES`` scores (1 MB), so that a chunk's scores stay in the cache
between the product that makes them, the exponential and the product that sums them.
"""

from __future__ import annotations

import numpy as np

from .._threads import held_blas, parallel_blocks
from ._kernels import _CHUNK_ENTRIES, _SMALL_ENTRIES

#: up to this many keys, row maxima are taken column by column (one vectorised ``maximum``
#: per key over the whole chunk) rather than by a reduction along each short row
_COLUMNWISE_MAX = 48


def _row_max(S):
    """``S.max(axis=2)`` for a chunk (b, r, m): exact either way (a maximum does not round),
    column by column for few keys, where numpy's reduction pays its set-up per row."""
    m = S.shape[2]
    if m > _COLUMNWISE_MAX:
        return S.max(axis=2)
    out = S[:, :, 0].copy()
    for j in range(1, m):
        np.maximum(out, S[:, :, j], out=out)
    return out


def fits(rows: int, keys: int) -> bool:
    """Whether a member with ``rows`` queries and ``keys`` keys is computed as one dense matrix
    by the engine (so that the stacked computation here is bitwise the engine's)."""
    return 0 < rows * keys <= _SMALL_ENTRIES


def softmax_sums(queries, keys, values, q_pos=None, k_pos=None):
    """Shifted softmax kernel sums of every member, ``sum_j exp(S_ij - M_i) values_j``.

    Parameters
    ----------
    queries : ndarray, shape (B, r, p)
    keys : ndarray, shape (B, m, p)
    values : ndarray, shape (B, m, c)
    q_pos, k_pos : ndarray, shapes (B, r) and (B, m), optional
        Causal mask: query ``i`` of a member sees key ``j`` iff ``k_pos[j] <= q_pos[i]``.

    Returns
    -------
    ndarray, shape (B, r, c)
        Member ``b`` is bitwise ``engine_sums(queries[b], keys[b], values[b], "softmax", ...)``
        whenever ``fits(r, m)``; rows that see no key are NaN, as there.
    """
    B, r, _ = queries.shape
    m, c = keys.shape[1], values.shape[2]
    queries = np.ascontiguousarray(queries, dtype=np.float64)
    keys = np.ascontiguousarray(keys, dtype=np.float64)
    values = np.ascontiguousarray(values, dtype=np.float64)
    out = np.empty((B, r, c))
    per = max(1, _CHUNK_ENTRIES // max(1, r * m))
    nchunks = -(-B // per)

    def chunk(i):
        lo, hi = i * per, min(B, (i + 1) * per)
        S = np.matmul(queries[lo:hi], keys[lo:hi].transpose(0, 2, 1))  # (b, r, m)
        seen = None
        if q_pos is not None:
            S[k_pos[lo:hi, None, :] > q_pos[lo:hi, :, None]] = -np.inf
            shift = _row_max(S)
            seen = np.isfinite(shift)
            S -= np.where(seen, shift, 0.0)[:, :, None]
        else:
            S -= _row_max(S)[:, :, None]
        np.exp(S, out=S)
        sums = np.matmul(S, values[lo:hi], out=out[lo:hi])
        if seen is not None:
            sums[~seen] = np.nan

    entries = B * r * m
    with held_blas(entries, nchunks):
        parallel_blocks(nchunks, chunk, entries)
    return out


def softmax_heads_field(heads, points, weights, positions, t):
    """The summed field of plain softmax heads on every member, shape (B, n, d): bitwise
    ``Softmax._summed_field(heads, points[b], weights[b], positions[b], t)`` for each ``b``,
    provided every weight is positive and ``fits(len(heads) * n, n)``.

    Parameters
    ----------
    heads : sequence of Softmax
    points : ndarray, shape (B, n, d)
    weights : ndarray, shape (B, n)
    positions : ndarray, shape (B, n), or None
    t : float
    """
    B, n, _ = points.shape
    H = len(heads)
    queries = [np.matmul(points, np.ascontiguousarray(h.A(t).T)) for h in heads]
    queries = queries[0] if H == 1 else np.concatenate(queries, axis=1)  # (B, H n, d)
    values = np.empty((B, n, points.shape[2] + 1))
    np.multiply(points, weights[:, :, None], out=values[:, :, :-1])
    values[:, :, -1] = weights
    q_pos = None if positions is None else np.tile(positions, (1, H))
    nd = softmax_sums(queries, points, values, q_pos, positions)
    out = None
    for i, h in enumerate(heads):
        part = nd[:, i * n : (i + 1) * n]
        avg = part[:, :, :-1] / part[:, :, -1:]
        term = np.matmul(avg, np.ascontiguousarray(h.V(t).T))
        if out is None:
            out = term
        else:
            out += term
    return out
