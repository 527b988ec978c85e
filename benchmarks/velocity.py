"""Speed and memory of the attention velocity fields (a script, not a test).

Prints, side by side in one run, for n = 1000, 4000, 16000 tokens and d = 2, 16, 64:

* each field's time (``att.velocity(mu)``, uniform weights) and its ratios to
  - the *bound*: the field's n^2 exponentials plus its two thin products (scores ``Q K^T`` with
    max(d, 4) inner columns, and the product with the d + 1 value columns), each at its measured
    in-cache one-core speed on a 256-row tile, divided by the cores used: what a blocked numpy
    evaluation cannot go below (``cpu/bnd``: our CPU time over all threads against the one-core
    time of that work, the same ratio on an idle machine with perfect scaling);
  - the plain numpy version of the same field (full n x n matrices, three lines; skipped where
    those matrices would exceed ``PLAIN_MAX_BYTES``);
  - ``jax.jit`` of the same field in float64, dense (``/jax``), and for the softmax fields blocked
    (``/jaxblk``: rows of 256 queries through ``lax.map``, the memory of one block at a time);
  - torch's fused ``scaled_dot_product_attention`` in float64 for the softmax fields
    (``/torch``);
  and the largest relative difference to any peer (they compute the same field; ``!`` marks one
  above 1e-11). JAX and torch are optional (``pip install -r requirements-bench.txt``, torch
  separately); a missing one prints ``-``.
* our Sinkhorn attention divided by POT's log-domain Sinkhorn (``ot.sinkhorn(...,
  method="sinkhorn_log")``) at the same tolerance, both from a cold start (our ``tol`` is on the L1
  marginal violation, which bounds POT's L2 ``stopThr``: ours does at least as much);
* one softmax evaluation at n = 100,000, d = 2 in a child process whose address space is capped
  at 3 GiB: time and peak resident memory.

The script runs in the environment a reader has: it sets no ``OPENBLAS_NUM_THREADS`` (it prints
what it finds). ``kernel_sums`` threads over row blocks itself (``TPDE_NUM_THREADS``, default:
all cores) and holds BLAS to one thread during each field's call; JAX and torch use their own
thread pools (torch set to the same number of threads).

Every time is the smallest of a few repeats (the least disturbed by the other processes of a
shared machine), taken over rounds in which ours and each peer take turns (blocks of calls), so
that their ratios compare the same conditions; at n = 1000, twelve rounds of 20 calls, since
``jax.jit``'s best time there moves between two levels from one round to the next. The load
average is printed on every line. Run: ``python benchmarks/velocity.py [--quick | --fields-only]``
(``--fields-only``: the field table at n = 1000 alone; ``--quick``:
n = 1000, 4000 only). What the numbers showed, and why, is in ``benchmarks/NOTES.md``.
"""

import math
import os
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import tpde_lib.attention._kernels as engine  # white box: its tile sizes (CONTRIBUTING.md, Contracts)
from tpde_lib import get_num_threads
from tpde_lib.attention import L2, MultiHead, Sigmoid, Sinkhorn, Softmax, Unnormalised
from tpde_lib.measures import Empirical

try:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
except ImportError:
    jax = None
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

try:
    from threadpoolctl import threadpool_info, threadpool_limits
except ImportError:
    threadpool_info = threadpool_limits = None

#: the plain numpy versions are skipped above this size of one n x n float64 matrix
PLAIN_MAX_BYTES = 600 * 2**20
#: jax.jit fuses some of its n x n temporaries: it runs up to this size of one such matrix
JAX_MAX_BYTES = 2100 * 2**20


def best_time(fn, repeat=3):
    """Smallest wall time of ``repeat`` calls (the least disturbed by other processes)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def interleaved_best(fns, repeat=3, rounds=3):
    """Smallest wall time of each of ``fns``: ``rounds`` rounds of ``repeat`` calls of each in turn.

    Also the first one's smallest CPU time. Taking turns in blocks lets each see the machine's
    varying state (other processes, frequency) several times, so that their ratios are fair;
    calls within a block are consecutive because jax's worker threads keep spinning for a while
    after each jax call, which would slow a call of ours made right after it.
    """
    wall = [np.inf] * len(fns)
    cpu = np.inf
    for _ in range(rounds):
        for k, fn in enumerate(fns):
            for _ in range(repeat):
                t0, c0 = time.perf_counter(), time.process_time()
                fn()
                wall[k] = min(wall[k], time.perf_counter() - t0)
                if k == 0:
                    cpu = min(cpu, time.process_time() - c0)
    return wall, cpu


def exp_seconds():
    """In-cache time of one float64 exp on one core (min over many calls on a 256 KB array)."""
    src = -10.0 * np.random.default_rng(0).random(32_768)
    dst = np.empty_like(src)
    return min(best_time(lambda: np.exp(src, out=dst), 50) for _ in range(20)) / src.size


def exp_seconds_threads(threads):
    """Time per exp when ``threads`` threads each run ``np.exp`` on their own in-cache array.

    Shows how far the cores really scale (shared units, other tenants): the exp bound assumes
    perfect scaling.
    """
    src = -10.0 * np.random.default_rng(0).random(32_768)
    dsts = [np.empty_like(src) for _ in range(threads)]

    def work(dst):
        for _ in range(200):
            np.exp(src, out=dst)

    with ThreadPoolExecutor(threads) as pool:

        def run():
            list(pool.map(work, dsts))

        return min(best_time(run, 3) for _ in range(5)) / (200 * threads * src.size)


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# ---------------------------------------------------------------------------------------------
# the fields: ours, plain numpy, jax (xp = np or jnp; w uniform)
# ---------------------------------------------------------------------------------------------


def _softmax_plain(xp, X, A, V, mask=None):
    S = X @ A.T @ X.T
    if mask is not None:
        S = xp.where(mask, S, -xp.inf)
    E = xp.exp(S - S.max(axis=1, keepdims=True))
    return (E @ X) / E.sum(axis=1, keepdims=True) @ V.T


def _l2_plain(xp, X, Q, K, V, tau=1.0):
    qx, ky = X @ Q.T, X @ K.T
    S = (2.0 * qx @ ky.T - (ky**2).sum(axis=1)[None, :]) / tau
    E = xp.exp(S - S.max(axis=1, keepdims=True))
    return (E @ X) / E.sum(axis=1, keepdims=True) @ V.T


def _sigmoid_plain(xp, X, A, V, bias):
    n = X.shape[0]
    return (1.0 / (1.0 + xp.exp(-(X @ A.T @ X.T + bias)))) @ X @ V.T / n


def _unnormalised_plain(xp, X, A, V):
    return xp.exp(X @ A.T @ X.T) @ X @ V.T / X.shape[0]


#: rows of queries per block of the blocked jax peer
JAX_BLOCK = 256


def _softmax_jax_blocked(A, V, causal=False):
    """``jax.jit`` of the softmax field over blocks of ``JAX_BLOCK`` query rows (``lax.map``):
    one block's n-wide scores in memory at a time, as our engine keeps one tile per thread."""
    Aj, Vj = jnp.asarray(A), jnp.asarray(V)

    def field(X):
        n = X.shape[0]
        nb = -(-n // JAX_BLOCK)
        Q = jnp.pad(X @ Aj.T, ((0, nb * JAX_BLOCK - n), (0, 0))).reshape(nb, JAX_BLOCK, -1)
        rows = jnp.arange(nb * JAX_BLOCK).reshape(nb, JAX_BLOCK)

        def block(args):
            q, i = args
            S = q @ X.T
            if causal:  # positions 0..1 increasing: key j seen by row i if j <= i
                S = jnp.where(jnp.arange(n)[None, :] <= i[:, None], S, -jnp.inf)
            E = jnp.exp(S - S.max(axis=1, keepdims=True))
            return (E @ X) / E.sum(axis=1, keepdims=True)

        out = jax.lax.map(block, (Q, rows)).reshape(nb * JAX_BLOCK, -1)[:n]
        return out @ Vj.T

    return jax.jit(field)


def _softmax_torch(A, V, causal=False):
    """torch's fused ``scaled_dot_product_attention`` (float64) for the softmax field."""
    At, Vt = torch.from_numpy(A), torch.from_numpy(V)

    def field(Xt):
        with torch.inference_mode():
            q, k = (Xt @ At.T)[None], Xt[None]
            return F.scaled_dot_product_attention(q, k, k, scale=1.0, is_causal=causal)[0] @ Vt.T

    return field


def _cases(n, d, rng):
    X = rng.standard_normal((n, d))
    A = rng.standard_normal((d, d)) / math.sqrt(d)
    V = rng.standard_normal((d, d)) / math.sqrt(d)
    Q, K = rng.standard_normal((d, d)) / d**0.75, rng.standard_normal((d, d)) / d**0.75
    bias = -math.log(n)
    mu, mu_c = Empirical(X), Empirical(X, positions=np.linspace(0, 1, n))
    return (
        X,
        [
            # name, ours, plain(xp, X), exponentials per pair of tokens (the bound's count),
            # softmax heads (A, causal) for the blocked jax and torch peers (None: no such peer)
            (
                "Softmax",
                lambda: Softmax(A, V).velocity(mu),
                lambda xp, X: _softmax_plain(xp, X, A, V),
                1,
                [(A, False)],
            ),
            (
                "Softmax causal",
                lambda: Softmax(A, V, causal=True).velocity(mu_c),
                lambda xp, X: _softmax_plain(xp, X, A, V, xp.tril(xp.ones((n, n), dtype=bool))),
                1,
                [(A, True)],
            ),
            ("L2", lambda: L2(Q, K, V).velocity(mu), lambda xp, X: _l2_plain(xp, X, Q, K, V), 1, None),
            (
                "Sigmoid",
                lambda: Sigmoid(A, V, bias=bias).velocity(mu),
                lambda xp, X: _sigmoid_plain(xp, X, A, V, bias),
                1,
                None,
            ),
            (
                "Unnormalised",
                lambda: Unnormalised(A, V).velocity(mu),
                lambda xp, X: _unnormalised_plain(xp, X, A, V),
                1,
                None,
            ),
            (
                "MultiHead (2 heads)",
                lambda: MultiHead([Softmax(A, V), Softmax(A.T, V)]).velocity(mu),
                lambda xp, X: _softmax_plain(xp, X, A, V) + _softmax_plain(xp, X, A.T, V),
                2,
                [(A, False), (A.T, False)],
            ),
        ],
        V,
    )


def product_seconds(d):
    """One-core in-cache time per score of the engine's two thin products at dimension ``d``:
    the score product (max(d, 4) inner columns) and the product with the d + 1 value columns
    (padded to 4), on one tile of 256 rows by the engine's tile width."""
    rng = np.random.default_rng(0)
    p, c = max(d, engine._NARROW), max(d + 1, engine._NARROW)
    cols = engine._BLOCK_COLS if p <= engine._NARROW else engine._BLOCK_COLS_WIDE
    keys, q_t = rng.standard_normal((cols, p)), rng.standard_normal((p, 256))
    vals, T = rng.standard_normal((cols, c)), np.empty((cols, 256))
    out = np.empty((256, c))

    def tile():
        np.matmul(keys, q_t, out=T)
        np.matmul(T.T, vals, out=out)

    limit = threadpool_limits(1, user_api="blas") if threadpool_limits else None
    try:
        return min(best_time(tile, 200) for _ in range(10)) / (cols * 256)
    finally:
        if limit is not None:
            limit.unregister()


def _peers(name, plain, heads, V, X, n, plain_ok):
    """The peers of one field: (column, callable, value) for those that run here."""
    peers = []
    if plain_ok:
        peers.append(("numpy", lambda: plain(np, X), plain(np, X)))
    if jax is not None and 8 * n * n <= JAX_MAX_BYTES:
        Xj = jnp.asarray(X)
        fj = jax.jit(lambda Xj: plain(jnp, Xj))
        peers.append(("jax", lambda: fj(Xj).block_until_ready(), np.asarray(fj(Xj))))
    if jax is not None and heads:
        Xj = jnp.asarray(X)
        fbs = [_softmax_jax_blocked(Ah, V, c) for Ah, c in heads]

        def blocked():
            return sum(f(Xj) for f in fbs).block_until_ready()

        peers.append(("jaxblk", blocked, np.asarray(blocked())))
    if torch is not None and heads:
        Xt = torch.from_numpy(X)
        fts = [_softmax_torch(Ah, V, c) for Ah, c in heads]

        def fused():
            return sum(f(Xt) for f in fts)

        peers.append(("torch", fused, fused().numpy()))
    return peers


COLUMNS = ("numpy", "jax", "jaxblk", "torch")


def velocity_table(sizes=(1000, 4000, 16000), dims=(2, 16, 64), seed=0):
    cores = get_num_threads()
    if torch is not None:
        torch.set_num_threads(cores)
    t_exp = exp_seconds()
    jax_v = f"jax {jax.__version__} (jit, float64)" if jax else "not installed"
    torch_v = f"torch {torch.__version__} (float64, {cores} threads)" if torch else "not installed"
    print(
        f"bound: {t_exp * 1e9:.3f} ns per exp in cache (one core) plus the two thin products "
        f"(below), / {cores} cores used; jax: {jax_v}; torch: {torch_v}"
    )
    if cores > 1:
        t_par = exp_seconds_threads(cores)
        print(
            f"measured: {cores} threads of exp run {t_exp / t_par:.2f} times as fast as one "
            f"(the bound assumes {cores})"
        )
    t_prod = {d: product_seconds(d) for d in dims}
    print(
        "thin products, ns per score (one core, in cache): "
        + ", ".join(f"d={d}: {t * 1e9:.3f}" for d, t in t_prod.items())
    )
    head = (
        f"{'n':>6s}{'d':>4s}  {'field':21s}{'ours [ms]':>10s}{'/bound':>8s}{'cpu/bnd':>8s}"
        + "".join(f"{'/' + c:>8s}" for c in COLUMNS)
        + f"{'max.diff':>10s}   load"
    )
    print(head)
    rng = np.random.default_rng(seed)
    for n in sizes:
        for d in dims:
            X, cases, V = _cases(n, d, rng)
            plain_ok = 8 * n * n <= PLAIN_MAX_BYTES
            per_score = t_exp + t_prod[d]
            for name, ours, plain, exps, heads in cases:
                work = exps * n * n * per_score  # one core
                repeat = {1000: 20, 4000: 3}.get(n, 1)
                rounds = 12 if n <= 1000 else 3  # jax.jit's time there moves between rounds
                v = ours()  # warm up
                peers = _peers(name, plain, heads, V, X, n, plain_ok)
                times, cpu = interleaved_best([ours] + [f for _, f, _ in peers], repeat, rounds)
                t = times[0]
                ratio = {c: t / tp for (c, _, _), tp in zip(peers, times[1:])}
                diff = max((np.abs(v - ref).max() / np.abs(ref).max() for _, _, ref in peers), default=np.nan)
                print(
                    f"{n:6d}{d:4d}  {name:21s}{t * 1e3:10.1f}{t / (work / cores):8.2f}"
                    f"{cpu / work:8.2f}"
                    + "".join(f"{ratio[c]:8.2f}" if c in ratio else f"{'-':>8s}" for c in COLUMNS)
                    + f"{diff:9.1e}{'!' if diff > 1e-11 else ' '}   {load()}",
                    flush=True,
                )
    print(
        "(bound: the field's exponentials and thin products alone, n^2 of each, 2 n^2 for two "
        "heads, at one core's in-cache speed / the cores; cpu/bnd: our CPU time over all "
        "threads / their one-core time; ratios < 1: ours faster; max.diff: max |ours - peer| "
        "/ max |peer| over the peers, '!' above 1e-11; '-': not run (not installed, no such "
        f"peer, or one n x n matrix above {PLAIN_MAX_BYTES / 2**20:.0f} MiB for numpy, "
        f"{JAX_MAX_BYTES / 2**20:.0f} MiB for dense jax))"
    )


def sinkhorn_table(n=4000, dims=(2, 16), tol=1e-9, eps=1.0, seed=1):
    import ot  # POT (imported here: it may pull in jax and torch)

    rng = np.random.default_rng(seed)
    print(
        f"\nSinkhorn attention vs POT ot.sinkhorn(method='sinkhorn_log'), n={n}, eps={eps}, "
        f"tol={tol:g} (cold starts)"
    )
    print(
        f"{'case':24s}{'ours [s]':>10s}{'iters':>7s}{'POT [s]':>10s}{'iters':>7s}"
        f"{'ratio':>8s}{'max|dGamma|':>13s}"
    )
    for d in dims:
        X = rng.standard_normal((n, d))
        A0 = rng.standard_normal((d, d)) / math.sqrt(d)
        V = np.eye(d)
        mu = Empirical(X)
        w = mu.weights
        for label, A in (("symmetric A", 0.5 * (A0 + A0.T)), ("non-symmetric A", A0)):
            sk = Sinkhorn(A, V, eps=eps, tol=tol, max_iter=100_000)
            t0 = time.perf_counter()
            v = sk.velocity(mu)
            t_ours = time.perf_counter() - t0
            C = -(X @ A.T @ X.T)  # kernel e^{<Ax,y>/eps} = e^{-C/reg}
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                P, log = ot.sinkhorn(
                    w, w, C, eps, method="sinkhorn_log", stopThr=tol, numItermax=100_000, log=True
                )
            t_pot = time.perf_counter() - t0
            v_pot = (P @ X) / P.sum(axis=1, keepdims=True) @ V.T
            print(
                f"{'d=' + str(d) + ', ' + label:24s}{t_ours:10.2f}{sk.last_iterations:7d}"
                f"{t_pot:10.2f}{log['niter']:7d}{t_ours / t_pot:8.3f}"
                f"{np.abs(v - v_pot).max():13.1e}",
                flush=True,
            )


_CHILD = r"""
import resource, time
cap = 3 * 1024**3
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
import numpy as np
from tpde_lib.attention import Softmax
from tpde_lib.measures import Empirical

def hwm_mib():  # peak resident set of this process image (reset by exec, unlike ru_maxrss)
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 1024

n, d = N, 2
rng = np.random.default_rng(0)
mu = Empirical(rng.standard_normal((n, d)))
att = Softmax(rng.standard_normal((d, d)) / 2, np.eye(d))
att.velocity(Empirical(mu.points[:100]))          # warm up imports and BLAS buffers
h0 = hwm_mib()
t0, c0 = time.perf_counter(), time.process_time()
v = att.velocity(mu)
dt, dc = time.perf_counter() - t0, time.process_time() - c0
print(f"{dt:.2f} {dc:.2f} {hwm_mib() - h0:.1f} {hwm_mib():.1f}")
"""


def memory_line(n=100_000):
    res = subprocess.run(
        [sys.executable, "-c", _CHILD.replace("N, 2", f"{n}, 2")],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
    )
    if res.returncode != 0:
        print(f"\nSoftmax n={n:,}, d=2 under a 3 GiB address-space cap: FAILED\n" + res.stderr)
        return
    dt, dc, dpeak, peak = res.stdout.split()
    print(
        f"\nSoftmax, one evaluation at n={n:,}, d=2, address space capped at 3 GiB: {dt} s "
        f"wall, {dc} s CPU over all threads (load {load()}); peak RSS increase {dpeak} MiB "
        f"(process peak {peak} MiB; a dense n x n float64 matrix would be "
        f"{n**2 * 8 / 2**30:.1f} GiB)"
    )


if __name__ == "__main__":
    import ot

    quick = "--quick" in sys.argv
    blas = (
        [
            f"{i['internal_api']} {i['num_threads']} threads"
            for i in threadpool_info()
            if i["user_api"] == "blas"
        ]
        if threadpool_info
        else ["threadpoolctl not installed"]
    )
    print(
        f"environment as a reader's: OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}, OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', '(unset)')}; BLAS: {', '.join(blas)}; "
        f"numpy {np.__version__}, POT {ot.__version__}, kernel_sums threads "
        f"{get_num_threads()}, cpu_count {os.cpu_count()}, load average {load()}"
    )
    if "--fields-only" in sys.argv:  # the field table alone, at n = 1000 (a few minutes)
        velocity_table(sizes=(1000,))
    else:
        velocity_table(sizes=(1000, 4000) if quick else (1000, 4000, 16000))
        sinkhorn_table()
        memory_line()
