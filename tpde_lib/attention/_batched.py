r"""Kernel sums of small clouds in one dense score array each: one cloud or a batch of them.

A call whose score matrix is small (at most ``_SMALL_ENTRIES`` scores: below that, the bounds,
tiles and threads of the blocked engine would cost more than the scores) is computed here in one
dense array of scores per member, by :func:`dense_stack`, on a stack of members: queries
(b, r, p), keys (b, m, p), values (b, m, c). The engine's small path
(:func:`._kernels._small_sums`) is this function on a stack of one cloud, and
:func:`dense_sums` is it on a whole batch (the fields' ``field_batch``, behind
:func:`tpde_lib.simulate_batch`), a chunk of members at a time, the chunks spread over the
engine's threads. Every operation acts on each member alone, with the same arithmetic whatever
the stack around it: stacked matrix products (``np.matmul`` multiplies each member's matrices
with the same BLAS call as a single product of those shapes), reductions along each member's
rows, shifts and kernels element by element. So every member of a batch is bitwise what the
engine gives it alone (tested), whatever the chunks and the thread count.

Chunks hold about ``_CHUNK_ENTRIES`` scores (1 MB), so that a chunk's scores stay in the cache
between the product that makes them, the kernel and the product that sums them.
"""

from __future__ import annotations

import numpy as np

from .._threads import held_blas, parallel_blocks

#: calls with at most this many scores (n m) per member are one dense matrix
_SMALL_ENTRIES = 32_768
#: a batch is cut into chunks of members of about this many scores (1 MB, in cache)
_CHUNK_ENTRIES = 131_072
#: row maxima of a stack of at least ``_COLUMNWISE_STACK`` members with at most
#: ``_COLUMNWISE_MAX`` keys are taken column by column (one vectorised ``maximum`` per key over
#: the whole stack) rather than by a reduction along each short row, which pays its set-up per
#: row; a maximum does not round, so either way gives the same values
_COLUMNWISE_MAX = 16
_COLUMNWISE_STACK = 8


def fits(rows: int, keys: int) -> bool:
    """Whether a member with ``rows`` queries and ``keys`` keys is one dense matrix of scores."""
    return 0 < rows * keys <= _SMALL_ENTRIES


def _row_max(S):
    """``S.max(axis=2)`` for a stack (b, r, m), column by column for many members with few
    keys (the same values: a maximum does not round)."""
    m = S.shape[2]
    if m > _COLUMNWISE_MAX or S.shape[0] < _COLUMNWISE_STACK:
        return S.max(axis=2)
    out = S[:, :, 0].copy()
    for j in range(1, m):
        np.maximum(out, S[:, :, j], out=out)
    return out


def builtin_kernel(kind, S):
    """The built-in kernel ``kind`` applied in place to the (shifted) scores ``S``: the small
    path's and the blocked engine's tiles' (:func:`._kernels._apply_kernel`)."""
    if kind == "sigmoid":
        with np.errstate(over="ignore"):
            np.exp(S, out=S)  # e^{-s}: inf for s < -709 gives sigma = 0
        S += 1.0
        np.reciprocal(S, out=S)
    else:
        np.exp(S, out=S)


def dense_stack(queries, keys, values, kind, q_pos=None, k_pos=None, call_kernel=None, out=None):
    """Kernel sums of a stack of members, each in one dense array of scores, on this thread.

    Parameters
    ----------
    queries : ndarray, shape (b, r, p)
    keys : ndarray, shape (b, m, p)
    values : ndarray, shape (b, m, c)
        Float64, C-contiguous.
    kind : {"softmax", "exp", "sigmoid"} or callable
        As for :func:`._kernels.kernel_sums`; a callable only with ``b == 1``, applied through
        ``call_kernel(kind, scores (r, m))``.
    q_pos, k_pos : ndarray, shapes (b, r) and (b, m), optional
        Causal mask: query ``i`` of a member sees key ``j`` iff ``k_pos[j] <= q_pos[i]``.
    out : ndarray, shape (b, r, c), optional
        Where to write the sums (no fresh array per chunk of a batch).

    Returns
    -------
    ndarray, shape (b, r, c), and for ``"exp"`` also the exact row maxima, shape (b, r)
        Rows of ``"softmax"``/``"exp"`` that see no key are NaN (their maxima -inf).
    """
    S = np.matmul(-queries if kind == "sigmoid" else queries, keys.transpose(0, 2, 1))
    hidden = None if q_pos is None else k_pos[:, None, :] > q_pos[:, :, None]
    shift = seen = None
    if kind in ("softmax", "exp"):  # shifted by the exact row maxima
        if hidden is not None:
            S[hidden] = -np.inf
        shift = _row_max(S)
        if hidden is not None:
            seen = np.isfinite(shift)
            S -= np.where(seen, shift, 0.0)[:, :, None]
        else:  # unmasked rows see every key: finite, given finite inputs
            S -= shift[:, :, None]
    if callable(kind):
        call_kernel(kind, S[0])
    else:
        builtin_kernel(kind, S)
    if hidden is not None and shift is None:
        S[hidden] = 0.0
    sums = np.matmul(S, values, out=out)
    if seen is not None:
        sums[~seen] = np.nan  # no visible key: an empty normalisation
    if kind == "exp":
        return sums, shift  # the exact row maxima
    return sums


def dense_sums(queries, keys, values, kind, q_pos=None, k_pos=None):
    """:func:`dense_stack` of a whole batch, a chunk of members at a time over the threads.

    Parameters
    ----------
    queries : ndarray, shape (B, r, p)
    keys : ndarray, shape (B, m, p)
    values : ndarray, shape (B, m, c)
    kind : {"softmax", "exp", "sigmoid"}
    q_pos, k_pos : ndarray, shapes (B, r) and (B, m), optional

    Returns
    -------
    ndarray, shape (B, r, c), and for ``"exp"`` the row maxima (B, r)
        Member ``b`` is bitwise ``engine_sums(queries[b], keys[b], values[b], kind, ...)``
        whenever ``fits(r, m)``.
    """
    B, r, _ = queries.shape
    m, c = keys.shape[1], values.shape[2]
    queries = np.ascontiguousarray(queries, dtype=np.float64)
    keys = np.ascontiguousarray(keys, dtype=np.float64)
    values = np.ascontiguousarray(values, dtype=np.float64)
    out = np.empty((B, r, c))
    shift = np.empty((B, r)) if kind == "exp" else None
    per = max(1, _CHUNK_ENTRIES // max(1, r * m))
    nchunks = -(-B // per)

    def chunk(i):
        sl = slice(i * per, min(B, (i + 1) * per))
        qp, kp = (None, None) if q_pos is None else (q_pos[sl], k_pos[sl])
        res = dense_stack(queries[sl], keys[sl], values[sl], kind, qp, kp, out=out[sl])
        if kind == "exp":
            shift[sl] = res[1]

    entries = B * r * m
    with held_blas(entries, nchunks):
        parallel_blocks(nchunks, chunk, entries)
    return (out, shift) if kind == "exp" else out


def queries(points, M):
    """``points @ M.T`` member by member, shape (B, n, k): each member's product the one-cloud
    path's (:func:`._kernels.times_transpose`)."""
    return np.matmul(points, np.ascontiguousarray(M.T))


def weighted_values(points, weights):
    """``[w_j y_j | w_j]`` of every member, shape (B, m, d + 1)."""
    out = np.empty(points.shape[:2] + (points.shape[2] + 1,))
    np.multiply(points, weights[:, :, None], out=out[:, :, :-1])
    out[:, :, -1] = weights
    return out


def normalised(sums, V):
    """``(numerator / denominator) @ V.T`` of every member (:func:`._kernels.normalised`)."""
    return queries(sums[:, :, :-1] / sums[:, :, -1:], V)


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
    n = points.shape[1]
    H = len(heads)
    qs = [queries(points, h.A(t)) for h in heads]
    qs = qs[0] if H == 1 else np.concatenate(qs, axis=1)  # (B, H n, d)
    q_pos = None if positions is None else np.tile(positions, (1, H))
    nd = dense_sums(qs, points, weighted_values(points, weights), "softmax", q_pos, positions)
    out = normalised(nd[:, :n], heads[0].V(t))
    for i, h in enumerate(heads[1:], start=1):
        out += normalised(nd[:, i * n : (i + 1) * n], h.V(t))
    return out
