r"""Energies and the gradient-flow structure of the Transformer PDE (chapter "Gradient flows").

Which attention dynamics are gradient flows, of which energy, for which metric (the paper's
gradient-flow part, arXiv:2501.18322; each statement below is derived and checked in the chapter
"Gradient flows", which says which are the paper's claims and which are ours):

- **Sinkhorn attention** with :math:`V = A = A^\top` is the :math:`W_2` gradient flow of the
  entropic self-transport energy :math:`F(\mu) = \frac12\mathrm{OT}_\varepsilon(\mu,\mu)`
  (:func:`sinkhorn_energy`); on Gaussians it is the Bures–Wasserstein gradient flow of the
  closed form :func:`sinkhorn_energy_gaussian` (Sander et al. 2022 for the first statement).
- **Unnormalised attention** with :math:`A = A^\top` is
  :math:`\Gamma = -P\nabla\frac{\delta E}{\delta\mu}` with the constant *mobility*
  :math:`P = -VA^{-1}` (:func:`mobility`) and the interaction energy
  :math:`E(\mu) = \frac12\iint e^{\langle Ax,y\rangle}\mathrm d\mu\,\mathrm d\mu`
  (:func:`interaction_energy`): for :math:`P` symmetric positive definite, the gradient flow of
  :math:`E` for the twisted distance :func:`tpde_lib.transport.twisted_wasserstein`.
- **Softmax attention** is the unnormalised field divided by :math:`Z_\mu(x)`
  (:func:`partition_function`): the gradient flow of :math:`E` for the metric of kinetic energy
  :math:`\int Z_\mu\langle v, P^{-1}v\rangle\,\mathrm d\mu` (:func:`dissipation`,
  :func:`gaussian_metric`); it is not a :math:`W_2` gradient flow for general :math:`\mu`.

Modules: ``_particles`` (the energies of empirical measures, the mobility, the dissipation),
``_gaussian`` (their closed forms on Gaussians, the Bures–Wasserstein gradient flow, the metrics
on affine fields), ``_witnesses`` (finite-difference witnesses: Jacobian symmetry, gradients,
second differences along geodesics, a search for non-convexity). The distances and geodesics
these use live in :mod:`tpde_lib.transport`.

Conventions: score :math:`\langle Ax,y\rangle = y^\top Ax`, :math:`\Sigma` a covariance,
:math:`\alpha` a mean, :math:`\varepsilon > 0` the entropic temperature.
"""

# the imports in reading order: the order of __all__ and of the API reference
# isort: off
from .._exports import public_names as _public_names
from ._particles import sinkhorn_energy, partition_function, interaction_energy, mobility, dissipation
from ._gaussian import (
    sinkhorn_energy_gaussian,
    sinkhorn_energy_gradient_gaussian,
    bures_wasserstein_gradient_flow_rhs,
    interaction_energy_gaussian,
    gaussian_metric,
)
from ._witnesses import (
    velocity_jacobian,
    symmetry_defect,
    configuration_gradient,
    frobenius_gradient,
    energy_along_geodesic,
    second_differences,
    search_geodesic_convexity,
    ConvexitySearch,
)
# isort: on

__all__ = _public_names(globals())  # the names imported above, in that order
