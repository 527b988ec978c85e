"""Speed and memory of the attention velocity fields (a script, not a test).

Prints, side by side:

* each velocity field's time divided by a *primitive bound* at n = 4000 tokens, d = 2 and 16:
  one n x n score matmul, one exp and one (n x n) @ (n x d) matmul in plain numpy, i.e. the
  least work any dense softmax attention does;
* our Sinkhorn attention divided by POT's log-domain Sinkhorn (``ot.sinkhorn(...,
  method="sinkhorn_log")``) at the same tolerance, both from a cold start (our ``tol`` is on the L1
  marginal violation, which bounds POT's L2 ``stopThr``: ours does at least as much);
* the peak memory of one softmax evaluation at n = 40,000, d = 2, run in a child process whose
  address space is capped at 3 GiB.

Run: ``python benchmarks/velocity.py``. BLAS threads default to 1 (set ``OPENBLAS_NUM_THREADS``
to change it): on a small shared machine multi-threaded BLAS makes every timing erratic.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", os.environ["OPENBLAS_NUM_THREADS"])

import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import ot  # noqa: E402

from tpde_lib.attention import (  # noqa: E402
    L2,
    Linear,
    MultiHead,
    Sigmoid,
    Sinkhorn,
    Softmax,
    Unnormalised,
)
from tpde_lib.measures import Empirical  # noqa: E402


def best_time(fn, repeat=5):
    """Smallest wall time of ``repeat`` calls (the least disturbed by other processes)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def primitive(X, A):
    """One score matmul, one exp, one matmul: a lower bound for dense softmax attention."""
    E = np.exp(X @ A.T @ X.T)
    return E @ X


def velocity_table(n=4000, dims=(2, 16), seed=0):
    rng = np.random.default_rng(seed)
    rows = {}
    for d in dims:
        X = rng.standard_normal((n, d))
        A = rng.standard_normal((d, d)) / math.sqrt(d)
        V = rng.standard_normal((d, d)) / math.sqrt(d)
        Q, K = rng.standard_normal((d, d)) / d**0.75, rng.standard_normal((d, d)) / d**0.75
        mu = Empirical(X)
        mu_causal = Empirical(X, positions=np.linspace(0, 1, n))
        base = best_time(lambda X=X, A=A: primitive(X, A))
        variants = {
            "Softmax": (Softmax(A, V), mu),
            "Softmax causal": (Softmax(A, V, causal=True), mu_causal),
            "MultiHead (2 heads)": (MultiHead([Softmax(A, V), Softmax(A.T, V)]), mu),
            "L2": (L2(Q, K, V), mu),
            "Sigmoid": (Sigmoid(A, V, bias=-math.log(n)), mu),
            "Linear": (Linear(A, V), mu),
            "Unnormalised": (Unnormalised(A, V), mu),
        }
        rows.setdefault("primitive bound [s]", {})[d] = f"{base:.3f}"
        for name, (att, m) in variants.items():
            rows.setdefault(name, {})[d] = f"{best_time(lambda a=att, m=m: a.velocity(m)) / base:.2f}"
        sk = Sinkhorn(A + A.T, V)
        t_sk = best_time(lambda sk=sk, m=mu: (sk.reset(), sk.velocity(m)), repeat=2)
        rows.setdefault("Sinkhorn (cold start, sym. A)", {})[d] = f"{t_sk / base:.2f}"
    print(f"Velocity time / primitive bound, n={n} (primitive: exp(X A^T X^T) @ X)")
    print(f"{'variant':32s}" + "".join(f"{'d=' + str(d):>10s}" for d in dims))
    for name, vals in rows.items():
        print(f"{name:32s}" + "".join(f"{vals[d]:>10s}" for d in dims))


def sinkhorn_table(n=4000, dims=(2, 16), tol=1e-9, eps=1.0, seed=1):
    rng = np.random.default_rng(seed)
    print(f"\nSinkhorn attention vs POT ot.sinkhorn(method='sinkhorn_log'), n={n}, eps={eps}, "
          f"tol={tol:g} (cold starts)")
    print(f"{'case':24s}{'ours [s]':>10s}{'iters':>7s}{'POT [s]':>10s}{'iters':>7s}"
          f"{'ratio':>8s}{'max|dGamma|':>13s}")
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
            C = -(X @ A.T @ X.T)                 # kernel e^{<Ax,y>/eps} = e^{-C/reg}
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                P, log = ot.sinkhorn(w, w, C, eps, method="sinkhorn_log", stopThr=tol,
                                     numItermax=100_000, log=True)
            t_pot = time.perf_counter() - t0
            v_pot = (P @ X) / P.sum(axis=1, keepdims=True) @ V.T
            print(f"{'d=' + str(d) + ', ' + label:24s}{t_ours:10.2f}{sk.last_iterations:7d}"
                  f"{t_pot:10.2f}{log['niter']:7d}{t_ours / t_pot:8.3f}"
                  f"{np.abs(v - v_pot).max():13.1e}")


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

n, d = 40_000, 2
rng = np.random.default_rng(0)
mu = Empirical(rng.standard_normal((n, d)))
att = Softmax(rng.standard_normal((d, d)) / 2, np.eye(d))
att.velocity(Empirical(mu.points[:100]))          # warm up imports and BLAS buffers
h0 = hwm_mib()
t0 = time.perf_counter()
v = att.velocity(mu)
dt = time.perf_counter() - t0
print(f"{dt:.2f} {hwm_mib() - h0:.1f} {hwm_mib():.1f}")
"""


def memory_line():
    res = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                         env=os.environ.copy())
    if res.returncode != 0:
        print("\nSoftmax n=40,000, d=2 under a 3 GiB address-space cap: FAILED\n" + res.stderr)
        return
    dt, dpeak, peak = res.stdout.split()
    print(f"\nSoftmax, one evaluation at n=40,000, d=2, address space capped at 3 GiB: {dt} s; "
          f"peak RSS increase {dpeak} MiB (process peak {peak} MiB; a dense n x n float64 "
          f"matrix would be {40_000**2 * 8 / 2**30:.1f} GiB)")


if __name__ == "__main__":
    print(f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}, numpy {np.__version__}, "
          f"POT {ot.__version__}")
    velocity_table()
    sinkhorn_table()
    memory_line()
