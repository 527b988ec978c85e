"""Live panels and static twins (tpde_lib.widgets), without a kernel: widgets work in plain Python."""

import struct

import ipywidgets as widgets
import pytest

import tpde_lib as tp
from tpde_lib.widgets import explore, live_panel, static_twin

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data):
    """(width, height) from a PNG's IHDR chunk."""
    assert data[:8] == PNG_SIGNATURE
    return struct.unpack(">II", data[16:24])


def make_controls():
    return {
        "a": widgets.FloatSlider(value=1.0, min=0.0, max=2.0, step=0.5),
        "kind": widgets.Dropdown(options=["x", "y"], value="x", description="kind of plot"),
    }


def recording_draw(calls):
    def draw(fig, a, kind):
        calls.append((id(fig), a, kind))
        ax = fig.add_subplot(1, 1, 1)
        ax.plot([0, 1], [0, a], "o-" if kind == "x" else "s--")
        ax.set_title(f"a = {a}, {kind}")

    return draw


def test_panel_redraws_on_each_change_into_one_reused_figure():
    calls = []
    controls = make_controls()
    panel = live_panel(recording_draw(calls), controls, figsize=(4, 3), dpi=50)
    image = panel.children[1]
    first = image.value
    assert png_size(first) == (200, 150)  # figsize * dpi, no tight bounding box
    assert image.width == "200"
    controls["a"].value = 1.5
    second = image.value
    controls["kind"].value = "y"
    assert [c[1:] for c in calls] == [(1.0, "x"), (1.5, "x"), (1.5, "y")]
    assert len({c[0] for c in calls}) == 1  # the same Figure every time
    assert len({first, second, image.value}) == 3  # each change gives a new image


def test_a_redraw_draws_the_figure_once_with_or_without_a_layout_engine():
    """savefig would draw twice (a layout pass, then the drawing) whenever the figure has a
    layout engine: the panel prints its canvas once, the layout running inside that draw."""
    from matplotlib.figure import Figure

    draws = []
    original = Figure.draw

    def counting(self, renderer):
        draws.append(self)
        return original(self, renderer)

    with tp.viz.book_style():  # constrained layout on every new figure
        controls = make_controls()
        Figure.draw = counting
        try:
            panel = live_panel(recording_draw([]), controls)
            assert panel.children[1].value
            assert len(draws) == 1  # the first, full draw, laid out by the engine
            fig = draws[0]
            assert fig.get_layout_engine() is not None
            controls["a"].value = 0.5
            assert len(draws) == 2 and draws[1] is fig
        finally:
            Figure.draw = original


def test_panel_labels_controls_and_updates_sliders_on_release():
    controls = make_controls()
    panel = live_panel(recording_draw([]), controls)
    assert controls["a"].description == "a"  # was empty: labelled by its name
    assert controls["kind"].description == "kind of plot"  # kept
    assert controls["a"].continuous_update is False
    assert "tpde-live-panel" in panel._dom_classes
    assert "tpde-figure" in panel.children[1]._dom_classes
    panel_on = live_panel(recording_draw([]), make_controls(), continuous_update=True)
    assert panel_on.children[0].children[0].continuous_update is True


def test_panel_clears_the_figure_between_draws():
    n_axes = []

    def draw(fig, a, kind):
        n_axes.append(len(fig.axes))
        fig.subplots(1, 2)

    controls = make_controls()
    live_panel(draw, controls)
    controls["a"].value = 0.5
    assert n_axes == [0, 0]


def test_explore_marks_the_main_control_and_returns_both():
    controls = make_controls()
    panel, twin = explore(
        recording_draw([]), controls, twin="a", twin_values=[0.0, 2.0], figsize=(3, 2), show=False
    )
    assert "tpde-main-control" in controls["a"]._dom_classes
    assert "tpde-main-control" not in controls["kind"]._dom_classes
    assert isinstance(panel, widgets.VBox)
    assert "<img" in twin.data and "animation" in twin.data


def test_static_twin_draws_each_value_once():
    calls = []
    static_twin(recording_draw(calls), {"a": 1.0, "kind": "y"}, "a", [0.0, 0.5, 2.0], figsize=(2, 2))
    assert sorted({c[1:] for c in calls}) == [(0.0, "y"), (0.5, "y"), (2.0, "y")]


@pytest.mark.parametrize(
    "bad, error",
    [
        ({"controls": {}}, ValueError),
        ({"controls": {"a": 1.0}}, TypeError),
        ({"twin": "b"}, ValueError),
        ({"twin_values": []}, ValueError),
    ],
)
def test_explore_rejects_bad_input(bad, error):
    args = {"controls": make_controls(), "twin": "a", "twin_values": [0.0, 1.0]}
    args.update(bad)
    with pytest.raises(error):
        explore(recording_draw([]), args["controls"], args["twin"], args["twin_values"], show=False)


# --- failures leave nothing open, and name the reader's function -------------------------------


def raising_draw(fig, a, kind):
    fig.add_subplot(1, 1, 1)
    if a > 1.5:
        raise ZeroDivisionError("reader's bug")


def test_a_failing_draw_closes_its_figure_and_names_the_draw_function():
    plt = pytest.importorskip("matplotlib.pyplot")
    before = plt.get_fignums()
    with pytest.raises(ZeroDivisionError) as info:
        explore(raising_draw, make_controls(), twin="a", twin_values=[1.0, 2.0], show=False)
    assert "raising_draw" in "".join(info.value.__notes__)
    assert plt.get_fignums() == before  # the old twin left its pyplot figure open


def test_a_draw_that_opens_its_own_pyplot_figure_is_refused_and_the_figure_closed():
    plt = pytest.importorskip("matplotlib.pyplot")
    before = plt.get_fignums()

    def draw(fig, a, kind):
        plt.figure()
        plt.plot([0, a])

    with pytest.raises(ValueError, match="draw 'test_a_draw_that.*pyplot figures"):
        static_twin(draw, {"a": 1.0, "kind": "x"}, "a", [0.0, 1.0])
    assert plt.get_fignums() == before


def test_a_draw_that_draws_nothing_is_refused():
    with pytest.raises(ValueError, match="drew nothing"):
        live_panel(lambda fig, a, kind: None, make_controls())


def test_a_live_error_leaves_a_cleared_figure_and_the_next_change_redraws():
    controls = make_controls()
    panel = live_panel(raising_draw, controls, figsize=(2, 2), dpi=50)
    image = panel.children[1]
    good = image.value
    # in a kernel the output area below the figure shows the error; here it propagates
    with pytest.raises(ZeroDivisionError):
        controls["a"].value = 2.0
    assert image.value != good  # the stale figure is not kept
    controls["a"].value = 0.5
    assert image.value == good


def test_update_moves_artists_in_place_and_can_ask_for_a_full_draw():
    calls = []

    def draw(fig, a, kind):
        calls.append("draw")
        ax = fig.add_subplot(1, 1, 1)
        (line,) = ax.plot([0, 1], [0, a])
        return {"ax": ax, "line": line, "kind": kind}

    def update(h, a, kind):
        if kind != h["kind"]:
            return False  # a new layout: full draw
        calls.append("update")
        h["line"].set_ydata([0, a])
        h["ax"].relim()
        h["ax"].autoscale_view()

    controls = make_controls()
    panel = live_panel(draw, controls, update=update, figsize=(2, 2), dpi=50)
    image = panel.children[1]
    first = image.value
    controls["a"].value = 0.5
    assert image.value != first
    controls["kind"].value = "y"
    controls["a"].value = 2.0
    assert calls == ["draw", "update", "draw", "update"]
    fresh = live_panel(
        draw,
        {
            "a": widgets.FloatSlider(value=2.0, max=2.0),
            "kind": widgets.Dropdown(options=["x", "y"], value="y"),
        },
        figsize=(2, 2),
        dpi=50,
    )
    assert fresh.children[1].value == image.value  # in place = drawn afresh, pixel for pixel


def test_a_failing_update_names_itself_and_the_next_change_draws_in_full():
    def draw(fig, a, kind):
        return fig.add_subplot(1, 1, 1).plot([0, a])[0]

    def update(line, a, kind):
        if a > 1.5:
            raise KeyError("missing artist")
        line.set_ydata([0, a])

    with pytest.raises(KeyError) as info:
        static_twin(draw, {"a": 1.0, "kind": "x"}, "a", [1.0, 2.0], update=update)
    assert "update" in "".join(info.value.__notes__)
    with pytest.raises(TypeError, match="update 'test_a_failing_update.*must return None"):
        static_twin(draw, {"a": 1.0, "kind": "x"}, "a", [1.0, 2.0], update=lambda line, a, kind: line)


@pytest.mark.parametrize(
    "bad, error",
    [
        ({"draw": "not callable"}, TypeError),
        ({"update": 3}, TypeError),
    ],
)
def test_explore_rejects_callables_of_the_wrong_kind(bad, error):
    args = {"draw": recording_draw([]), "update": None}
    args.update(bad)
    with pytest.raises(error, match=next(iter(bad))):
        explore(args["draw"], make_controls(), "a", [0.0, 1.0], show=False, update=args["update"])


def test_one_output_holds_the_live_panel_and_the_twin_as_its_html_fallback():
    from tpde_lib.widgets import panel_bundle

    panel, twin = explore(
        recording_draw([]), make_controls(), twin="a", twin_values=[0.0, 2.0], figsize=(2, 2), show=False
    )
    bundle = panel_bundle(panel, twin, "a", [0.0, 2.0])
    view = bundle["application/vnd.jupyter.widget-view+json"]
    assert view["model_id"] == panel.model_id  # the live panel itself
    assert twin.data in bundle["text/html"]  # the twin, whole
    assert "JupyterLab" in bundle["text/html"] and "Binder" in bundle["text/html"]
    assert "<code>a</code> runs through 0, 2" in bundle["text/html"]
    # the printed face (text/markdown, first for LaTeX): the twin's first frame and the note
    first = twin.data.split('frames[0] = "', 1)[1].split('"', 1)[0].replace("\\\n", "")
    assert bundle["text/markdown"].endswith(f"({first})") and first.startswith("data:image/png;base64,")
    assert (
        "first frame* (`a` = 0" in bundle["text/markdown"]
        and "live in the notebook" in bundle["text/markdown"]
    )


def _draw(fig, a):
    return fig.add_subplot(111)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"interval": -5}, "interval"),
        ({"dpi": 0}, "dpi"),
        ({"figsize": (-1, 2)}, "figsize"),
        ({"figsize": 3}, "figsize"),
    ],
)
def test_a_panels_twin_checks_its_figure_arguments(kwargs, name):
    with pytest.raises((ValueError, TypeError), match=name):
        tp.widgets.static_twin(_draw, {"a": 1.0}, "a", [1.0], **kwargs)


def test_in_place_updates_keep_the_layout_of_the_full_draw():
    """Under the book's constrained layout a full draw is laid out; an in-place update keeps
    that layout (no layout pass: it cost about half of a redraw) and a later full draw lays
    out again."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from tpde_lib.widgets import _Redrawer

    def draw(fig, a):
        ax = fig.add_subplot(111)
        (line,) = ax.plot([0, 1], [0, a])
        ax.set_xlabel("$t$")
        return {"ax": ax, "line": line}

    def update(h, a):
        if a < 0:
            return False  # asks for a full draw
        h["line"].set_ydata([0, a])

    with tp.viz.book_style():
        fig = Figure()
        FigureCanvasAgg(fig)
        redraw = _Redrawer(draw, update, fig)
        redraw({"a": 1.0})
        fig.canvas.draw()
        laid_out = fig.axes[0].get_position().bounds
        assert type(fig.get_layout_engine()).__name__ == "ConstrainedLayoutEngine"
        redraw({"a": 2.0})
        assert type(fig.get_layout_engine()).__name__ == "PlaceHolderLayoutEngine"
        fig.canvas.draw()
        assert fig.axes[0].get_position().bounds == laid_out
        redraw({"a": -1.0})
        assert type(fig.get_layout_engine()).__name__ == "ConstrainedLayoutEngine"


@pytest.mark.parametrize("twin_values", [5, "abc", None], ids=["int", "str", "none"])
def test_explore_refuses_twin_values_that_are_not_a_sequence(twin_values):
    with pytest.raises(TypeError, match="twin_values must be a sequence"):
        explore(lambda fig, a: None, {"a": widgets.FloatSlider(value=1.0)}, "a", twin_values, show=False)
