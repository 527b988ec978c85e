r"""The blocked kernel engine shared by every attention variant: :func:`kernel_sums`.

All attention fields of :mod:`tpde_lib.attention` are ratios or sums of kernel sums

.. math:: \Big(\sum_j \kappa(S_{ij})\,\mathrm{values}_j\Big)_i, \qquad S = \mathrm{queries}\,
          \mathrm{keys}^\top,

over the tokens ``j`` of the measure (their masses enter through ``values``). This module holds
:func:`kernel_sums` (public: validates its arguments) and :func:`engine_sums` (the same without
the checks, for the variants, whose ``velocity`` has validated the measure), the tiling
(:func:`block_shape`), the per-call job that computes one row block (:class:`_Job`), and the small
helpers the variants share (:func:`weighted_values`, :func:`normalised`, :func:`support`,
:func:`times_transpose`).

The sums are computed tile by tile, so that memory stays :math:`O(b\,c_b)` per thread for tiles
of ``b`` rows and ``c_b`` columns whatever the numbers ``n`` of queries and ``m`` of keys; the
row blocks are spread over threads (:mod:`._threads`; numpy releases the GIL in its matrix
products and ufuncs) with BLAS held to one thread; the causal mask of masked attention is applied
tile by tile. The shifts of the exponential kernels are decided before the blocks run
(:mod:`._shifts`); shifted scores are clamped at ``_EXP_FLOOR`` (-700) where they may fall below
it, since ``np.exp`` is several times slower on arguments below -708 (subnormal or zero results)
and a term :math:`e^{-700}` is :math:`e^{-500}` times below the row's largest term: the sums are
bitwise unchanged (tested). Why the tiles, chunks, paddings and thresholds are what they are
(measured) is told in ``benchmarks/NOTES.md``.

The tiles and every arithmetic operation on them are fixed by the shapes and the data alone,
never by the number of threads, so the results are bitwise identical for any thread count.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from .._checks import as_ndarray
from .._threads import PARALLEL_ENTRIES, held_blas, parallel_blocks
from ._batched import _SMALL_ENTRIES, builtin_kernel, dense_stack
from ._shifts import _loose_blocks, _shift_bounds, _unshifted

#: scores in one tile at most (65536 float64 = 512 KB, in L2 cache with its keys and values)
_BLOCK_ENTRIES = 65_536
#: at most this many queries per row block (what lets two threads scale, measured)
_BLOCK_ROWS = 256
#: at most this many keys per tile when the score product has at most 4 columns (``_NARROW``)
_BLOCK_COLS = 256
#: ... and when it is wider (thin matrix products run faster on shorter tiles, measured)
_BLOCK_COLS_WIDE = 128
#: inner and value widths below this are padded with zero columns to it
_NARROW = 4
#: a threaded call splits its rows into at least this many blocks (short calls still use 2+ threads)
_MIN_BLOCKS = 4
#: full tiles are batched into one product and one kernel call of at most this many scores
#: (more work per numpy call, so the threads wait less for the GIL between calls; measured)
_CHUNK_ENTRIES = 131_072
#: the built-in kernels (see :func:`kernel_sums`)
KERNELS = ("softmax", "exp", "sigmoid")
#: shifted exponential scores below this are raised to it where they may occur: e^-700 is
#: e^-500 below the row's largest term (>= e^-200, :mod:`._shifts`), so no sum changes, and
#: ``np.exp`` is 4 to 6 times slower below -708 (subnormal results; measured)
_EXP_FLOOR = -700.0


def _check_2d(name, value, cols=None):
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f" or value.ndim != 2:
        got = (
            f"{value.dtype} array of shape {value.shape}"
            if isinstance(value, np.ndarray)
            else type(value).__name__
        )
        raise TypeError(f"{name} must be a 2-d float array, got {got}")
    if cols is not None and value.shape[1] != cols:
        raise ValueError(f"{name} must have {cols} columns, got shape {value.shape}")


def block_shape(n, m, p=_NARROW):
    """(rows, columns) of a tile for ``n`` queries, ``m`` keys and ``p`` score columns, from the
    shapes alone. The keys are split into tiles of equal width (at most ``_BLOCK_COLS``, or
    ``_BLOCK_COLS_WIDE`` for wide products) and a threaded call's rows into blocks of equal
    size, so that no tile or block is mostly empty (n = m = 1000, d = 16: tiles of 125 keys and
    blocks of 250 rows instead of 128 and 256 with a last block of 232, 2 to 5 % faster)."""
    widest = _BLOCK_COLS if p <= _NARROW else _BLOCK_COLS_WIDE
    cols = max(1, -(-m // max(1, -(-m // widest))))
    rows = max(1, min(n, _BLOCK_ROWS, _BLOCK_ENTRIES // cols))
    if n * m >= PARALLEL_ENTRIES:  # enough blocks for the pool, of equal size
        blocks = max(_MIN_BLOCKS, -(-n // rows))
        rows = max(1, -(-n // blocks))
    return rows, cols


def _padded(a, rows, cols):
    """``a`` (r, k) in the top-left corner of zeros of shape (rows, cols), r <= rows, k <= cols
    (``a`` itself when it has that shape). Zero columns give the same scores and a faster
    product; a zero key scores 0 and adds kappa(0) x 0 = 0."""
    if a.shape == (rows, cols):
        return a
    out = np.zeros((rows, cols))
    out[: a.shape[0], : a.shape[1]] = a
    return out


def _kernel_name(kind):
    return getattr(kind, "__name__", None) or repr(kind)


def _call_kernel(kind, view):
    """A reader's kernel applied to the block ``view`` (b, c_b), its result checked where it comes
    back: None (the block overwritten in place) or an array of the block's shape, real; the
    block must then hold finite numbers. Never broadcast (a scalar or one row is an error)."""
    res = kind(view)
    if res is not None and res is not view:
        if not isinstance(res, np.ndarray):
            try:
                res = np.asarray(res)
            except (TypeError, ValueError) as exc:
                raise TypeError(
                    f"kind (the kernel {_kernel_name(kind)}) returned "
                    f"{type(res).__name__}, expected None (the block of scores "
                    f"overwritten in place) or an array of shape {view.shape}"
                ) from exc
        if res.dtype.kind not in "fiu":
            raise TypeError(
                f"kind (the kernel {_kernel_name(kind)}) returned an array of dtype "
                f"{res.dtype}, expected real numbers (float or int) of shape "
                f"{view.shape}"
            )
        if res.shape != view.shape:
            raise ValueError(
                f"kind (the kernel {_kernel_name(kind)}) returned shape {res.shape} "
                f"for a block of scores of shape {view.shape}; expected an array of "
                "that shape (kappa applied to every score, no broadcasting) or None "
                "after overwriting the block in place"
            )
        np.copyto(view, res)
    if not np.isfinite(view).all():
        raise ValueError(
            f"kind (the kernel {_kernel_name(kind)}) gave non-finite values (inf or "
            "NaN) on a block of scores; expected finite kernel values"
        )


def _apply_kernel(kind, T, view, clamp=False):
    """The kernel applied in place to the scores ``T``; a callable kernel gets ``view`` (the same
    scores as (b, c_b), queries along the rows) and may overwrite it or return a new array.
    ``clamp``: shifted exponential scores are raised to ``_EXP_FLOOR`` first (module docstring)."""
    if isinstance(kind, str):
        if clamp and kind != "sigmoid":
            np.maximum(T, _EXP_FLOOR, out=T)
        builtin_kernel(kind, T)
    else:
        _call_kernel(kind, view)


def _small_sums(queries, keys, values, kind, q_pos, k_pos):
    """:func:`kernel_sums` of a call of at most ``_SMALL_ENTRIES`` scores, in one dense matrix
    (:func:`._batched.dense_stack` on a stack of one cloud, so that a batch of clouds computes
    each member bitwise as here): no bounds, tiles or padding to set up (measured: n = m = 100,
    d = 2, 23 against 56 us)."""
    res = dense_stack(
        queries[None],
        keys[None],
        values[None],
        kind,
        None if q_pos is None else q_pos[None],
        None if k_pos is None else k_pos[None],
        call_kernel=_call_kernel,
    )
    if kind == "exp":
        return res[0][0], res[1][0]
    return res[0]


class _Job:
    """One call of :func:`kernel_sums`: its operands in computation order and its block task.

    Tiles are stored transposed, ``T = keys_tile @ queries_block.T`` of shape (c_b, b): this
    orientation of the thin score product is the faster one in OpenBLAS (measured). The full
    tiles that every row of a block sees are computed a chunk of several at a time, by batched
    (3-d) products and one kernel call over the chunk: the work per numpy call, between which
    a thread needs the GIL back, is then several times larger (see ``_CHUNK_ENTRIES``).
    """

    def __init__(self, queries, keys, values, kind, cnt):
        n, p = queries.shape
        m = keys.shape[0]
        self.kind, self.cnt, self.p, self.n, self.m = kind, cnt, p, n, m
        self.c = values.shape[1]
        self.exponential = kind in ("softmax", "exp")
        self.clamp = False
        # a shift column in the score product, unless softmax scores are small (_unshifted);
        # the squared query norms serve both that test and the shift bounds
        qq = np.einsum("ij,ij->i", queries, queries) if self.exponential and m else None
        self.shifted = (
            self.exponential and m > 0 and not (kind == "softmax" and _unshifted(queries, keys, values, qq))
        )
        width = max(p + self.shifted, _NARROW)
        self.rows, self.cols = block_shape(n, m, width)
        self.nblocks = -(-n // self.rows) if m else 0
        # unmasked built-in kernels: zero keys (and values) up to whole tiles, so that every tile
        # goes into the batched chunks; inner and value widths padded with zero columns
        pad = (-m % self.cols) if cnt is None and not callable(kind) else 0
        self.values = _padded(values, m + pad, max(self.c, _NARROW))
        self.lhs = _padded(-queries if kind == "sigmoid" else queries, n, width)
        self.keys = _padded(keys, m + pad, width)
        # every row block writes all its rows; with no keys there is no block
        self.sums = (np.empty if m else np.zeros)((n, self.values.shape[1]))
        if self.exponential:  # the shift (0 when unshifted) and the exact row blocks
            self.shift, self.exact = np.zeros(n), np.zeros(self.nblocks, dtype=bool)
        if self.shifted:
            # [k_j, 1] . [q_i, -U_i] = S_ij - U_i: the shift costs one inner column, not a pass
            # (width > p: lhs and keys are padded copies); the shift bounds, and which row
            # blocks take the exact maximum instead
            self.shift, low = _shift_bounds(queries, keys, cnt, qq)
            self.exact = _loose_blocks(queries, keys, cnt, self.shift, low, kind, self.rows)
            # a shifted score is at least low_i - U_i (the exact maximum is above low_i too):
            # the clamp is needed only where that may fall below the floor
            self.clamp = bool(np.max(self.shift - low, initial=0.0) > -_EXP_FLOOR)
            self.lhs[:, p] = -self.shift
            self.keys[:m, p] = 1.0
        nfull = self.keys.shape[0] // self.cols
        self.keys3 = self.keys[: nfull * self.cols].reshape(nfull, self.cols, self.keys.shape[1])
        self.values3 = self.values[: nfull * self.cols].reshape(nfull, self.cols, self.values.shape[1])
        # full tiles per batched call (1 for a callable kernel, which is applied tile by tile)
        self.chunk = 1 if callable(kind) else max(1, _CHUNK_ENTRIES // (self.rows * self.cols))
        self.scratch = {}

    def _buffers(self):
        """This thread's tile chunk and partial sums (allocated once per thread and call)."""
        key = threading.get_ident()
        bufs = self.scratch.get(key)
        if bufs is None:
            ntiles = -(-self.keys.shape[0] // self.cols)
            bufs = (
                np.empty(self.chunk * self.cols * self.rows),
                np.empty(ntiles * self.rows * self.values.shape[1]),
            )
            self.scratch[key] = bufs
        return bufs

    def _hidden(self, r0, r1, c0, c1):
        """Mask (c1 - c0, r1 - r0) of the keys c0..c1 hidden from the rows r0..r1 (True: hidden)."""
        return np.arange(c0, c1)[:, None] >= self.cnt[None, r0:r1]

    def _exact_max(self, r0, r1, ncols, tile):
        """Row maxima of the visible scores of rows r0..r1 (0 for a row that sees nothing)."""
        qt = np.ascontiguousarray(self.lhs[r0:r1, : self.p].T)
        best = np.full(r1 - r0, -np.inf)
        for c0 in range(0, ncols, self.cols):
            c1 = min(ncols, c0 + self.cols)
            T = tile[: (c1 - c0) * (r1 - r0)].reshape(c1 - c0, r1 - r0)
            np.matmul(self.keys[c0:c1, : self.p], qt, out=T)
            if self.cnt is not None and c1 > self.cnt[r0]:
                np.copyto(T, -np.inf, where=self._hidden(r0, r1, c0, c1))
            np.maximum(best, T.max(axis=0), out=best)
        best[~np.isfinite(best)] = 0.0
        return best

    def block(self, i):
        """Rows i b .. (i + 1) b of the sums: the partial sums of every tile of keys they see,
        then their sum over the tiles (in tile order)."""
        r0 = i * self.rows
        r1 = min(self.n, r0 + self.rows)
        b, cnt, cols = r1 - r0, self.cnt, self.cols
        out = self.sums[r0:r1]
        ncols = self.keys.shape[0] if cnt is None else int(cnt[r1 - 1])
        if ncols == 0:
            out[:] = 0.0
            return
        full = ncols if cnt is None else int(cnt[r0])  # keys seen by every row of the block
        tile, part = self._buffers()
        lhs_t = np.ascontiguousarray(self.lhs[r0:r1].T)
        if self.exponential and self.exact[i]:
            self.shift[r0:r1] = self._exact_max(r0, r1, min(ncols, self.m), tile)  # real keys only
            self.lhs[r0:r1, self.p] = lhs_t[self.p] = -self.shift[r0:r1]
        ntiles = -(-ncols // cols)
        part = part[: ntiles * b * self.values.shape[1]].reshape(ntiles, b, -1)
        batched = 0 if callable(self.kind) else full // cols  # full tiles every row sees
        for t0 in range(0, batched, self.chunk):
            t1 = min(batched, t0 + self.chunk)
            T = tile[: (t1 - t0) * cols * b].reshape(t1 - t0, cols, b)
            np.matmul(self.keys3[t0:t1], lhs_t, out=T)
            _apply_kernel(self.kind, T, T.T, self.clamp)
            np.matmul(T.transpose(0, 2, 1), self.values3[t0:t1], out=part[t0:t1])
        for t in range(batched, ntiles):  # partial, masked or callable: one by one
            c0 = t * cols
            c1 = min(ncols, c0 + cols)
            T = tile[: (c1 - c0) * b].reshape(c1 - c0, b)
            np.matmul(self.keys[c0:c1], lhs_t, out=T)
            if cnt is not None and c1 > full and self.exponential:
                # the shift bounds the scores the rows see: hidden ones may overflow, and are
                # zeroed just below (no warning or error of the caller's errstate for them)
                with np.errstate(over="ignore"):
                    _apply_kernel(self.kind, T, T.T, self.clamp)
            else:
                _apply_kernel(self.kind, T, T.T, self.clamp)
            if cnt is not None and c1 > full:
                lo = max(c0, full)
                np.copyto(T[lo - c0 :], 0.0, where=self._hidden(r0, r1, lo, c1))
            np.matmul(T.T, self.values[c0:c1], out=part[t])
        np.sum(part, axis=0, out=out)


def kernel_sums(
    queries: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    kind: str | Callable[[np.ndarray], np.ndarray | None],
    q_pos: np.ndarray | None = None,
    k_pos: np.ndarray | None = None,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
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

        - ``"softmax"``: :math:`\sum_j e^{S_{ij}-M_i}\,\mathrm{values}_j` with a row shift
          :math:`M_i` (it cancels when the caller divides a numerator by a denominator): 0 when
          :math:`\max_i|q_i|\,\max_j|k_j| \le 200` (so every :math:`|S_{ij}| \le 200`) and
          :math:`m\max|\mathrm{values}| \le 10^{200}`, else as for ``"exp"``;
        - ``"exp"``: the same sums *and* ``M`` (shape (n,)), so that the unscaled sum is
          :math:`e^{M_i}` times row ``i``. :math:`M_i` is the row maximum of the (visible)
          scores, or an upper bound of it within ``_MAX_GAP`` = 200 and at most 700, so
          :math:`e^{M_i}` overflows only if the row maximum exceeds 700;
        - ``"sigmoid"``: :math:`\sigma(s) = 1/(1+e^{-s})`;
        - a callable ``kappa(S)`` applied to a block ``S`` (shape (b, c_b), a view of a tile):
          it either overwrites ``S`` with :math:`\kappa(S)` in place and returns None (fastest,
          e.g. ``lambda S: np.maximum(S, 0, out=S)`` for ReLU attention; returning ``S`` itself
          is the same) or returns :math:`\kappa(S)` as a new real array of exactly the block's
          shape (e.g. ``np.exp``), which is then used. The result is checked where it comes back:
          another shape (a scalar, one row), a complex or non-numeric array raise
          ``ValueError``/``TypeError`` naming ``kind``, never broadcast; non-finite values raise
          ``ValueError``. Masked entries are set to 0 after it is applied. It is called from the
          worker threads, on disjoint tiles at the same time: it must act on its argument only.
    q_pos, k_pos : ndarray, shape (n,) and (m,), optional
        Sequence positions (masked attention): query ``i`` sees key ``j`` only when
        ``k_pos[j] <= q_pos[i]``. Give both or neither; no NaN.

    Returns
    -------
    sums : ndarray, shape (n, c)
    row_max : ndarray, shape (n,)
        Only for ``kind="exp"``: the shift ``M`` above.

    Notes
    -----
    Memory: each thread holds at most ``_CHUNK_ENTRIES`` (131072) scores at a time, and the
    partial sums of its row block over the tiles, ``ceil(m / c_b) b c`` numbers (at most
    ``2 m c``); besides the output, the operands are copied once (sorted by position when
    masked), O((n + m) p).
    With a mask, the keys and queries are ordered by position, a row block computes only the
    keys its last query sees, and only the tiles its queries partly see are masked. A query with
    no visible key gets a zero row for the callable and sigmoid kernels and ``nan`` (with
    ``M = -inf``) for ``"softmax"``/``"exp"`` (an empty normalisation; the variants never ask
    for it).

    Threads: the row blocks are spread over ``TPDE_NUM_THREADS`` threads (environment variable;
    default: the cores available; :func:`set_num_threads` overrides it) for calls of at least
    ``PARALLEL_ENTRIES`` scores, with BLAS held to one thread for the whole call
    (``threadpoolctl``) and restored afterwards. The results are bitwise identical for every
    number of threads: the tiles and their operations depend only on the shapes and the data.
    Shifted exponential scores are clamped at -700 where they may fall below it (module
    docstring): the sums are unchanged.

    Examples
    --------
    Sigmoid kernel sums of two queries against two keys (one value column of ones):

    >>> import numpy as np, tpde_lib as tp
    >>> Q, K = np.array([[1.0], [0.0]]), np.array([[0.0], [1.0]])
    >>> s = tp.kernel_sums(Q, K, np.ones((2, 1)), "sigmoid")
    >>> np.allclose(s[:, 0], [0.5 + 1 / (1 + np.exp(-1.0)), 1.0])
    True

    A kernel of one's own, applied in place (ReLU), with a causal mask (query 0 sees key 0 only,
    query 1 both keys, whose scores are 0):

    >>> relu = lambda S: np.maximum(S, 0.0, out=S)
    >>> pos = np.array([0.0, 1.0])
    >>> tp.kernel_sums(Q, Q, np.ones((2, 1)), relu, pos, pos)[:, 0].tolist()
    [1.0, 0.0]
    """
    _check_2d("queries", queries)
    _check_2d("keys", keys, queries.shape[1])
    _check_2d("values", values)
    if values.shape[0] != keys.shape[0]:
        raise ValueError(f"values must have one row per key ({keys.shape[0]}), got shape {values.shape}")
    for name, arr in (("queries", queries), ("keys", keys), ("values", values)):
        if not np.isfinite(arr).all():  # NaN keys gave NaN sums, silently
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])
            raise ValueError(f"{name} contains NaN or infinite values (first at index {bad})")
    if not (callable(kind) or kind in KERNELS):
        raise ValueError(f"kind must be one of {KERNELS} or a callable, got {kind!r}")
    if (q_pos is None) != (k_pos is None):
        raise ValueError("q_pos and k_pos must be given together (masked attention) or not at all")
    n, m = queries.shape[0], keys.shape[0]
    if q_pos is not None:
        q_pos, k_pos = as_ndarray("q_pos", q_pos), as_ndarray("k_pos", k_pos)
        if q_pos.dtype.kind not in "fiu" or k_pos.dtype.kind not in "fiu":
            raise TypeError(
                f"q_pos and k_pos must be real arrays, got dtypes {q_pos.dtype} and {k_pos.dtype}"
            )
        q_pos, k_pos = q_pos.astype(float, copy=False), k_pos.astype(float, copy=False)
        if q_pos.shape != (n,) or k_pos.shape != (m,):
            raise ValueError(
                f"q_pos and k_pos must have shapes ({n},) and ({m},), got {q_pos.shape} and {k_pos.shape}"
            )
        if np.isnan(q_pos).any() or np.isnan(k_pos).any():
            raise ValueError("q_pos and k_pos must not contain NaN")
    with held_blas(n * m):
        return engine_sums(queries, keys, values, kind, q_pos, k_pos)


def engine_sums(queries, keys, values, kind, q_pos=None, k_pos=None):
    """:func:`kernel_sums` without the checks of its arguments, for callers that have validated
    them (the variants, behind :meth:`~tpde_lib.Attention.velocity`): float arrays of consistent
    shapes, positions float arrays of the right lengths without NaN, ``kind`` valid. The caller
    holds BLAS (:func:`._threads.held_blas`) for its whole call when it wants to."""
    n, m = queries.shape[0], keys.shape[0]
    queries = np.ascontiguousarray(queries, dtype=np.float64)
    keys = np.ascontiguousarray(keys, dtype=np.float64)
    values = np.ascontiguousarray(values, dtype=np.float64)
    q_order = cnt = None
    if 0 < n * m <= _SMALL_ENTRIES:
        return _small_sums(queries, keys, values, kind, q_pos, k_pos)
    if q_pos is not None:
        k_order = np.argsort(k_pos, kind="stable")
        keys, values, k_sorted = keys[k_order], values[k_order], k_pos[k_order]
        q_order = np.argsort(q_pos, kind="stable")
        queries = queries[q_order]
        cnt = np.searchsorted(k_sorted, q_pos[q_order], side="right")  # keys seen by query i
    job = _Job(queries, keys, values, kind, cnt)
    parallel_blocks(job.nblocks, job.block, n * m)
    sums = job.sums if job.c == job.sums.shape[1] else job.sums[:, : job.c].copy()  # no padding
    shift = job.shift if job.exponential else None
    if job.exponential and (cnt is not None or m == 0):  # rows that see no key
        empty = cnt == 0 if m else np.ones(n, dtype=bool)
        sums[empty] = np.nan
        shift[empty] = -np.inf
    if q_order is not None:
        sorted_sums, sums = sums, np.empty_like(sums)
        sums[q_order] = sorted_sums
        if shift is not None:
            shift = np.empty_like(shift)
            shift[q_order] = job.shift
    return (sums, shift) if kind == "exp" else sums


def weighted_values(points, weights):
    """``[w_j y_j | w_j]``, shape (m, d + 1): numerator and denominator of a normalised average."""
    out = np.empty((points.shape[0], points.shape[1] + 1))
    np.multiply(points, weights[:, None], out=out[:, :-1])
    out[:, -1] = weights
    return out


def times_transpose(x, M):
    """``x @ M.T``, shape (n, k), for ``x`` (n, d) and ``M`` (k, d), through a contiguous copy of
    ``M.T``: OpenBLAS multiplies it about twice as fast at these thin shapes (measured: 7 against
    13 us for (1000, 16) @ (16, 16))."""
    return x @ np.ascontiguousarray(M.T)


def normalised(sums, V):
    """``(numerator / denominator) @ V.T``, shape (n, d), from kernel sums ``[num | den]``
    (n, d + 1) of :func:`weighted_values`: the average under the attention weights, times V.
    The average comes first, so that sums far from 1 (up to ~e^200 without a shift) never meet
    a large V: ``Softmax(A, 1e300 * I)`` stays finite."""
    return times_transpose(sums[:, :-1] / sums[:, -1:], V)


def support(points, weights, positions):
    """Keys of positive mass: (points (m, d), weights (m,), positions (m,) or None)."""
    keep = weights > 0
    if keep.all():
        return points, weights, positions
    return points[keep], weights[keep], None if positions is None else positions[keep]
