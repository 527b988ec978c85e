r"""The threads of the kernel engine (``attention/_kernels.py``) and of the Sinkhorn solver's
dense kernels (``attention/_dense.py``), and the BLAS limit that goes with them (also held by the
batched integrator, :mod:`tpde_lib.integrate`): a module of the base layer, which every layer
may import (CONTRIBUTING.md, "Layers").

Threads: ``set_num_threads(k)``, else the environment variable ``TPDE_NUM_THREADS``, else the
number of cores available to the process. A threaded call hands its row blocks to a
``concurrent.futures.ThreadPoolExecutor`` of that many threads less one (the calling thread takes
blocks too). The row blocks, their tiles and every arithmetic operation on them are fixed by the
shapes and the data alone, never by the number of threads, so the results are bitwise identical
for any thread count (each block is computed by the same sequence of numpy calls whichever thread
runs it).

BLAS: while a call runs its own threads, BLAS is held to one thread (``threadpoolctl``, when
installed), for the *whole* call (:func:`held_blas`, entered by the fields and by
:func:`~tpde_lib.kernel_sums`), so that OpenBLAS's own threads neither oversubscribe the cores nor
spin between the small products before and after the blocks (measured in a plain environment,
n = 1000, d = 64: 2.3 times slower without the hold). The hold is shared by every caller of the
process: the first to enter saves the BLAS thread counts and sets them to one, the last to leave
restores them, on every path (exceptions, ``KeyboardInterrupt``, several Python threads calling at
once). Without ``threadpoolctl`` the engine runs its threads only when ``OPENBLAS_NUM_THREADS``
or ``OMP_NUM_THREADS`` is ``1``, and a call otherwise runs on one thread.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import os
import sys
import threading

import numpy as np

try:  # optional: holds BLAS to one thread inside the engine's threaded calls
    from threadpoolctl import ThreadpoolController
except ImportError:  # pragma: no cover - depends on the environment
    ThreadpoolController = None

#: calls with fewer scores (n m) run on the calling thread (handing blocks out costs ~0.1 ms)
PARALLEL_ENTRIES = 1 << 18

_state = {"threads": None, "pool": None, "size": 0, "blas": None, "modules": 0}
#: the BLAS hold shared by all callers: how many are inside, and the thread counts to restore
_hold = {"depth": 0, "saved": [], "seen": set()}
_lock = threading.Lock()
_local = threading.local()  # .inside: this thread runs blocks of a threaded call (no nesting)
# a forked child has the parent's executor but not its threads, nor its callers: it starts afresh
os.register_at_fork(
    after_in_child=lambda: (_state.update(pool=None, size=0), _hold.update(depth=0, saved=[]))
)


def set_num_threads(k: int | None = None) -> None:
    """Set the number of threads of :func:`~tpde_lib.kernel_sums` (``None``: back to the default).

    The default is the environment variable ``TPDE_NUM_THREADS`` when set, else the number of
    cores available to this process. Results do not depend on it (bitwise).

    Parameters
    ----------
    k : int or None
        A positive number of threads. Checked before anything changes.

    Examples
    --------
    >>> import tpde_lib as tp
    >>> tp.set_num_threads(1)
    >>> tp.get_num_threads()
    1
    >>> tp.set_num_threads(None)           # back to TPDE_NUM_THREADS or the cores
    """
    if k is not None:
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"k must be a positive int or None, got {k!r}")
        if k < 1:
            raise ValueError(f"k must be a positive int or None, got {k!r}")
        k = int(k)
    _state["threads"] = k


def get_num_threads() -> int:
    """The number of threads :func:`~tpde_lib.kernel_sums` uses for a large call.

    ``set_num_threads(k)`` if set, else ``TPDE_NUM_THREADS``, else the cores available.

    Raises
    ------
    ValueError
        ``TPDE_NUM_THREADS`` is set but not a positive integer.

    Examples
    --------
    >>> import tpde_lib as tp
    >>> tp.get_num_threads() >= 1
    True
    """
    if _state["threads"] is not None:
        return _state["threads"]
    env = os.environ.get("TPDE_NUM_THREADS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"TPDE_NUM_THREADS must be a positive integer, got {env!r}")
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _blas_single_by_env():
    return "1" in (os.environ.get("OPENBLAS_NUM_THREADS"), os.environ.get("OMP_NUM_THREADS"))


def call_threads(nblocks, entries):
    """The number of threads a call of ``entries`` scores in ``nblocks`` row blocks runs on,
    from the data and the settings alone (``get_num_threads`` is parsed here, before any state
    changes). 1 inside a worker of a threaded call, and without ``threadpoolctl`` unless BLAS is
    held to one thread by the environment."""
    if entries < PARALLEL_ENTRIES or nblocks < 2 or getattr(_local, "inside", False):
        return 1
    threads = min(get_num_threads(), nblocks)
    if ThreadpoolController is None and not _blas_single_by_env():
        return 1
    return threads


def _blas_controllers():
    """The BLAS libraries loaded in the process, found again whenever modules were imported since
    the last look (scipy brings its own OpenBLAS, often loaded after the first hold: unheld, its
    threads made the Sinkhorn solver's LU factorisations depend on the thread count)."""
    if _state["blas"] is None or _state["modules"] != len(sys.modules):
        _state["modules"] = len(sys.modules)
        ctl = ThreadpoolController()
        _state["blas"] = [c for c in ctl.lib_controllers if c.user_api == "blas"]
    return _state["blas"]


def _enter_hold():
    with _lock:
        if _hold["depth"] == 0:
            saved = []
            try:
                for c in _blas_controllers():
                    k = c.get_num_threads()
                    if k != 1:
                        saved.append((c, k))  # before the change: undone below if it fails
                        c.set_num_threads(1)
            except BaseException:  # an interrupt or a library error half-way: undo, hold nothing
                for c, k in saved:
                    c.set_num_threads(k)
                raise
            _hold["saved"] = saved
            _hold["seen"] = {c.filepath for c in _state["blas"]}
        elif _state["modules"] != len(sys.modules):
            # a BLAS loaded while held (scipy.linalg imported inside an outer hold, as the
            # Sinkhorn field's first solve does on many tokens): held too, restored with the rest
            for c in _blas_controllers():
                if c.filepath not in _hold["seen"]:
                    _hold["seen"].add(c.filepath)
                    k = c.get_num_threads()
                    if k != 1:
                        _hold["saved"].append((c, k))
                        c.set_num_threads(1)
        _hold["depth"] += 1


def _leave_hold():
    with _lock:
        _hold["depth"] -= 1
        if _hold["depth"] == 0:
            saved, _hold["saved"], _hold["seen"] = _hold["saved"], [], set()
            for c, k in saved:
                c.set_num_threads(k)


class _Held:
    """The context of :func:`held_blas` that holds BLAS (entered at most once). It counts the
    holds of the calling thread (``_local.held``), so that a call nested in a held one on the
    same thread does not enter the hold again (:func:`_held_here`)."""

    def __enter__(self):
        _enter_hold()
        _local.held = getattr(_local, "held", 0) + 1
        return self

    def __exit__(self, *exc):
        _local.held -= 1
        _leave_hold()
        return False


def _held_here():
    """Whether this thread already holds BLAS for an enclosing call, and no module was imported
    since BLAS was last looked for (a BLAS loaded meanwhile is held by entering again): the
    nested call then runs under the enclosing hold, one hold per public call."""
    return getattr(_local, "held", 0) > 0 and _state["modules"] == len(sys.modules)


_NOT_HELD = contextlib.nullcontext()


def single_blas():
    """A context holding BLAS to one thread whatever the call's size (the shared hold of
    :func:`held_blas`); one that does nothing without ``threadpoolctl``. For loops of many small
    products, such as the batched integrator's, where BLAS threads cost more than they give."""
    return _NOT_HELD if ThreadpoolController is None or _held_here() else _Held()


def held_blas(entries, nblocks=2):
    """A context holding BLAS to one thread, if a call of ``entries`` scores (and ``nblocks``
    row blocks) runs the engine's own threads (:func:`call_threads`); otherwise one that does
    nothing. The hold is shared by every caller of the process: the first one in saves the BLAS
    thread counts and limits them, the last one out restores them, on every path.

    Whether BLAS is held depends on the call's size alone, not on the number of threads: a
    call large enough to be threaded holds BLAS even when it runs on one thread, so that its
    products (the queries ``x A^T`` before the blocks, the tiles inside them) are computed by
    the same BLAS code whatever :func:`get_num_threads` says (OpenBLAS on two threads gave
    results 2e-16 apart from one thread at d = 64 and 128).

    One hold per public call: a call nested in a held one on the same thread (the engine's
    blocks inside a field that :meth:`~tpde_lib.Attention.velocity` holds BLAS for) runs under
    the enclosing hold instead of entering it again, unless a module was imported meanwhile
    (which may have loaded a BLAS of its own: entering again holds it too)."""
    if (
        ThreadpoolController is None
        or entries < PARALLEL_ENTRIES
        or nblocks < 2
        or getattr(_local, "inside", False)
        or _held_here()
    ):
        return _NOT_HELD
    return _Held()


def _executor(workers):
    """A thread pool of at least ``workers`` threads (replaced by a larger one when needed)."""
    with _lock:
        if _state["size"] < workers:
            # (the old pool is not shut down: a concurrent caller may still submit to it; its
            # idle threads end when it is collected)
            _state["pool"] = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="tpde")
            _state["size"] = workers
        return _state["pool"]


def parallel_blocks(nblocks, task, entries):
    """Run ``task(i)`` for ``i`` in ``range(nblocks)``, spread over the threads.

    ``entries`` (the number of scores of the call) decides, from the data alone, whether the
    threads are used (:func:`call_threads`), BLAS being then held to one thread; blocks are
    handed out in order to whichever thread is free, so a core slowed by another process gets
    fewer of them. ``task`` must write disjoint outputs and depend only on ``i``: then the
    result does not depend on the threads. Floating-point error settings (``np.errstate``) of
    the caller apply in every thread; the first exception raised by a task (or an interrupt of
    the caller) is raised here once every thread has stopped taking blocks.
    """
    threads = call_threads(nblocks, entries)
    if threads == 1:
        for i in range(nblocks):
            task(i)
        return
    errs = np.geterr()
    counter = itertools.count()
    failed = []

    def worker():  # records the first exception instead of raising it
        _local.inside = True
        try:
            with np.errstate(**errs):
                while not failed and (i := next(counter)) < nblocks:
                    task(i)
        except BaseException as exc:
            failed.append(exc)
        finally:
            _local.inside = False

    with held_blas(entries, nblocks):
        pool = _executor(threads - 1)
        futures = [pool.submit(worker) for _ in range(threads - 1)]
        try:
            worker()
            concurrent.futures.wait(futures)
        except BaseException as exc:  # interrupted while waiting: the others stop too
            failed.append(exc)
            raise
    if failed:
        raise failed[0]
