"""tpde_lib: numerics for the Transformer PDE.

Companion library of the book on *A Unified Perspective on the Dynamics of Deep Transformers*
(V. Castin, P. Ablin, J. A. Carrillo, G. Peyré, arXiv:2501.18322). Tokens are a probability
measure mu_t transported by the self-attention velocity field Gamma_mu:

    d/dt mu + div(mu Gamma_mu) = 0.

Conventions (paper notes §1.2): tokens are rows of an (n, d) array; the score between a query x
and a key y is <A x, y> = y^T A x, with A = K^T Q / sqrt(k) when built from Q, K in R^{k x d};
V in R^{d x d} merges value and output matrices.
"""

from .measures import Empirical, Gaussian

__all__ = ["Empirical", "Gaussian"]
__version__ = "0.1.0"
