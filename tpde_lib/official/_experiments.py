r"""The six 2-D experiments E1–E6 of the official ``2d_plots.py``, with the authors' draws.

Each :class:`PaperExperiment` holds the matrices drawn by the authors (their legacy
``np.random.seed`` stream, replayed in the code's order), the step sizes and tolerances of each
run, and the grid of initial covariances; its methods run the authors' projected Euler scheme
and, for comparison, an accurate integration of the same equations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_count
from ..attention import Attention
from ..gaussian import GaussianBatch, covariance_rhs, simulate_gaussian_batch
from ..psd_cone import init_grid, rank_one_direction
from ._runs import EulerRun, EulerSettings, run_paper_euler
from ._variants import paper_attention, paper_parameters

#: The official code's variant names in the book's words (figure titles).
LABELS = {"softmax": "softmax", "L2": "ℓ²", "multihead": "multi-head", "sinkhorn": "Sinkhorn"}


@dataclass(frozen=True)
class PaperExperiment:
    """A 2-D experiment of the official ``2d_plots.py``.

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
        ``(n_u, n_c, limits)`` of :func:`tpde_lib.psd_cone.init_grid`.
    outputs : dict
        variant -> the code's output file name (kept for reference; figures use
        :meth:`label`).
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

    def _run(self, variant):
        """The settings of one run; ValueError naming ``variant`` if the experiment has none."""
        if not isinstance(variant, str) or variant not in self.runs:
            raise ValueError(
                f"variant must be one of {tuple(self.runs)} (the runs of {self.name}), got {variant!r}"
            )
        return self.runs[variant]

    def parameters(self, variant: str) -> dict:
        """:func:`paper_parameters` for one of the runs (with its number of heads)."""
        return paper_parameters(self.Q, self.K, self.V, variant, H=self._run(variant).H)

    def attention(self, variant: str) -> Attention:
        """The attention of one run (:func:`paper_attention`, with its number of heads)."""
        return paper_attention(self.Q, self.K, self.V, variant, H=self._run(variant).H)

    def rhs(self, variant: str) -> Callable[[np.ndarray], np.ndarray]:
        """Batched covariance right-hand side of one run (:func:`paper_rhs`)."""
        return covariance_rhs(self.attention(variant))

    def label(self, variant: str) -> str:
        """The run's name in the book's words (e.g. ``"multi-head, H = 2"``)."""
        H = self._run(variant).H
        return LABELS[variant] + (f", H = {H}" if variant == "multihead" else "")

    def inits(self, n_u: int | None = None, n_c: int | None = None) -> np.ndarray:
        """The initial covariances; ``n_u``, ``n_c`` override the grid size (coarser grids)."""
        nu, nc, lim = self.grid
        return init_grid(nu if n_u is None else n_u, nc if n_c is None else n_c, lim)

    def euler(
        self,
        variant: str,
        n_u: int | None = None,
        n_c: int | None = None,
        max_iter: int | None = None,
        record_every: int = 1,
    ) -> EulerRun:
        """The authors' projected Euler runs of one variant on the grid (:func:`run_paper_euler`).

        ``n_u``, ``n_c`` (coarser grid) and ``max_iter`` (fewer steps) are budgets; the step
        size and tolerances are always the authors'.

        Returns
        -------
        EulerRun
        """
        rhs = self.rhs(variant)
        record_every = as_count("record_every", record_every, 1)
        return run_paper_euler(
            lambda idx: rhs,
            self.inits(n_u, n_c),
            self._run(variant),
            record_every=record_every,
            max_iter=max_iter,
            chunk=max(500, record_every),
        )

    def accurate(
        self,
        variant: str,
        times: ArrayLike,
        n_u: int | None = None,
        n_c: int | None = None,
        rtol: float = 1e-8,
        atol: float = 1e-10,
    ) -> GaussianBatch:
        """The same initial conditions integrated accurately (adaptive Dormand–Prince).

        :func:`tpde_lib.gaussian.simulate_gaussian_batch` with the attention of
        :meth:`attention` (same matrices and scalings as the Euler runs).

        Returns
        -------
        GaussianBatch
        """
        return simulate_gaussian_batch(
            self.attention(variant), self.inits(n_u, n_c), times, rtol=rtol, atol=atol
        )


def _draw_qk_until(condition, rs):
    """Legacy draws ``Q = randn(2,2)``, ``K = randn(2,2)`` until ``condition(eigvalsh(A + A^T))``.

    ``rs`` is the private legacy generator (``np.random.RandomState``). Like the official
    code: at most 1000 attempts, ``A = K^T Q`` (the sign test does not depend
    on the scaling), and the last draw is kept even if no attempt succeeded.
    """
    for _ in range(1000):
        Q = rs.randn(2, 2)  # noqa: NPY002 (authors' legacy stream)
        K = rs.randn(2, 2)  # noqa: NPY002 (authors' legacy stream)
        A = K.T @ Q
        lam = np.linalg.eigvalsh(A + A.T)
        if condition(lam):
            break
    return Q, K


def paper_experiment(name: str) -> PaperExperiment:
    r"""The parameters of one 2-D experiment of the official code, with the authors' draws.

    The draws use the **legacy** generator (``seed`` + ``randn``/``rand`` of a private
    ``np.random.RandomState``, the stream of the authors' ``np.random.seed``) in the code's
    order: this is the one place where the project does not use ``np.random.default_rng``,
    because only the legacy stream reproduces the authors' matrices. The global generator is
    neither used nor changed, so concurrent calls from several threads are safe.

    ========  =================================================================================
    name      draws
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
    return _paper_experiment(name, np.random.RandomState())  # noqa: NPY002 (authors' legacy stream)


def _paper_experiment(name, rs):
    # Legacy draws on purpose, from the private RandomState ``rs`` (the global generator is
    # neither used nor changed; same stream): they reproduce the authors' exact draws.
    small = (10, 10, (-0.5, 0.5, -0.5, 0.5))
    full = (-1.0, 1.0, -1.0, 1.0)
    if name == "E1":
        rs.seed(35)  # noqa: NPY002 (authors' legacy stream)
        Q = rs.rand(2, 2)  # noqa: NPY002 (authors' legacy stream)
        K = -Q
        B = rs.randn(2, 2)  # noqa: NPY002 (authors' legacy stream)
        V = B @ B.T
        runs = {
            "softmax": EulerSettings(0.3, 1e-5),
            "L2": EulerSettings(0.3, 1e-5),
            "multihead": EulerSettings(0.3, 1e-5, H=2),
            "sinkhorn": EulerSettings(0.5, 1e-5),
        }
        outputs = {
            "softmax": "trad_neg_def_V",
            "L2": "L2_neg_def_V",
            "multihead": "MH_neg_def_V",
            "sinkhorn": "sink_convergence",
        }
        return PaperExperiment(
            "E1",
            "Convergence to zero",
            35,
            Q,
            K,
            V,
            runs,
            small,
            outputs,
            "start",
            "cone",
            "A = -Q^T Q/sqrt(2) is negative definite and V is SPD: every trajectory goes to the apex.",
        )
    if name in ("E2", "E3"):
        rs.seed(36)  # noqa: NPY002 (authors' legacy stream)
        q = rs.randn(1, 2)  # noqa: NPY002 (authors' legacy stream)
        q = q / np.linalg.norm(q)
        rs.randn(2, 2)  # the code draws a V here and does not use it (it passes V = I)  # noqa: NPY002
        Q, K, V = q, -q, np.eye(2)
        extra = {"rank_one_direction": rank_one_direction(q[0])}
        if name == "E2":
            runs = {"softmax": EulerSettings(0.5, 1e-4), "L2": EulerSettings(0.5, 1e-4)}
            outputs = {"softmax": "trad_rank_1", "L2": "L2_rank_1"}
            return PaperExperiment(
                "E2",
                "Convergence to a line",
                36,
                Q,
                K,
                V,
                runs,
                small,
                outputs,
                "start",
                "cone",
                "A = -q^T q/sqrt(2) has rank one: the limit is the rank-one projector onto q-perp.",
                extra,
            )
        runs = {"multihead": EulerSettings(0.5, 1e-4, H=2)}
        return PaperExperiment(
            "E3",
            "Convergence to a plane",
            36,
            Q,
            K,
            V,
            runs,
            small,
            {"multihead": "MH_rank_1"},
            "start",
            "cone",
            "With H = 2 and one row in Q, head 2 gets empty slices "
            "(A_2 = 0): only head 1 acts, with C_1 = e_1 e_1^T.",
            extra,
        )
    if name == "E4":
        rs.seed(36)  # noqa: NPY002 (authors' legacy stream)
        Q, K = _draw_qk_until(lambda lam: lam[0] * lam[1] < 0, rs)
        rs.seed(32)  # noqa: NPY002 (authors' legacy stream)
        V = rs.randn(2, 2)  # noqa: NPY002 (authors' legacy stream)
        runs = {"softmax": EulerSettings(0.01, 1e-7), "L2": EulerSettings(0.01, 1e-7)}
        outputs = {"softmax": "trad_mixed_3d", "L2": "L2_mixed_3d"}
        return PaperExperiment(
            "E4",
            "Convergence to two lines",
            36,
            Q,
            K,
            V,
            runs,
            (20, 20, full),
            outputs,
            "final",
            "cone",
            "The released code overwrites the softmax list with the L2 run "
            "before plotting: both published files show L2.",
        )
    if name == "E5":
        rs.seed(33)  # noqa: NPY002 (authors' legacy stream)
        Q, K = _draw_qk_until(lambda lam: lam[0] > 0, rs)
        runs = {
            "softmax": EulerSettings(0.01, 1e-4, max_iter=100000),
            "multihead": EulerSettings(0.002, 1e-4, max_iter=100000, H=2),
            "L2": EulerSettings(0.001, 1e-5, tol_high=1e4),
            "sinkhorn": EulerSettings(0.01, 1e-5, tol_high=1e4),
        }
        outputs = {
            "softmax": "trad_explosion",
            "multihead": "MH_explosion",
            "L2": "L2_divergence",
            "sinkhorn": "sink_divergence",
        }
        return PaperExperiment(
            "E5",
            "Blow-up or divergence",
            33,
            Q,
            K,
            np.eye(2),
            runs,
            (40, 40, full),
            outputs,
            "start",
            "disk",
            "A + A^T is positive definite and V = I: softmax blows up from every initial condition.",
        )
    if name == "E6":
        rs.seed(36)  # noqa: NPY002 (authors' legacy stream)
        Q, K = _draw_qk_until(lambda lam: lam[0] * lam[1] < 0, rs)
        rs.seed(35)  # noqa: NPY002 (authors' legacy stream)
        rs.randn(8, 7)  # discarded by the code  # noqa: NPY002 (authors' legacy stream)
        V = rs.randn(2, 2)  # noqa: NPY002 (authors' legacy stream)
        runs = {
            "softmax": EulerSettings(0.003, 1e-4),
            "L2": EulerSettings(0.002, 1e-4),
            "multihead": EulerSettings(0.002, 1e-4, H=1),
        }
        outputs = {"softmax": "trad_both_V", "L2": "L2_both", "multihead": "MH_both"}
        return PaperExperiment(
            "E6",
            "Convergence and blow-up depending on initial data",
            36,
            Q,
            K,
            V,
            runs,
            (30, 30, full),
            outputs,
            "start",
            "disk",
            "H is not passed to the multi-head run, so H = 1 and MH_both is softmax with another step size.",
        )
    raise ValueError(f"name must be one of 'E1', ..., 'E6', got {name!r}")
