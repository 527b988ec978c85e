"""Speed of batched simulation (a script, not a test): ``tp.simulate_batch`` against its peers.

Prints, side by side in one run, for batches of B clouds of n tokens in dimension d (softmax
attention, V = I, a random A of norm about 1, RK4 with h = 0.05 for ``--steps`` steps):

* ``ours``: :func:`tpde_lib.simulate_batch`, in milliseconds per member (per run);
* ``loop/ours``: a Python loop of :func:`tpde_lib.simulate` over the members (timed on at most
  ``LOOP_MEMBERS`` of them, per member);
* ``np/ours``: plain numpy on the whole batch at once (``(B, n, n)`` scores, five lines per
  field, the same RK4 steps); ``-`` where one score array would exceed ``PLAIN_MAX_BYTES``;
* ``jax/ours``: ``jax.jit(jax.vmap(...))`` of the same RK4 loop written with ``lax.scan``, in
  float64 (compile time excluded, printed in the ``jit s`` column); ``-`` without JAX
  (``pip install -r requirements-bench.txt``);
* ``ours/bnd``: our time over the *bound*: the 4 x steps field evaluations' exponentials (B n^2)
  and their two stacked products (scores with d inner columns, sums with d + 1 value columns),
  each timed on one in-cache chunk of members and scaled to B, divided by the threads used;
* ``exp/jax``: the exponentials alone (B n^2 per evaluation, at numpy's in-cache speed, on
  the threads used) over JAX's whole time: above 1, no numpy code, which needs one ``np.exp``
  per score, can match JAX on this machine (the header prints both exponentials' speeds);
* ``prod``: the share of our time that the four stacked products of each evaluation take
  (queries, scores, sums, ``V``: one BLAS call per member each, as in :func:`tpde_lib.simulate`,
  for bitwise equality with it), timed like the bound;
* ``diff``: the largest relative difference between ours and any peer at the last time (they
  integrate the same system; ``!`` marks one above 1e-10).

First, one cloud (the single call's overhead, before any batch): microseconds per field
evaluation of :func:`tpde_lib.simulate` (``sim us``), against the same plain numpy RK4 on that
cloud alone (``np/sim``: above 0.6 or so, what is left of ``simulate`` over five numpy lines per
field is its checks and its per-call set-up), and against JAX's compiled loop on it
(``jax/sim``).

Every time is the smallest of a few repeats, ours and the peers taking turns, and the load
average is printed with each line: on a shared machine the ratios, not the times, are what to
read. Run: ``python benchmarks/ensembles.py [--quick] [--steps 100]``; ``--quick`` runs
B in {100, 1000}, n in {8, 32}, d in {2, 3}; ``--B``, ``--n``, ``--d`` choose the cells. What
the numbers showed is in ``benchmarks/NOTES.md``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import tpde_lib as tp

try:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
except ImportError:
    jax = None

LOOP_MEMBERS = 20
H = 0.05
#: the plain-numpy peer is not run when one of its (B, n, n) score arrays would exceed this
#: (as in ``velocity.py``: at B = 10000, n = 128 each of its temporaries is 1.3 GB, and its page
#: faults took over 12 minutes of one cell here)
PLAIN_MAX_BYTES = 600 * 2**20
#: the bound's products and exponentials are timed on this many scores at once (1 MB: in cache)
IN_CACHE_SCORES = 131_072


def best_of(func, repeats):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - t0)
    return best


def numpy_rk4(x, A, V, steps):
    """Plain numpy, the whole batch at once."""
    AT, VT = A.T.copy(), V.T.copy()

    def field(y):
        S = np.matmul(y @ AT, y.transpose(0, 2, 1))
        S -= S.max(axis=2, keepdims=True)
        np.exp(S, out=S)
        S /= S.sum(axis=2, keepdims=True)
        return np.matmul(S, y) @ VT

    for _ in range(steps):
        k1 = field(x)
        k2 = field(x + 0.5 * H * k1)
        k3 = field(x + 0.5 * H * k2)
        k4 = field(x + H * k3)
        x = x + (H / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return x


def jax_rk4(A, V, steps):
    """``jit(vmap(RK4 by lax.scan))``: one member's loop, mapped over the batch."""

    def field(y):
        S = (y @ A.T) @ y.T
        P = jax.nn.softmax(S, axis=1)
        return (P @ y) @ V.T

    def step(y, _):
        k1 = field(y)
        k2 = field(y + 0.5 * H * k1)
        k3 = field(y + 0.5 * H * k2)
        k4 = field(y + H * k3)
        return y + (H / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4), None

    def run(y):
        return jax.lax.scan(step, y, None, length=steps)[0]

    return jax.jit(jax.vmap(run))


def bound(B, n, d, steps, threads):
    """Seconds of the exponentials and the two stacked products of 4 x steps evaluations, of
    the exponentials alone, and of the four stacked products a field evaluation makes (the
    queries ``x A^T``, the scores, the sums, the average times ``V^T``: each one BLAS call per
    member)."""
    per = max(1, min(B, IN_CACHE_SCORES // (n * n)))
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((per, n, d)), rng.standard_normal((per, n, d))
    values = rng.standard_normal((per, n, d + 1))
    M = rng.standard_normal((d, d))
    S = np.matmul(q, k.transpose(0, 2, 1))
    S -= S.max(axis=2, keepdims=True)
    exps = best_of(lambda: np.exp(S), 20)
    scores = best_of(lambda: np.matmul(q, k.transpose(0, 2, 1)), 20)
    sums = best_of(lambda: np.matmul(S, values), 20)
    thin = best_of(lambda: np.matmul(q, M), 20)  # as the queries and the product with V
    scale = (B / per) * 4 * steps / threads
    return (scores + exps + sums) * scale, exps * scale, (scores + sums + 2 * thin) * scale


def exp_speeds():
    """Nanoseconds per ``exp`` of numpy and of ``jax.jit(jnp.exp)`` on one in-cache chunk of
    scores in [-30, 0] (float64), on this machine: numpy's (one thread), and JAX's wall time
    and CPU time over all its threads (XLA spreads a large elementwise operation over the
    cores); None for JAX when it is absent."""
    x = np.random.default_rng(1).uniform(-30.0, 0.0, IN_CACHE_SCORES)
    ours = best_of(lambda: np.exp(x), 50) / x.size * 1e9
    if jax is None:
        return ours, None, None
    f = jax.jit(jnp.exp)
    xj = jnp.asarray(x)
    f(xj).block_until_ready()
    wall = best_of(lambda: f(xj).block_until_ready(), 50) / x.size * 1e9
    cpu0 = time.process_time()
    for _ in range(200):
        f(xj).block_until_ready()
    cpu = (time.process_time() - cpu0) / 200 / x.size * 1e9
    return ours, wall, cpu


def problem(B, n, d):
    """The benchmark's system: a random A of norm about 1, V = I, and B clouds (B, n, d)."""
    rng = np.random.default_rng(B + n + d)
    A = rng.standard_normal((d, d)) / np.sqrt(d)
    V = np.eye(d)
    return A, V, rng.standard_normal((B, n, d)), tp.Softmax(A, V)


def row(B, n, d, steps, repeats):
    A, V, x0, att = problem(B, n, d)
    times = [0.0, H * steps]
    out = {}
    ours = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        ens = tp.simulate_batch(att, x0, times, h=H)
        ours = min(ours, time.perf_counter() - t0)
    final = ens.points[:, -1]
    m = min(B, LOOP_MEMBERS)
    loop = best_of(lambda: [tp.simulate(att, x0[b], times, h=H) for b in range(m)], 2) * B / m
    out["loop"] = loop / ours
    diffs = []
    if B * n * n * 8 <= PLAIN_MAX_BYTES:
        plain = best_of(lambda: numpy_rk4(x0, A, V, steps), repeats)
        out["np"] = plain / ours
        diffs.append(np.abs(numpy_rk4(x0, A, V, steps) - final).max() / np.abs(final).max())
    if jax is not None:
        run = jax_rk4(jnp.asarray(A), jnp.asarray(V), steps)
        xj = jnp.asarray(x0)
        t0 = time.perf_counter()
        yj = run(xj).block_until_ready()
        compile_s = time.perf_counter() - t0
        out["jax"] = best_of(lambda: run(xj).block_until_ready(), repeats) / ours
        out["jit"] = compile_s
        diffs.append(np.abs(np.asarray(yj) - final).max() / np.abs(final).max())
    threads = tp.get_num_threads() if B * n * n >= 1 << 18 else 1
    bnd, exps, products = bound(B, n, d, steps, threads)
    out["bnd"] = ours / bnd
    out["prod"] = products / ours
    if jax is not None:
        out["expjax"] = exps / (out["jax"] * ours)
    out["diff"] = max(diffs) if diffs else float("nan")
    out["ms"] = ours / B * 1e3
    return out


def single(n, d, steps, repeats):
    """One cloud: microseconds per field evaluation of ``tp.simulate``, and the ratios of plain
    numpy's and JAX's times on the same cloud to it."""
    A, V, x0, att = problem(1, n, d)
    times = [0.0, H * steps]
    mu = tp.Empirical(x0[0])
    ours = best_of(lambda: tp.simulate(att, mu, times, h=H), repeats)
    out = {"us": ours / (4 * steps) * 1e6}
    out["np"] = best_of(lambda: numpy_rk4(x0, A, V, steps), repeats) / ours
    if jax is not None:
        run = jax_rk4(jnp.asarray(A), jnp.asarray(V), steps)
        xj = jnp.asarray(x0)
        run(xj).block_until_ready()
        out["jax"] = best_of(lambda: run(xj).block_until_ready(), repeats) / ours
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--B", type=int, nargs="+", help="batch sizes (default: the grid)")
    parser.add_argument("--n", type=int, nargs="+", help="tokens per cloud (default: the grid)")
    parser.add_argument("--d", type=int, nargs="+", help="dimensions (default: the grid)")
    args = parser.parse_args()
    Bs, ns, ds = (
        ((100, 1000), (8, 32), (2, 3)) if args.quick else ((100, 1000, 10000), (8, 32, 128), (2, 3, 16))
    )
    Bs, ns, ds = args.B or Bs, args.n or ns, args.d or ds
    print(
        f"softmax, V = I, RK4 h = {H}, {args.steps} steps; threads {tp.get_num_threads()}; "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}; "
        f"jax {'-' if jax is None else jax.__version__}"
    )
    ours_exp, jax_exp, jax_cpu = exp_speeds()
    jx = "-" if jax_exp is None else f"{jax_exp:.2f} (CPU time over its threads {jax_cpu:.2f})"
    print(
        f"exp, ns per value in cache: numpy {ours_exp:.2f} (one thread), jax.jit {jx}; "
        f"cpu_count {os.cpu_count()}"
    )
    print(f"one cloud: {'n':>4} {'d':>3} {'sim us':>7} {'np/sim':>6} {'jax/sim':>7}  load")
    for n in ns:
        for d in ds:
            r = single(n, d, args.steps, 5 * args.repeats)
            jx = f"{r['jax']:7.2f}" if "jax" in r else f"{'-':>7}"
            print(
                f"{'':10} {n:4d} {d:3d} {r['us']:7.1f} {r['np']:6.2f} {jx}  {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    print(
        f"{'B':>6} {'n':>4} {'d':>3} {'ours ms':>8} {'loop/ours':>9} {'np/ours':>8} {'jax/ours':>8} "
        f"{'jit s':>6} {'ours/bnd':>8} {'exp/jax':>7} {'prod':>5} {'diff':>8}  load"
    )
    for B in Bs:
        for n in ns:
            for d in ds:
                r = row(B, n, d, args.steps, args.repeats)
                jx = f"{r['jax']:8.2f} {r['jit']:6.2f}" if "jax" in r else f"{'-':>8} {'-':>6}"
                ej = f"{r['expjax']:7.2f}" if "expjax" in r else f"{'-':>7}"
                flag = "!" if r["diff"] > 1e-10 else " "
                npr = f"{r['np']:8.2f}" if "np" in r else f"{'-':>8}"
                print(
                    f"{B:6d} {n:4d} {d:3d} {r['ms']:8.3f} {r['loop']:9.1f} {npr} {jx} "
                    f"{r['bnd']:8.2f} {ej} {r['prod']:5.2f} {r['diff']:8.1e}{flag} "
                    f"{os.getloadavg()[0]:.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
