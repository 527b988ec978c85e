"""tpde_lib: numerics for the Transformer PDE.

Companion library of the book on *A Unified Perspective on the Dynamics of Deep Transformers*
(V. Castin, P. Ablin, J. A. Carrillo, G. Peyré, arXiv:2501.18322). Tokens are a probability
measure mu_t transported by the self-attention velocity field Gamma_mu:

    d/dt mu + div(mu Gamma_mu) = 0.

Conventions (paper notes §1.2): tokens are rows of an (n, d) array; the score between a query x
and a key y is <A x, y> = y^T A x, with A = K^T Q / sqrt(k) when built from Q, K in R^{k x d};
V in R^{d x d} merges value and output matrices.

Modules: ``measures`` (Empirical, Gaussian), ``attention`` (the variants and their velocity
fields), ``particles`` (token simulations), ``gaussian_odes`` and ``gaussian`` (mean/covariance
ODEs, blow-up, closed forms), ``transport`` (Wasserstein distances), ``stability`` (explicit
constants), ``masked`` (causal attention, the attention sink), ``clustering`` (the paper's
experiments), ``energy`` (gradient-flow structure), ``claims`` (the book's ledger), ``viz`` and
``widgets`` (figures, panels and their static twins).
"""

from .attention import L2, Linear, MultiHead, Sigmoid, Sinkhorn, Softmax, Unnormalised
from .gaussian import (
    GaussianBatch,
    GaussianTrajectory,
    projected_euler,
    simulate_gaussian,
    simulate_gaussian_batch,
)
from .measures import Empirical, Gaussian
from .particles import Trajectory, simulate
from .transport import bures_wasserstein, conditional_wasserstein, wasserstein

__all__ = [
    "Empirical", "Gaussian",
    "Softmax", "MultiHead", "L2", "Sinkhorn", "Sigmoid", "Linear", "Unnormalised",
    "simulate", "Trajectory",
    "simulate_gaussian", "simulate_gaussian_batch", "GaussianTrajectory", "GaussianBatch",
    "projected_euler",
    "wasserstein", "bures_wasserstein", "conditional_wasserstein",
]
__version__ = "0.1.0"
