"""Mutation tests of the book: plausible wrong formulas, each caught by the chapter presenting it.

Each mutant replaces one snippet of ``tpde_lib`` by a plausible wrong version (a wrong sign, a
transposed convention, a dropped or doubled factor, an ignored argument, a wrong normalisation,
a mask pointing the wrong way). For every mutant the script copies the library to a temporary
folder, applies the replacement there, and runs the chapter that presents the formula under
nbval (the same plugin as ``pytest``), with that copy first on ``PYTHONPATH``, stopping at the
first failing cell. The mutant is *killed* when the chapter fails. The book itself must catch the
error: the library's unit tests are not run here.

Usage: ``python tools/mutants.py [--jobs 2] [--only ID ...] [--chapter 02 ...] [--list]``.
Prints one line per mutant (which chapter and cell killed it), the wall time, and ends with
``mutants: N, killed by the chapters: K``; exits 1 when a mutant survives or a snippet is not
found (the library changed under it).

Mutants of the library's machinery rather than of a formula a chapter states are guarded by unit
tests instead, since the chapters no longer check machinery: the multi-head layer fusing a
Softmax subclass head, and the kernel engine's test for skipping the log-sum-exp shift, are killed
by ``tests/test_chapter_machinery.py``; the internals of ``fit_rate`` (the one-sided quantile, the
variance over N instead of N - 2, seed columns paired with the wrong abscissae) are killed by
``tests/test_meanfield.py`` (the appendix page "How the library is checked" lists them).

A mutant that is equivalent to the original in every case a chapter runs is not listed (it
could not be killed and would say nothing about the chapter), e.g. ``coupling_distance`` with
equal weights (chapter 2 only passes equal weights), the supremum over the time grid of
``support_radius`` replaced by ``t = 0`` (chapter 3 has constant weights), or the covariance
part of ``gaussian_affine_flow`` as ``2 M Sigma`` (the right-hand side symmetrises Sigma, so its
symmetric part solves the same ODE).
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
    M(
        "softmax-V-transposed",
        "softmax field applies V^T instead of V",
        "attention/_bilinear.py",
        "out = normalised(nd[:n], heads[0].V(t))",
        "out = normalised(nd[:n], heads[0].V(t).T)",
        "01_transformer_pde",
    ),
    M(
        "multihead-last-head-dropped",
        "multi-head layer without its last softmax head",
        "attention/_bilinear.py",
        "for i, h in enumerate(heads[1:], start=1):",
        "for i, h in enumerate(heads[1:-1], start=1):",
        "01_transformer_pde",
    ),
    M(
        "multihead-first-head-V",
        "every softmax head of a multi-head layer uses the first V",
        "attention/_bilinear.py",
        "out += normalised(nd[i * n : (i + 1) * n], h.V(t))",
        "out += normalised(nd[i * n : (i + 1) * n], heads[0].V(t))",
        "01_transformer_pde",
    ),
    M(
        "from-qk-scale-1-over-k",
        "A = K^T Q / k instead of / sqrt(k)",
        "attention/_bilinear.py",
        "scale = 1.0 / math.sqrt(q.shape[0])",
        "scale = 1.0 / q.shape[0]",
        "01_transformer_pde",
    ),
    M(
        "from-qk-transposed",
        "A = Q^T K / sqrt(k) (query and key swapped)",
        "attention/_bilinear.py",
        "A = k().T @ q() * scale",
        "A = q().T @ k() * scale",
        "01_transformer_pde",
    ),
    M(
        "l2-temperature-ignored-in-field",
        "l2 logits 2<Qx, Ky> without the 1/tau",
        "attention/_composite.py",
        "qx = times_transpose(points, self.Q(t)) * (2.0 / self.tau)",
        "qx = times_transpose(points, self.Q(t)) * 2.0",
        "01_transformer_pde",
    ),
    M(
        "l2-key-norm-dropped",
        "l2 logits without the -|Ky|^2/tau term",
        "attention/_composite.py",
        "key_feats = np.hstack([ky, -(ky**2).sum(axis=1, keepdims=True) / self.tau])",
        "key_feats = np.hstack([ky, 0.0 * (ky**2).sum(axis=1, keepdims=True)])",
        "01_transformer_pde",
    ),
    M(
        "sinkhorn-eps-ignored",
        "Sinkhorn field with A instead of A / eps",
        "attention/_sinkhorn.py",
        "queries = np.hstack([points @ (A.T / self.eps), np.ones((points.shape[0], 1))])",
        "queries = np.hstack([points @ A.T, np.ones((points.shape[0], 1))])",
        "01_transformer_pde",
    ),
    M(
        "linear-A-transposed",
        "linear field with A^T x",
        "attention/_bilinear.py",
        "        qa = self.queries(points, t)  # rows A x_i",
        "        qa = points @ self.A(t)  # rows A^T x_i",
        "01_transformer_pde",
    ),
    M(
        "causal-mask-reversed",
        "masked attention sees the later tokens instead of the earlier",
        "attention/_kernels.py",
        "    if 0 < n * m <= _SMALL_ENTRIES:\n",
        "    if q_pos is not None:\n        q_pos, k_pos = -q_pos, -k_pos\n"
        "    if 0 < n * m <= _SMALL_ENTRIES:\n",
        "01_transformer_pde",
    ),
    M(
        "euler-step-doubled",
        "residual layer x + 2h Gamma",
        "particles.py",
        "return x + h * field(x, t)",
        "return x + 2 * h * field(x, t)",
        "01_transformer_pde",
    ),
    # ---- Gaussian closures (chapter 5 tests them on a quantised Gaussian) ------------------
    M(
        "softmax-closure-A-not-transposed",
        "Sigma' = V S A S + S A S V^T (A^T dropped)",
        "_closures.py",
        "    return sym_part2(V @ (cov @ A) @ cov)",
        "    return V @ (cov @ A) @ cov + cov @ A @ cov @ _t(V)",
        "05_gaussian_solutions",
    ),
    M(
        "softmax-mean-closure-drops-tilt",
        "alpha' = V alpha (the Sigma A alpha term dropped)",
        "_closures.py",
        "dmean = _mv(V, mean + _mv(cov @ A, mean))",
        "dmean = _mv(V, mean)",
        "05_gaussian_solutions",
    ),
    M(
        "l2-closure-coupling-halved",
        "l2 closure with c = 1/tau instead of 2/tau",
        "_closures.py",
        "c = (2.0 / np.asarray(tau, dtype=float))",
        "c = (1.0 / np.asarray(tau, dtype=float))",
        "05_gaussian_solutions",
    ),
    M(
        "l2-closure-key-damping-dropped",
        "l2 closure without (I + c Sigma B)^-1 (W = Sigma)",
        "_closures.py",
        "W = np.linalg.solve(np.eye(cov.shape[-1]) + c * (cov @ B), cov)",
        "W = np.linalg.solve(np.eye(cov.shape[-1]) + 0.0 * (cov @ B), cov)",
        "06_clustering",
    ),
    M(
        "sinkhorn-gain-is-softmax",
        "Sinkhorn gain G Sigma = Sigma A Sigma (softmax's)",
        "_closures.py",
        "return 2.0 * (S @ N @ inv_1pD @ S)",
        "return cov @ A @ cov",
        "05_gaussian_solutions",
    ),
    M(
        "linear-closure-drops-mean",
        "linear attention's moment Sigma + alpha alpha^T -> Sigma",
        "_closures.py",
        "second_moment = cov + mean[..., :, None] * mean[..., None, :]",
        "second_moment = cov + 0.0 * mean[..., :, None] * mean[..., None, :]",
        "05_gaussian_solutions",
    ),
    M(
        "multihead-closure-first-head-only",
        "multi-head closure keeps only its first head",
        "attention/_composite.py",
        "                dm, dc, start = dm + a, dc + b, start + k",
        "                dm, dc, start = (a, b, start + k) if start == 0 else (dm, dc, start + k)",
        "05_gaussian_solutions",
    ),
    M(
        "weights-ignored",
        "softmax keys with unit weights instead of their masses",
        "attention/_kernels.py",
        "    np.multiply(points, weights[:, None], out=out[:, :-1])\n    out[:, -1] = weights\n",
        "    out[:, :-1] = points\n    out[:, -1] = 1.0\n",
        "05_gaussian_solutions",
    ),
    M(
        "rk4-weights-wrong",
        "RK4 combination (k1 + k2 + k3 + k4) / 4",
        "particles.py",
        "return x + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)",
        "return x + (h / 4.0) * (k1 + k2 + k3 + k4)",
        "05_gaussian_solutions",
    ),
    M(
        "blowup-time-halved",
        "t* = 1 / (2 lambda_max) for softmax with V = I",
        "gaussian/_closed_forms.py",
        "out = np.where(pos, 1.0 / np.where(pos, rate, 1.0), np.inf)",
        "out = np.where(pos, 0.5 / np.where(pos, rate, 1.0), np.inf)",
        "05_gaussian_solutions",
    ),
    M(
        "gauss-hermite-nodes-unscaled",
        "Gauss-Hermite nodes without the covariance's square root",
        "gaussian/_defect.py",
        "points = g.mean + Z[keep] @ psd_sqrt(g.cov)",
        "points = g.mean + Z[keep]",
        "05_gaussian_solutions",
    ),
    # ---- a reader's variant (chapter 8) ----------------------------------------------------
    # ---- the kernel engine: the blocked path (n m > 32768) and the dense one for small calls --
    M(
        "blocked-mask-off-by-one",
        "blocked engine: a query also sees the first later key",
        "attention/_kernels.py",
        "return np.arange(c0, c1)[:, None] >= self.cnt[None, r0:r1]",
        "return np.arange(c0, c1)[:, None] > self.cnt[None, r0:r1]",
        "04_masked_attention",
    ),
    M(
        "blocked-first-tile-only",
        "blocked engine keeps the first tile's partial sums only",
        "attention/_kernels.py",
        "np.sum(part, axis=0, out=out)",
        "np.copyto(out, part[0])",
        "01_transformer_pde",
    ),
    M(
        "dense-mask-reversed",
        "dense path for small calls: a query sees the later keys",
        "attention/_batched.py",
        "hidden = None if q_pos is None else k_pos[:, None, :] > q_pos[:, :, None]",
        "hidden = None if q_pos is None else k_pos[:, None, :] < q_pos[:, :, None]",
        "04_masked_attention",
    ),
    M(
        "blocked-sigmoid-sign",
        "blocked engine: sigma(-s) instead of sigma(s)",
        "attention/_kernels.py",
        'self.lhs = _padded(-queries if kind == "sigmoid" else queries, n, width)',
        "self.lhs = _padded(queries, n, width)",
        "01_transformer_pde",
    ),
    M(
        "dense-sigmoid-sign",
        "dense path for small calls: sigma(-s) instead of sigma(s)",
        "attention/_batched.py",
        'S = np.matmul(-queries if kind == "sigmoid" else queries, keys.transpose(0, 2, 1))',
        "S = np.matmul(queries, keys.transpose(0, 2, 1))",
        "01_transformer_pde",
    ),
    M(
        "dense-exp-shift-dropped",
        'dense path: "exp" returns the sums without their shift',
        "attention/_batched.py",
        "return sums, shift  # the exact row maxima",
        "return sums, 0.0 * shift",
        "01_transformer_pde",
    ),
    M(
        "kernel-callable-ignored",
        "a callable kernel is not applied (identity kernel)",
        "attention/_kernels.py",
        "    res = kind(view)\n",
        "    res = None\n",
        "08_your_own_attention",
    ),
    M(
        "affine-defect-unweighted",
        "affine fit ignores the Gaussian's quadrature weights",
        "gaussian/_defect.py",
        "sw = np.sqrt(mu.weights)[:, None]",
        "sw = np.ones((mu.n, 1))",
        "08_your_own_attention",
    ),
    # ---- mean-field limit (chapter 2: exact affine flow, label coupling, rate fits) --------
    M(
        "affine-flow-Phi-right-multiplied",
        "exact flow with Phi' = Phi M instead of M Phi",
        "meanfield/_affine.py",
        "return np.concatenate([(M @ Phi).ravel(), M @ c + b,",
        "return np.concatenate([(Phi @ M).ravel(), M @ c + b,",
        "02_mean_field",
    ),
    M(
        "affine-flow-shift-drops-b",
        "exact flow with c' = M c (the drift b dropped)",
        "meanfield/_affine.py",
        "(M @ Phi).ravel(), M @ c + b, M @ mean + b",
        "(M @ Phi).ravel(), M @ c, M @ mean + b",
        "02_mean_field",
    ),
    M(
        "coupling-distance-unnormalised",
        "label coupling sum_i |x_i - y_i|^2 without weights",
        "meanfield/_rates.py",
        "return float(np.sqrt(w @ np.sum((x - y) ** 2, axis=1)))",
        "return float(np.sqrt(np.sum((x - y) ** 2)))",
        "02_mean_field",
    ),
    M(
        "uniform-disk-radius-not-sqrt",
        "disk sampler with r = R U instead of R sqrt(U)",
        "meanfield/_samplers.py",
        "r = radius * np.sqrt(rng.uniform(size=n))",
        "r = radius * rng.uniform(size=n)",
        "02_mean_field",
    ),
    M(
        "fit-rate-against-x-not-log-x",
        "rate fit of log y against x instead of log x",
        "meanfield/_rates.py",
        "u = np.repeat(np.log(x), y.shape[1])",
        "u = np.repeat(x, y.shape[1])",
        "02_mean_field",
    ),
    M(
        "step-order-fitted-against-depth",
        "step order fitted against L = T/h instead of h",
        "meanfield/_step_order.py",
        "return StepOrder(steps, errors, fit_rate(steps, errors))",
        "return StepOrder(steps, errors, fit_rate(T / steps, errors))",
        "02_mean_field",
    ),
    # ---- stability constants (chapter 3: attained by two-atom measures and one token) ------
    M(
        "softmax-Lmu-exponent-halved",
        "softmax L_mu with e^{|A|R^2} instead of e^{2|A|R^2}",
        "attention/_bilinear.py",
        "np.log(v) + np.log1p(2 * a * R2) + 2 * a * R2",
        "np.log(v) + np.log1p(2 * a * R2) + a * R2",
        "03_well_posedness",
    ),
    M(
        "softmax-Lx-R-not-squared",
        "softmax L_x = |V||A|R instead of |V||A|R^2",
        "attention/_bilinear.py",
        "return np.log(v * a * R2), np.log(v) + np.log1p(2 * a",
        "return np.log(v * a * R), np.log(v) + np.log1p(2 * a",
        "03_well_posedness",
    ),
    M(
        "l2-Lx-coupling-halved",
        "l2 L_x with 1/tau instead of 2/tau",
        "attention/_composite.py",
        "np.log(2 / tau * v * _norm(K.T @ Q) * R2),",
        "np.log(1 / tau * v * _norm(K.T @ Q) * R2),",
        "03_well_posedness",
    ),
    M(
        "sigmoid-Lx-quarter-dropped",
        "sigmoid L_x = |V||A|R^2 (sup sigma' = 1/4 dropped)",
        "attention/_bilinear.py",
        "return np.log(v * a * R2 / 4), np.log(v) + np.log1p(a * R2 / 4)",
        "return np.log(v * a * R2), np.log(v) + np.log1p(a * R2 / 4)",
        "03_well_posedness",
    ),
    M(
        "multihead-lipschitz-max-not-sum",
        "multi-head constants: largest head, not the sum",
        "attention/_composite.py",
        "return tuple(np.logaddexp.reduce(logs, axis=0))",
        "return tuple(logs.max(axis=0))",
        "03_well_posedness",
    ),
    M(
        "multihead-growth-max-not-sum",
        "multi-head growth rate: largest |V_h|, not the sum",
        "attention/_composite.py",
        "return sum(h.growth_rate(t) for h in self.heads)",
        "return max(h.growth_rate(t) for h in self.heads)",
        "03_well_posedness",
    ),
    # ---- masked attention (chapter 4: prefix average, Hardy constants, W_p^cond) -----------
    M(
        "prefix-average-mask-reversed",
        "prefix average over s' >= s instead of s' <= s",
        "masked/_bounds.py",
        "seen = s[None, :] <= s[:, None]",
        "seen = s[None, :] >= s[:, None]",
        "04_masked_attention",
    ),
    M(
        "prefix-average-unweighted",
        "prefix average with equal weights, not the masses",
        "masked/_bounds.py",
        "return seen * w[None, :] / prefix[:, None]",
        "return seen / seen.sum(axis=1)[:, None]",
        "04_masked_attention",
    ),
    M(
        "masked-lipschitz-atom-power-ignored",
        "pointwise constant L_mu / m({0}) for every p",
        "masked/_bounds.py",
        "return float(L_mu / m ** (1.0 / p))",
        "return float(L_mu / m)",
        "04_masked_attention",
    ),
    M(
        "hardy-kappa1-suffix-masses",
        "kappa_1 = sum m_i / m([s_i, 1]) (suffix, not prefix)",
        "masked/_bounds.py",
        "return float(np.sum(m / np.cumsum(m))) if p == 1.0",
        "return float(np.sum(m / np.cumsum(m[::-1])[::-1])) if p == 1.0",
        "04_masked_attention",
    ),
    M(
        "lp-norm-l1-unweighted",
        "l1(m) operator norm as the plain largest column sum",
        "masked/_bounds.py",
        "return float(np.max((m @ np.abs(E)) / m))",
        "return float(np.max(np.abs(E).sum(axis=0)))",
        "04_masked_attention",
    ),
    M(
        "conditional-wasserstein-no-root",
        "W_p^cond returned as its p-th power",
        "transport/_wasserstein.py",
        "return float(scale * top * total ** (1.0 / p))",
        "return float((scale * top) ** p * total)",
        "04_masked_attention",
    ),
    M(
        "conditional-wasserstein-fibres-equal",
        "W_p^cond averaging fibres with equal weights",
        "transport/_wasserstein.py",
        "total = float(np.sum(m_mu * (fibre_w / top) ** p))",
        "total = float(np.mean((fibre_w / top) ** p))",
        "04_masked_attention",
    ),
    M(
        "sink-series-inner-sum-dropped",
        "sink response sum_n (t l)^n / n!^2 (the bound I_0)",
        "masked/_bounds.py",
        "truncated_exp = np.cumsum(np.exp(k * np.log(ell) - log_fact))",
        "truncated_exp = np.exp(k * np.log(ell) - log_fact)",
        "04_masked_attention",
    ),
    # ---- gradient flows (chapter 7: dissipation identities, twisted distances) -------------
    M(
        "dissipation-mobility-ignored",
        "dissipation int <G, G> instead of int <G, P^-1 G>",
        "energy/_particles.py",
        "PiG = np.linalg.solve(P, G.T).T",
        "PiG = G",
        "07_gradient_flows",
    ),
    M(
        "dissipation-factor-ignored",
        "dissipation without the factor rho = Z_mu",
        "energy/_particles.py",
        'rho = np.ones(mu.n) if factor is None else as_float_array("factor", factor, shape=(mu.n,))',
        "rho = np.ones(mu.n)",
        "07_gradient_flows",
    ),
    M(
        "interaction-energy-half-dropped",
        "E = sum_ij w_i w_j e^{<Ax_i, x_j>} (1/2 dropped)",
        "energy/_particles.py",
        "log_e = float(np.log(0.5) + logsumexp(",
        "log_e = float(0.0 + logsumexp(",
        "07_gradient_flows",
    ),
    M(
        "sinkhorn-energy-entropy-dropped",
        "F = OT_eps/2 without the entropy term eps KL",
        "energy/_particles.py",
        "return 0.5 * (float(np.sum(plan * C)) + eps * kl)",
        "return 0.5 * float(np.sum(plan * C))",
        "07_gradient_flows",
    ),
    M(
        "sinkhorn-energy-gaussian-eps-ignored",
        "Gaussian F with A instead of A / eps",
        "energy/_gaussian.py",
        "M = R @ (A / eps) @ R\n    s = np.linalg.eigvalsh",
        "M = R @ A @ R\n    s = np.linalg.eigvalsh",
        "07_gradient_flows",
    ),
    M(
        "bw-gradient-flow-factor-2-dropped",
        "BW flow Sigma' = -(grad F Sigma + Sigma grad F)",
        "energy/_gaussian.py",
        "out = -2.0 * (grad @ S + S @ grad)",
        "out = -1.0 * (grad @ S + S @ grad)",
        "07_gradient_flows",
    ),
    M(
        "twisted-wasserstein-P-root-inverted",
        "d_P maps the points by P^{1/2}, not P^{-1/2}",
        "transport/_gaussian.py",
        "_, T = _mobility_roots(P, mu.d)",
        "T, _ = _mobility_roots(P, mu.d)",
        "07_gradient_flows",
    ),
    M(
        "twisted-bures-P-root-inverted",
        "twisted BW maps by P^{1/2}, not P^{-1/2}",
        "transport/_gaussian.py",
        "_, T = _mobility_roots(P, g1.d)",
        "T, _ = _mobility_roots(P, g1.d)",
        "07_gradient_flows",
    ),
    M(
        "bures-map-commuting-formula",
        "Brenier map T = Sigma_1^{1/2} Sigma_0^{-1/2} (commuting case)",
        "transport/_gaussian.py",
        "T = Ri @ psd_sqrt(R @ S1 @ R) @ Ri",
        "T = psd_sqrt(S1) @ Ri",
        "07_gradient_flows",
    ),
    # ---- clustering versus blow-up (chapter 6) ---------------------------------------------
    M(
        "lyapunov-V-not-inverted",
        "Lyapunov function tr(V Sigma) instead of tr(V^-1 Sigma)",
        "clustering/_analysis.py",
        "return np.trace(np.linalg.solve(V, cov), axis1=-2, axis2=-1)",
        "return np.trace(V @ cov, axis1=-2, axis2=-1)",
        "06b_clustering_general_v",
    ),
    M(
        "limit-cov-keeps-the-wrong-directions",
        "limit covariance keeps the expanding directions",
        "gaussian/_closed_forms.py",
        "keep = P_eig <= rank_tol * np.maximum(1.0, P_eig.max(axis=-1, keepdims=True))",
        "keep = P_eig > rank_tol * np.maximum(1.0, P_eig.max(axis=-1, keepdims=True))",
        "06_clustering",
    ),
    M(
        "blowup-rate-not-whitened",
        "blow-up rate from A + A^T alone, forgetting Sigma_0",
        "gaussian/_closed_forms.py",
        "P = R @ (A + np.swapaxes(A, -1, -2)) @ R",
        "P = A + np.swapaxes(A, -1, -2) + 0 * R",
        "06_clustering",
    ),
    M(
        "cone-coordinates-no-factor-2",
        "cone picture (a - b, c, a + b), not (a - b, 2c, a + b)",
        "psd_cone.py",
        "return np.stack([a - b, 2.0 * c, a + b], axis=-1)",
        "return np.stack([a - b, c, a + b], axis=-1)",
        "06_clustering",
    ),
    M(
        "predicted-rank-counts-the-kernel",
        "predicted limit rank = rank(A + A^T) instead of d - rank",
        "clustering/_analysis.py",
        "return A.shape[-1] - np.sum(np.abs(lam) > tol * scale, axis=-1)",
        "return np.sum(np.abs(lam) > tol * scale, axis=-1)",
        "06_clustering",
    ),
    # (the survey's growth cap, "a capped member is not a blow-up", is engineering, not a
    # chapter's mathematics: tests/test_clustering.py::
    # test_survey_members_stopped_by_the_growth_cap_are_not_blowups kills that mutant)
    M(
        "survey-va-max-of-AV",
        "survey's sign condition from AV + V^T A^T instead of VA + A^T V^T",
        "clustering/_general_v.py",
        "status.astype(str), _sym_max(V @ A),",
        "status.astype(str), _sym_max(A @ V),",
        "06b_clustering_general_v",
    ),
    M(
        "sinkhorn-gradient-K-for-K-prime",
        "Gaussian Sinkhorn gradient with K' = phi(M M^T)",
        "energy/_gaussian.py",
        "K, K2 = sym_fn(M @ M.T, _phi), sym_fn(M.T @ M, _phi)",
        "K, K2 = sym_fn(M @ M.T, _phi), sym_fn(M @ M.T, _phi)",
        "07_gradient_flows",
    ),
    M(
        "affine-defect-uncentred",
        "affine defect normalised by |Gamma| instead of |Gamma - mean|",
        "gaussian/_defect.py",
        "centred = field - mu.weights @ field",
        "centred = field",
        "08_your_own_attention",
    ),
    M(
        "affine-defect-squared",
        "affine defect returned squared",
        "gaussian/_defect.py",
        "return 0.0 if den <= 1e-12 else min(1.0, num / den)",
        "return 0.0 if den <= 1e-12 else min(1.0, (num / den) ** 2)",
        "08_your_own_attention",
    ),
    M(
        "causal-linear-ties-excluded",
        "causal linear attention: tied positions do not see each other",
        "attention/_bilinear.py",
        'last = np.searchsorted(s_sorted, positions, side="right") - 1',
        'last = np.searchsorted(s_sorted, positions, side="left") - 1',
        "01_transformer_pde",
    ),
    M(
        "prefix-average-array-order",
        "prefix average over earlier rows, not earlier positions",
        "masked/_bounds.py",
        "seen = s[None, :] <= s[:, None]",
        "seen = np.arange(w.size)[None, :] <= np.arange(w.size)[:, None]",
        "04_masked_attention",
    ),
    M(
        "conditional-wasserstein-fibres-p2",
        "W_p^cond solves fibres of several tokens with p = 2",
        "transport/_wasserstein.py",
        "cdist(mu.points[sel_mu] / scale, nu.points[sel_nu] / scale), p)",
        "cdist(mu.points[sel_mu] / scale, nu.points[sel_nu] / scale), 2.0)",
        "04_masked_attention",
    ),
    M(
        "coupled-wasserstein-index-pairing",
        "coupled distance pairs token i with token i N / n",
        "transport/_coupled.py",
        'j = np.minimum(np.searchsorted(F_nu, mid, side="right"), w_nu.size - 1)',
        "j = np.minimum((i * w_nu.size) // w_mu.size, w_nu.size - 1)",
        "04_masked_attention",
    ),
    M(
        "coupled-wasserstein-pieces-unweighted",
        "coupled distance averages pieces, not masses",
        "transport/_coupled.py",
        "np.sum(mass * (gap / top) ** p)",
        "np.mean((gap / top) ** p)",
        "04_masked_attention",
    ),
    M(
        "l2-closure-tau-multiplied",
        "l2 closure with c = 2 tau instead of 2 / tau",
        "_closures.py",
        "c = (2.0 / np.asarray(tau, dtype=float))",
        "c = (2.0 * np.asarray(tau, dtype=float))",
        "05_gaussian_solutions",
    ),
    M(
        "symmetry-defect-weights-ignored",
        "Jacobian symmetry defect without the weights",
        "energy/_witnesses.py",
        "S = np.kron(np.diag(w), Pinv) @ J",
        "S = np.kron(np.eye(n), Pinv) @ J",
        "07_gradient_flows",
    ),
    M(
        "symmetry-defect-P-not-inverted",
        "Jacobian symmetry defect with P instead of P^-1",
        "energy/_witnesses.py",
        "        else np.linalg.inv(\n"
        '            as_nonsingular("mobility_matrix", as_square("mobility_matrix", mobility_matrix, d))\n',
        "        else np.asarray(\n"
        '            as_nonsingular("mobility_matrix", as_square("mobility_matrix", mobility_matrix, d))\n',
        "07_gradient_flows",
    ),
    M(
        "partition-function-A-not-transposed",
        "Z_mu(x_i) with <A x_j, x_i> (A transposed)",
        "energy/_particles.py",
        "AX = mu.points @ A.T\n    out = np.empty(mu.n)",
        "AX = mu.points @ A\n    out = np.empty(mu.n)",
        "07_gradient_flows",
    ),
    M(
        "partition-function-weights-ignored",
        "Z_mu with equal weights, not the masses",
        "energy/_particles.py",
        "keys, logw = mu.points[keep], np.log(mu.weights[keep])",
        "keys, logw = mu.points[keep], np.log(np.full(keep.sum(), 1.0 / keep.sum()))",
        "07_gradient_flows",
    ),
    # ---- tokens on the sphere (chapter 9: per-token loop, energy rate, plateaus vs quadrature)
    M(
        "sphere-tangent-projection-sign",
        "tangent projection v + <x, v> x / |x|^2 instead of minus",
        "layer.py",
        "return v - radial[:, None] * x",
        "return v + radial[:, None] * x",
        "09_sphere",
    ),
    M(
        "sphere-normalise-skipped",
        "simulate does not map the tokens back onto the sphere after a step",
        "particles.py",
        "                        x = normalise(x)\n",
        "                        x = x\n",
        "09_sphere",
    ),
    M(
        "sphere-energy-half-dropped",
        "interaction energy on the sphere with 1/beta instead of 1/(2 beta)",
        "sphere.py",
        "np.exp(beta * gram), w) / (2.0 * beta)",
        "np.exp(beta * gram), w) / beta",
        "09_sphere",
    ),
    M(
        "two-cluster-exponent-halved",
        "two-point-cluster ODE with the weight e^{-beta(1 - cos)/2}",
        "sphere.py",
        "e = beta * gap(theta)",
        "e = 0.5 * beta * gap(theta)",
        "09_sphere",
    ),
    # ---- a Transformer layer (chapter 10: quantised Gaussian, closed forms vs the solver) ----
    M(
        "layer-ff-closure-no-transpose",
        "feed-forward part of the layer's closure 2 W Sigma instead of W Sigma + Sigma W^T",
        "layer.py",
        "return dm + (W @ mean[..., None])[..., 0] + b, dc + WS + np.swapaxes(WS, -1, -2)",
        "return dm + (W @ mean[..., None])[..., 0] + b, dc + 2 * WS",
        "10_transformer_layer",
    ),
    M(
        "layer-blowup-time-rate-halved",
        "layer blow-up time log(1 + w/p)/w instead of log(1 + 2w/p)/(2w)",
        "gaussian/_layer.py",
        "float(np.log1p(2.0 * w / top) / (2.0 * w))",
        "float(np.log1p(w / top) / w)",
        "10_transformer_layer",
    ),
    M(
        "layer-closed-form-decay-halved",
        "layer closed form with e^{-wt} instead of e^{-2wt}",
        "gaussian/_layer.py",
        "denom = np.exp(-2.0 * w * times)[:, None]",
        "denom = np.exp(-w * times)[:, None]",
        "10_transformer_layer",
    ),
    M(
        "layer-equilibrium-factor",
        "layer equilibrium -w (A + A^T)^{-1} instead of -2w (A + A^T)^{-1}",
        "gaussian/_layer.py",
        "out = (U * (-2.0 * w / lam_s)) @ U.T",
        "out = (U * (-w / lam_s)) @ U.T",
        "10_transformer_layer",
    ),
    # ---- fidelity (issue 38): chapters 9 and 10 check each formula where its wrong version differs
    # (unequal weights and masses, beta != 1, V != I with a feed-forward on the sphere, a
    # non-symmetric W, a covariance that does not commute with A + A^T, |w| < p_max < 2|w|)
    M(
        "sphere-energy-weights-ignored",
        "interaction energy on the sphere with equal weights, not the tokens' masses",
        "sphere.py",
        "w = _weights(weights, x.shape[-2])",
        "w = _weights(None, x.shape[-2])",
        "09_sphere",
    ),
    M(
        "sphere-energy-over-two",
        "interaction energy on the sphere with 1/2 instead of 1/(2 beta) (equal at beta = 1)",
        "sphere.py",
        "np.exp(beta * gram), w) / (2.0 * beta)",
        "np.exp(beta * gram), w) / 2.0",
        "09_sphere",
    ),
    M(
        "sphere-energy-over-two-beta-squared",
        "interaction energy on the sphere with 1/(2 beta^2) instead of 1/(2 beta)",
        "sphere.py",
        "np.exp(beta * gram), w) / (2.0 * beta)",
        "np.exp(beta * gram), w) / (2.0 * beta**2)",
        "09_sphere",
    ),
    M(
        "two-cluster-masses-swapped",
        "two-point-cluster speed with each cluster pulled by its own mass, not the other's",
        "sphere.py",
        "return math.exp(e - top) / (m2 / (m1 + m2 * q) + m1 / (m2 + m1 * q))",
        "return math.exp(e - top) / (m1 / (m1 + m2 * q) + m2 / (m2 + m1 * q))",
        "09_sphere",
    ),
    M(
        "sphere-layer-projects-attention-only",
        "layer on the sphere projecting the attention only, the feed-forward added unprojected",
        "layer.py",
        "            out = out + ff\n"
        '        if self.normalisation == "sphere":\n'
        "            out = _tangent(points, out)\n",
        '            out = (_tangent(points, out) if self.normalisation == "sphere" else out) + ff\n'
        '        if self.normalisation == "sphere" and self.feedforward is None:\n'
        "            out = _tangent(points, out)\n",
        "09_sphere",
    ),
    M(
        "sphere-projection-dropped",
        "layer on the sphere without the tangent projection (renormalisation only)",
        "layer.py",
        "            out = _tangent(points, out)",
        "            out = out",
        "09_sphere",
    ),
    M(
        "layer-ff-rhs-W-for-WT",
        "feed-forward closure W Sigma + Sigma W (W for W^T) in AffineFeedForward.gaussian_rhs",
        "layer.py",
        "return W @ mean + self.b(t), WS + WS.T",
        "return W @ mean + self.b(t), WS + cov @ W",
        "10_transformer_layer",
    ),
    M(
        "layer-ff-batched-W-for-WT",
        "feed-forward closure W Sigma + Sigma W (W for W^T) in the layer's batched closure",
        "layer.py",
        "dc + WS + np.swapaxes(WS, -1, -2)",
        "dc + WS + cov @ W",
        "10_transformer_layer",
    ),
    M(
        "layer-blowup-threshold-w-for-2w",
        "layer blow-up when p_max > max(0, -w) instead of max(0, -2w)",
        "gaussian/_layer.py",
        "if top <= max(0.0, -2.0 * w) + _ROUNDOFF",
        "if top <= max(0.0, -w) + _ROUNDOFF",
        "10_transformer_layer",
    ),
    M(
        "layer-blowup-p-from-eigenvalues",
        "layer blow-up with p = lambda_max(Sigma_0) lambda_max(v (A + A^T)), not of the whitened matrix",
        "gaussian/_layer.py",
        "top = float(p.max())",
        "top = float(v * np.linalg.eigvalsh(cov0).max() * np.linalg.eigvalsh(A + A.T).max())",
        "10_transformer_layer",
    ),
    # ---- causal attention (chapter 12: closed form vs the n-token prediction, particles,
    # the threshold's root and published values, the leaders vs Rényi centres) ----------------
    M(
        "causal-psi-factor",
        "psi_c(y) as sqrt(c/y) I_1(2 sqrt(cy)) / 2 (the factor 2 of 2c I_1(z)/z dropped)",
        "masked/_causal.py",
        "bessel = 2.0 * c * ive(1, safe) * np.exp(safe) / safe",
        "bessel = c * ive(1, safe) * np.exp(safe) / safe",
        "12_causal_attention",
    ),
    M(
        "causal-coefficient-no-position",
        "closed form's coefficient lambda/(e^lambda - 1) instead of lambda e^{lambda s}/(e^lambda - 1)",
        "masked/_causal.py",
        "coeff = lam * np.exp(lam * (s - 1.0)) / -np.expm1(-lam)",
        "coeff = lam * np.exp(-lam) / -np.expm1(-lam) * np.ones_like(s)",
        "12_causal_attention",
    ),
    M(
        "causal-Y-without-bias",
        "Y_lambda(s) = log(1/s), the bias-free argument, for every lambda",
        "masked/_causal.py",
        "return coeff, np.log(np.expm1(lam) / np.expm1(lam * s))",
        "return coeff, -np.log(s)",
        "12_causal_attention",
    ),
    M(
        "causal-softmax-rate-no-beta",
        "softmax mode rate m^2 I_m / I_0 instead of m^2 I_m / (beta I_0)",
        "masked/_causal.py",
        "return m**2 * scaled / (beta * ive(0, beta))",
        "return m**2 * scaled / ive(0, beta)",
        "12_causal_attention",
    ),
    M(
        "causal-threshold-factor-2",
        "recency threshold without its factor 2",
        "masked/_causal.py",
        "return float(-2.0 * math.expm1(-lam) * (w @ a) / (w @ a**2))",
        "return float(-math.expm1(-lam) * (w @ a) / (w @ a**2))",
        "12_causal_attention",
    ),
    M(
        "causal-bias-sign",
        "positional bias +lambda (s_j - s_k): distant keys favoured",
        "masked/_causal.py",
        "logw = np.where(keep, -lam * rel, -np.inf)",
        "logw = np.where(keep, lam * rel, -np.inf)",
        "12_causal_attention",
    ),
    M(
        "causal-linear-no-self-weight",
        "n-token prediction with the query's own weight I_0 like any key's, not e^beta",
        "masked/_causal.py",
        "np.diag(w) * math.exp(beta) + (w.sum(axis=1) - np.diag(w)) * ive(0, beta) * math.exp(beta)",
        "w.sum(axis=1) * ive(0, beta) * math.exp(beta)",
        "12_causal_attention",
    ),
    M(
        "causal-jacobian-sin2-sign",
        "tangent of the softmax circle field with +beta sin^2 instead of -beta sin^2",
        "masked/_causal.py",
        "M = p * (cos - beta * sin**2 + beta * v[:, :, None] * sin)",
        "M = p * (cos + beta * sin**2 + beta * v[:, :, None] * sin)",
        "12_causal_attention",
    ),
    M(
        "causal-renyi-last-centre-only",
        "Rényi centres tested against the last centre only, not all earlier ones",
        "masked/_causal.py",
        "earlier = np.arange(k) if strong else np.asarray(centres)",
        "earlier = np.arange(k) if strong else np.asarray(centres[-1:])",
        "12_causal_attention",
    ),
    # ---- a trained Transformer (chapter 11: the model's own attention against the PDE's
    # multi-head field, the heads' inertia, the Gaussian gap against its sampling floor) -----
    M(
        "trained-multihead-no-query-bias",
        "homogeneous MultiHead of a trained layer without the query bias column",
        "trained.py",
        "np.hstack([Q[h], bq[h]])",
        "np.hstack([Q[h], 0.0 * bq[h]])",
        "11_trained_transformer",
    ),
    M(
        "trained-multihead-no-value-bias",
        "homogeneous MultiHead without the value bias's constant W^O_h b^V_h",
        "trained.py",
        "Vt[: self.d, self.d] = offsets[h] + self.output_bias / self.heads",
        "Vt[: self.d, self.d] = self.output_bias / self.heads",
        "11_trained_transformer",
    ),
    M(
        "trained-attention-no-sqrt-k",
        "the model's attention scores without the 1/sqrt(k) scaling",
        "trained.py",
        "s = q @ np.swapaxes(kk, 1, 2) / np.sqrt(k)  # (H, n queries, n keys)",
        "s = q @ np.swapaxes(kk, 1, 2)  # (H, n queries, n keys)",
        "11_trained_transformer",
    ),
    M(
        "trained-spectra-J-identity",
        "eigenvalues of V_hA_h + A_h^T V_h^T from [U B][U B]^T (J = I)",
        "trained.py",
        "J = np.block([[np.zeros((k, k)), np.eye(k)], [np.eye(k), np.zeros((k, k))]])",
        "J = np.eye(2 * k)",
        "11_trained_transformer",
    ),
    M(
        "trained-gap-not-standardised",
        "Gaussian gap of the projections without dividing by their standard deviation",
        "trained.py",
        "z = np.sort(z / sd, axis=0)",
        "z = np.sort(z, axis=0)",
        "11_trained_transformer",
    ),
    # ---- post (issue 38, chapters 4 and 6b): wrong versions of code chapters 9-10 do not run
    M(
        "coupled-distance-unsorted-positions",
        "coupled Wasserstein distance pairing tokens in row order, not in position order",
        "transport/_coupled.py",
        'order = np.argsort(mu.positions, kind="stable")',
        "order = np.arange(mu.positions.size)",
        "04_masked_attention",
    ),
    M(
        "sink-positions-at-midpoints",
        "non-sink tokens at the midpoints (k - 1/2)/n of their cells instead of k/n",
        "masked/_positions.py",
        "positions = np.concatenate([np.zeros(n_sink), np.arange(1, n_rest + 1) / n_rest])",
        "positions = np.concatenate([np.zeros(n_sink), (np.arange(1, n_rest + 1) - 0.5) / n_rest])",
        "04_masked_attention",
    ),
    M(
        "histogram-fast-path-drops-V",
        "the authors' protocol's covariance-only fast path for softmax with V = I, whatever V",
        "official/_histograms.py",
        "return lambda S: softmax_dcov(A, V, S)",
        "return lambda S: softmax_dcov(A, np.broadcast_to(np.eye(A.shape[-1]), A.shape), S)",
        "06b_clustering_general_v",
    ),
    # ---- NEW_MUTANTS_END
]


def apply(mutant, lib):
    """Apply ``mutant`` to the copy of tpde_lib at ``lib`` (ValueError if its snippet is gone)."""
    path = lib / mutant.path
    text = path.read_text(encoding="utf-8")
    count = text.count(mutant.old)
    if count != 1:
        raise ValueError(
            f"{mutant.id}: the snippet occurs {count} times in tpde_lib/"
            f"{mutant.path} (expected once): update tools/mutants.py"
        )
    path.write_text(text.replace(mutant.old, mutant.new), encoding="utf-8")


# pytest for one mutated chapter, without what costs CPU time and checks nothing here (measured
# per run: 1.7 s of CPU for jsonschema's optional IRI grammar, which nbformat's notebook schema
# never uses, built by ``rfc3987_syntax`` at import; 0.3 s for hypothesis's plugin; the
# fingerprint of the installed code, which never matches a mutated library): the chapter's
# kernel is another process, untouched
_PYTEST = (
    "import sys; sys.modules['rfc3987_syntax'] = None; import pytest; sys.exit(pytest.main(sys.argv[1:]))"
)


def run(mutant, python):
    """(killed, where, seconds) for one mutant."""
    start = time.time()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.id}-") as tmp:
        lib = Path(tmp) / "tpde_lib"
        shutil.copytree(ROOT / "tpde_lib", lib, ignore=shutil.ignore_patterns("__pycache__"))
        apply(mutant, lib)
        env = dict(
            os.environ,
            PYTHONPATH=tmp + os.pathsep + os.environ.get("PYTHONPATH", ""),
            PYTHONDONTWRITEBYTECODE="1",
        )
        chapter = ROOT / "chapters" / f"{mutant.chapter}.md"
        proc = subprocess.run(
            [
                python,
                "-c",
                _PYTEST,
                str(chapter),
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:hypothesispytest",
                "-o",
                "addopts=--nbval-lax --nbval-current-env -p tests.nbmyst --nbmyst-execute",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    out = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    where = re.search(r"FAILED \S*?(chapters/\S+::Cell \d+)", out)
    killed = proc.returncode == 1 and where is not None
    if not killed:
        return False, out.strip().splitlines()[-1:], time.time() - start
    # the exception and the line of the cell that raised it (an assert, or the call that failed)
    errors = re.findall(r"^([A-Za-z_][\w.]*(?:Error|Exception))\b", out, re.M)
    line = re.search(r"^-+> *\d+ (.*)$", out, re.M)
    detail = f" ({errors[-1] if errors else 'error'}"
    detail += f" at `{line.group(1).strip()[:60]}`)" if line else ")"
    return True, where.group(1) + detail, time.time() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", nargs="*", help="run only these mutant ids")
    parser.add_argument(
        "--chapter", nargs="*", help="run only the mutants of these chapters (e.g. 02_mean_field or 02)"
    )
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    chosen = [
        m
        for m in MUTANTS
        if (not args.only or m.id in args.only)
        and (not args.chapter or any(m.chapter.startswith(c) for c in args.chapter))
    ]
    unknown = set(args.only or ()) - {m.id for m in MUTANTS}
    if unknown:
        parser.error(f"unknown mutant ids: {sorted(unknown)}")
    if args.list:
        for m in chosen:
            print(f"{m.id:36s} {m.chapter:24s} {m.what}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:  # every snippet must apply before any run
        shutil.copytree(ROOT / "tpde_lib", Path(tmp) / "tpde_lib")
        for m in chosen:
            apply(m, Path(tmp) / "tpde_lib")
            shutil.copy2(ROOT / "tpde_lib" / m.path, Path(tmp) / "tpde_lib" / m.path)
    killed, start = 0, time.time()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [(m, pool.submit(run, m, sys.executable)) for m in chosen]
        for m, fut in futures:
            ok, where, secs = fut.result()
            killed += ok
            verdict = f"killed by {where}" if ok else f"SURVIVED ({where})"
            print(f"{m.id:36s} {verdict}  [{secs:.0f} s] — {m.what}", flush=True)
    print(f"wall time {time.time() - start:.0f} s with --jobs {args.jobs}")
    print(f"mutants: {len(chosen)}, killed by the chapters: {killed}")
    return 0 if killed == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
