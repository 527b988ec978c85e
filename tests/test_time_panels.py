"""tools/time_panels.py's sweep of a panel (a book tool: it reads tools/, so not a library test)."""

import gc
import sys
from pathlib import Path

import ipywidgets as widgets

from tpde_lib.widgets import live_panel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import time_panels  # noqa: E402

#: a CPU clock of the test's own: only ``busy`` advances it. time_panels measures CPU time of the
#: whole process, which other threads left running by earlier tests (BLAS, the engine's pool)
#: inflate at random: on the real clock a plain redraw of "kind" took over 0.05 s in a full run
_CPU = [0.0]


def busy(seconds):
    """Spend ``seconds`` of the test's CPU clock (time_panels measures CPU time)."""
    _CPU[0] += seconds


def _virtual_cpu(monkeypatch):
    monkeypatch.setattr(time_panels.time, "process_time", lambda: _CPU[0])


def make_panel(slow_at=None, frozen_at=None):
    controls = {
        "a": widgets.FloatSlider(value=1.0, min=0.0, max=2.0, step=0.5),
        "kind": widgets.Dropdown(options=["x", "y"], value="x"),
    }

    def draw(fig, a, kind):
        busy(0.05 if a == slow_at else 0.001)
        ax = fig.add_subplot(1, 1, 1)
        shown = 1.0 if a == frozen_at else a  # the same figure for two values: unchanged
        ax.plot([0, 1], [0, shown], "o-" if kind == "x" else "s--")

    return controls, live_panel(draw, controls)


def test_the_sweep_finds_each_controls_slowest_redraw_and_restores_the_panel(monkeypatch):
    _virtual_cpu(monkeypatch)
    controls, panel = make_panel(slow_at=2.0)
    worst, failures, by_choice = time_panels.time_panel(controls, panel, budget=0.02)
    assert failures == []
    assert 0.05 <= worst["a"][3] < 0.06  # the most CPU time of one redraw of "a"
    assert "a=2.0" in worst["a"][4]  # ... and where: at its maximum
    assert worst["kind"][3] < 0.01  # no change of "kind" alone reaches a = 2
    assert set(by_choice) == {"kind='x'", "kind='y'"}  # every option of the dropdown
    assert {n: w.value for n, w in controls.items()} == {"a": 1.0, "kind": "x"}  # defaults
    assert gc.get_freeze_count() == 0  # the heap is unfrozen on return


def test_a_heap_frozen_by_the_caller_stays_frozen():
    controls, panel = make_panel()
    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        time_panels.time_panel(controls, panel, budget=1.0)
        # not thawed (objects frozen may have died meanwhile: the count may fall, not to 0)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_redraw_that_leaves_the_figure_unchanged_is_a_failure():
    controls, panel = make_panel(frozen_at=0.0)
    _, failures, _ = time_panels.time_panel(controls, panel, budget=1.0)
    assert failures and all("figure unchanged" in f for f in failures)
    assert any("a=0.0" in f for f in failures)


def test_the_heap_is_unfrozen_when_a_redraw_raises():
    controls, panel = make_panel()

    def boom(change):
        raise RuntimeError("draw failed")

    controls["a"].observe(boom, names="value")
    try:
        time_panels.time_panel(controls, panel, budget=1.0)
    except RuntimeError:
        pass
    else:  # pragma: no cover - the observer raises
        raise AssertionError("expected the observer's error")
    assert gc.get_freeze_count() == 0
