"""Interactive panels with a static twin.

Every exploration in the book is one call to :func:`explore`: a live ipywidgets panel for
Jupyter/Binder, where a kernel runs, and its *static twin* for the online book, where none does:
a playable animation (``matplotlib.animation.FuncAnimation.to_jshtml``) over the panel's main
parameter, the other parameters held at their default values.
"""

from __future__ import annotations

import io

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import HTML, Markdown, display
from matplotlib.animation import FuncAnimation
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["explore", "static_twin", "live_panel"]


def _check_controls(controls, twin, twin_values):
    if not isinstance(controls, dict) or not controls:
        raise ValueError("controls must be a non-empty dict mapping names to ipywidgets widgets")
    for name, widget in controls.items():
        if not hasattr(widget, "value"):
            raise TypeError(f"controls[{name!r}] must be an ipywidgets widget with a .value")
    if twin not in controls:
        raise ValueError(f"twin must name one of the controls {sorted(controls)}, got {twin!r}")
    values = list(twin_values)
    if not values:
        raise ValueError("twin_values must contain at least one value")
    return values


def _format(value):
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def static_twin(draw, defaults, twin, twin_values, figsize=(8, 4), interval=800, dpi=80):
    """A self-contained, playable animation of ``draw`` as ``twin`` runs through ``twin_values``.

    Parameters
    ----------
    draw : callable
        ``draw(fig, **params)`` draws onto a cleared :class:`matplotlib.figure.Figure`.
    defaults : dict
        Values of all parameters; ``defaults[twin]`` is replaced frame by frame.
    twin : str
        Name of the parameter the animation sweeps.
    twin_values : sequence
        Its values, one frame each.

    Returns
    -------
    IPython.display.HTML
        JavaScript + embedded PNG frames: plays in a static web page, without a kernel.
    """

    values = list(twin_values)
    fig = plt.figure(figsize=figsize, dpi=dpi)

    def frame(k):
        fig.clear()
        params = dict(defaults)
        params[twin] = values[k]
        draw(fig, **params)
        fig.text(0.01, 0.01, f"{twin} = {_format(values[k])}", fontsize=9, alpha=0.7)
        return []

    anim = FuncAnimation(fig, frame, frames=len(values), interval=interval, blit=False)
    html = anim.to_jshtml(default_mode="loop")
    plt.close(fig)
    return HTML(html)


def _png(fig):
    """PNG bytes of ``fig`` at its own size (no tight bounding box: one draw, fast zlib level)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", pil_kwargs={"compress_level": 1})
    return buf.getvalue()


def live_panel(draw, controls, figsize=(8, 4), dpi=100, continuous_update=False):
    """An ipywidgets panel that redraws ``draw(fig, **values)`` whenever a control changes.

    One :class:`matplotlib.figure.Figure` (Agg canvas, no pyplot) is made once and cleared before
    each redraw; its PNG goes into an :class:`ipywidgets.Image`, so a change costs one draw and one
    fast PNG encoding, and the page swaps one image instead of re-creating an output.

    Parameters
    ----------
    draw : callable
        ``draw(fig, **params)`` draws onto the cleared figure.
    controls : dict
        Name -> ipywidgets widget; a control without a ``description`` is labelled by its name.
    figsize : (float, float)
        Inches; the image is ``figsize * dpi`` pixels.
    dpi : int
    continuous_update : bool
        Applied to every control that has the setting (sliders, text boxes): False (default)
        redraws when a slider is released or stepped by a key, or a text is entered, not at every
        pixel of a drag or every digit, so redraws do not queue up.

    Returns
    -------
    ipywidgets.VBox
        Controls (CSS class ``tpde-controls``), the figure (``tpde-figure``) and an output area
        for warnings and errors of ``draw``; the box has the CSS class ``tpde-live-panel``.
    """

    for name, widget in controls.items():
        if hasattr(widget, "description") and not widget.description:
            widget.description = name
        if hasattr(widget, "continuous_update"):
            widget.continuous_update = bool(continuous_update)
    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    image = widgets.Image(format="png", width=int(round(figsize[0] * dpi)))
    image.add_class("tpde-figure")
    messages = widgets.Output()

    def update(change=None):
        params = {name: w.value for name, w in controls.items()}
        messages.clear_output()
        with messages:  # a warning or an exception of ``draw`` is shown here, below the figure
            fig.clear()
            draw(fig, **params)
            image.value = _png(fig)

    for widget in controls.values():
        widget.observe(update, names="value")
    update()
    bar = widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap"))
    bar.add_class("tpde-controls")
    panel = widgets.VBox([bar, image, messages])
    panel.add_class("tpde-live-panel")
    return panel


def explore(draw, controls, twin, twin_values, figsize=(8, 4), show=True):
    """Display a live panel (needs a kernel) and its static twin (plays anywhere).

    Parameters
    ----------
    draw : callable
        ``draw(fig, **params)``: draws a figure for the given values of the controls. It must not
        call ``plt.show``. It runs once per twin frame when the book is built.
    controls : dict
        Name -> ipywidgets widget (``FloatSlider``, ``IntSlider``, ``Dropdown``, ...). The widgets'
        current values are the defaults used by the twin.
    twin : str
        The main parameter: the static twin animates it.
    twin_values : sequence
        Its values in the twin (keep to about a dozen: each is a PNG in the page).
    figsize : (float, float)
    show : bool
        Display both (default); with False only return them.

    Returns
    -------
    (ipywidgets.VBox, IPython.display.HTML)
        The live panel and the static twin.
    """
    values = _check_controls(controls, twin, twin_values)
    defaults = {name: w.value for name, w in controls.items()}
    # the twin first: any error in ``draw`` surfaces here as a normal exception (an error inside
    # an ipywidgets callback would only be printed into the widget's output)
    twin_html = static_twin(draw, defaults, twin, values, figsize=figsize)
    controls[twin].add_class("tpde-main-control")  # the control the static twin sweeps
    panel = live_panel(draw, controls, figsize=figsize)
    if show:

        display(Markdown("**Live panel** (needs a running kernel: Binder or local Jupyter):"))
        display(panel)
        display(Markdown(f"**Static twin** (plays in the online book): `{twin}` runs through "
                         f"{', '.join(_format(v) for v in values)}."))
        display(twin_html)
    return panel, twin_html
