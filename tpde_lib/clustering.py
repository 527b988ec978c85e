r"""Clustering versus blow-up of Gaussian covariances: the paper's experiments and their analysis.

What this module holds (paper notes §6, §7):

* the authors' experiment settings, with their exact random draws: the six 2-D families E1–E6
  (:func:`paper_experiment`, notes §7.5) and the rank-histogram experiment
  (:func:`histogram_setting`, notes §7.6), with the official code's scalings of :math:`A`;
* the initial-condition grid (:func:`init_grid`, §7.4) and the cone coordinates of 2×2 covariances
  (:func:`to_3d`, :func:`from_3d`, :func:`to_disk`, §7.3);
* analysis: :func:`numerical_rank`, :func:`classify_outcome`, :func:`phase_diagram`,
  :func:`predicted_limit_rank`, :func:`lyapunov`, and the authors' histogram protocol
  (:func:`paper_histogram_ranks`).

Notation: :math:`\Sigma` is the covariance, :math:`A` the score matrix (score
:math:`\langle Ax, y\rangle`, :math:`A = K^\top Q/\sqrt k`), :math:`V` the value matrix
(paper notes §1.2).

Scalings of the official code (paper notes §1.2, "code scaling quirk"), reproduced by
:func:`paper_parameters`:

* softmax: :math:`A = K^\top Q/\sqrt d` with :math:`d` the **full** dimension (even when
  :math:`Q` has fewer than :math:`d` rows);
* ℓ²: kernel :math:`e^{-|Qx/\sqrt d - Ky|^2}`, i.e. our ``L2(Q/sqrt(d), K, V, tau=1)``;
* multi-head with :math:`H` heads: :math:`k = d // H`, head :math:`h` uses rows
  :math:`hk{:}(h+1)k` of :math:`Q, K, V`, :math:`A_h = K_h^\top Q_h/\sqrt k` and value-output
  matrix :math:`C_h = V` with the rows outside block :math:`h` set to zero;
* Sinkhorn: :math:`A = K^\top Q` (no scaling), :math:`\varepsilon = 1`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._checks import as_float_array, as_positive

__all__ = [
    "VARIANTS", "EulerSettings", "PaperExperiment", "paper_experiment", "paper_parameters",
    "paper_rhs", "paper_attention", "rank_one_direction", "init_grid", "to_3d", "from_3d",
    "to_disk", "numerical_rank", "predicted_limit_rank", "lyapunov", "CONVERGES", "BLOWS_UP",
    "GROWS", "OUTCOME_NAMES", "classify_outcome", "PhaseDiagram", "phase_diagram",
    "HistogramSetting", "histogram_setting", "histogram_inits", "paper_histogram_ranks",
    "run_paper_euler", "histogram_euler_budget", "histogram_accurate",
    "r5_counterexample",
]

#: The attention variants of the official code, with our names.
VARIANTS = ("softmax", "L2", "multihead", "sinkhorn")


# --------------------------------------------------------------------------------------------
# Geometry of 2×2 covariances (paper notes §7.3, §7.4)
# --------------------------------------------------------------------------------------------

def to_3d(S):
    r"""Cone coordinates of 2×2 symmetric matrices (paper notes §7.3).

    :math:`\Sigma = \begin{pmatrix} a & c\\ c & b\end{pmatrix} \mapsto (a-b,\ 2c,\ a+b)`. This
    linear map sends the PSD cone onto the round cone :math:`\{z \ge \sqrt{x^2+y^2}\}`: the
    eigenvalues are :math:`(z \pm \sqrt{x^2+y^2})/2`, so the boundary :math:`z = \sqrt{x^2+y^2}` is
    the set of rank-≤1 matrices and the apex is :math:`0`.

    Parameters
    ----------
    S : array_like, shape (..., 2, 2)

    Returns
    -------
    ndarray, shape (..., 3)
    """
    S = np.asarray(S, dtype=float)
    if S.shape[-2:] != (2, 2):
        raise ValueError(f"S must have shape (..., 2, 2), got {S.shape}")
    a, b = S[..., 0, 0], S[..., 1, 1]
    c = 0.5 * (S[..., 0, 1] + S[..., 1, 0])
    return np.stack([a - b, 2.0 * c, a + b], axis=-1)


def from_3d(X):
    r"""Inverse of :func:`to_3d`: :math:`(u, w, v) \mapsto \begin{pmatrix}(u+v)/2 & w/2\\ w/2 &
    (v-u)/2\end{pmatrix}`.

    Parameters
    ----------
    X : array_like, shape (..., 3)

    Returns
    -------
    ndarray, shape (..., 2, 2)
    """
    X = np.asarray(X, dtype=float)
    if X.shape[-1] != 3:
        raise ValueError(f"X must have shape (..., 3), got {X.shape}")
    u, w, v = X[..., 0], X[..., 1], X[..., 2]
    a, b, c = 0.5 * (u + v), 0.5 * (v - u), 0.5 * w
    return np.stack([np.stack([a, c], -1), np.stack([c, b], -1)], axis=-2)


def to_disk(S):
    r"""Normalised-trace disk coordinates of 2×2 covariances (paper notes §7.3).

    The first two cone coordinates of :math:`\Sigma/\operatorname{tr}\Sigma`,
    :math:`((a-b)/(a+b),\ 2c/(a+b))`. PSD matrices land in the closed unit disk; the unit circle is
    the rank-one matrices and the centre is a multiple of the identity (an isotropic Gaussian).

    Parameters
    ----------
    S : array_like, shape (..., 2, 2)
        Covariances with positive trace.

    Returns
    -------
    ndarray, shape (..., 2)
    """
    X = to_3d(S)
    if np.any(X[..., 2] <= 0):
        raise ValueError("S must have positive trace to be normalised")
    return X[..., :2] / X[..., 2:3]


def init_grid(n_u, n_c, limits=(-0.5, 0.5, -0.5, 0.5)):
    r"""Trace-one initial covariances on a grid inside the disk (paper notes §7.4).

    :math:`u` runs over ``linspace(limits[0], limits[1], n_u)`` and :math:`w` over
    ``linspace(limits[2], limits[3], n_c)``; the points with :math:`u^2 + w^2 < 1` (strictly
    positive definite) are mapped by :func:`from_3d` at :math:`v = \operatorname{tr}\Sigma_0 = 1`.
    The order is the official code's (``u`` slow, ``w`` fast), so member ``i`` is the authors'
    ``inits[i]``.

    Parameters
    ----------
    n_u, n_c : int
        Grid sizes (the authors use 10×10 on the default limits, 20×20, 30×30, 40×40 on
        :math:`[-1, 1]^2`).
    limits : sequence of 4 floats
        ``(u_min, u_max, w_min, w_max)``.

    Returns
    -------
    ndarray, shape (m, 2, 2)
        The ``m`` grid covariances strictly inside the PSD cone.
    """
    for name, n in (("n_u", n_u), ("n_c", n_c)):
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{name} must be a positive integer, got {n!r}")
    lim = as_float_array("limits", limits, shape=(4,))
    u = np.linspace(lim[0], lim[1], n_u)
    w = np.linspace(lim[2], lim[3], n_c)
    uu, ww = np.meshgrid(u, w, indexing="ij")  # u slow, w fast: the official ordering
    keep = 1.0 - uu**2 > ww**2
    X = np.stack([uu[keep], ww[keep], np.ones(keep.sum())], axis=-1)
    return from_3d(X)


# --------------------------------------------------------------------------------------------
# Ranks, limits, Lyapunov quantity (paper notes §6.3)
# --------------------------------------------------------------------------------------------

def numerical_rank(cov, tol=1e-1, relative=False):
    r"""Number of eigenvalues above ``tol`` (batched).

    The histograms of the paper count eigenvalues :math:`> 0.1` (``tol_rank=1e-1``, notes §7.6);
    with ``relative=True`` the threshold is ``tol * max(1, lambda_max)`` per matrix.

    Parameters
    ----------
    cov : array_like, shape (..., d, d)
        Symmetric matrices.
    tol : float
        Threshold (> 0).
    relative : bool

    Returns
    -------
    ndarray of int, shape (...)
    """
    cov = as_float_array("cov", cov)
    if cov.ndim < 2 or cov.shape[-1] != cov.shape[-2]:
        raise ValueError(f"cov must have shape (..., d, d), got {cov.shape}")
    tol = as_positive("tol", tol)
    lam = np.linalg.eigvalsh(0.5 * (cov + np.swapaxes(cov, -1, -2)))
    thr = tol * np.maximum(1.0, lam[..., -1:]) if relative else tol
    return np.sum(lam > thr, axis=-1)


def predicted_limit_rank(A, tol=1e-10):
    r"""Rank of the limit covariance predicted for :math:`V = I` and :math:`A + A^\top \preceq 0`.

    **Derived** (paper notes §6.3 R2): with :math:`V = I`,
    :math:`\Sigma_t = (\Sigma_0^{-1} - t(A+A^\top))^{-1} \to \Sigma_\infty` with
    :math:`\operatorname{range}\Sigma_\infty = \ker(A+A^\top)`, so for every full-rank
    :math:`\Sigma_0`

    .. math:: \operatorname{rank}\Sigma_\infty = d - \operatorname{rank}(A + A^\top).

    Parameters
    ----------
    A : array_like, shape (..., d, d)
    tol : float
        Eigenvalues of :math:`A + A^\top` with modulus below ``tol * max(1, |A + A^T|)`` count as 0.

    Returns
    -------
    ndarray of int, shape (...)

    Raises
    ------
    ValueError
        If some :math:`A + A^\top` has a positive eigenvalue (then :math:`\Sigma` blows up).
    """
    A = as_float_array("A", A)
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"A must have shape (..., d, d), got {A.shape}")
    lam = np.linalg.eigvalsh(A + np.swapaxes(A, -1, -2))
    scale = np.maximum(1.0, np.abs(lam).max(axis=-1, keepdims=True))
    if np.any(lam > tol * scale):
        raise ValueError("A + A^T must be negative semi-definite for a limit to exist "
                         f"(largest eigenvalue {lam[..., -1].max():.3g} > 0)")
    return A.shape[-1] - np.sum(np.abs(lam) > tol * scale, axis=-1)


def lyapunov(cov, V):
    r""":math:`\mathcal L = \operatorname{tr}(V^{-1}\Sigma)` (paper notes §6.3 R4), batched.

    **Derived**: for softmax with :math:`V` symmetric positive definite,
    :math:`\mathcal L' = \operatorname{tr}(\Sigma(A+A^\top)\Sigma)`, which is :math:`\le 0` when
    :math:`A + A^\top \preceq 0`.

    Parameters
    ----------
    cov : array_like, shape (..., d, d)
    V : array_like, shape (..., d, d)
        Invertible (symmetric positive definite for the monotonicity statement).

    Returns
    -------
    ndarray, shape (...)
    """
    cov = as_float_array("cov", cov)
    V = as_float_array("V", V)
    if cov.shape[-2:] != V.shape[-2:] or cov.shape[-1] != cov.shape[-2]:
        raise ValueError(f"cov and V must be (..., d, d) with the same d, got {cov.shape}, "
                         f"{V.shape}")
    return np.trace(np.linalg.solve(V, cov), axis1=-2, axis2=-1)


# --------------------------------------------------------------------------------------------
# The official code's parameters and scalings
# --------------------------------------------------------------------------------------------

def paper_parameters(Q, K, V, variant, H=1):
    r"""Our parameters for the official code's ``rhs_<variant>(S, Q, K, V, d, H)`` (notes §1.2).

    Parameters
    ----------
    Q, K : array_like, shape (..., k, d)
        The code's query/key matrices (``k`` rows, possibly ``k < d``).
    V : array_like, shape (..., d, d)
    variant : {"softmax", "L2", "multihead", "sinkhorn"}
    H : int
        Number of heads (multi-head only).

    Returns
    -------
    dict
        * ``"softmax"``: ``A = K^T Q / sqrt(d)`` (full ``d``), ``V``;
        * ``"L2"``: ``Q = Q / sqrt(d)``, ``K``, ``V``, ``tau = 1.0``;
        * ``"multihead"``: ``As``, ``Vs`` (lists of ``(..., d, d)``): ``A_h = K_h^T Q_h/sqrt(k)``,
          ``C_h`` = rows ``hk:(h+1)k`` of ``V`` (others zero), ``k = d // H``. Slices past the
          last row of ``Q`` are empty, as in numpy, so such a head has ``A_h = 0`` (experiment E3);
        * ``"sinkhorn"``: ``A = K^T Q`` (no scaling), ``V``, ``eps = 1.0``.
    """
    Q = as_float_array("Q", Q)
    K = as_float_array("K", K)
    V = as_float_array("V", V)
    if Q.shape != K.shape or Q.ndim < 2:
        raise ValueError(f"Q and K must have the same shape (..., k, d), got {Q.shape}, {K.shape}")
    d = Q.shape[-1]
    if V.shape[-2:] != (d, d):
        raise ValueError(f"V must have shape (..., {d}, {d}), got {V.shape}")
    Kt = np.swapaxes(K, -1, -2)
    if variant == "softmax":
        return {"A": Kt @ Q / np.sqrt(d), "V": V}
    if variant == "L2":
        return {"Q": Q / np.sqrt(d), "K": K, "V": V, "tau": 1.0}
    if variant == "sinkhorn":
        return {"A": Kt @ Q, "V": V, "eps": 1.0}
    if variant == "multihead":
        if not isinstance(H, (int, np.integer)) or H < 1 or d % H:
            raise ValueError(f"H must be a positive integer dividing d={d}, got {H!r}")
        k = d // H
        As, Vs = [], []
        for h in range(H):
            rows = slice(k * h, k * (h + 1))
            As.append(np.swapaxes(K[..., rows, :], -1, -2) @ Q[..., rows, :] / np.sqrt(k))
            C = np.zeros_like(V)
            C[..., rows, :] = V[..., rows, :]
            Vs.append(C)
        return {"As": As, "Vs": Vs}
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


def paper_rhs(params, variant):
    r"""The covariance right-hand side ``cov (..., d, d) -> dcov`` for :func:`paper_parameters`.

    Uses :mod:`tpde_lib.gaussian_odes` with a zero mean (the covariance ODEs are autonomous,
    notes §5); batch dimensions of ``cov`` broadcast against those of the parameters.
    """
    from . import gaussian_odes as go

    def zero(cov):
        return np.zeros(cov.shape[:-1])

    if variant == "softmax":
        return lambda cov: go.softmax_rhs(params["A"], params["V"], zero(cov), cov)[1]
    if variant == "L2":
        return lambda cov: go.l2_rhs(params["Q"], params["K"], params["V"], params["tau"],
                                     zero(cov), cov)[1]
    if variant == "sinkhorn":
        return lambda cov: go.sinkhorn_rhs(params["A"], params["V"], params["eps"], zero(cov),
                                           cov)[1]
    if variant == "multihead":
        return lambda cov: go.multihead_rhs(params["As"], params["Vs"], zero(cov), cov)[1]
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


def paper_attention(params, variant):
    """An attention object of :mod:`tpde_lib.attention` for unbatched :func:`paper_parameters`."""
    from . import attention as at

    if variant == "softmax":
        return at.Softmax(params["A"], params["V"])
    if variant == "L2":
        return at.L2(params["Q"], params["K"], params["V"], tau=params["tau"])
    if variant == "sinkhorn":
        return at.Sinkhorn(params["A"], params["V"], eps=params["eps"])
    if variant == "multihead":
        return at.MultiHead([at.Softmax(A, C) for A, C in zip(params["As"], params["Vs"])])
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


# --------------------------------------------------------------------------------------------
# The 2-D experiments E1–E6 (paper notes §7.5)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EulerSettings:
    """One run of the authors' projected explicit Euler scheme (paper notes §7.2).

    Attributes
    ----------
    h : float
        Step size. ``tol_low``: stop as converged when the Frobenius norm of the right-hand side
        (before the step) is below it; ``tol_high``: stop as diverged when the trace (after the
        step) exceeds it; ``max_iter``: at most this many steps; ``H``: number of heads passed.
    """

    h: float
    tol_low: float = 1e-5
    tol_high: float = 1e3
    max_iter: int = 50000
    H: int = 1


@dataclass(frozen=True)
class PaperExperiment:
    """A 2-D experiment of ``2d_plots.py`` (paper notes §7.5).

    Attributes
    ----------
    name, title : str
        ``"E1"`` ... ``"E6"`` and the code's section title.
    seed : int
        The first ``np.random.seed`` of the section.
    Q, K, V : ndarray, shape (k, 2), (k, 2), (2, 2)
        The code's matrices (``V`` is the value matrix actually passed to the runs).
    runs : dict
        variant -> :class:`EulerSettings`.
    grid : tuple
        ``(n_u, n_c, limits)`` of :func:`init_grid`.
    outputs : dict
        variant -> the code's output file name.
    colour : {"start", "final"}
        Colour by the starting :math:`2c` or by the final trace.
    view : {"cone", "disk"}
        3-D cone or normalised-trace disk.
    notes : str
        Peculiarities of the code (bugs, unused draws).
    """

    name: str
    title: str
    seed: int
    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    runs: dict
    grid: tuple
    outputs: dict
    colour: str
    view: str
    notes: str = ""
    extra: dict = field(default_factory=dict)

    def parameters(self, variant):
        """:func:`paper_parameters` for one of the runs (with its number of heads)."""
        return paper_parameters(self.Q, self.K, self.V, variant, H=self.runs[variant].H)

    def rhs(self, variant):
        """Batched covariance right-hand side of one run (see :func:`paper_rhs`)."""
        return paper_rhs(self.parameters(variant), variant)

    def inits(self, n_u=None, n_c=None):
        """The initial covariances; ``n_u``, ``n_c`` override the grid size (coarser grids)."""
        nu, nc, lim = self.grid
        return init_grid(nu if n_u is None else n_u, nc if n_c is None else n_c, lim)

    def euler(self, variant, n_u=None, n_c=None, max_iter=None, record_every=1):
        """The authors' projected Euler runs of one variant on the grid (:func:`run_paper_euler`).

        ``n_u``, ``n_c`` (coarser grid) and ``max_iter`` (fewer steps) are budgets; the step
        size and tolerances are always the authors'.
        """
        rhs = self.rhs(variant)
        return run_paper_euler(lambda idx: rhs, self.inits(n_u, n_c), self.runs[variant],
                               record_every=record_every, max_iter=max_iter,
                               chunk=max(500, record_every))

    def accurate(self, variant, times, n_u=None, n_c=None, rtol=1e-8, atol=1e-10):
        """The same initial conditions integrated accurately (adaptive Dormand–Prince).

        Uses :func:`tpde_lib.gaussian.simulate_gaussian_batch` with the attention of
        :func:`paper_attention` (same matrices and scalings as the Euler runs).
        """
        from .gaussian import simulate_gaussian_batch

        att = paper_attention(self.parameters(variant), variant)
        return simulate_gaussian_batch(att, self.inits(n_u, n_c), times, rtol=rtol, atol=atol)


def _draw_qk_until(condition):
    """Legacy draws ``Q = randn(2,2)``, ``K = randn(2,2)`` until ``condition(eigvalsh(A + A^T))``.

    Like the official code: at most 1000 attempts, ``A = K^T Q`` (the sign test does not depend
    on the scaling), and the last draw is kept even if no attempt succeeded.
    """
    for _ in range(1000):
        Q = np.random.randn(2, 2)  # noqa: NPY002 (authors' legacy stream)
        K = np.random.randn(2, 2)  # noqa: NPY002 (authors' legacy stream)
        A = K.T @ Q
        lam = np.linalg.eigvalsh(A + A.T)
        if condition(lam):
            break
    return Q, K


def paper_experiment(name):
    r"""The parameters of one 2-D experiment of the official code, with the authors' draws.

    The draws use the **legacy global** generator (``np.random.seed`` + ``randn``/``rand``) in
    the code's order: this is the one place where the project does not use
    ``np.random.default_rng``, because only the legacy stream reproduces the authors' matrices.
    The global state is saved and restored, so calling this has no side effect.

    ========  =================================================================================
    name      draws (paper notes §7.5)
    ========  =================================================================================
    ``E1``    seed 35; ``Q = rand(2,2)``, ``K = -Q``, ``V = B B^T`` with ``B = randn(2,2)``
    ``E2``    seed 36; ``q = randn(1,2)/|q|``, ``Q = q``, ``K = -q``; ``randn(2,2)`` drawn and
              unused; ``V = I``
    ``E3``    as E2, multi-head with ``H = 2`` (head 2 has empty slices: :math:`A_2 = 0`)
    ``E4``    seed 36; ``Q, K = randn(2,2)`` until :math:`A + A^\top` indefinite; seed 32,
              ``V = randn(2,2)``
    ``E5``    seed 33; ``Q, K = randn(2,2)`` until :math:`A + A^\top \succ 0`; ``V = I``
    ``E6``    Q, K as E4; seed 35, ``randn(8,7)`` discarded, ``V = randn(2,2)``; the multi-head
              run is called without ``H`` (so ``H = 1``)
    ========  =================================================================================

    Parameters
    ----------
    name : {"E1", "E2", "E3", "E4", "E5", "E6"}

    Returns
    -------
    PaperExperiment
    """
    state = np.random.get_state()  # noqa: NPY002 (authors' legacy stream)
    try:
        return _paper_experiment(name)
    finally:
        np.random.set_state(state)  # noqa: NPY002 (authors' legacy stream)


def _paper_experiment(name):
    # Legacy np.random calls on purpose: they reproduce the authors' exact draws (see docstring).
    small = (10, 10, (-0.5, 0.5, -0.5, 0.5))
    full = (-1.0, 1.0, -1.0, 1.0)
    if name == "E1":
        np.random.seed(35)  # noqa: NPY002 (authors' legacy stream)
        Q = np.random.rand(2, 2)  # noqa: NPY002 (authors' legacy stream)
        K = -Q
        B = np.random.randn(2, 2)  # noqa: NPY002 (authors' legacy stream)
        V = B @ B.T
        runs = {"softmax": EulerSettings(0.3, 1e-5), "L2": EulerSettings(0.3, 1e-5),
                "multihead": EulerSettings(0.3, 1e-5, H=2),
                "sinkhorn": EulerSettings(0.5, 1e-5)}
        outputs = {"softmax": "trad_neg_def_V", "L2": "L2_neg_def_V",
                   "multihead": "MH_neg_def_V", "sinkhorn": "sink_convergence"}
        return PaperExperiment("E1", "Convergence to zero", 35, Q, K, V, runs, small, outputs,
                               "start", "cone", "A = -Q^T Q/sqrt(2) is negative definite and V "
                               "is SPD: every trajectory goes to the apex.")
    if name in ("E2", "E3"):
        np.random.seed(36)  # noqa: NPY002 (authors' legacy stream)
        q = np.random.randn(1, 2)  # noqa: NPY002 (authors' legacy stream)
        q = q / np.linalg.norm(q)
        np.random.randn(2, 2)  # the code draws a V here and does not use it (it passes V = I)  # noqa: NPY002
        Q, K, V = q, -q, np.eye(2)
        extra = {"rank_one_direction": rank_one_direction(q[0])}
        if name == "E2":
            runs = {"softmax": EulerSettings(0.5, 1e-4), "L2": EulerSettings(0.5, 1e-4)}
            outputs = {"softmax": "trad_rank_1", "L2": "L2_rank_1"}
            return PaperExperiment("E2", "Convergence to a line", 36, Q, K, V, runs, small,
                                   outputs, "start", "cone", "A = -q^T q/sqrt(2) has rank one: "
                                   "the limit is the rank-one projector onto q-perp (R2).", extra)
        runs = {"multihead": EulerSettings(0.5, 1e-4, H=2)}
        return PaperExperiment("E3", "Convergence to a plane", 36, Q, K, V, runs, small,
                               {"multihead": "MH_rank_1"}, "start", "cone",
                               "With H = 2 and one row in Q, head 2 gets empty slices "
                               "(A_2 = 0): only head 1 acts, with C_1 = e_1 e_1^T.", extra)
    if name == "E4":
        np.random.seed(36)  # noqa: NPY002 (authors' legacy stream)
        Q, K = _draw_qk_until(lambda lam: lam[0] * lam[1] < 0)
        np.random.seed(32)  # noqa: NPY002 (authors' legacy stream)
        V = np.random.randn(2, 2)  # noqa: NPY002 (authors' legacy stream)
        runs = {"softmax": EulerSettings(0.01, 1e-7), "L2": EulerSettings(0.01, 1e-7)}
        outputs = {"softmax": "trad_mixed_3d", "L2": "L2_mixed_3d"}
        return PaperExperiment("E4", "Convergence to two lines", 36, Q, K, V, runs,
                               (20, 20, full), outputs, "final", "cone",
                               "The released code overwrites the softmax list with the L2 run "
                               "before plotting: both published files show L2.")
    if name == "E5":
        np.random.seed(33)  # noqa: NPY002 (authors' legacy stream)
        Q, K = _draw_qk_until(lambda lam: lam[0] > 0)
        runs = {"softmax": EulerSettings(0.01, 1e-4, max_iter=100000),
                "multihead": EulerSettings(0.002, 1e-4, max_iter=100000, H=2),
                "L2": EulerSettings(0.001, 1e-5, tol_high=1e4),
                "sinkhorn": EulerSettings(0.01, 1e-5, tol_high=1e4)}
        outputs = {"softmax": "trad_explosion", "multihead": "MH_explosion",
                   "L2": "L2_divergence", "sinkhorn": "sink_divergence"}
        return PaperExperiment("E5", "Blow-up or divergence", 33, Q, K, np.eye(2), runs,
                               (40, 40, full), outputs, "start", "disk",
                               "A + A^T is positive definite and V = I: softmax blows up "
                               "from every initial condition (R2).")
    if name == "E6":
        np.random.seed(36)  # noqa: NPY002 (authors' legacy stream)
        Q, K = _draw_qk_until(lambda lam: lam[0] * lam[1] < 0)
        np.random.seed(35)  # noqa: NPY002 (authors' legacy stream)
        np.random.randn(8, 7)  # discarded by the code  # noqa: NPY002 (authors' legacy stream)
        V = np.random.randn(2, 2)  # noqa: NPY002 (authors' legacy stream)
        runs = {"softmax": EulerSettings(0.003, 1e-4), "L2": EulerSettings(0.002, 1e-4),
                "multihead": EulerSettings(0.002, 1e-4, H=1)}
        outputs = {"softmax": "trad_both_V", "L2": "L2_both", "multihead": "MH_both"}
        return PaperExperiment("E6", "Convergence and blow-up depending on initial data", 36,
                               Q, K, V, runs, (30, 30, full), outputs, "start", "disk",
                               "H is not passed to the multi-head run, so H = 1 and MH_both is "
                               "softmax with another step size.")
    raise ValueError(f"name must be one of 'E1', ..., 'E6', got {name!r}")


def rank_one_direction(q):
    r"""Unit cone-coordinate direction of the projector onto :math:`q^\perp` (2-D).

    The official ``compute_dir_mat`` projects a random vector onto :math:`q^\perp`; the projector
    does not depend on that draw (only on its sign, which cancels), so we compute it directly.

    Parameters
    ----------
    q : array_like, shape (2,)

    Returns
    -------
    ndarray, shape (3,)
    """
    q = as_float_array("q", q, shape=(2,))
    p = np.array([-q[1], q[0]]) / np.linalg.norm(q)
    X = to_3d(np.outer(p, p))
    return X / np.linalg.norm(X)


# --------------------------------------------------------------------------------------------
# Outcomes and the phase diagram (paper notes §6.3)
# --------------------------------------------------------------------------------------------

CONVERGES, BLOWS_UP, GROWS = 0, 1, 2
OUTCOME_NAMES = {CONVERGES: "converges", BLOWS_UP: "blows up", GROWS: "grows"}


def classify_outcome(cov, blowup_time, valid=None, growth_factor=10.0, rank_tol=1e-2, status=None):
    r"""Classify accurate covariance trajectories: converge to rank r, blow up at t*, or grow.

    * **blows up**: the integrator reported a finite blow-up time (with ``status`` given: only
      where it is ``"blowup"``; a ``"growth_limit"`` stop is growth, not a detected blow-up);
    * **grows**: no blow-up within the horizon, and the trace at the last valid time exceeds
      ``growth_factor`` times the initial trace (growth without finite-time blow-up, e.g. ℓ² and
      Sinkhorn where softmax blows up, notes §6.3 R6);
    * **converges**: otherwise; the rank is :func:`numerical_rank` of the last covariance with the
      relative threshold ``rank_tol * tr(Sigma_0)`` (a limit approached like :math:`O(1/t)`
      needs ``rank_tol`` above the remaining :math:`1/t` tail).

    Parameters
    ----------
    cov : array_like, shape (B, T, d, d)
        Trajectories on a common time grid.
    blowup_time : array_like, shape (B,)
        ``np.inf`` where there is no blow-up.
    valid : array_like of bool, shape (B, T), optional
        Which times are before blow-up (default: all).
    growth_factor, rank_tol : float
    status : array_like of str, shape (B,), optional
        The solver's status per member (:class:`~tpde_lib.gaussian.GaussianBatch`).

    Returns
    -------
    outcome : ndarray of int, shape (B,)
        :data:`CONVERGES`, :data:`BLOWS_UP` or :data:`GROWS`.
    rank : ndarray of int, shape (B,)
        Numerical rank of the last valid covariance (``-1`` unless converging).
    """
    cov = as_float_array("cov", cov, ndim=4)
    B, T = cov.shape[:2]
    tstar = np.asarray(blowup_time, dtype=float).reshape(-1)
    if tstar.shape != (B,):
        raise ValueError(f"blowup_time must have shape ({B},), got {np.shape(blowup_time)}")
    valid = np.ones((B, T), bool) if valid is None else np.asarray(valid, bool)
    if valid.shape != (B, T):
        raise ValueError(f"valid must have shape ({B}, {T}), got {valid.shape}")
    last = np.maximum(T - 1 - np.argmax(valid[:, ::-1], axis=1), 0)
    final = cov[np.arange(B), last]
    tr0 = np.trace(cov[:, 0], axis1=-2, axis2=-1)
    trT = np.trace(final, axis1=-2, axis2=-1)
    outcome = np.full(B, CONVERGES)
    outcome[trT > growth_factor * tr0] = GROWS
    blows = np.isfinite(tstar)
    if status is not None:
        status = np.asarray(status).reshape(-1)
        if status.shape != (B,):
            raise ValueError(f"status must have shape ({B},), got {status.shape}")
        blows &= status == "blowup"
        outcome[(status == "growth_limit") & ~blows] = GROWS
    outcome[blows] = BLOWS_UP
    lam = np.linalg.eigvalsh(final)
    rank = np.sum(lam > rank_tol * tr0[:, None], axis=-1)
    rank[outcome != CONVERGES] = -1
    return outcome, rank


@dataclass
class PhaseDiagram:
    r"""Outcome of softmax dynamics over a two-parameter family (see :func:`phase_diagram`).

    Attributes
    ----------
    a1, a2 : ndarray, shape (n1,), (n2,)
        Eigenvalues of the symmetric part of :math:`A` on the axes.
    outcome, rank : ndarray of int, shape (n2, n1)
        From :func:`classify_outcome` (rows follow ``a2``).
    blowup_time : ndarray, shape (n2, n1)
        Measured blow-up time (``inf`` if none).
    predicted_blowup_time : ndarray, shape (n2, n1) or None
        Closed form :math:`t^* = 1/(v\lambda_{\max}(\Sigma_0^{1/2}(A+A^\top)\Sigma_0^{1/2}))` when
        :math:`V = vI` (paper notes §6.3 R2), ``inf`` if no blow-up; ``None`` otherwise.
    predicted_rank : ndarray of int, shape (n2, n1) or None
        :math:`d - \operatorname{rank}(A+A^\top)` where the limit exists and :math:`V = vI`.
    """

    a1: np.ndarray
    a2: np.ndarray
    outcome: np.ndarray
    rank: np.ndarray
    blowup_time: np.ndarray
    predicted_blowup_time: np.ndarray | None
    predicted_rank: np.ndarray | None


def _rotation(theta):
    c, s = np.cos(theta), np.sin(theta)
    return np.array([[c, -s], [s, c]])


def phase_diagram(a1, a2, V, cov0, theta=0.0, skew=0.0, horizon=50.0, n_times=201,
                  growth_factor=10.0, rank_tol=1e-2, **solver_options):
    r"""Outcome of 2-D softmax dynamics over the family :math:`A = R_\theta\,\mathrm{diag}(a_1,
    a_2)\,R_\theta^\top + s J`.

    :math:`R_\theta` is the rotation by ``theta`` and :math:`J = \begin{pmatrix}0&-1\\1&0
    \end{pmatrix}` adds a skew part ``skew`` (which changes nothing when :math:`V = I`, since
    only :math:`A + A^\top` enters the closed form). All grid points are integrated as one batch
    with :func:`tpde_lib.gaussian.simulate_gaussian_batch` up to ``horizon`` and classified with
    :func:`classify_outcome`.

    Parameters
    ----------
    a1, a2 : array_like, shape (n1,), (n2,)
    V : array_like, shape (2, 2)
    cov0 : array_like, shape (2, 2)
        Initial covariance (positive definite).
    theta, skew : float
    horizon : float
        Integration time; limits are read at this time.
    n_times : int
        Number of output times.
    growth_factor, rank_tol : float
        See :func:`classify_outcome`.
    **solver_options
        Passed to ``simulate_gaussian_batch``.

    Returns
    -------
    PhaseDiagram
    """
    from .attention import Softmax
    from .gaussian import simulate_gaussian_batch

    a1 = as_float_array("a1", a1, ndim=1)
    a2 = as_float_array("a2", a2, ndim=1)
    V = as_float_array("V", V, shape=(2, 2))
    cov0 = as_float_array("cov0", cov0, shape=(2, 2))
    R = _rotation(theta)
    J = np.array([[0.0, -1.0], [1.0, 0.0]])
    g1, g2 = np.meshgrid(a1, a2)  # (n2, n1)
    D = np.zeros(g1.shape + (2, 2))
    D[..., 0, 0], D[..., 1, 1] = g1, g2
    A = R @ D @ R.T + skew * J
    flatA = A.reshape(-1, 2, 2)
    atts = [Softmax(a, V) for a in flatA]
    times = np.linspace(0.0, horizon, n_times)
    batch = simulate_gaussian_batch(atts, np.broadcast_to(cov0, flatA.shape).copy(), times,
                                    **solver_options)
    outcome, rank = classify_outcome(batch.cov, batch.blowup_time, batch.valid, status=batch.status,
                                     growth_factor=growth_factor, rank_tol=rank_tol)
    shape = g1.shape
    pred_t = pred_r = None
    if np.allclose(V, V[0, 0] * np.eye(2)) and V[0, 0] > 0:
        v = V[0, 0]
        lam, U = np.linalg.eigh(cov0)
        root = (U * np.sqrt(lam)) @ U.T
        top = np.linalg.eigvalsh(root @ (flatA + np.swapaxes(flatA, -1, -2)) @ root)[:, -1]
        top = np.where(top > 1e-12, top, 0.0)  # round-off of an exactly zero eigenvalue
        pred_t = np.where(top > 0, 1.0 / (v * np.where(top > 0, top, 1.0)), np.inf)
        pred_t = pred_t.reshape(shape)
        sym_eigs = np.linalg.eigvalsh(flatA + np.swapaxes(flatA, -1, -2))
        pred_r = np.where(sym_eigs[:, -1] > 1e-12, -1,
                          2 - np.sum(np.abs(sym_eigs) > 1e-12, axis=-1)).reshape(shape)
    return PhaseDiagram(a1, a2, outcome.reshape(shape), rank.reshape(shape),
                        np.asarray(batch.blowup_time, float).reshape(shape), pred_t, pred_r)


def r5_counterexample(d=2, seed=0, n_candidates=100, horizon=10.0):
    r"""A softmax instance with :math:`VA + A^\top V^\top \preceq 0` whose covariance blows up.

    **Derived** (paper notes §6.3 R5): the condition :math:`VA + A^\top V^\top \preceq 0` does not
    exclude blow-up when :math:`V` is not symmetric. Candidates are built to satisfy it exactly:
    draw :math:`V` (non-symmetric), a negative semi-definite :math:`N` and a skew :math:`W`, set
    :math:`A = V^{-1}(N/2 + W)`, so :math:`VA + A^\top V^\top = N \preceq 0`, then rescale
    :math:`A` and :math:`V` to unit spectral norm (positive factors keep the sign condition).
    Each is integrated from :math:`\Sigma_0 = I` (one batch,
    :func:`tpde_lib.gaussian.simulate_gaussian_batch`); the first one that blows up before
    ``horizon`` is returned.

    Parameters
    ----------
    d : int
    seed : int
        Seed of ``np.random.default_rng``.
    n_candidates : int
    horizon : float

    Returns
    -------
    dict
        ``A``, ``V`` (d×d), ``blowup_time`` (float), ``fraction`` (share of candidates that blew
        up before ``horizon``), ``n_candidates``.

    Raises
    ------
    RuntimeError
        If no candidate blows up.
    """
    from .attention import Softmax
    from .gaussian import simulate_gaussian_batch

    rng = np.random.default_rng(seed)
    V = rng.standard_normal((n_candidates, d, d))
    G = rng.standard_normal((n_candidates, d, d))
    N = -G @ np.swapaxes(G, -1, -2)
    S = rng.standard_normal((n_candidates, d, d))
    W = 0.5 * (S - np.swapaxes(S, -1, -2))
    A = np.linalg.solve(V, 0.5 * N + W)
    A /= np.linalg.norm(A, 2, axis=(1, 2))[:, None, None]
    V /= np.linalg.norm(V, 2, axis=(1, 2))[:, None, None]
    atts = [Softmax(a, v) for a, v in zip(A, V)]
    cov0 = np.broadcast_to(np.eye(d), (n_candidates, d, d)).copy()
    batch = simulate_gaussian_batch(atts, cov0, np.array([0.0, horizon]), rtol=1e-10,
                                    atol=1e-12)
    tstar = np.asarray(batch.blowup_time, float)
    hits = np.flatnonzero(np.isfinite(tstar) & (batch.status == "blowup"))
    if hits.size == 0:
        raise RuntimeError("no candidate blew up; increase n_candidates or horizon")
    i = hits[0]
    return {"A": A[i], "V": V[i], "blowup_time": float(tstar[i]),
            "fraction": hits.size / n_candidates, "n_candidates": n_candidates}


# --------------------------------------------------------------------------------------------
# The rank histograms (paper notes §7.6)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HistogramSetting:
    """One row × column of the authors' rank histograms (``histograms.py``, notes §7.6).

    Attributes
    ----------
    variant : {"softmax", "L2"}
    V_kind : {"identity", "random"}
    d : int
    Q, K : ndarray, shape (n, d // 2, d)
        ``K = -Q``.
    V : ndarray, shape (n, d, d)
    euler : EulerSettings
    n_max : int
        Largest number of initial conditions tried (the code's ``n_max``).
    tol_rank : float
        Eigenvalues above it count in the rank.
    """

    variant: str
    V_kind: str
    d: int
    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    euler: EulerSettings
    n_max: int
    tol_rank: float = 1e-1

    def parameters(self):
        """Batched :func:`paper_parameters` (leading axis: the ``n`` draws)."""
        return paper_parameters(self.Q, self.K, self.V, self.variant)


def histogram_setting(variant, V_kind, d, n_per_dim=100):
    r"""The authors' parameters for one histogram panel, with their legacy draws.

    Legacy global-generator draws on purpose (they reproduce the authors' matrices; the global
    state is restored afterwards): ``np.random.seed(40)`` then ``Q = randn(d//2, d)`` for
    ``d = 3`` (100 times), ``4`` (100), ``5`` (100), in that order; ``K = -Q``. For ``V_kind =
    "random"``: ``np.random.seed(26)`` (softmax) or ``27`` (ℓ²), then ``B = randn(d, d)`` in the
    same order over all 300 draws and ``V = B^T B``.

    ===========  ==========  =====================  ======  =========  ======
    variant      V           h for d = 3 / 4 / 5    tol     max_iter   n_max
    ===========  ==========  =====================  ======  =========  ======
    softmax      identity    0.09 / 0.05 / 0.02     1e-4    60000      1000
    softmax      random      0.09 / 0.06 / 0.02     5e-5    90000      10000
    L2           identity    0.09 / 0.06 / 0.02     1e-4    60000      1000
    L2           random      0.15 / 0.15 / 0.15     5e-5    50000      1000
    ===========  ==========  =====================  ======  =========  ======

    Parameters
    ----------
    variant : {"softmax", "L2"}
    V_kind : {"identity", "random"}
    d : {3, 4, 5}
    n_per_dim : int
        Number of draws kept (the first ``n_per_dim`` of the authors' 100).

    Returns
    -------
    HistogramSetting
    """
    if variant not in ("softmax", "L2"):
        raise ValueError(f"variant must be 'softmax' or 'L2', got {variant!r}")
    if V_kind not in ("identity", "random"):
        raise ValueError(f"V_kind must be 'identity' or 'random', got {V_kind!r}")
    dims = (3, 4, 5)
    if d not in dims:
        raise ValueError(f"d must be 3, 4 or 5, got {d!r}")
    if not 1 <= n_per_dim <= 100:
        raise ValueError(f"n_per_dim must be in 1..100, got {n_per_dim!r}")
    j = dims.index(d)
    state = np.random.get_state()  # noqa: NPY002 (authors' legacy stream)
    try:
        np.random.seed(40)  # noqa: NPY002 (authors' legacy stream)
        Qs = [np.random.randn(dd // 2, dd) for dd in np.repeat(dims, 100)]  # noqa: NPY002
        if V_kind == "random":
            np.random.seed(26 if variant == "softmax" else 27)  # noqa: NPY002
            Bs = [np.random.randn(dd, dd) for dd in np.repeat(dims, 100)]  # noqa: NPY002
    finally:
        np.random.set_state(state)  # noqa: NPY002 (authors' legacy stream)
    sel = slice(100 * j, 100 * j + n_per_dim)
    Q = np.stack(Qs[sel])
    if V_kind == "random":
        V = np.stack([B.T @ B for B in Bs[sel]])
    else:
        V = np.broadcast_to(np.eye(d), (n_per_dim, d, d)).copy()
    table = {("softmax", "identity"): ((0.09, 0.05, 0.02), 1e-4, 60000, 1000),
             ("softmax", "random"): ((0.09, 0.06, 0.02), 5e-5, 90000, 10000),
             ("L2", "identity"): ((0.09, 0.06, 0.02), 1e-4, 60000, 1000),
             ("L2", "random"): ((0.15, 0.15, 0.15), 5e-5, 50000, 1000)}
    steps, tol, max_iter, n_max = table[(variant, V_kind)]
    return HistogramSetting(variant, V_kind, d, Q, -Q, V,
                            EulerSettings(steps[j], tol, max_iter=max_iter), n_max)


def histogram_inits(d, n, seed=41):
    r"""The authors' initial covariances :math:`\Sigma_0 = G G^\top`, ``G = randn(d, d)``.

    ``create_histograms`` calls ``np.random.seed(41)`` at the start of each dimension and draws
    one ``G`` per attempt; the ``i``-th attempt uses the ``i``-th matrix. Legacy global-generator
    draws on purpose (reproduction of the authors' stream; the global state is restored).

    Returns
    -------
    ndarray, shape (n, d, d)
    """
    state = np.random.get_state()  # noqa: NPY002 (authors' legacy stream)
    try:
        np.random.seed(seed)  # noqa: NPY002 (authors' legacy stream)
        G = np.stack([np.random.randn(d, d) for _ in range(n)])  # noqa: NPY002
    finally:
        np.random.set_state(state)  # noqa: NPY002 (authors' legacy stream)
    return G @ np.swapaxes(G, -1, -2)


def run_paper_euler(rhs_for, cov0, settings, record_every=1, chunk=500, max_iter=None):
    r"""The authors' projected Euler scheme, run in chunks on a shrinking batch.

    Calls :func:`tpde_lib.gaussian.projected_euler` (the scheme as published, notes §7.2) for
    ``chunk`` iterations at a time, then restarts it from the last iterate of the members still
    running only. The scheme is memoryless (each iteration depends on the current iterate alone),
    so the result is identical to one uninterrupted run; the saving is that finished members stop
    costing anything (``projected_euler`` evaluates the whole batch at every iteration).

    Parameters
    ----------
    rhs_for : callable
        ``rhs_for(idx)`` returns the batched right-hand side for the members ``idx`` (int array);
        for parameters shared by the batch it may ignore ``idx``.
    cov0 : array_like, shape (B, d, d)
    settings : EulerSettings
    record_every : int
        Keep one iterate in ``record_every`` in the paths (a multiple of it must divide ``chunk``
        for a regular record; 1 keeps all, as the authors).
    chunk : int
        Iterations per call.
    max_iter : int, optional
        Overrides ``settings.max_iter`` (a budget; say so where used).

    Returns
    -------
    types.SimpleNamespace
        ``paths`` (list of (n_b, d, d) arrays), ``status`` ((B,) str: "converged", "diverged",
        "max_iter"), ``n_steps`` ((B,) int), ``last`` ((B, d, d), the iterate after the last
        step).
    """
    from types import SimpleNamespace

    from .gaussian import projected_euler

    S = as_float_array("cov0", cov0, ndim=3).copy()
    B = S.shape[0]
    total = settings.max_iter if max_iter is None else int(max_iter)
    if chunk % record_every:
        chunk = record_every * max(1, chunk // record_every)
    paths = [[] for _ in range(B)]
    status = np.full(B, "max_iter", dtype=object)
    n_steps = np.zeros(B, dtype=int)
    idx = np.arange(B)
    done = 0
    while idx.size and done < total:
        n = min(chunk, total - done)
        res = projected_euler(rhs_for(idx), S[idx], settings.h, tol_low=settings.tol_low,
                              tol_high=settings.tol_high, max_iter=n,
                              record_every=record_every)
        for j, b in enumerate(idx):
            paths[b].append(res.paths[j])
        S[idx] = res.last
        n_steps[idx] += res.n_steps
        stopped = res.status != "max_iter"
        status[idx[stopped]] = res.status[stopped]
        idx = idx[~stopped]
        done += n
    return SimpleNamespace(paths=[np.concatenate(p) for p in paths], status=status.astype(str),
                           n_steps=n_steps, last=S)


def paper_histogram_ranks(setting, runner=None, max_rounds=None, max_iter=None, n_attempts=None):
    r"""Run the authors' histogram protocol with their projected Euler scheme, vectorised.

    The official ``create_histograms`` goes through attempts ``k = 0, 1, ...`` with parameter
    index ``i`` (starting at 0) and initial condition ``k`` of :func:`histogram_inits`; ``i``
    advances only when the run converged, and a converged limit is counted only if its rank
    (eigenvalues of the last iterate above ``tol_rank``) is at most ``(d + 1) // 2``.
    We reproduce this sequence exactly, in *rounds*: assuming every remaining attempt converges,
    all pending pairs ``(i, k)`` are run as one batch; results up to the first failure are final,
    and the next round restarts after it. The number of rounds is one plus the number of failures.
    (The authors count the rank on the iterate before the last step, we on the one after it: the
    two differ by ``h * tol_low``, far below ``tol_rank``.)

    Parameters
    ----------
    setting : HistogramSetting
    runner : callable, optional
        ``runner(rhs_for, cov0, euler_settings, max_iter)`` returning an object with ``status``
        ((B,) str) and ``last`` ((B, d, d)); default :func:`run_paper_euler` (no paths kept).
    max_rounds : int, optional
        Stop after this many rounds (a budget: the result then covers fewer parameter draws).
    max_iter : int, optional
        Override the authors' ``max_iter`` (a budget; say so where used).
    n_attempts : int, optional
        Override the authors' ``n_max`` (number of initial conditions available).

    Returns
    -------
    dict
        ``ranks`` (counted ranks, list), ``exceptions`` (converged limits of too high rank),
        ``attempts`` (initial conditions used), ``failures`` (non-converged attempts),
        ``diverged`` (attempts stopped by the trace threshold), ``processed`` (parameter draws
        finished), ``rounds``, ``finals`` (last iterates of the counted runs, (m, d, d)),
        ``draws`` (parameter index of each counted run).
    """
    if runner is None:
        def runner(rhs_for, cov0, st, it):
            return run_paper_euler(rhs_for, cov0, st, record_every=10**9, chunk=400,
                                   max_iter=it)
    s = setting
    n = s.Q.shape[0]
    params = s.parameters()
    n_max = s.n_max if n_attempts is None else int(n_attempts)
    inits = histogram_inits(s.d, n_max)
    it = s.euler.max_iter if max_iter is None else int(max_iter)
    i = k = rounds = failures = exceptions = diverged = 0
    ranks, finals, draws = [], [], []
    while i < n and k < n_max and (max_rounds is None or rounds < max_rounds):
        m = min(n - i, n_max - k)
        sub = _take(params, slice(i, i + m))

        def rhs_for(idx, sub=sub):
            return paper_rhs(_take(sub, idx), s.variant)

        res = runner(rhs_for, inits[k:k + m], s.euler, it)
        status = np.asarray(res.status)
        bad = np.flatnonzero(status != "converged")
        ok = m if bad.size == 0 else bad[0]
        last = np.asarray(res.last)[:ok]
        r = np.sum(np.linalg.eigvalsh(last) > s.tol_rank, axis=-1)
        keep = r <= (s.d + 1) // 2
        ranks.extend(int(x) for x in r[keep])
        finals.extend(last[keep])
        draws.extend(int(x) for x in (i + np.flatnonzero(keep)))
        exceptions += int(np.sum(~keep))
        i += ok
        k += ok
        rounds += 1
        if ok < m:
            failures += 1
            diverged += int(status[ok] == "diverged")
            k += 1
    return {"ranks": ranks, "exceptions": exceptions, "attempts": k, "failures": failures,
            "diverged": diverged, "processed": i, "rounds": rounds,
            "finals": np.array(finals).reshape(-1, s.d, s.d), "draws": draws}


def histogram_euler_budget(setting, max_iter, n_draws=None):
    r"""The authors' Euler runs for a histogram panel, one initial condition per draw, on a budget.

    A cheaper variant of :func:`paper_histogram_ranks` for the book: draw ``i`` is run from the
    ``i``-th initial condition of :func:`histogram_inits` (the authors' pairing as long as no run
    fails), for at most ``max_iter`` iterations, and nothing is replaced. The rank is counted on the
    last iterate whatever the status, so the caller can report converged runs separately.

    Returns
    -------
    dict
        ``ranks`` ((n,) int, eigenvalues above ``tol_rank``), ``status`` ((n,) str),
        ``clipped`` ((n,) bool: an eigenvalue below 1e-10 at the end, the mark of the projection's
        ``1e-14`` floor, since the exact flow keeps :math:`\Sigma_t \succ 0`), ``last`` (n, d, d).
    """
    s = setting
    n = s.Q.shape[0] if n_draws is None else int(n_draws)
    params = _take(s.parameters(), slice(0, n))
    res = run_paper_euler(lambda idx: paper_rhs(_take(params, idx), s.variant),
                          histogram_inits(s.d, n), s.euler, record_every=10**9, chunk=400,
                          max_iter=max_iter)
    lam = np.linalg.eigvalsh(res.last)
    return {"ranks": np.sum(lam > s.tol_rank, axis=-1), "status": res.status,
            "clipped": lam[:, 0] < 1e-10, "last": res.last}


def histogram_accurate(setting, horizon=1e3, n_draws=None, rtol=1e-6, atol=1e-9):
    r"""Accurate covariances at time ``horizon`` for a histogram panel (first init of each draw).

    Integrates every draw from the ``i``-th initial condition of :func:`histogram_inits` with
    :func:`tpde_lib.gaussian.simulate_gaussian_batch` (adaptive Dormand–Prince, one batch).
    For softmax with :math:`V = I` use :func:`tpde_lib.gaussian.softmax_limit_cov` instead: it is
    the exact limit.

    Returns
    -------
    dict
        ``cov`` ((n, d, d), at ``horizon``), ``blowup_time`` ((n,)), ``ranks`` ((n,) int,
        eigenvalues above ``tol_rank``).
    """
    from .gaussian import simulate_gaussian_batch

    s = setting
    n = s.Q.shape[0] if n_draws is None else int(n_draws)
    p = _take(s.parameters(), slice(0, n))
    atts = [paper_attention(_take(p, i), s.variant) for i in range(n)]
    batch = simulate_gaussian_batch(atts, histogram_inits(s.d, n), np.array([0.0, horizon]),
                                    rtol=rtol, atol=atol)
    cov = batch.cov[:, -1]
    return {"cov": cov, "blowup_time": np.asarray(batch.blowup_time),
            "ranks": np.sum(np.linalg.eigvalsh(cov) > s.tol_rank, axis=-1)}


def _take(params, sl):
    """Slice (or index) every batched array of a parameter dict along its leading axis."""
    out = {}
    for key, val in params.items():
        if isinstance(val, list):
            out[key] = [v[sl] for v in val]
        elif isinstance(val, np.ndarray) and val.ndim >= 3:
            out[key] = val[sl]
        else:
            out[key] = val
    return out
