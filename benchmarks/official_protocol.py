"""Benchmark of the authors' histogram protocol: ``paper_histogram_ranks`` against their loop.

For each of the twelve panels of the authors' rank histograms (``tpde_lib.official.PANELS``) it
runs
1. ``paper_histogram_ranks`` (the library: the sequential protocol, several runs in flight at
   once) and checks that every draw's initial condition, status, step count and rank, and every
   failed attempt, equal the committed cache ``tpde_lib/official/data/histograms.json``;
2. the authors' sequential loop written out as their ``histograms.py`` runs it: one attempt
   after the other, each a plain ``while`` loop of projected Euler iterations on one d x d
   matrix (``S_list`` kept, rhs from the paper's formulas, ``eigh`` projection with the
   ``1e-14`` floor, the convergence test on the rhs before the step and the trace test after
   it), the initial condition ``G G^T`` drawn inside the loop from ``np.random.seed(41)``;
   the rank counted on the iterate before the last step, as they do.

It prints, per panel, the CPU time (``time.process_time``: this machine is shared, so wall
times are printed too but the CPU time is the comparison) of both, their ratio, the Euler
iterations the protocol needs, the iterations the library computed (dropped speculative runs
included) over those needed, and whether the authors' loop took the same path (its rhs is
evaluated by other formulas, so a run may differ in the last bits; the library's run is the
one checked against the cache).

Run: ``python benchmarks/official_protocol.py [--panels softmax/identity/3 ...] [--ours-only]``.

Measured on 2026-12-01 (2 cores shared with other jobs, load 4-12; CPU seconds; numpy 2.4,
OpenBLAS), all twelve panels equal to the cache, and the authors' loop on the cache's path on
all twelve; "work" is the iterations the library computed over those the loop needs::

    panel                 iterations   ours  authors  ratio  work
    softmax/random/5         6835384   93.5    143.2   1.53  2.10
    softmax/random/4         2120842   29.9     43.3   1.45  1.93
    softmax/random/3          872881    4.5     16.9   3.75  1.08
    softmax/identity/5        972029    8.7     20.6   2.38  1.89
    softmax/identity/4        694247    2.2     14.1   6.36  1.00
    softmax/identity/3        181400    0.4      3.7   8.46  1.00
    L2/random/5              1071013   17.5     33.0   1.89  1.76
    L2/random/4               902379    7.2     24.7   3.43  1.27
    L2/random/3               426798    3.9     11.3   2.89  1.79
    L2/identity/5             480770    2.3     13.9   6.08  1.00
    L2/identity/4             224867    1.3      6.2   4.88  1.00
    L2/identity/3              92809    0.3      2.4   6.82  1.00
    total                   14874658  171.7    333.2   1.94

Where the time goes: at d <= 5 an iteration costs its numpy calls, not its arithmetic, so a
batch of B runs costs little more than one run (the library's iteration on one run is about
as fast as the authors'); speculative runs are worth it while they have a fair chance of being
needed, and the panels with many failures (softmax, random V, d = 4 and 5: 492 and 147 retries,
37 runs of 90000 iterations that end without converging) gain least. The previous version ran
every pending draw at four shifts to the end: 31-55 s on softmax/identity/3 alone, 30-35
minutes on each of the two slowest panels.
"""

import argparse
import time

import numpy as np

from tpde_lib import official as of


# ---------------------------------------------------------------- the authors' loop, written out
def _authors_rhs(variant, Q, K, V, d):
    """The paper code's ``rhs_softmax`` / ``rhs_L2`` for one draw (``K = -Q`` there)."""
    A = K.T @ Q / np.sqrt(d)
    if variant == "softmax":

        def rhs(S):
            X = V @ S @ A @ S
            return X + X.T
    else:
        KK = 2 * K.T @ K
        eye = np.eye(d)

        def rhs(S):
            X = 2 * V @ S @ np.linalg.inv(eye + KK @ S) @ A @ S
            return X + X.T

    return rhs


def _psd_projection(S):
    lam, U = np.linalg.eigh(S)
    lam[lam < 0] = 1e-14
    return U @ np.diag(lam) @ U.T


def _evolution(S, rhs, h, tol_low, tol_high, max_iter):
    """One run as the authors' ``utils.evolution``: returns (status, iterations, S_list)."""
    S_list = []
    for it in range(max_iter):
        S_list.append(S)
        r = rhs(S)
        S = _psd_projection(S + h * r)
        if np.linalg.norm(r) < tol_low:
            return "converged", it + 1, S_list
        if np.trace(S) > tol_high:
            return "diverged", it + 1, S_list
    return "max_iter", max_iter, S_list


def authors_loop(setting):
    """The authors' ``create_histograms`` for one panel, sequential; returns the path taken."""
    s, e = setting, setting.euler
    n = s.Q.shape[0]
    state = np.random.get_state()  # noqa: NPY002 (the authors' legacy stream)
    np.random.seed(41)  # noqa: NPY002
    i = 0
    path, ranks, iterations = [], [], 0
    try:
        for k in range(s.n_max):
            G = np.random.randn(s.d, s.d)  # noqa: NPY002
            rhs = _authors_rhs(s.variant, s.Q[i], s.K[i], s.V[i], s.d)
            status, it, S_list = _evolution(G @ G.T, rhs, e.h, e.tol_low, e.tol_high, e.max_iter)
            iterations += it
            path.append((i, k, status, it))
            if status == "converged":
                rank = int(np.sum(np.linalg.eigvalsh(S_list[-1]) > s.tol_rank))
                if rank <= (s.d + 1) // 2:
                    ranks.append(rank)
                i += 1
                if i == n:
                    break
    finally:
        np.random.set_state(state)  # noqa: NPY002
    return path, ranks, iterations


# ---------------------------------------------------------------- the comparison
def _cache_path(panel):
    """The sequence of attempts stored in the cache: (draw, init, status, steps)."""
    rows = [
        (int(i), int(k), "converged", int(st))
        for i, (k, st) in enumerate(zip(panel.draw_init, panel.n_steps))
    ]
    rows += [
        (int(i), int(k), str(st), int(n))
        for i, k, st, n in zip(panel.failed_draw, panel.failed_init, panel.failed_status, panel.failed_steps)
    ]
    return sorted(rows, key=lambda row: row[1])


def _same_as_cache(run, panel):
    return (
        run.draw_init.tolist() == panel.draw_init.tolist()
        and run.n_steps.tolist() == panel.n_steps.tolist()
        and run.euler_rank.tolist() == panel.euler_rank.tolist()
        and run.failed_draw.tolist() == panel.failed_draw.tolist()
        and run.failed_init.tolist() == panel.failed_init.tolist()
        and run.failed_steps.tolist() == panel.failed_steps.tolist()
        and run.failed_status.tolist() == panel.failed_status.tolist()
        and run.attempts == panel.attempts
    )


def _timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - w0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--panels", nargs="*", help="e.g. softmax/random/4 (default: all 12)")
    parser.add_argument("--ours-only", action="store_true", help="skip the authors' loop")
    args = parser.parse_args()
    panels = (
        of.PANELS if not args.panels else [(v, k, int(d)) for v, k, d in (p.split("/") for p in args.panels)]
    )
    cache = of.load_histogram_cache()
    print(
        f"{'panel':22s} {'iterations':>10s} {'ours CPU':>9s} {'authors CPU':>11s} "
        f"{'ratio':>6s} {'ours wall':>9s} {'authors wall':>12s}  checks"
    )
    tot = np.zeros(4)
    for key in panels:
        s = of.histogram_setting(*key)
        panel = cache[key]
        run, c_ours, w_ours = _timed(lambda: of.paper_histogram_ranks(s))  # noqa: B023
        iterations = int(panel.n_steps.sum() + panel.failed_steps.sum())
        same = _same_as_cache(run, panel)
        spec = f"work {run.work / iterations:.2f}x needed"
        if args.ours_only:
            print(
                f"{'/'.join(map(str, key)):22s} {iterations:10d} {c_ours:8.1f}s {'':>11s} "
                f"{'':>6s} {w_ours:8.1f}s {'':>12s}  cache {'equal' if same else 'DIFFERS'}; "
                f"{spec}",
                flush=True,
            )
            tot += (c_ours, 0, w_ours, 0)
            continue
        (path, ranks, its), c_auth, w_auth = _timed(lambda: authors_loop(s))  # noqa: B023
        want = _cache_path(panel)
        agree = (
            "same path"
            if path == want
            else (f"path differs ({sum(a == b for a, b in zip(path, want))}/{len(want)} attempts equal)")
        )
        print(
            f"{'/'.join(map(str, key)):22s} {iterations:10d} {c_ours:8.1f}s {c_auth:10.1f}s "
            f"{c_auth / c_ours:6.2f} {w_ours:8.1f}s {w_auth:11.1f}s  cache "
            f"{'equal' if same else 'DIFFERS'}; {spec}; authors' loop: {agree}",
            flush=True,
        )
        tot += (c_ours, c_auth, w_ours, w_auth)
    print(
        f"{'total':22s} {'':10s} {tot[0]:8.1f}s {tot[1]:10.1f}s "
        f"{tot[1] / tot[0] if tot[1] else np.nan:6.2f} {tot[2]:8.1f}s {tot[3]:11.1f}s"
    )


if __name__ == "__main__":
    main()
