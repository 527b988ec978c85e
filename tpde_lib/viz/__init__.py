"""Figures and animations: particle clouds, covariance ellipses, the PSD cone.

Submodules: ``clouds`` (particle clouds), ``ellipses`` (Gaussian covariance ellipses),
``cone`` (2×2 covariance trajectories in the PSD cone and the normalised-trace disk).
"""
