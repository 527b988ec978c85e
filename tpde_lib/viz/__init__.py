"""Figures and animations: particle clouds, covariance ellipses, the PSD cone.

Submodules: ``clouds`` (particle clouds), ``ellipses`` (Gaussian covariance ellipses, the one
ellipse plotter), ``cone`` (2×2 covariance trajectories in the PSD cone and the normalised-trace
disk, rank histograms). Importing ``tpde_lib.viz`` loads none of them (nor matplotlib).
"""

__all__: list[str] = []
