"""tpde_lib: numerics for the Transformer PDE.

Companion library of the book on *A Unified Perspective on the Dynamics of Deep Transformers*
(V. Castin, P. Ablin, J. A. Carrillo, G. Peyré, arXiv:2501.18322). Tokens are a probability
measure mu_t transported by the self-attention velocity field Gamma_mu:

    d/dt mu + div(mu Gamma_mu) = 0.

Conventions (the book's introduction has the table): tokens are rows of an (n, d) array;
the score between a query x and a key y is <A x, y> = y^T A x, with A = K^T Q / sqrt(k) when
built from Q, K in R^{k x d}; V in R^{d x d} merges value and output matrices.

The root holds the public API (``__all__``); the subpackages hold the rest, one concept each:
``measures`` (Empirical, Gaussian), ``attention`` (the protocol :class:`Attention`, the blocked
engine :func:`kernel_sums` and the variants), ``particles`` (token simulations), ``ensembles``
(many clouds in one call), ``layer`` (a Transformer layer: attention + feed-forward +
normalisation on the sphere), ``gaussian`` (the Gaussian closures' right-hand sides, their
solvers, blow-up, closed forms, the affine defect), ``integrate`` (a batched adaptive ODE
integrator), ``transport`` (Wasserstein distances, Bures–Wasserstein maps and geodesics),
``meanfield`` (samplers, exact affine flows, rate fits, step orders), ``stability`` (explicit
constants), ``masked`` (causal attention, the attention sink), ``clustering`` (ranks, Lyapunov
functions, blow-up surveys), ``sphere`` (tokens on the sphere: energy, clusters, plateaus),
``psd_cone`` (the 2×2 cone picture), ``energy`` (gradient-flow structure), ``official`` (the
authors' released schemes, reproduced), ``viz`` and ``widgets`` (figures, panels and their
static twins). The subpackages that need heavy dependencies (scipy.stats, POT, matplotlib) are
imported on first access, ``tp.energy`` or ``tp.viz``, so that ``import tpde_lib`` stays light.
"""

import importlib

# the imports in reading order: the order of __all__ and of the API reference
# isort: off
from ._exports import public_names as _public_names
from .measures import Empirical, Gaussian
from .attention import (
    Attention,
    GaussianClosure,
    kernel_sums,
    set_num_threads,
    get_num_threads,
    Softmax,
    MultiHead,
    L2,
    Sinkhorn,
    Sigmoid,
    Linear,
    Unnormalised,
    sinkhorn_potentials,
)
from .particles import simulate, Trajectory
from .ensembles import simulate_batch, Ensemble
from .gaussian import (
    simulate_gaussian,
    simulate_gaussian_batch,
    GaussianTrajectory,
    GaussianBatch,
    affine_defect,
)
from .layer import Layer, AffineFeedForward, to_sphere, tangent_projection
from .integrate import solve_batch
from .official import projected_euler
from . import official
from .transport import wasserstein, bures_wasserstein, conditional_wasserstein, coupled_wasserstein
# isort: on

__version__ = "1.2.0"

#: the root API: every name imported above (in that order), and three subpackages reached as
#: ``tp.official``, ``tp.meanfield``, ``tp.sphere`` (the other subpackages: ``tp.<name>``)
__all__ = [*_public_names(globals()), "official", "meanfield", "sphere"]

#: subpackages imported on first access (PEP 562), ``tp.meanfield`` etc.
_LAZY = (
    "clustering",
    "energy",
    "masked",
    "meanfield",
    "psd_cone",
    "sphere",
    "stability",
    "trained",
    "viz",
    "widgets",
)


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
