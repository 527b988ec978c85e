"""Figures and animations: particle clouds, covariance ellipses, the PSD cone, the book's style.

Modules: ``style`` (the book's figure style: column width, fonts, palette, panel grids),
``clouds`` (particle clouds, paths, their animations), ``ellipses`` (Gaussian covariance
ellipses, the one ellipse plotter), ``cone`` (2×2 covariance trajectories in the PSD cone and the
normalised-trace disk, rank histograms). Every function draws on axes or a figure it is given and
returns them; only ``style.subplots`` creates a figure (through ``matplotlib.pyplot``, imported
when it is called). ``tpde_lib`` imports this package on first use (``tp.viz``), so
``import tpde_lib`` loads no matplotlib.
"""

# the imports in reading order: the order of __all__ and of the API reference
# isort: off
from .._exports import public_names as _public_names
from .clouds import plot_cloud, plot_paths, initial_angle, common_limits, cloud_panels, animate_clouds
from ._animation import animation_html
from .cone import (
    as_paths,
    path_colours,
    draw_cone,
    plot_cone_trajectories,
    plot_disk_trajectories,
    plot_rank_histograms,
)
from .ellipses import ellipse_points, draw_ellipse, draw_ellipses
from .style import COLUMN_INCHES, DPI, PALETTE, book_style, use_book_style, subplots
# isort: on

__all__ = _public_names(globals())  # the names imported above, in that order
