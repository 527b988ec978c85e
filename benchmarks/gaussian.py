"""Benchmark of the Gaussian ODE solvers (chapter "Gaussian solutions").

Prints wall-clock times (best of several repeats) of
1. one d = 2 softmax trajectory to t = 10 with ``simulate_gaussian`` (RK45 and DOP853), next to
   a bare ``solve_ivp`` on a hand-written 2x2 right-hand side (the floor for this method);
2. batches of B = 100 and 500 covariance trajectories, d = 3..5, to t = 1e3 (slow O(1/t)
   convergence, the clustering chapter's regime) with ``simulate_gaussian_batch``, next to a loop
   of ``simulate_gaussian`` on the first members (extrapolated to B), with the ratio;
3. a batch of B = 1000, d = 3 in this process's environment against the same call in a child
   process with ``OPENBLAS_NUM_THREADS=1`` (``solve_batch`` holds BLAS to one thread itself,
   so the two should agree; before it did, two BLAS threads made the call 2-3x slower);
4. issue 31's ensemble with stiff members (d = 3, V = I + 0.3 randn/sqrt(d), 100 members):
   each member has its own step budget, so the others finish; prints the statuses.

The benchmark runs in the environment a reader has: it sets no ``OPENBLAS_NUM_THREADS`` (it
prints what it finds). Run: ``python benchmarks/gaussian.py``.
"""

import os
import subprocess
import sys
import time
import warnings

import numpy as np
from scipy.integrate import solve_ivp

from tpde_lib.attention import L2, Softmax
from tpde_lib.gaussian import simulate_gaussian, simulate_gaussian_batch
from tpde_lib.measures import Gaussian


def best_of(fn, repeat=5):
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def single_d2():
    A = np.array([[-1.0, 0.4], [-0.2, -0.5]])
    V = np.array([[1.0, 0.3], [0.0, 0.8]])
    g0 = Gaussian([1.0, -0.5], [[1.0, 0.3], [0.3, 0.5]])
    att = Softmax(A, V)
    times = np.linspace(0, 10, 101)

    def bare():
        def f(t, y):
            m, S = y[:2], y[2:].reshape(2, 2)
            SA = S @ A
            X = V @ SA @ S
            return np.concatenate([V @ (m + SA @ m), (X + X.T).ravel()])

        solve_ivp(f, (0, 10), np.r_[g0.mean, g0.cov.ravel()], t_eval=times, rtol=1e-9, atol=1e-12)

    print("1. one d=2 softmax trajectory, t in [0, 10], 101 output times, rtol=1e-9")
    t_bare = best_of(bare)
    print(f"   bare solve_ivp (RK45, hand-written rhs) : {1e3 * t_bare:7.2f} ms")
    for method in ("RK45", "DOP853"):
        t = best_of(lambda method=method: simulate_gaussian(att, g0, times, method=method))
        print(
            f"   simulate_gaussian method={method:6s}      : {1e3 * t:7.2f} ms  (x{t / t_bare:.2f} bare RK45)"
        )


def batch(B, d, variant="softmax", t_end=1e3, n_loop=5):
    rng = np.random.default_rng(d)
    Q = rng.standard_normal((d // 2, d))
    A = -Q.T @ Q / np.sqrt(d)  # K = -Q: A + A^T <= 0, convergence to rank ceil(d/2) (chapter 6)
    G = rng.standard_normal((B, d, d))
    cov0 = G @ np.swapaxes(G, 1, 2)
    Bm = rng.standard_normal((d, d))
    V = Bm.T @ Bm / d + 0.5 * np.eye(d)
    att = Softmax(A, V) if variant == "softmax" else L2(Q / np.sqrt(d), -Q, V)
    times = np.concatenate([[0.0], np.geomspace(1e-2, t_end, 60)])
    t_batch = best_of(lambda: simulate_gaussian_batch(att, cov0, times), repeat=2)
    t_loop = (
        best_of(
            lambda: [simulate_gaussian(att, Gaussian(np.zeros(d), c), times) for c in cov0[:n_loop]], repeat=1
        )
        * B
        / n_loop
    )
    print(
        f"   B={B:3d} d={d} {variant:7s}: batch {t_batch:6.2f} s   loop of single solves "
        f"(extrapolated) {t_loop:6.2f} s   ratio x{t_loop / t_batch:.1f}"
    )


def big_batch(repeat=2):
    """B = 1000, d = 3 softmax covariances to t = 20 (best of ``repeat``, seconds)."""
    rng = np.random.default_rng(1)
    G = rng.standard_normal((1000, 3, 3))
    A = -np.eye(3) + 0.2 * rng.standard_normal((3, 3))
    att = Softmax(A, np.eye(3))
    return best_of(
        lambda: simulate_gaussian_batch(att, G @ np.swapaxes(G, 1, 2), np.linspace(0, 20, 21)), repeat=repeat
    )


def blas_environment(rounds=4):
    """Alternated rounds: here, then a child process with ``OPENBLAS_NUM_THREADS=1``."""
    print(
        f"3. B=1000 d=3 batch to t=20, {rounds} alternated rounds: OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS')!r} here"
    )
    code = "import benchmarks.gaussian as g; print(g.big_batch())"
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    here, one = [], []
    for _ in range(rounds):
        here.append(big_batch())
        one.append(
            float(
                subprocess.run(
                    [sys.executable, "-c", code],
                    env=env,
                    cwd=root,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout.split()[-1]
            )
        )
    h, o = np.median(here), np.median(one)
    print(f"   medians: this environment {h:6.3f} s   OPENBLAS_NUM_THREADS=1 {o:6.3f} s   ratio x{h / o:.2f}")


def stiff_ensemble(max_steps=5000):
    d, B = 3, 100
    rng = np.random.default_rng(0)
    V = np.eye(d) + 0.3 * rng.standard_normal((B, d, d)) / np.sqrt(d)
    A = rng.standard_normal((B, d, d))
    A /= np.linalg.norm(A, 2, axis=(1, 2))[:, None, None]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the statuses are printed below
        gb = simulate_gaussian_batch(
            [Softmax(a, v) for a, v in zip(A, V)], np.stack([np.eye(d)] * B), [0.0, 50.0], max_steps=max_steps
        )
    wall = time.perf_counter() - t0
    counts = ", ".join(f"{k}: {n}" for k, n in zip(*np.unique(gb.status, return_counts=True)))
    print(
        f"4. issue 31's ensemble (B=100, d=3, t in [0, 50], max_steps={max_steps} per "
        f"member): {wall:5.1f} s; {counts}"
    )


if __name__ == "__main__":
    single_d2()
    print("2. batches of covariance trajectories to t = 1e3 (61 output times)")
    for B in (100, 500):
        for d in (3, 4, 5):
            batch(B, d)
    batch(100, 3, "l2")
    blas_environment()
    stiff_ensemble()
