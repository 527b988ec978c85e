"""tpde_lib: numerics for the Transformer PDE.

Companion library of the book on *A Unified Perspective on the Dynamics of Deep Transformers*
(V. Castin, P. Ablin, J. A. Carrillo, G. Peyré, arXiv:2501.18322). Tokens are a probability
measure mu_t transported by the self-attention velocity field Gamma_mu:

    d/dt mu + div(mu Gamma_mu) = 0.

Conventions (the book's introduction has the table): tokens are rows of an (n, d) array;
the score between a query x and a key y is <A x, y> = y^T A x, with A = K^T Q / sqrt(k) when
built from Q, K in R^{k x d}; V in R^{d x d} merges value and output matrices.

Modules: ``measures`` (Empirical, Gaussian), ``attention`` (the protocol :class:`Attention`,
the blocked engine :func:`kernel_sums` and the variants), ``particles`` (token simulations),
``gaussian_odes`` and ``gaussian`` (mean/covariance ODEs, blow-up, closed forms, the affine
defect), ``integrate`` (a batched adaptive ODE integrator), ``official`` (the authors' released
schemes, reproduced), ``transport`` (Wasserstein distances), ``stability`` (explicit
constants), ``masked`` (causal attention, the attention sink), ``clustering`` (the paper's
experiments), ``energy`` (gradient-flow structure), ``claims`` (the book's ledger), ``viz`` and
``widgets`` (figures, panels and their static twins).
"""

from . import meanfield, official
from .attention import (
    L2,
    Attention,
    GaussianClosure,
    Linear,
    MultiHead,
    Sigmoid,
    Sinkhorn,
    Softmax,
    Unnormalised,
    get_num_threads,
    kernel_sums,
    set_num_threads,
    sinkhorn_potentials,
)
from .gaussian import (
    GaussianBatch,
    GaussianTrajectory,
    affine_defect,
    simulate_gaussian,
    simulate_gaussian_batch,
)
from .integrate import solve_batch
from .measures import Empirical, Gaussian
from .official import projected_euler
from .particles import Trajectory, simulate
from .transport import bures_wasserstein, conditional_wasserstein, wasserstein

__all__ = [
    "Empirical", "Gaussian",
    "Attention", "GaussianClosure", "kernel_sums", "set_num_threads", "get_num_threads",
    "Softmax", "MultiHead", "L2", "Sinkhorn", "Sigmoid", "Linear", "Unnormalised",
    "sinkhorn_potentials",
    "simulate", "Trajectory",
    "simulate_gaussian", "simulate_gaussian_batch", "GaussianTrajectory", "GaussianBatch",
    "affine_defect", "solve_batch",
    "projected_euler", "official", "meanfield",
    "wasserstein", "bures_wasserstein", "conditional_wasserstein",
]
__version__ = "1.0.0"
