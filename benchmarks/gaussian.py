"""Benchmark of the Gaussian ODE solvers (chapter "Gaussian solutions").

Prints wall-clock times (best of several repeats) of
1. one d = 2 softmax trajectory to t = 10 with ``simulate_gaussian`` (RK45 and DOP853), next to
   a bare ``solve_ivp`` on a hand-written 2x2 right-hand side (the floor for this method);
2. batches of B = 100 and 500 covariance trajectories, d = 3..5, to t = 1e3 (slow O(1/t)
   convergence, the clustering chapter's regime) with ``simulate_gaussian_batch``, next to a loop
   of ``simulate_gaussian`` on the first members (extrapolated to B), with the ratio.

Run: ``python benchmarks/gaussian.py``.
"""

import time

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
        solve_ivp(f, (0, 10), np.r_[g0.mean, g0.cov.ravel()], t_eval=times, rtol=1e-9,
                  atol=1e-12)

    print("1. one d=2 softmax trajectory, t in [0, 10], 101 output times, rtol=1e-9")
    t_bare = best_of(bare)
    print(f"   bare solve_ivp (RK45, hand-written rhs) : {1e3 * t_bare:7.2f} ms")
    for method in ("RK45", "DOP853"):
        t = best_of(lambda method=method: simulate_gaussian(att, g0, times, method=method))
        print(f"   simulate_gaussian method={method:6s}      : {1e3 * t:7.2f} ms  "
              f"(x{t / t_bare:.2f} bare RK45)")


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
    t_loop = best_of(lambda: [simulate_gaussian(att, Gaussian(np.zeros(d), c), times)
                              for c in cov0[:n_loop]], repeat=1) * B / n_loop
    print(f"   B={B:3d} d={d} {variant:7s}: batch {t_batch:6.2f} s   loop of single solves "
          f"(extrapolated) {t_loop:6.2f} s   ratio x{t_loop / t_batch:.1f}")


if __name__ == "__main__":
    single_d2()
    print("2. batches of covariance trajectories to t = 1e3 (61 output times)")
    for B in (100, 500):
        for d in (3, 4, 5):
            batch(B, d)
    batch(100, 3, "l2")
