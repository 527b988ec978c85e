"""Figures and animations: particle clouds, covariance ellipses, the PSD cone, the book's style.

Modules: ``style`` (the book's figure style: column width, fonts, palette, panel grids),
``clouds`` (particle clouds, paths, their animations), ``ellipses`` (Gaussian covariance
ellipses, the one ellipse plotter), ``cone`` (2×2 covariance trajectories in the PSD cone and the
normalised-trace disk, rank histograms). Every function draws on axes or a figure it is given and
returns them; only ``style.subplots`` creates a figure (through ``matplotlib.pyplot``, imported
when it is called). ``tpde_lib`` imports this package on first use (``tp.viz``), so
``import tpde_lib`` loads no matplotlib.
"""

from .._exports import public_names as _public_names
from ._animation import animation_html
from .clouds import animate_clouds, cloud_panels, common_limits, initial_angle, plot_cloud, plot_paths
from .cone import (
    as_paths,
    draw_cone,
    path_colours,
    plot_cone_trajectories,
    plot_disk_trajectories,
    plot_rank_histograms,
)
from .ellipses import draw_ellipse, draw_ellipses, ellipse_points
from .style import COLUMN_INCHES, DPI, PALETTE, book_style, subplots, use_book_style

__all__ = _public_names(globals())  # the names imported above, in that order
