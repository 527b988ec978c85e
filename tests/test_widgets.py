"""Live panels and static twins (tpde_lib.widgets), without a kernel: widgets work in plain Python."""

import struct

import ipywidgets as widgets
import pytest

from tpde_lib.widgets import explore, live_panel, static_twin

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data):
    """(width, height) from a PNG's IHDR chunk."""
    assert data[:8] == PNG_SIGNATURE
    return struct.unpack(">II", data[16:24])


def make_controls():
    return {"a": widgets.FloatSlider(value=1.0, min=0.0, max=2.0, step=0.5),
            "kind": widgets.Dropdown(options=["x", "y"], value="x", description="kind of plot")}


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
    assert png_size(first) == (200, 150)          # figsize * dpi, no tight bounding box
    controls["a"].value = 1.5
    second = image.value
    controls["kind"].value = "y"
    assert [c[1:] for c in calls] == [(1.0, "x"), (1.5, "x"), (1.5, "y")]
    assert len({c[0] for c in calls}) == 1        # the same Figure every time
    assert len({first, second, image.value}) == 3  # each change gives a new image


def test_panel_labels_controls_and_updates_sliders_on_release():
    controls = make_controls()
    panel = live_panel(recording_draw([]), controls)
    assert controls["a"].description == "a"                 # was empty: labelled by its name
    assert controls["kind"].description == "kind of plot"   # kept
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
    panel, twin = explore(recording_draw([]), controls, twin="a", twin_values=[0.0, 2.0],
                          figsize=(3, 2), show=False)
    assert "tpde-main-control" in controls["a"]._dom_classes
    assert "tpde-main-control" not in controls["kind"]._dom_classes
    assert isinstance(panel, widgets.VBox)
    assert "<img" in twin.data and "animation" in twin.data


def test_static_twin_draws_each_value_once():
    calls = []
    static_twin(recording_draw(calls), {"a": 1.0, "kind": "y"}, "a", [0.0, 0.5, 2.0],
                figsize=(2, 2))
    assert sorted({c[1:] for c in calls}) == [(0.0, "y"), (0.5, "y"), (2.0, "y")]


@pytest.mark.parametrize("bad, error", [
    ({"controls": {}}, ValueError),
    ({"controls": {"a": 1.0}}, TypeError),
    ({"twin": "b"}, ValueError),
    ({"twin_values": []}, ValueError),
])
def test_explore_rejects_bad_input(bad, error):
    args = {"controls": make_controls(), "twin": "a", "twin_values": [0.0, 1.0]}
    args.update(bad)
    with pytest.raises(error):
        explore(recording_draw([]), args["controls"], args["twin"], args["twin_values"],
                show=False)
