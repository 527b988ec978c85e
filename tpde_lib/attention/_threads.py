r"""The thread pool of the kernel engine (:mod:`._kernels`) and the Sinkhorn solver's dense
kernels (:mod:`._dense`).

Threads: ``set_num_threads(k)``, else the environment variable ``TPDE_NUM_THREADS``, else the
number of cores available to the process; the pool is that many persistent threads less one,
each waiting in a ``queue.SimpleQueue`` (the calling thread takes blocks too). The row blocks,
their tiles and every arithmetic operation on them are fixed by the shapes and the data alone,
never by the number of threads, so the results are bitwise identical for any thread count
(each block is computed by the same sequence of numpy calls whichever thread runs it). During a
threaded call BLAS is held to one thread (``threadpoolctl``, when installed) so that the pool
does not oversubscribe the cores; without ``threadpoolctl`` the pool is used only when
``OPENBLAS_NUM_THREADS`` or ``OMP_NUM_THREADS`` is ``1``, and a call otherwise runs on one
thread.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import threading

import numpy as np

try:  # optional: holds BLAS to one thread inside the pool
    from threadpoolctl import ThreadpoolController
except ImportError:  # pragma: no cover - depends on the environment
    ThreadpoolController = None

#: calls with fewer scores (n m) run on the calling thread (the pool costs ~0.1 ms)
_PARALLEL_ENTRIES = 1 << 18

_state = {"threads": None, "workers": [], "controller": None, "blas": []}
_lock = threading.Lock()
_local = threading.local()      # .inside: this thread is a worker of the pool (no nesting)
# a forked child has the parent's inboxes but not its threads: it starts its own
os.register_at_fork(after_in_child=lambda: _state.update(workers=[]))


def set_num_threads(k=None):
    """Number of threads used by :func:`kernel_sums` (``None``: back to the default).

    The default is the environment variable ``TPDE_NUM_THREADS`` when set, else the number of
    cores available to this process. Results do not depend on it (bitwise).
    """
    if k is not None:
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"k must be a positive int or None, got {k!r}")
        if k < 1:
            raise ValueError(f"k must be a positive int or None, got {k!r}")
        k = int(k)
    _state["threads"] = k


def get_num_threads():
    """Number of threads :func:`kernel_sums` uses for a large call (see :func:`set_num_threads`)."""
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


def _blas_one_thread():
    """A context holding BLAS to one thread (a null one when every BLAS already runs one), or
    None without ``threadpoolctl``."""
    if ThreadpoolController is None:
        return None
    with _lock:
        if _state["controller"] is None:
            ctl = ThreadpoolController()
            _state["controller"] = ctl
            _state["blas"] = [c for c in ctl.lib_controllers if c.user_api == "blas"]
        ctl = _state["controller"]
    if all(c.get_num_threads() == 1 for c in _state["blas"]):   # 0.5 us, the limit 6 us
        return contextlib.nullcontext()
    return ctl.limit(limits=1, user_api="blas")


def _serve(inbox):
    """A worker thread's loop: run each ``(task, done)`` it is handed, then say so on ``done``."""
    while True:
        task, done = inbox.get()
        try:
            task()
        finally:
            done.put(None)


def _workers(k):
    """The inboxes of ``k`` persistent worker threads (started on first use, daemons).

    Each waits in ``queue.SimpleQueue.get``, a C call without the GIL, and hands a finished task
    back with one ``put``: unlike ``concurrent.futures`` (whose futures, conditions and work
    items are Python code run at the start and the end of every task), a worker takes the GIL
    only briefly around a parallel call, where the calling thread needs it.
    """
    with _lock:
        boxes = _state["workers"]
        while len(boxes) < k:
            inbox = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(inbox,), daemon=True,
                             name=f"tpde-{len(boxes)}").start()
            boxes.append(inbox)
        return boxes[:k]


def parallel_blocks(nblocks, task, entries):
    """Run ``task(i)`` for ``i`` in ``range(nblocks)``, spread over the threads.

    ``entries`` (the number of scores of the call) decides, from the data alone, whether the
    pool is used and BLAS held to one thread; blocks are handed out in order to whichever thread
    is free, so a core slowed by another process gets fewer of them. ``task`` must write
    disjoint outputs and depend only on ``i``: then the result does not depend on the threads.
    Floating-point error settings (``np.errstate``) of the caller apply in every thread; the
    first exception raised by a task is raised here.
    """
    big = entries >= _PARALLEL_ENTRIES and not getattr(_local, "inside", False)
    limit = _blas_one_thread() if big else None
    threads = min(get_num_threads(), nblocks) if big else 1
    if limit is None and not _blas_single_by_env():
        threads = 1
    errs = np.geterr()
    counter = itertools.count()
    failed = []

    def worker():                # records the first exception instead of raising it
        _local.inside = True
        try:
            with np.errstate(**errs):
                while not failed and (i := next(counter)) < nblocks:
                    task(i)
        except BaseException as exc:
            failed.append(exc)
        finally:
            _local.inside = False

    def run():
        if threads == 1:
            for i in range(nblocks):
                task(i)
            return
        done = queue.SimpleQueue()          # this call's own: callers in several threads never mix
        for inbox in _workers(threads - 1):
            inbox.put((worker, done))
        worker()
        for _ in range(threads - 1):
            done.get()
        if failed:
            raise failed[0]

    if limit is None:
        run()
    else:
        with limit:
            run()
