r"""Gaussian solutions of the Transformer PDE: ODE solvers, blow-up detection and closed forms.

For the variants whose field is affine on Gaussians the solution started from a Gaussian stays
Gaussian and its mean and covariance solve the ODEs of :mod:`tpde_lib.gaussian_odes`.

Modules: ``_closure`` (a batch of attentions as one vectorised right-hand side, through their
methods), ``_solve`` (:func:`simulate_gaussian`, :func:`simulate_gaussian_batch`, blow-up
detection), ``_closed_forms`` (softmax with :math:`V = vI`), ``_defect`` (:func:`affine_defect`:
does a variant preserve Gaussians?).
"""

from ._closed_forms import (
    scalar_closed_form,
    softmax_blowup_time,
    softmax_identity_V_closed_form,
    softmax_limit_cov,
)
from ._closure import covariance_rhs
from ._defect import affine_defect, gauss_hermite
from ._solve import GaussianBatch, GaussianTrajectory, simulate_gaussian, simulate_gaussian_batch

__all__ = [
    "GaussianTrajectory", "GaussianBatch", "simulate_gaussian", "simulate_gaussian_batch",
    "covariance_rhs", "affine_defect", "gauss_hermite",
    "softmax_identity_V_closed_form", "softmax_blowup_time", "softmax_limit_cov",
    "scalar_closed_form",
]


def __getattr__(name):
    # moved to tpde_lib.official (the authors' scheme); kept importable from here for one release.
    # Imported on first use: at module level it would be a cycle (tpde_lib.official's
    # experiments import tpde_lib.gaussian).
    if name in ("projected_euler", "ProjectedEulerResult"):
        from .. import official
        return getattr(official, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
