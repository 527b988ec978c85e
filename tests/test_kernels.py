"""Tests of the blocked, threaded engine ``kernel_sums`` against a naive dense computation.

The oracle builds the full score matrix ``S = Q K^T`` with one numpy product and applies the
kernel and the mask entry by entry (``np.where``), then one dense product with the values: no
tiles, no shift bound, no sorting by position. Float64 sums of at most a few hundred terms of
size O(1) agree with a reordered sum to ~1e-13, so ``rtol=1e-11`` leaves room for reordering
only; a wrong shift, mask, tile boundary or row order gives O(1) errors.
"""

import multiprocessing
import threading
import time
import tracemalloc

import numpy as np
import pytest

import tpde_lib as tp
import tpde_lib.attention._dense as D
import tpde_lib.attention._kernels as K
import tpde_lib.attention._shifts as Sh
from tpde_lib import _threads, kernel_sums

RTOL = 1e-11


def _naive(Q, Y, values, kind, q_pos=None, k_pos=None):
    """Dense oracle: (sums of kappa(S) values over the visible keys, row max of visible S)."""
    S = Q @ Y.T
    seen = np.ones(S.shape, bool) if q_pos is None else k_pos[None, :] <= q_pos[:, None]
    if kind == "exp":
        row_max = np.where(seen, S, -np.inf).max(axis=1)
        E = np.where(seen, np.exp(S), 0.0)  # unscaled: the test scores are moderate
        return E @ values, row_max
    if kind == "sigmoid":
        E = 1.0 / (1.0 + np.exp(-S))
    else:
        E = kind(S.copy()) if callable(kind) else None
    return np.where(seen, E, 0.0) @ values


def _relu(S):
    np.maximum(S, 0.0, out=S)


def _cube(S):  # odd and unbounded: any row/column mix-up shows
    S *= S * S


def _functional(kappa):
    """The in-place kernel as a function for the oracle."""

    def f(S):
        kappa(S)
        return S

    return f


def _problem(n=37, m=53, p=3, c=4, seed=0, scale=1.0, masked=False):
    rng = np.random.default_rng(seed)
    Q = scale * rng.standard_normal((n, p))
    Y = rng.standard_normal((m, p))
    values = rng.standard_normal((m, c))
    values[:, -1] = rng.random(m) + 0.1  # a positive column (a denominator)
    if not masked:
        return Q, Y, values, None, None
    q_pos = rng.integers(0, 12, n).astype(float)  # ties, unsorted, some see nothing
    k_pos = rng.integers(1, 12, m).astype(float)
    return Q, Y, values, q_pos, k_pos


def _check_exponential(Q, Y, values, q_pos=None, k_pos=None):
    """softmax: normalised sums equal the oracle's; exp: e^M sums and M within the gap."""
    want, true_max = _naive(Q, Y, values, "exp", q_pos, k_pos)
    seen = np.isfinite(true_max)
    soft = kernel_sums(Q, Y, values, "softmax", q_pos, k_pos)
    np.testing.assert_allclose(
        soft[seen, :-1] / soft[seen, -1:], want[seen, :-1] / want[seen, -1:], rtol=RTOL, atol=1e-13
    )
    assert np.isnan(soft[~seen]).all()
    sums, M = kernel_sums(Q, Y, values, "exp", q_pos, k_pos)
    np.testing.assert_allclose(
        sums[seen] * np.exp(M[seen])[:, None], want[seen], rtol=RTOL, atol=1e-13 * np.abs(want).max()
    )
    assert np.all(M[seen] >= true_max[seen] - 1e-12)
    assert np.all(M[seen] <= true_max[seen] + Sh._MAX_GAP)
    assert np.isnan(sums[~seen]).all() and np.all(M[~seen] == -np.inf)


# ---------------------------------------------------------------------------------------------
# every kind against the dense oracle, with and without masks, over several tilings
# ---------------------------------------------------------------------------------------------

TILINGS = [(None, None), (35, 7), (24, 5), (53 * 37, 53), (1, 1)]  # (entries, cols)


@pytest.fixture(params=TILINGS, ids=lambda t: f"tile{t[0]}x{t[1]}")
def tiling(request, monkeypatch):
    """The engine's two paths: one dense matrix for these small problems (no tiling given), and
    the blocked engine with tiles of several shapes: partial last row blocks and partial last
    column tiles, full tiles batched two by two (a ragged last chunk when their number is odd)."""
    entries, cols = request.param
    if entries is not None:
        monkeypatch.setattr(K, "_SMALL_ENTRIES", 0)
        monkeypatch.setattr(K, "_BLOCK_ENTRIES", entries)
        monkeypatch.setattr(K, "_BLOCK_COLS", cols)
        monkeypatch.setattr(K, "_BLOCK_COLS_WIDE", cols)
        monkeypatch.setattr(K, "_CHUNK_ENTRIES", 2 * entries)
    return request.param


@pytest.mark.parametrize("masked", [False, True])
def test_exponential_kinds_match_dense(tiling, masked):
    Q, Y, values, q_pos, k_pos = _problem(masked=masked)
    if masked:
        assert np.any(q_pos < k_pos.min())  # the problem has queries that see nothing
    _check_exponential(Q, Y, values, q_pos, k_pos)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("kind", ["sigmoid", _relu, _cube], ids=["sigmoid", "relu", "cube"])
def test_other_kinds_match_dense(tiling, kind, masked):
    Q, Y, values, q_pos, k_pos = _problem(masked=masked, seed=3)
    want = _naive(Q, Y, values, _functional(kind) if callable(kind) else kind, q_pos, k_pos)
    got = kernel_sums(Q, Y, values, kind, q_pos, k_pos)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-13 * np.abs(want).max())


def test_callable_sees_blocks_of_the_tile_shape(monkeypatch, blocked):
    monkeypatch.setattr(K, "_BLOCK_ENTRIES", 35)
    monkeypatch.setattr(K, "_BLOCK_COLS", 7)
    monkeypatch.setattr(K, "_BLOCK_COLS_WIDE", 7)
    shapes = []

    def spy(S):
        shapes.append(S.shape)
        _relu(S)

    Q, Y, values, _, _ = _problem()
    kernel_sums(Q, Y, values, spy)
    rows = {s[0] for s in shapes}
    cols = {s[1] for s in shapes}
    assert rows == {5, 37 % 5} and cols == {7, 53 % 7}  # full and partial tiles both occur
    assert len(shapes) == 8 * 8  # ceil(37/5) x ceil(53/7) tiles


@pytest.fixture
def blocked(monkeypatch):
    """The blocked engine even for the small test problems (not one dense matrix)."""
    monkeypatch.setattr(K, "_SMALL_ENTRIES", 0)


@pytest.mark.parametrize("scale", [80.0, 300.0])
def test_large_scores_take_the_exact_row_maximum(scale, blocked):
    # scores up to ~ 500 and ~ 2000: the bound is more than _MAX_GAP above the row maximum (and
    # e^U would overflow for "exp"), so the blocks take the exact maximum; a shift by the bound
    # would underflow every term to 0 and give nan
    Q, Y, values, _, _ = _problem(scale=scale, seed=5)
    S = Q @ Y.T
    true_max = S.max(axis=1)
    E = np.exp(S - true_max[:, None]) @ values  # stabilised oracle
    soft = kernel_sums(Q, Y, values, "softmax")
    np.testing.assert_allclose(soft[:, :-1] / soft[:, -1:], E[:, :-1] / E[:, -1:], rtol=1e-9)
    sums, M = kernel_sums(Q, Y, values, "exp")
    np.testing.assert_array_equal(M, true_max)  # exact: the same products
    np.testing.assert_allclose(sums, E, rtol=1e-9, atol=1e-13 * np.abs(E).max())


def test_exact_maximum_ignores_the_padding_keys(tiling):
    # every score far below 0 (keys in a half-space, queries pointing away), so the blocks take
    # the exact row maximum: it must come from the real keys, not from the zero keys that fill
    # the last tile up (a maximum of 0 would underflow every term)
    rng = np.random.default_rng(13)
    Y = np.abs(rng.standard_normal((53, 3))) + 1.0
    Q = -300.0 * (np.abs(rng.standard_normal((37, 3))) + 0.5)
    values = rng.standard_normal((53, 4))
    values[:, -1] = rng.random(53) + 0.1
    S = Q @ Y.T
    true_max = S.max(axis=1)
    assert true_max.max() < -400.0
    E = np.exp(S - true_max[:, None]) @ values
    soft = kernel_sums(Q, Y, values, "softmax")
    np.testing.assert_allclose(soft[:, :-1] / soft[:, -1:], E[:, :-1] / E[:, -1:], rtol=1e-9)
    sums, M = kernel_sums(Q, Y, values, "exp")
    assert np.all(M >= true_max - 1e-9) and np.all(M <= true_max + Sh._MAX_GAP)
    np.testing.assert_allclose(
        sums * np.exp(M - true_max)[:, None], E, rtol=1e-9, atol=1e-13 * np.abs(E).max()
    )


def test_bound_shift_is_used_when_tight():
    # consistency check of the fast path: moderate scores keep the bound, within the gap
    Q, Y, values, _, _ = _problem(seed=6)
    job = K._Job(Q, Y, values, "exp", None)
    assert job.shifted and job.exact.shape == (job.nblocks,) and not job.exact.any()
    assert np.all(job.shift >= (Q @ Y.T).max(axis=1) - 1e-12)


def _scaled_to(Q, Y, B):
    """Q rescaled so that max|q| max|k| = B (the bound _unshifted compares with _MAX_GAP)."""
    top = np.sqrt((Q**2).sum(axis=1).max() * (Y**2).sum(axis=1).max())
    return Q * (B / top)


@pytest.mark.parametrize("masked", [False, True])
def test_softmax_is_unshifted_exactly_when_every_score_is_small(masked, blocked):
    # the decision, and the sums on both sides of it against the stabilised dense oracle:
    # B = 0.999 x 200 needs no shift (the largest term of a row may be ~ e^-200), B = 1.001 x 200
    # takes the bound shift; max|values| m near 1e200 or a NaN switch the shift back on
    Q, Y, values, q_pos, k_pos = _problem(seed=8, masked=masked)
    for B, unshifted in [(0.999 * Sh._MAX_GAP, True), (1.001 * Sh._MAX_GAP, False)]:
        Qb = _scaled_to(Q, Y, B)
        assert Sh._unshifted(Qb, Y, values) is unshifted
        job = K._Job(Qb, Y, values, "softmax", None)
        assert job.shifted is not unshifted and job.lhs.shape[1] == 4  # p = 3: + shift or pad
        assert job.shifted or not job.shift.any()
        S = Qb @ Y.T
        if masked:
            S = np.where(k_pos[None, :] <= q_pos[:, None], S, -np.inf)
        seen = np.isfinite(S.max(axis=1))
        E = np.exp(S[seen] - S[seen].max(axis=1, keepdims=True)) @ values
        got = kernel_sums(Qb, Y, values, "softmax", q_pos, k_pos)[seen]
        np.testing.assert_allclose(got[:, :-1] / got[:, -1:], E[:, :-1] / E[:, -1:], rtol=1e-9)
    small = _scaled_to(Q, Y, 10.0)
    assert Sh._unshifted(small, Y, values)
    assert not Sh._unshifted(small, Y, values * (1e200 / Y.shape[0]) * 1.01)
    assert not Sh._unshifted(small, Y, np.where(values == values.max(), np.nan, values))
    assert not Sh._unshifted(np.where(small == small.max(), np.nan, small), Y, values)


@pytest.mark.parametrize("masked", [False, True])
def test_sampled_keys_keep_the_bound_shift(masked, blocked):
    # scores ~ 15: the free lower bound q.z - |q| r of the row maxima leaves a gap above _MAX_GAP,
    # the sampled keys' scores show the bound is within it, so the bound stays the shift (not
    # the exact maximum) and the sums are still those of the oracle
    Q, Y, values, q_pos, k_pos = _problem(scale=15.0, seed=4, masked=masked)
    U, low = Sh._shift_bounds(Q, Y, None)
    assert np.max(U - low) > Sh._MAX_GAP
    _check_exponential(Q, Y, values, q_pos, k_pos)
    _, M = kernel_sums(Q, Y, values, "exp", q_pos, k_pos)
    _, true_max = _naive(Q, Y, values, "exp", q_pos, k_pos)
    seen = np.isfinite(true_max)
    assert np.any(M[seen] > true_max[seen] + 1e-6)


def test_narrow_values_give_contiguous_sums():
    # values of 2 columns are padded to 4 inside: the result is a copy of the 2 columns, not a
    # strided view of the padded buffer
    Q, Y, values, _, _ = _problem(c=2, seed=12)
    for kind in ("softmax", "sigmoid"):
        got = kernel_sums(Q, Y, values, kind)
        assert got.shape == (37, 2) and got.flags.c_contiguous


@pytest.mark.parametrize("shift", ["bound", "none"])
def test_bound_shift_is_as_accurate_as_the_exact_maximum(shift, monkeypatch):
    # gaps U - max S up to ~ 100 use the bound as the shift (_MAX_GAP = 200), and scores this
    # small need none: against an 80-bit oracle the normalised sums are as accurate as numpy's
    # with the exact row maximum either way
    if shift == "bound":
        monkeypatch.setattr(K, "_unshifted", lambda *args: False)
    worst_ours = worst_plain = widest = 0.0
    for seed in range(10):
        Q, Y, values, _, _ = _problem(n=200, m=300, p=8, scale=5.0, seed=seed)
        S_l = Q.astype(np.longdouble) @ Y.T.astype(np.longdouble)
        E_l = np.exp(S_l - S_l.max(axis=1, keepdims=True)) @ values.astype(np.longdouble)
        want = (E_l[:, :-1] / E_l[:, -1:]).astype(float)
        S = Q @ Y.T
        E = np.exp(S - S.max(axis=1, keepdims=True)) @ values
        got = kernel_sums(Q, Y, values, "softmax")
        assert K._Job(Q, Y, values, "softmax", None).shifted is (shift == "bound")
        scale = np.abs(want).max()
        worst_ours = max(worst_ours, np.abs(got[:, :-1] / got[:, -1:] - want).max() / scale)
        worst_plain = max(worst_plain, np.abs(E[:, :-1] / E[:, -1:] - want).max() / scale)
        _, M = kernel_sums(Q, Y, values, "exp")  # the shift used
        widest = max(widest, (M - S.max(axis=1)).max())
    assert widest > 60.0  # the bound, well above the maximum
    assert worst_ours <= 2.0 * worst_plain + 1e-15, (worst_ours, worst_plain)


def test_empty_key_set():
    Q, Y, values, _, _ = _problem()
    soft = kernel_sums(Q, Y[:0], values[:0], "softmax")
    assert soft.shape == (37, 4) and np.isnan(soft).all()
    np.testing.assert_array_equal(kernel_sums(Q, Y[:0], values[:0], "sigmoid"), 0.0)


@pytest.mark.parametrize("kind", ["softmax", "exp", "sigmoid", _relu], ids=str)
def test_empty_query_set(kind):
    # no query, some keys: empty sums (and shifts), not a failed reduction over no rows
    _, Y, values, _, _ = _problem()
    got = kernel_sums(np.zeros((0, 3)), Y, values, kind)
    sums, M = got if kind == "exp" else (got, np.zeros(0))
    assert sums.shape == (0, 4) and M.shape == (0,)


# ---------------------------------------------------------------------------------------------
# threads: bitwise identical results, the pool really used, errors and errstate carried over
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def pool_allowed(monkeypatch):
    """Let the pool run even without threadpoolctl (the engine then trusts this variable)."""
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    yield
    tp.set_num_threads(None)


def _spy_threads(monkeypatch):
    """Record, per engine call, how many threads computed its blocks. On a threaded call the
    first two blocks wait for each other (a barrier): each thread holds one when they meet, so
    both threads take work however loaded the machine is (a sleep in the kernel only made it
    likely: the calling thread took every block in 2 of 4 runs beside other jobs)."""
    used = []
    real = K.parallel_blocks

    def spy(nblocks, task, entries):
        idents = set()
        threaded = _threads.call_threads(nblocks, entries) > 1
        meet = threading.Barrier(2, timeout=120)

        def marked(i):
            idents.add(threading.get_ident())
            if threaded and i < 2:
                meet.wait()
            task(i)

        real(nblocks, marked, entries)
        used.append(len(idents))

    monkeypatch.setattr(K, "parallel_blocks", spy)
    return used


def _slow_relu(S):
    time.sleep(2e-4)  # releases the GIL
    _relu(S)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize(
    "kind", ["softmax", "exp", "sigmoid", _slow_relu], ids=["softmax", "exp", "sigmoid", "relu"]
)
def test_one_and_two_threads_are_bitwise_equal(kind, masked, pool_allowed, monkeypatch):
    n = 700  # n^2 above PARALLEL_ENTRIES: the pool is used
    Q, Y, values, q_pos, k_pos = _problem(n=n, m=n, masked=masked, seed=7)
    if masked:
        q_pos, k_pos = q_pos * 50 + np.arange(n) % 7, k_pos * 50
    used = _spy_threads(monkeypatch)
    tp.set_num_threads(1)
    one = kernel_sums(Q, Y, values, kind, q_pos, k_pos)
    tp.set_num_threads(2)
    two = kernel_sums(Q, Y, values, kind, q_pos, k_pos)
    if kind == _slow_relu:
        assert used == [1, 2]
    for a, b in zip(one if kind == "exp" else [one], two if kind == "exp" else [two]):
        assert np.array_equal(a, b, equal_nan=True)


def test_calls_from_several_threads_at_once(pool_allowed):
    # the workers are shared: callers in several threads queue their tasks on the same workers,
    # each must wait for its own (a caller that took another's "done" would return before its
    # blocks are written), and every result is the one a call alone gives, bitwise. Slow tiles
    # (the kernel sleeps) keep several calls in flight; results are compared on return. Three
    # threads a call: two workers, so that one can finish a task while the other runs one.
    tp.set_num_threads(3)
    problems = [_problem(n=700, m=600 + 50 * k, masked=k % 2 == 1, seed=20 + k) for k in range(4)]
    alone = [kernel_sums(Q, Y, v, _slow_relu, qp, kp) for Q, Y, v, qp, kp in problems]
    same = [[] for _ in problems]

    def call(k):
        Q, Y, v, qp, kp = problems[k]
        for _ in range(3):
            same[k].append(np.array_equal(kernel_sums(Q, Y, v, _slow_relu, qp, kp), alone[k]))

    callers = [threading.Thread(target=call, args=(k,)) for k in range(len(problems))]
    for t in callers:
        t.start()
    for t in callers:
        t.join(120)
    assert not any(t.is_alive() for t in callers)
    assert same == [[True] * 3] * len(problems)


def test_worker_exception_is_raised(pool_allowed):
    tp.set_num_threads(2)
    Q, Y, values, _, _ = _problem(n=700, m=700)
    calls = []

    def bad(S):
        calls.append(1)
        if len(calls) == 5:
            raise ArithmeticError("from a worker")
        _relu(S)

    with pytest.raises(ArithmeticError, match="from a worker"):
        kernel_sums(Q, Y, values, bad)


def test_errstate_applies_in_worker_threads(pool_allowed):
    tp.set_num_threads(2)
    Q, Y, values, _, _ = _problem(n=700, m=700)

    def overflow(S):
        np.exp(S * 1e3, out=S)

    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        kernel_sums(Q, Y, values, overflow)


def test_a_forked_child_starts_its_own_workers(pool_allowed):
    # a child forked after the workers started inherits their inboxes, not their threads: without
    # its own workers a threaded call would wait for ever (here: the child is stopped after 60 s)
    tp.set_num_threads(2)
    Q, Y, values, _, _ = _problem(n=700, m=700, seed=11)
    want = kernel_sums(Q, Y, values, "softmax")  # the parent's workers exist now
    ctx = multiprocessing.get_context("fork")
    out = ctx.SimpleQueue()
    child = ctx.Process(target=lambda: out.put(kernel_sums(Q, Y, values, "softmax")))
    child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0
    np.testing.assert_array_equal(out.get(), want)


def test_thread_settings(monkeypatch):
    monkeypatch.setenv("TPDE_NUM_THREADS", "3")
    tp.set_num_threads(None)
    assert tp.get_num_threads() == 3
    tp.set_num_threads(2)
    assert tp.get_num_threads() == 2
    tp.set_num_threads(None)
    monkeypatch.setenv("TPDE_NUM_THREADS", "two")
    with pytest.raises(ValueError, match="TPDE_NUM_THREADS"):
        tp.get_num_threads()
    with pytest.raises(ValueError, match="k must be"):
        tp.set_num_threads(0)
    with pytest.raises(TypeError, match="k must be"):
        tp.set_num_threads(1.5)


# ---------------------------------------------------------------------------------------------
# memory and input checks
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,m", [(1, 1), (7, 100_000), (100_000, 7), (600, 600), (5000, 300)])
def test_tiles_stay_within_the_budget(n, m):
    for p in (1, 4, 5, 17):
        rows, cols = K.block_shape(n, m, p)
        assert 1 <= rows <= min(n, K._BLOCK_ROWS) and 1 <= cols <= min(m, K._BLOCK_COLS)
        assert rows * cols <= max(K._BLOCK_ENTRIES, cols)


@pytest.mark.parametrize("n,m", [(1000, 1000), (1001, 999), (4000, 300), (2100, 129), (513, 7000)])
def test_tiles_and_threaded_row_blocks_have_equal_sizes(n, m):
    # the keys are cut into tiles of equal width and a threaded call's rows into blocks of equal
    # size: together they overshoot m (n) by less than one key (row) per tile (block), so no
    # tile or block is mostly empty and the zero-key padding stays below one key per tile
    for p in (2, 5, 17):
        rows, cols = K.block_shape(n, m, p)
        tiles, blocks = -(-m // cols), -(-n // rows)
        assert 0 <= tiles * cols - m < tiles
        assert n * m >= K.PARALLEL_ENTRIES and blocks >= K._MIN_BLOCKS
        assert 0 <= blocks * rows - n < blocks


@pytest.mark.parametrize("masked", [False, True])
def test_peak_memory_is_far_below_the_score_matrix(masked, pool_allowed):
    tp.set_num_threads(2)
    n = 2000  # a dense score matrix would take 32 MB
    Q, Y, values, q_pos, k_pos = _problem(n=n, m=n, masked=masked, seed=8)
    kernel_sums(Q[:10], Y, values, "softmax")  # warm-up outside the trace
    tracemalloc.start()
    kernel_sums(Q, Y, values, "softmax", q_pos, k_pos)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    operands = 8 * n * (3 * (Q.shape[1] + 1) + 3 * values.shape[1])  # copies and output
    # budget: two threads, each a 1 MB chunk of tiles (131072 scores) plus the partial sums
    # of its row block, a mask and small blocks: 3 MiB in all (a dense score matrix: 32 MB)
    assert peak < operands + 3 * 2**20, peak


def test_bad_input():
    Q, Y, values, q_pos, k_pos = _problem(masked=True)
    with pytest.raises(ValueError, match="NaN"):
        kernel_sums(Q, Y, values, "softmax", np.full(37, np.nan), k_pos)
    with pytest.raises(ValueError, match="together"):
        kernel_sums(Q, Y, values, "softmax", q_pos, None)
    with pytest.raises(ValueError, match="kind"):
        kernel_sums(Q, Y, values, "relu")
    with pytest.raises(TypeError, match="keys"):
        kernel_sums(Q, Y.astype(int), values, "softmax")


# ---------------------------------------------------------------------------------------------
# the Sinkhorn solver's dense kernel matrices and matrix-vector products
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("threads", [1, 2])
def test_dense_kernel_and_matvec_match_numpy(threads, pool_allowed):
    tp.set_num_threads(threads)
    rng = np.random.default_rng(9)
    n, m = 610, 530  # n m above PARALLEL_ENTRIES, partial last blocks
    left, right = rng.standard_normal((n, 3)), rng.standard_normal((m, 3))
    r, c, w = rng.standard_normal(n), rng.standard_normal(m), rng.random(m) + 0.5
    L = left @ right.T
    out = np.empty((n, m))
    assert D.dense_kernel(left, right, out) is True
    np.testing.assert_allclose(out, L, rtol=1e-14, atol=1e-14)
    assert D.dense_kernel(left, right, out, "exp", row_add=r, col_add=c)
    np.testing.assert_allclose(out, np.exp(L + r[:, None] + c[None, :]), rtol=1e-13)
    finite, M, s = D.dense_kernel(left, right, out, "softmax", col_add=c, col_div=w)
    Lc = L + c[None, :]
    E = np.exp(Lc - Lc.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, E / E.sum(axis=1, keepdims=True) / w, rtol=1e-13)
    np.testing.assert_allclose(M, Lc.max(axis=1), rtol=1e-15)
    np.testing.assert_allclose(s, E.sum(axis=1), rtol=1e-13)
    x, y = rng.standard_normal(m), rng.standard_normal(n)
    np.testing.assert_allclose(D.matvec(out, x), out @ x, rtol=1e-13)
    np.testing.assert_allclose(D.matvec(out, y, transpose=True), out.T @ y, rtol=1e-13)
    bad = left.copy()
    bad[3, 1] = np.inf
    with np.errstate(invalid="ignore"):  # inf * 0 inside the product
        assert D.dense_kernel(bad, right, out) is False


def test_dense_kernel_and_matvec_bitwise_over_threads(pool_allowed):
    rng = np.random.default_rng(10)
    n = 700
    left, right, x = rng.standard_normal((n, 2)), rng.standard_normal((n, 2)), rng.random(n)
    results = []
    for threads in (1, 2):
        tp.set_num_threads(threads)
        out = np.empty((n, n))
        _, M, s = D.dense_kernel(left, right, out, "softmax", col_add=x, col_div=x + 1)
        results.append((out, M, s, D.matvec(out, x), D.matvec(out, x, transpose=True)))
    for a, b in zip(*results):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("threads", [1, 2])
def test_dense_kernel_floor_zeroes_only_relative_entries_below_it(threads, pool_allowed):
    """The softmax kernel's floor (the Sinkhorn solver's 1e-200: no subnormal products): entries
    whose exp(L - max) falls below it are 0, the others as without a floor (row sums within
    m * floor), bitwise the same whatever the thread count."""
    tp.set_num_threads(threads)
    rng = np.random.default_rng(11)
    n, m = 600, 500
    left, right = 30.0 * rng.standard_normal((n, 2)), 30.0 * rng.standard_normal((m, 2))
    plain, floored = np.empty((n, m)), np.empty((n, m))
    D.dense_kernel(left, right, plain, "softmax")
    D.dense_kernel(left, right, floored, "softmax", floor=1e-200)
    L = left @ right.T
    below = np.exp(L - L.max(axis=1, keepdims=True)) < 1e-200
    assert below.mean() > 0.1  # scores spanning thousands: many entries below the floor
    assert np.all(floored[below] == 0.0) and np.any(plain[below] > 0.0)
    np.testing.assert_allclose(floored[~below], plain[~below], rtol=1e-14)
    # rows still sum to 1 (they are normalised after the floor)
    np.testing.assert_allclose(floored.sum(axis=1), 1.0, rtol=1e-13)
    tp.set_num_threads(3 - threads)
    again = np.empty((n, m))
    D.dense_kernel(left, right, again, "softmax", floor=1e-200)
    assert np.array_equal(again, floored)


def test_a_kernel_that_returns_a_new_array_is_used_not_ignored():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, 2))
    w = np.full(40, 1 / 40)
    dense = np.exp(X @ X.T) @ (X * w[:, None])
    returned = kernel_sums(X, X, X * w[:, None], lambda S: np.exp(S))
    assert np.allclose(returned, dense, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# a reader's kernel is checked where its result comes back
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [40, 700])  # the dense small path and the tiled one
@pytest.mark.parametrize(
    "bad,error,match",
    [
        (lambda S: 1.0, ValueError, r"shape \(\)"),  # a scalar: not broadcast
        (lambda S: S[:1].copy(), ValueError, r"shape \(1, "),  # one row: not broadcast
        (lambda S: S[:, 1:].copy(), ValueError, "shape"),
        (lambda S: S + 0j, TypeError, "complex"),
        (lambda S: S > 0, TypeError, "bool"),
        (lambda S: "S", TypeError, "dtype|str"),
        (lambda S: np.full(S.shape, np.nan), ValueError, "non-finite"),
        (lambda S: np.exp(S * 1e3), ValueError, "non-finite"),  # overflow to inf
    ],
)
def test_a_bad_kernel_result_is_an_error_naming_the_kernel(n, bad, error, match):
    Q, Y, values, _, _ = _problem(n=n, m=n)

    def my_kernel(S):
        with np.errstate(over="ignore"):
            return bad(S)

    with pytest.raises(error, match=match) as info:
        kernel_sums(Q, Y, values, my_kernel)
    assert "kind (the kernel my_kernel)" in str(info.value)


def test_an_in_place_kernel_that_writes_non_finite_values_is_an_error():
    Q, Y, values, _, _ = _problem(n=700, m=700)

    def log_kernel(S):
        with np.errstate(divide="ignore", invalid="ignore"):
            np.log(S, out=S)  # negative scores: NaN

    with pytest.raises(ValueError, match=r"kind \(the kernel log_kernel\).*non-finite"):
        kernel_sums(Q, Y, values, log_kernel)


def test_a_kernel_may_return_an_array_like_of_the_block_shape():
    Q, Y, values, q_pos, k_pos = _problem(masked=True)
    got = kernel_sums(Q, Y, values, lambda S: np.tanh(S).tolist(), q_pos, k_pos)
    np.testing.assert_allclose(got, _naive(Q, Y, values, np.tanh, q_pos, k_pos), rtol=RTOL)


# ---------------------------------------------------------------------------------------------
# shifted scores far below the underflow threshold are clamped: sums bitwise unchanged
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("kind", ["softmax", "exp"])
def test_clamping_far_negative_scores_changes_no_bit(kind, masked, monkeypatch):
    # a spread cloud (|x| ~ 25, d = 2): most shifted scores lie far below -708, where exp
    # underflows; raised to -700 they give e^-700 instead of a subnormal or 0, which is e^-500
    # below each row's largest term (>= e^-200) and so below half an ulp of every sum
    rng = np.random.default_rng(3)
    n = 2000
    X = 25.0 * rng.standard_normal((n, 2))
    values = np.hstack([X, np.ones((n, 1))]) / n
    pos = np.sort(rng.random(n)) if masked else None
    jobs = []
    real_job = K._Job

    def spy(*args):
        jobs.append(real_job(*args))
        return jobs[-1]

    monkeypatch.setattr(K, "_Job", spy)
    clamped = kernel_sums(X, X, values, kind, pos, pos)
    assert jobs[-1].clamp  # the clamp really ran
    S = X @ X.T - jobs[-1].shift[:, None] if not masked else None
    if S is not None:
        assert (S < -745).mean() > 0.3  # ... on scores whose exp is 0
    monkeypatch.setattr(K, "_EXP_FLOOR", -np.inf)  # no clamp: the plain exponential
    plain = kernel_sums(X, X, values, kind, pos, pos)
    for a, b in zip(clamped if kind == "exp" else [clamped], plain if kind == "exp" else [plain]):
        assert np.array_equal(a, b, equal_nan=True)


def test_clamped_softmax_fields_are_bitwise_the_unclamped_ones(monkeypatch):
    import tpde_lib as tp

    rng = np.random.default_rng(4)
    for n, d, scale in ((400, 2, 30.0), (2000, 2, 10.0), (1000, 16, 6.0)):
        X = scale * rng.standard_normal((n, d))
        att = tp.Softmax(rng.standard_normal((d, d)), np.eye(d))
        mu = tp.Empirical(X)
        with monkeypatch.context() as m:
            m.setattr(K, "_EXP_FLOOR", -np.inf)
            plain = att.velocity(mu)
        assert np.array_equal(att.velocity(mu), plain)


# ---------------------------------------------------------------------------------------------
# BLAS state: held to one thread during threaded calls, restored on every path
# ---------------------------------------------------------------------------------------------

threadpoolctl = pytest.importorskip("threadpoolctl")


def _blas_threads():
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]


@pytest.fixture
def two_blas_threads():
    """BLAS at two threads (whatever the environment set), the engine at two threads."""
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        assert _blas_threads() and set(_blas_threads()) == {2}
        tp.set_num_threads(2)
        yield
        tp.set_num_threads(None)


def test_blas_is_held_to_one_thread_for_the_whole_field_and_restored(two_blas_threads):
    import tpde_lib as tp

    seen = []
    Q, Y, values, _, _ = _problem(n=700, m=700)

    def spy(S):
        seen.append(_blas_threads()[0])
        _relu(S)

    kernel_sums(Q, Y, values, spy)
    assert set(seen) == {1} and set(_blas_threads()) == {2}
    # a field built on the engine holds BLAS for the whole call, its own products included
    att = tp.Softmax(np.eye(3), np.eye(3))
    real = att.queries
    inside = []
    att.queries = lambda points, t: (inside.append(_blas_threads()[0]), real(points, t))[1]
    att.velocity(tp.Empirical(Q))
    assert inside == [1] and set(_blas_threads()) == {2}


def test_one_public_call_enters_the_blas_hold_once(two_blas_threads, monkeypatch):
    # velocity holds BLAS for the field; the engine's threaded blocks inside it (and the
    # public kernel_sums' own hold) run under that one hold instead of entering it again
    import tpde_lib as tp
    from tpde_lib import _threads

    entered = []
    real = _threads._enter_hold
    monkeypatch.setattr(_threads, "_enter_hold", lambda: (entered.append(1), real())[1])
    X = np.random.default_rng(1).standard_normal((700, 3))
    for att in (tp.Softmax(np.eye(3) / 3, np.eye(3)), tp.Sinkhorn(np.eye(3) / 3, np.eye(3))):
        att.velocity(X)  # the first Sinkhorn call may import scipy.linalg: entered again
        entered.clear()
        att.velocity(X)
        assert entered == [1], type(att).__name__
    entered.clear()
    kernel_sums(X, X, X, "softmax")
    assert entered == [1] and set(_blas_threads()) == {2} and _threads._hold["depth"] == 0


@pytest.mark.parametrize("raised", [ArithmeticError, KeyboardInterrupt])
def test_blas_threads_are_restored_after_an_exception_or_interrupt(raised, two_blas_threads):
    Q, Y, values, _, _ = _problem(n=700, m=700)
    calls = []

    def bad(S):
        calls.append(1)
        if len(calls) == 3:
            raise raised("stop")
        _relu(S)

    with pytest.raises(raised):
        kernel_sums(Q, Y, values, bad)
    assert set(_blas_threads()) == {2}


def test_a_bad_thread_setting_changes_nothing(two_blas_threads, monkeypatch):
    # the setting is parsed before BLAS is touched: a failed parse leaves BLAS as it was, and
    # once the variable is fixed calls run threaded again
    Q, Y, values, _, _ = _problem(n=700, m=700)
    tp.set_num_threads(None)
    monkeypatch.setenv("TPDE_NUM_THREADS", "two")
    with pytest.raises(ValueError, match="TPDE_NUM_THREADS"):
        kernel_sums(Q, Y, values, "softmax")
    assert set(_blas_threads()) == {2}
    monkeypatch.setenv("TPDE_NUM_THREADS", "2")
    seen = []
    kernel_sums(Q, Y, values, lambda S: (seen.append(_blas_threads()[0]), _relu(S))[1])
    assert set(seen) == {1} and set(_blas_threads()) == {2}


def test_threaded_calls_from_several_threads_restore_blas(two_blas_threads):
    # the hold is shared: while any caller is inside, BLAS stays at one thread; the last one
    # out restores two. Each result is bitwise the one a call alone gives.
    import tpde_lib as tp

    rng = np.random.default_rng(12)
    tp.set_num_threads(3)
    X = rng.standard_normal((900, 4))
    atts = [
        tp.Softmax(rng.standard_normal((4, 4)), np.eye(4)),
        tp.Sigmoid(rng.standard_normal((4, 4)), np.eye(4)),
        tp.Unnormalised(0.1 * rng.standard_normal((4, 4)), np.eye(4)),
    ]
    mu = tp.Empirical(X)
    alone = [a.velocity(mu) for a in atts]
    problem = _problem(n=700, m=650, seed=21)
    alone.append(kernel_sums(*problem[:3], _slow_relu))
    calls = [lambda a=a: a.velocity(mu) for a in atts] + [lambda: kernel_sums(*problem[:3], _slow_relu)]
    same, errors = [[] for _ in calls], []

    def run(k):
        try:
            for _ in range(4):
                same[k].append(np.array_equal(calls[k](), alone[k]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads) and not errors
    assert same == [[True] * 4] * len(calls)
    assert set(_blas_threads()) == {2}


def test_hidden_keys_never_raise_under_the_callers_errstate():
    # masked rows are shifted by a bound of the scores they see; the scores of the keys they do
    # not see may overflow before the mask zeroes them: no FloatingPointError for those
    rng = np.random.default_rng(6)
    n = 700
    X = 25.0 * rng.standard_normal((n, 2))
    pos = np.sort(rng.random(n))
    with np.errstate(all="raise"):
        got = kernel_sums(X, X, np.ones((n, 1)), "softmax", pos, pos)
    assert np.isfinite(got).all() and got.min() >= 1.0  # each row sees itself: e^0


def test_velocity_holds_blas_for_any_large_field_only(two_blas_threads):
    # every variant (a reader's, multi-head, l2 ...) runs its field with BLAS at one thread when
    # the call is large enough for the engine's threads, and with BLAS untouched otherwise
    import tpde_lib as tp

    class Probe(tp.Attention):
        def __init__(self):
            self.d, self.seen = 2, []

        def field(self, points, weights, positions, t):
            self.seen.append(_blas_threads()[0])
            return np.zeros_like(points)

    att = Probe()
    X = np.random.default_rng(0).standard_normal((700, 2))
    att.velocity(X)
    att.velocity(X[:100])
    assert att.seen == [1, 2] and set(_blas_threads()) == {2}


def test_an_interrupt_while_blas_is_being_limited_restores_what_was_limited(monkeypatch):
    # the hold limits the BLAS libraries one after another: an interrupt (or an error of the
    # library) half-way must give back the ones already limited and leave no hold behind
    class Lib:
        def __init__(self, k, fail=False):
            self.k, self.fail = k, fail

        def get_num_threads(self):
            return self.k

        def set_num_threads(self, k):
            if self.fail:
                raise KeyboardInterrupt
            self.k = k

    libs = [Lib(4), Lib(3, fail=True)]
    monkeypatch.setattr(_threads, "_blas_controllers", lambda: libs)
    with pytest.raises(KeyboardInterrupt):
        _threads._enter_hold()
    assert [lib.k for lib in libs] == [4, 3]
    assert _threads._hold == {"depth": 0, "saved": [], "seen": set()}
    libs[1].fail = False
    with _threads._Held():
        assert [lib.k for lib in libs] == [1, 1]
    assert [lib.k for lib in libs] == [4, 3] and _threads._hold["depth"] == 0


_LOADED_INSIDE_A_HOLD = r"""
import sys
import threadpoolctl
from tpde_lib import _threads

def blas():
    return {i["filepath"]: i["num_threads"] for i in threadpoolctl.threadpool_info()
            if i["user_api"] == "blas"}

assert "scipy.linalg" not in sys.modules
before = blas()
with _threads.single_blas():  # an outer hold: only the BLAS already loaded is known
    import scipy.linalg  # noqa: F401  (loads scipy's own BLAS where it has one)
    with _threads.single_blas():  # the inner hold finds and holds it
        inside = blas()
after = blas()
print(len(inside) > len(before), sorted(set(inside.values())),
      all(after[k] == v for k, v in before.items()))
"""


def test_a_blas_loaded_inside_a_hold_is_held_by_the_next_hold_and_restored():
    """scipy loads its own OpenBLAS: imported inside an outer hold (the Sinkhorn field's first
    solve on many tokens imports scipy.linalg there), it is held by the solver's inner hold."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}  # >1 even on a one-core machine
    out = subprocess.run(
        [sys.executable, "-c", _LOADED_INSIDE_A_HOLD],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    loaded_another, inside, restored = out[0], "".join(out[1:-1]), out[-1]
    if loaded_another == "True":  # scipy brought a BLAS of its own (the wheels do)
        assert inside == "[1]"  # every BLAS at one thread inside, the new one too
    assert restored == "True"  # the BLAS loaded before the holds is restored


def _variants_at(d, rng):
    """Every built-in variant at dimension d, with scores of moderate size (Sinkhorn converges
    in a few passes): their fields must not depend on the thread count at any d."""
    import tpde_lib as tp

    A = rng.standard_normal((d, d)) / (2 * d)
    V = rng.standard_normal((d, d)) / np.sqrt(d)
    Q, Kmat = rng.standard_normal((2, d, d)) / d
    return {
        "softmax": tp.Softmax(A, V),
        "causal": tp.Softmax(A, V, causal=True),
        "multihead": tp.MultiHead([tp.Softmax(A, V), tp.Softmax(A.T, V)]),
        "l2": tp.L2(Q, Kmat, V),
        "sinkhorn": tp.Sinkhorn(A + A.T, V, tol=1e-6),
        "sigmoid": tp.Sigmoid(A, V, bias=-1.0),
        "linear": tp.Linear(A, V),
        "unnormalised": tp.Unnormalised(A, V),
        "layer": tp.Layer(tp.Softmax(A, V), tp.AffineFeedForward(V)),
    }


@pytest.mark.parametrize("d", [2, 16, 64, 128])
def test_every_variant_is_bitwise_equal_over_thread_counts_at_every_width(d, pool_allowed):
    """n = 600 (n^2 above _PARALLEL_ENTRIES: two threads are used). BLAS is allowed two threads
    outside the calls, so that a product left outside the hold (it was the case at d = 64 and
    128: 2e-16 apart) would run on a different number of BLAS threads in the two runs."""
    from threadpoolctl import threadpool_limits

    import tpde_lib as tp

    rng = np.random.default_rng(d)
    n = 600
    mu = tp.Empirical(rng.standard_normal((n, d)), positions=(np.arange(n) % 50) / 50)
    results = {}
    with threadpool_limits(2, user_api="blas"):
        for k in (1, 2):
            tp.set_num_threads(k)
            for name, att in _variants_at(d, np.random.default_rng(d + 1)).items():
                results.setdefault(name, []).append(att.velocity(mu))
    for name, (one, two) in results.items():
        assert np.array_equal(one, two), f"{name} at d={d}: {np.abs(one - two).max():.3g}"
