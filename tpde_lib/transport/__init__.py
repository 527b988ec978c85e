"""Optimal-transport distances between token measures.

Modules: ``_wasserstein`` (W_p of empirical measures, exact or sliced; the Bures–Wasserstein
distance of Gaussians; the conditional W_p of masked attention), ``_coupled`` (the coupled W_p of the masked
mean-field limit, positions matched by their quantiles), ``_gaussian`` (Bures–Wasserstein
maps and geodesics, and the twisted distances of a constant mobility).
"""

# the imports in reading order: the order of __all__ and of the API reference
# isort: off
from .._exports import public_names as _public_names
from ._wasserstein import wasserstein, bures_wasserstein, conditional_wasserstein, MARGINAL_TOL
from ._coupled import coupled_wasserstein, position_quantile_pieces
from ._wasserstein import fibre_distances, sup_fibre_distance
from ._gaussian import (
    bures_wasserstein_map,
    bures_wasserstein_geodesic,
    twisted_wasserstein,
    twisted_bures_wasserstein,
    twisted_bures_wasserstein_geodesic,
)
# isort: on

__all__ = _public_names(globals())  # the names imported above, in that order
