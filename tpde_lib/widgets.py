"""Interactive panels with a static twin.

Every exploration in the book is one call to :func:`explore`: a live ipywidgets panel for
Jupyter/Binder, where a kernel runs, and its *static twin* for the online book, where none does:
a playable animation (``matplotlib.animation.FuncAnimation.to_jshtml``) over the panel's main
parameter, the other parameters held at their default values. Both go into one output (see
:func:`panel_bundle`): a notebook with a kernel shows the live panel, a static page the twin.
"""

from __future__ import annotations

import html
import io
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets
from IPython.display import HTML, display
from matplotlib.animation import FuncAnimation
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ._checks import as_positive
from .viz import animation_html

__all__ = ["explore", "static_twin", "live_panel", "panel_bundle"]


def _name(draw) -> str:
    return getattr(draw, "__qualname__", None) or repr(draw)


def _check_figure(figsize, dpi) -> tuple[tuple[float, float], float]:
    """``figsize`` (two positive inches) and ``dpi`` checked, naming them."""
    try:
        w, h = figsize
    except (TypeError, ValueError):
        raise TypeError(f"figsize must be (width, height) in inches, got {figsize!r}") from None
    return (as_positive("figsize[0]", w), as_positive("figsize[1]", h)), as_positive("dpi", dpi)


def _check_draw(draw) -> None:
    if not callable(draw):
        raise TypeError(f"draw must be a callable draw(fig, **params), got {type(draw).__name__}")


def _draw_on(draw, fig: Figure, params: Mapping[str, Any]) -> Any:
    """``fig.clear()`` then ``draw(fig, **params)``, checked where its result comes back.

    An exception of ``draw`` propagates with a note naming ``draw`` and the values it was given;
    a draw that leaves the figure empty, or that opens pyplot figures of its own (they would stay
    open: the panel shows only ``fig``), raises ValueError; those figures are closed first.
    """
    pyplot = sys.modules.get("matplotlib.pyplot")  # only if the reader's code imported it
    before = set(pyplot.get_fignums()) if pyplot is not None else set()
    fig.clear()
    try:
        handles = draw(fig, **params)
    except Exception as err:
        err.add_note(f"raised by the panel's draw function {_name(draw)!r} called with {params}")
        raise
    finally:
        pyplot = sys.modules.get("matplotlib.pyplot")
        opened = set(pyplot.get_fignums()) - before if pyplot is not None else set()
        for num in opened:
            pyplot.close(num)
    if opened:
        raise ValueError(
            f"draw {_name(draw)!r} must draw on the figure it is given, not open "
            f"pyplot figures of its own (it opened {len(opened)}, now closed)"
        )
    if not (fig.axes or fig.artists or fig.lines or fig.patches or fig.texts or fig.images):
        raise ValueError(
            f"draw {_name(draw)!r} drew nothing on the figure it was given for "
            f"{params}: expected axes or artists on fig"
        )
    return handles


class _Redrawer:
    """Draws ``fig`` for given parameter values: in full with ``draw`` (after clearing it), or,
    when an ``update`` is given and the figure already holds a drawing, in place with
    ``update(handles, **params)``, ``handles`` being what ``draw`` returned. ``update`` returning
    False asks for a full draw. After an error the next call draws in full. ``label(params)``,
    if given, is a line of text kept at the bottom left of the figure."""

    def __init__(self, draw, update, fig: Figure, label=None):
        if update is not None and not callable(update):
            raise TypeError(
                f"update must be None or a callable update(handles, **params), got {type(update).__name__}"
            )
        self.draw, self.update, self.fig, self.label = draw, update, fig, label
        self.handles, self.text, self.drawn = None, None, False
        # the layout engine of the figure (e.g. the book style's constrained layout): it lays out
        # each full draw; an in-place update keeps that layout (no engine: a layout pass costs
        # about as much as the rest of a redraw)
        self.engine = fig.get_layout_engine()

    def __call__(self, params: Mapping[str, Any]) -> None:
        try:
            done = False
            if self.drawn and self.update is not None:
                try:
                    result = self.update(self.handles, **params)
                except Exception as err:
                    err.add_note(
                        f"raised by the panel's update function {_name(self.update)!r} called with {params}"
                    )
                    raise
                if result is not None and not isinstance(result, bool):
                    raise TypeError(
                        f"update {_name(self.update)!r} must return None, True or "
                        f"False (False: draw in full), got {type(result).__name__}"
                    )
                done = result is not False
            if not done:
                self.drawn = False
                if self.engine is not None:
                    self.fig.set_layout_engine(self.engine)
                self.handles = _draw_on(self.draw, self.fig, params)
                self.text = None
            elif self.engine is not None:
                self.fig.set_layout_engine("none")
            self.drawn = True
            if self.label is not None:
                if self.text is None:
                    self.text = self.fig.text(0.01, 0.01, "", fontsize=9, alpha=0.7)
                self.text.set_text(self.label(params))
        except Exception:
            self.drawn, self.handles, self.text = False, None, None
            self.fig.clear()  # no half-drawn figure is kept
            raise


def _check_controls(controls, twin=None, twin_values=()):
    if not isinstance(controls, Mapping) or not controls:
        raise ValueError("controls must be a non-empty dict mapping names to ipywidgets widgets")
    for name, widget in controls.items():
        if not isinstance(widget, widgets.ValueWidget):
            raise TypeError(
                f"controls[{name!r}] must be an ipywidgets widget with a .value, got {type(widget).__name__}"
            )
    if twin is None:
        return []
    if twin not in controls:
        raise ValueError(f"twin must name one of the controls {sorted(controls)}, got {twin!r}")
    if isinstance(twin_values, (str, bytes)) or not isinstance(twin_values, Iterable):
        raise TypeError(
            f"twin_values must be a sequence of values of {twin!r} (e.g. [0.5, 1.0, 2.0]), "
            f"got {type(twin_values).__name__} {twin_values!r:.40}"
        )
    values = list(twin_values)
    if not values:
        raise ValueError("twin_values must contain at least one value")
    return values


def _format(value):
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def static_twin(
    draw: Callable[..., Any],
    defaults: Mapping[str, Any],
    twin: str,
    twin_values: Sequence[Any],
    figsize: tuple[float, float] = (7.4, 3.6),
    interval: int = 800,
    dpi: float = 100,
    update: Callable[..., Any] | None = None,
) -> HTML:
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
    figsize : (float, float)
        Inches (at most ``tp.viz.COLUMN_INCHES`` wide: the book's text column).
    interval : int
        Milliseconds between frames.
    dpi : float
        Dots per inch of the drawn size; the frames carry twice as many pixels (sharp on
        high-density screens) and are shown at the drawn size.
    update : callable, optional
        ``update(handles, **params)`` moves the artists of a figure that ``draw`` drew (and
        returned as ``handles``) to new values; see :func:`explore`.

    Returns
    -------
    IPython.display.HTML
        JavaScript + embedded PNG frames: plays in a static web page, without a kernel.

    Raises
    ------
    Exception
        Whatever ``draw`` raises, with a note naming it; ValueError if it draws nothing. The
        figure (an Agg figure outside pyplot) is dropped on every path: nothing stays open.
    """
    _check_draw(draw)
    figsize, dpi = _check_figure(figsize, dpi)
    interval = as_positive("interval", interval)
    values = list(twin_values)
    if not values:
        raise ValueError("twin_values must contain at least one value")
    if twin not in defaults:
        raise ValueError(f"twin must name one of the parameters {sorted(defaults)}, got {twin!r}")
    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    redraw = _Redrawer(draw, update, fig, label=lambda p: f"{twin} = {_format(p[twin])}")

    def frame(k):
        redraw({**defaults, twin: values[k]})
        return []

    anim = FuncAnimation(fig, frame, frames=len(values), interval=interval, blit=False)
    try:
        html = animation_html(anim, default_mode="loop")
    finally:
        fig.clear()
    return HTML(html)


def _png(fig: Figure) -> bytes:
    """PNG bytes of ``fig`` at its own size and dpi, from one draw, at a fast zlib level.

    The canvas prints directly: the figure's layout engine (the book style's constrained layout)
    runs inside that one draw. ``savefig`` would draw the figure twice whenever a layout engine
    is set, even a disabled one: a first pass to lay it out, then the drawing.
    """
    buf = io.BytesIO()
    fig.canvas.print_png(buf, pil_kwargs={"compress_level": 1})
    return buf.getvalue()


def live_panel(
    draw: Callable[..., Any],
    controls: Mapping[str, widgets.ValueWidget],
    figsize: tuple[float, float] = (7.4, 3.6),
    dpi: float = 100,
    continuous_update: bool = False,
    update: Callable[..., Any] | None = None,
) -> widgets.VBox:
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
    dpi : float
    continuous_update : bool
        Applied to every control that has the setting (sliders, text boxes): False (default)
        redraws when a slider is released or stepped by a key, or a text is entered, not at every
        pixel of a drag or every digit, so redraws do not queue up.
    update : callable, optional
        ``update(handles, **params)``: changes the figure in place (see :func:`explore`).

    Returns
    -------
    ipywidgets.VBox
        Controls (CSS class ``tpde-controls``), the figure (``tpde-figure``) and an output area
        for warnings and errors of ``draw``; the box has the CSS class ``tpde-live-panel``.

    Raises
    ------
    Exception
        The first draw's error, with a note naming ``draw`` (later errors are shown in the
        output area below the figure, and the figure is cleared).
    """
    _check_draw(draw)
    _check_controls(controls)
    figsize, dpi = _check_figure(figsize, dpi)

    for name, widget in controls.items():
        if hasattr(widget, "description") and not widget.description:
            widget.description = name
        if hasattr(widget, "continuous_update"):
            widget.continuous_update = bool(continuous_update)
    # figsize * dpi pixels: twice as many (as the static twins carry) cost every redraw about
    # 25 ms more, a sixth to a quarter of it, for encoding the PNG and rendering the glyphs
    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    image = widgets.Image(format="png", width=int(round(figsize[0] * dpi)))
    image.add_class("tpde-figure")
    messages = widgets.Output()

    redraw = _Redrawer(draw, update, fig)

    def render():
        redraw({name: w.value for name, w in controls.items()})
        image.value = _png(fig)

    def on_change(change=None):
        messages.clear_output()
        with messages:  # a warning or an exception of ``draw`` is shown here, below the figure
            try:
                render()
            except Exception:
                image.value = _png(fig)  # the cleared figure: no stale image
                raise

    render()  # the first draw's error propagates to the caller
    for widget in controls.values():
        widget.observe(on_change, names="value")
    bar = widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap"))
    bar.add_class("tpde-controls")
    panel = widgets.VBox([bar, image, messages])
    panel.add_class("tpde-live-panel")
    return panel


def explore(
    draw: Callable[..., Any],
    controls: Mapping[str, widgets.ValueWidget],
    twin: str,
    twin_values: Sequence[Any],
    figsize: tuple[float, float] = (7.4, 3.6),
    show: bool = True,
    update: Callable[..., Any] | None = None,
) -> tuple[widgets.VBox, HTML]:
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
        Display them (default) as one output, :func:`panel_bundle`: the live panel where a
        kernel runs, the twin with a line on how to get the live panel in a static page; with
        False only return them.
    update : callable, optional
        ``update(handles, **params)``: redraws in place, for speed. ``handles`` is what ``draw``
        returned (e.g. a dict of its artists); ``update`` sets their data, texts and limits to
        the new values (``set_data``, ``set_offsets``, ``set_text``, ...) and must leave the
        figure as ``draw(fig, **params)`` would draw it. It may return False to ask for a full
        draw (e.g. when a choice changes the layout). Without it every change clears the figure
        and calls ``draw``: creating axes and ticks costs about half of a redraw.

    Returns
    -------
    (ipywidgets.VBox, IPython.display.HTML)
        The live panel and the static twin.
    """
    _check_draw(draw)
    values = _check_controls(controls, twin, twin_values)
    figsize, _ = _check_figure(figsize, 1.0)
    defaults = {name: w.value for name, w in controls.items()}
    # the twin first: any error in ``draw`` surfaces here as a normal exception (an error inside
    # an ipywidgets callback would only be printed into the widget's output)
    twin_html = static_twin(draw, defaults, twin, values, figsize=figsize, update=update)
    controls[twin].add_class("tpde-main-control")  # the control the static twin sweeps
    panel = live_panel(draw, controls, figsize=figsize, update=update)
    if show:
        display(panel_bundle(panel, twin_html, twin, values), raw=True)
    return panel, twin_html


def panel_bundle(
    panel: widgets.Widget, twin_html: HTML, twin: str, twin_values: Sequence[Any]
) -> dict[str, Any]:
    """One output holding both faces of a panel, for the front end to pick from.

    The MIME bundle has the live widget (``application/vnd.jupyter.widget-view+json``: what
    JupyterLab shows when a kernel runs) and, as ``text/html``, the static twin under a line
    saying how to get the live panel: what a static page shows when its renderer ranks
    ``text/html`` above the widget view (MyST-NB: ``nb_mime_priority_overrides`` with
    ``["html", "application/vnd.jupyter.widget-view+json", 35]``, after ``text/html`` at 30).
    Pass it to ``IPython.display.display(bundle, raw=True)``.
    """
    bundle = dict(panel._repr_mimebundle_())
    sweep = ", ".join(_format(v) for v in twin_values)
    note = (
        f'<p class="tpde-twin-note"><em>Animation</em>: <code>{html.escape(twin)}</code> '
        f"runs through {html.escape(sweep)}, the other controls at their defaults. To move "
        "every control, open this page as a notebook in JupyterLab or on Binder (launch "
        "button at the top of the page) and run it.</p>"
    )
    bundle["text/html"] = f'<div class="tpde-static-twin">{note}{twin_html.data}</div>'
    # the printed book (MyST-NB ranks text/markdown first for LaTeX): the first frame, and where
    # the panel is live
    first = re.search(r'frames\[0\] = "(data:image/png;base64,[^"]+)"', twin_html.data)
    if first:  # matplotlib continues the base64 lines with a backslash
        uri = first.group(1).replace("\\\n", "")
        bundle["text/markdown"] = (
            f"*Panel, first frame* (`{twin}` = {_format(twin_values[0])}; the animation runs "
            f"through {sweep}). The panel is live in the notebook: open this chapter in "
            "JupyterLab, on Binder or on Colab and run it to move every control.\n\n"
            f"![First frame of the panel's animation]({uri})"
        )
    bundle["text/plain"] = f"Live panel (needs a kernel); its static twin sweeps {twin}"
    return bundle
