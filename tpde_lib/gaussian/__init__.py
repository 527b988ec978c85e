r"""Gaussian solutions of the Transformer PDE: closures, ODE solvers, blow-up, closed forms.

For the variants whose field is affine on Gaussians the solution started from a Gaussian stays
Gaussian, and its mean and covariance solve an ODE (the variant's *Gaussian closure*).

Modules: ``_closure`` (every closure's right-hand side, :func:`softmax_rhs` ... :func:`linear_rhs`,
and a batch of attentions as one vectorised right-hand side), ``_solve``
(:func:`simulate_gaussian`, :func:`simulate_gaussian_batch`, blow-up detection),
``_closed_forms`` (softmax with :math:`V = vI`), ``_defect`` (:func:`affine_defect`: does a
variant preserve Gaussians?).
"""

from ._closed_forms import (
    scalar_closed_form,
    softmax_blowup_time,
    softmax_identity_V_closed_form,
    softmax_limit_cov,
)
from ._closure import (
    covariance_rhs,
    l2_rhs,
    linear_rhs,
    multihead_rhs,
    sinkhorn_gain,
    sinkhorn_rhs,
    softmax_rhs,
)
from ._defect import affine_defect, gauss_hermite
from ._solve import GaussianBatch, GaussianTrajectory, simulate_gaussian, simulate_gaussian_batch

__all__ = [
    "softmax_rhs", "multihead_rhs", "l2_rhs", "sinkhorn_rhs", "linear_rhs", "sinkhorn_gain",
    "covariance_rhs",
    "GaussianTrajectory", "GaussianBatch", "simulate_gaussian", "simulate_gaussian_batch",
    "affine_defect", "gauss_hermite",
    "softmax_identity_V_closed_form", "softmax_blowup_time", "softmax_limit_cov",
    "scalar_closed_form",
]
