"""Mutation tests of the book: plausible wrong formulas, each caught by the chapter presenting it.

Each mutant replaces one snippet of ``tpde_lib`` by a plausible wrong version (a wrong sign, a
transposed convention, a dropped or doubled factor, an ignored argument, a wrong normalisation,
a mask pointing the wrong way). For every mutant the script copies the library to a temporary
folder, applies the replacement there, and runs the chapter that presents the formula under
nbval (the same plugin as ``pytest``), with that copy first on ``PYTHONPATH``, stopping at the
first failing cell. The mutant is *killed* when the chapter fails. The book itself must catch the
error: the library's unit tests are not run here.

Usage: ``python tools/mutants.py [--jobs 2] [--only ID ...] [--list]``. Prints one line per
mutant (which chapter and cell killed it) and ends with ``mutants: N, killed by the chapters: K``;
exits 1 when a mutant survives or a snippet is not found (the library changed under it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    """One wrong formula: in ``path`` (relative to tpde_lib/), ``old`` becomes ``new``."""

    id: str
    what: str
    path: str
    old: str
    new: str
    chapter: str


M = Mutant
MUTANTS = [
    # ---- velocity fields (chapter 1 compares each with its formula written in numpy) --------
    M("softmax-V-transposed", "softmax field applies V^T instead of V",
      "attention/_bilinear.py",
      "@ self.V(t).T\n\n    def gaussian_rhs(self, mean, cov, t=0.0):\n        r\"\"\"Softmax",
      "@ self.V(t)\n\n    def gaussian_rhs(self, mean, cov, t=0.0):\n        r\"\"\"Softmax",
      "01_transformer_pde"),
    M("from-qk-scale-1-over-k", "A = K^T Q / k instead of / sqrt(k)",
      "attention/_bilinear.py", "scale = 1.0 / math.sqrt(q.shape[0])",
      "scale = 1.0 / q.shape[0]", "01_transformer_pde"),
    M("from-qk-transposed", "A = Q^T K / sqrt(k) (query and key swapped)",
      "attention/_bilinear.py", "A = k().T @ q() * scale", "A = q().T @ k() * scale",
      "01_transformer_pde"),
    M("l2-temperature-ignored-in-field", "l2 logits 2<Qx, Ky> without the 1/tau",
      "attention/_composite.py", "qx = points @ self.Q(t).T * (2.0 / self.tau)",
      "qx = points @ self.Q(t).T * 2.0", "01_transformer_pde"),
    M("l2-key-norm-dropped", "l2 logits without the -|Ky|^2/tau term",
      "attention/_composite.py",
      "key_feats = np.hstack([ky, -(ky**2).sum(axis=1, keepdims=True) / self.tau])",
      "key_feats = np.hstack([ky, 0.0 * (ky**2).sum(axis=1, keepdims=True)])",
      "01_transformer_pde"),
    M("sinkhorn-eps-ignored", "Sinkhorn field with A instead of A / eps",
      "attention/_sinkhorn.py",
      "queries = np.hstack([points @ (A.T / self.eps), np.ones((points.shape[0], 1))])",
      "queries = np.hstack([points @ A.T, np.ones((points.shape[0], 1))])",
      "01_transformer_pde"),
    M("linear-A-transposed", "linear field with A^T x",
      "attention/_bilinear.py",
      "        qa = self.queries(points, t)                     # rows A x_i",
      "        qa = points @ self.A(t)                          # rows A^T x_i",
      "01_transformer_pde"),
    M("causal-mask-reversed", "masked attention sees the later tokens instead of the earlier",
      "attention/_kernels.py", "hidden = k_pos[None, :] > q_pos[start:stop, None] if masked",
      "hidden = k_pos[None, :] < q_pos[start:stop, None] if masked", "01_transformer_pde"),
    M("euler-step-doubled", "residual layer x + 2h Gamma",
      "particles.py", "return x + h * field(x, t)", "return x + 2 * h * field(x, t)",
      "01_transformer_pde"),
    # ---- Gaussian closures (chapter 5 tests them on a quantised Gaussian) ------------------
    M("softmax-closure-A-not-transposed", "Sigma' = V S A S + S A S V^T (A^T dropped)",
      "gaussian_odes.py", "    dcov = _sym_part2(V @ SA @ cov)\n    return dmean, dcov\n\n\ndef multihead",
      "    dcov = V @ SA @ cov + cov @ A @ cov @ _t(V)\n    return dmean, dcov\n\n\ndef multihead",
      "05_gaussian_solutions"),
    M("softmax-mean-closure-drops-tilt", "alpha' = V alpha (the Sigma A alpha term dropped)",
      "gaussian_odes.py", "dmean = _mv(V, mean + _mv(SA, mean))", "dmean = _mv(V, mean)",
      "05_gaussian_solutions"),
    M("l2-closure-coupling-halved", "l2 closure with c = 1/tau instead of 2/tau",
      "gaussian_odes.py", "c = (2.0 / np.asarray(tau, dtype=float))",
      "c = (1.0 / np.asarray(tau, dtype=float))", "05_gaussian_solutions"),
    M("sinkhorn-gain-is-softmax", "Sinkhorn gain G Sigma = Sigma A Sigma (softmax's)",
      "gaussian_odes.py", "return 2.0 * (S @ N @ inv_1pD @ S)", "return cov @ A @ cov",
      "05_gaussian_solutions"),
    M("linear-closure-drops-mean", "linear attention's moment Sigma + alpha alpha^T -> Sigma",
      "gaussian_odes.py", "second_moment = cov + mean[..., :, None] * mean[..., None, :]",
      "second_moment = cov + 0.0 * mean[..., :, None] * mean[..., None, :]",
      "05_gaussian_solutions"),
    M("multihead-closure-first-head-only", "multi-head closure keeps only its first head",
      "attention/_composite.py", "                dm, dc, start = dm + a, dc + b, start + k",
      "                dm, dc, start = (a, b, start + k) if start == 0 else (dm, dc, start + k)",
      "05_gaussian_solutions"),
    M("weights-ignored", "softmax keys with unit weights instead of their masses",
      "attention/_kernels.py",
      "    return np.hstack([points * weights[:, None], weights[:, None]])",
      "    return np.hstack([points, np.ones((points.shape[0], 1))])", "05_gaussian_solutions"),
    M("rk4-weights-wrong", "RK4 combination (k1 + k2 + k3 + k4) / 4",
      "particles.py", "return x + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)",
      "return x + (h / 4.0) * (k1 + k2 + k3 + k4)", "05_gaussian_solutions"),
    M("blowup-time-halved", "t* = 1 / (2 lambda_max) for softmax with V = I",
      "gaussian/_closed_forms.py", "out = np.where(pos, 1.0 / np.where(pos, rate, 1.0), np.inf)",
      "out = np.where(pos, 0.5 / np.where(pos, rate, 1.0), np.inf)", "05_gaussian_solutions"),
    M("gauss-hermite-nodes-unscaled", "Gauss-Hermite nodes without the covariance's square root",
      "gaussian/_defect.py", "points = g.mean + Z[keep] @ psd_sqrt(g.cov)",
      "points = g.mean + Z[keep]", "05_gaussian_solutions"),
    # ---- a reader's variant (chapter 8) ----------------------------------------------------
    M("kernel-callable-ignored", "a callable kernel is not applied (identity kernel)",
      "attention/_kernels.py", "        if callable(kind):\n            kind(S)",
      "        if callable(kind):\n            pass", "08_your_own_attention"),
    M("affine-defect-unweighted", "affine fit ignores the Gaussian's quadrature weights",
      "gaussian/_defect.py", "sw = np.sqrt(mu.weights)[:, None]",
      "sw = np.ones((mu.n, 1))", "08_your_own_attention"),
]


def apply(mutant, lib):
    """Apply ``mutant`` to the copy of tpde_lib at ``lib`` (ValueError if its snippet is gone)."""
    path = lib / mutant.path
    text = path.read_text(encoding="utf-8")
    count = text.count(mutant.old)
    if count != 1:
        raise ValueError(f"{mutant.id}: the snippet occurs {count} times in tpde_lib/"
                         f"{mutant.path} (expected once): update tools/mutants.py")
    path.write_text(text.replace(mutant.old, mutant.new), encoding="utf-8")


def run(mutant, python):
    """(killed, where, seconds) for one mutant."""
    start = time.time()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.id}-") as tmp:
        lib = Path(tmp) / "tpde_lib"
        shutil.copytree(ROOT / "tpde_lib", lib, ignore=shutil.ignore_patterns("__pycache__"))
        apply(mutant, lib)
        env = dict(os.environ, PYTHONPATH=tmp + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   PYTHONDONTWRITEBYTECODE="1")
        chapter = ROOT / "chapters" / f"{mutant.chapter}.md"
        proc = subprocess.run(
            [python, "-m", "pytest", str(chapter), "-x", "-q", "-p", "no:cacheprovider",
             "-o", "addopts=--nbval-lax --nbval-current-env -p tests.nbmyst"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    where = re.search(r"FAILED \S*?(chapters/\S+::Cell \d+)", out)
    killed = proc.returncode == 1 and where is not None
    return killed, where.group(1) if where else out.strip().splitlines()[-1:], time.time() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or m.id in args.only]
    if args.list:
        for m in chosen:
            print(f"{m.id:36s} {m.chapter:24s} {m.what}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:     # every snippet must apply before any run
        shutil.copytree(ROOT / "tpde_lib", Path(tmp) / "tpde_lib")
        for m in chosen:
            apply(m, Path(tmp) / "tpde_lib")
            shutil.copy2(ROOT / "tpde_lib" / m.path, Path(tmp) / "tpde_lib" / m.path)
    killed = 0
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [(m, pool.submit(run, m, sys.executable)) for m in chosen]
        for m, fut in futures:
            ok, where, secs = fut.result()
            killed += ok
            verdict = f"killed by {where}" if ok else f"SURVIVED ({where})"
            print(f"{m.id:36s} {verdict}  [{secs:.0f} s] — {m.what}", flush=True)
    print(f"mutants: {len(chosen)}, killed by the chapters: {killed}")
    return 0 if killed == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
