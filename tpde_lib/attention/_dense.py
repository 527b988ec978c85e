r"""Dense kernel matrices and matrix-vector products, threaded: the Sinkhorn solver's sweeps.

The Sinkhorn solver keeps the whole kernel of the support (m × m); these two helpers fill it and
multiply by it one cache-sized row block at a time on the thread pool of :mod:`._threads`, with
results that do not depend on the number of threads.
"""

from __future__ import annotations

import numpy as np

from .._threads import PARALLEL_ENTRIES, parallel_blocks

#: scores per row block of a dense kernel (32768 float64 = 256 KB; full-width rows of m keys)
_DENSE_BLOCK_ENTRIES = 32_768
#: rows (or columns, transposed) per block of a matrix-vector product (fixed: bitwise results)
_MATVEC_ROWS = 128


def dense_kernel(
    left, right, out, kind=None, row_add=None, col_add=None, col_div=None, extent=None, floor=0.0
):
    r"""Fill ``out`` (n, m) with a kernel matrix, one cache-sized row block at a time, threaded.

    With the logits :math:`L = \mathrm{left}\,\mathrm{right}^	op + r_i + c_j` (``row_add``,
    ``col_add``, each optional):

    - ``kind=None``: ``out = L``;
    - ``kind="exp"``: ``out = exp(L)``;
    - ``kind="softmax"``: ``out_ij = exp(L_ij - M_i) / s_i / col_div_j`` with the row maximum
      ``M_i`` and the row sum ``s_i`` of ``exp(L_ij - M_i)``, where ``exp(L_ij - M_i)`` below
      ``floor`` is replaced by 0 (before the sum).

    Parameters
    ----------
    left : ndarray, shape (n, p)
    right : ndarray, shape (m, p)
    out : ndarray, shape (n, m), C-contiguous float64
    kind : None, "exp" or "softmax"
    row_add : ndarray, shape (n,), optional
    col_add, col_div : ndarray, shape (m,), optional
    extent : ndarray, shape (2,), optional
        Receives the smallest and largest entry of ``left @ right.T`` (two reductions per block,
        read while the block is in cache).
    floor : float
        For ``kind="softmax"``: relative entries below it are set to 0 (default 0: none). A floor
        such as 1e-200 changes the row sums by less than m * 1e-200 relative, and keeps subnormal
        numbers, which the CPU handles about a hundred times slower, out of the products with
        ``out`` (a kernel whose scores span over 700 has them).

    Returns
    -------
    finite : bool
        Whether every entry of ``left @ right.T`` is finite (checked block by block, in cache).
    row_max, row_sum : ndarray, shape (n,)
        Only for ``kind="softmax"``.
    """
    n, m = out.shape
    if out.dtype != np.float64 or not out.flags.c_contiguous or left.shape[0] != n or right.shape[0] != m:
        raise ValueError(
            f"out must be a C-contiguous float64 array of shape ({left.shape[0]}, "
            f"{right.shape[0]}), got {out.dtype} {out.shape}"
        )
    if kind not in (None, "exp", "softmax"):
        raise ValueError(f"kind must be None, 'exp' or 'softmax', got {kind!r}")
    rows = max(1, min(n, _DENSE_BLOCK_ENTRIES // max(m, 1)))
    right_t = np.ascontiguousarray(right.T)
    finite = np.ones(-(-n // rows), dtype=bool)
    lows, highs = (np.empty(finite.size), np.empty(finite.size)) if extent is not None else (None, None)
    row_max, row_sum = (np.empty(n), np.empty(n)) if kind == "softmax" else (None, None)

    def task(i):
        r0, r1 = i * rows, min(n, (i + 1) * rows)
        L = out[r0:r1]
        np.matmul(left[r0:r1], right_t, out=L)
        finite[i] = np.isfinite(L).all()
        if extent is not None:
            lows[i], highs[i] = L.min(), L.max()
        if row_add is not None:
            L += row_add[r0:r1, None]
        if col_add is not None:
            L += col_add[None, :]
        if kind == "softmax":
            c = np.max(L, axis=1, out=row_max[r0:r1])
            L -= c[:, None]
        if kind is not None:
            np.exp(L, out=L)
        if kind == "softmax":
            if floor > 0.0:
                np.putmask(L, L < floor, 0.0)
            s = np.sum(L, axis=1, out=row_sum[r0:r1])
            L /= s[:, None]
            if col_div is not None:
                L /= col_div[None, :]

    parallel_blocks(finite.size, task, n * m)
    finite = bool(finite.all())
    if extent is not None:
        extent[:] = lows.min(), highs.max()
    return (finite, row_max, row_sum) if kind == "softmax" else finite


def matvec(matrix, x, transpose=False):
    """``matrix @ x`` (or ``matrix.T @ x``), threaded over fixed blocks of rows (columns).

    A product too small ever to be threaded (fewer than ``_threads.PARALLEL_ENTRIES`` entries,
    or one block: the shapes alone decide, so results do not depend on the thread count) is
    computed in one call.

    Parameters
    ----------
    matrix : ndarray, shape (n, m)
    x : ndarray, shape (m,) (or (n,) when ``transpose``)

    Returns
    -------
    ndarray, shape (n,) (or (m,))
    """
    n, m = matrix.shape
    size = m if transpose else n
    step = _MATVEC_ROWS if not transpose else 4 * _MATVEC_ROWS
    nblocks = -(-size // step)
    if n * m < PARALLEL_ENTRIES or nblocks < 2:
        # never threaded (the shapes alone decide, not the thread count): one product, no block
        # loop (the loop's Python calls cost several times the arithmetic of a 200 x 200 product)
        return x @ matrix if transpose else matrix @ x
    out = np.empty(size)

    def task(i):
        a, b = i * step, min(size, (i + 1) * step)
        if transpose:
            np.matmul(x, matrix[:, a:b], out=out[a:b])
        else:
            np.matmul(matrix[a:b], x, out=out[a:b])

    parallel_blocks(nblocks, task, n * m)
    return out
