"""The book's figure style: sizes that fit its text column, legible text, a colour-blind-safe palette.

A figure of the book is drawn at most :data:`COLUMN_INCHES` wide at :data:`DPI` dots per inch,
which is the width of the book's text column at a 1400 px wide window (784 px, measured in
Chromium with the book's theme), so that it is shown at its drawn size, never shrunk: its text
(at least 9 pt, :data:`RC`) is then at least 9 pt on the screen. Notebook figures are saved as
"retina" PNGs (twice the pixels, shown at the drawn size), sharp on high-density screens. Colours
follow Okabe and Ito's palette, which stays distinct under the common colour-vision
deficiencies (Okabe & Ito, *Color Universal Design*, 2008; Wong, *Nature Methods* 8, 441, 2011).

Use :func:`use_book_style` once at the top of a notebook, or :func:`book_style` as a context
manager around the code that draws; :func:`subplots` lays out ``n`` panels in rows that fit the
column.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .._checks import as_count, as_positive

__all__ = ["COLUMN_INCHES", "DPI", "PALETTE", "RC", "book_style", "use_book_style", "subplots"]

#: the widest a figure is drawn, in inches (740 px at :data:`DPI`: the column is 784 px wide)
COLUMN_INCHES = 7.4
#: dots per inch of the drawn (CSS) size; notebook PNGs carry twice as many pixels
DPI = 100
#: Okabe & Ito's eight colours, black last
PALETTE = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#D55E00",  # vermillion
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#F0E442",  # yellow
    "#000000",  # black
)
#: matplotlib settings of the style
RC = {
    "figure.dpi": DPI,
    "savefig.dpi": 2 * DPI,
    "figure.figsize": (COLUMN_INCHES, 3.2),
    "figure.constrained_layout.use": True,
    "font.size": 10,
    "axes.titlesize": 10.5,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "legend.title_fontsize": 9,
    "figure.titlesize": 11,
    "axes.prop_cycle": None,  # filled below (cycler of PALETTE)
    "axes.spines.top": False,
    "axes.spines.right": False,
    "image.cmap": "viridis",
    "lines.linewidth": 1.6,
    "animation.embed_limit": 60.0,
}


def _rc() -> dict:
    from cycler import cycler

    return dict(RC, **{"axes.prop_cycle": cycler(color=list(PALETTE))})


@contextlib.contextmanager
def book_style() -> Iterator[None]:
    """Context manager: matplotlib's settings set to the book's style, restored on exit.

    Examples
    --------
    >>> import matplotlib
    >>> import tpde_lib as tp
    >>> with tp.viz.book_style():
    ...     matplotlib.rcParams["xtick.labelsize"]
    9.0
    """
    import matplotlib

    with matplotlib.rc_context(_rc()):
        yield


def use_book_style() -> None:
    """Set matplotlib's settings to the book's style for the rest of the session.

    Meant for the first cell of a notebook (the book's chapters call it there); in an IPython
    kernel it also makes inline figures retina PNGs (twice the pixels, shown at the drawn size).
    Use :func:`book_style` to apply the style to one block of code only.

    Examples
    --------
    >>> import matplotlib
    >>> import tpde_lib as tp
    >>> saved = dict(matplotlib.rcParams)
    >>> tp.viz.use_book_style()
    >>> matplotlib.rcParams["figure.dpi"]
    100.0
    >>> matplotlib.rcParams.update(saved)
    """
    import matplotlib

    matplotlib.rcParams.update(_rc())
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: nothing more to set
        return
    shell = get_ipython()
    if shell is not None and "matplotlib_inline" in str(matplotlib.get_backend()):
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("retina")


def subplots(n: int, *, max_cols: int = 3, panel_height: float = 2.6, width: float = COLUMN_INCHES, **kwargs):
    """A figure of ``n`` panels in rows of at most ``max_cols``, as wide as the column.

    Parameters
    ----------
    n : int
        Number of panels (axes), at least 1.
    max_cols : int
        Most panels in one row (more are wrapped into further rows).
    panel_height : float
        Height of one row, in inches.
    width : float
        Width of the figure, in inches (at most :data:`COLUMN_INCHES`).
    **kwargs
        Passed to :meth:`matplotlib.figure.Figure.subplots` (e.g. ``sharex``, ``subplot_kw``).

    Returns
    -------
    fig : matplotlib.figure.Figure
        A figure created with :func:`matplotlib.pyplot.figure` (shown inline in a notebook).
    axes : list of matplotlib.axes.Axes
        The ``n`` panels, row by row (unused cells of the last row are removed).

    Examples
    --------
    >>> import tpde_lib as tp
    >>> fig, axes = tp.viz.subplots(5)
    >>> len(axes), fig.get_size_inches().round(2).tolist()
    (5, [7.4, 5.2])
    >>> import matplotlib.pyplot as plt; plt.close(fig)
    """
    import matplotlib.pyplot as plt

    n = as_count("n", n)
    max_cols = as_count("max_cols", max_cols)
    panel_height = as_positive("panel_height", panel_height)  # inches; '2' is a TypeError
    width = as_positive("width", width)
    if not width <= COLUMN_INCHES + 1e-9:
        raise ValueError(f"width must be in (0, {COLUMN_INCHES}] inches (the column), got {width!r}")
    cols = min(n, max_cols)
    rows = -(-n // cols)
    fig = plt.figure(figsize=(width, panel_height * rows))
    try:
        grid = fig.subplots(rows, cols, squeeze=False, **kwargs)
    except BaseException:
        plt.close(fig)  # a bad keyword leaves no figure open behind the error
        raise
    axes = list(grid.ravel())
    for ax in axes[n:]:
        ax.remove()
    return fig, axes[:n]
