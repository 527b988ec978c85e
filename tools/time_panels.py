"""Time the redraw of every live panel of the book, in this Python (no browser, no kernel).

Usage::

    python tools/time_panels.py [--budget-ms 150] [chapters/01_transformer_pde.md ...]

Runs each chapter's code cells (from the chapter's folder, as the book does), keeps every panel
that :func:`tpde_lib.widgets.live_panel` builds, then sets each control in turn to each of its
values (a dropdown or a selection slider of at most 8 options: every option; a slider: its
minimum, middle and maximum), for every option of
every dropdown of the panel, and times the redraw (draw + PNG) that the change triggers.
Prints per control the slowest redraw (wall clock, and its CPU time) and the most CPU time one
redraw took (on a busy machine wall clock exceeds CPU time), then the overall slowest. This is
the kernel's share of a keypress -> new figure round trip; ``tools/check_live_lab.py`` measures
the whole trip in a browser. The budget is on CPU time (``time.process_time``, every thread of
the process), which a machine shared with other jobs inflates far less than wall clock. Exits 1
when a redraw raised, left the figure unchanged, or took more CPU time than ``--budget-ms``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import itertools
import os
import sys
import time
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[1]


def _is_choice(widget):
    """A dropdown-like control (every option is tried), as opposed to a slider."""
    return hasattr(widget, "options") and "Slider" not in type(widget).__name__


def _values(widget):
    """The values a control is set to: every option of a dropdown or a short selection slider;
    otherwise a slider's ends and middle."""
    if hasattr(widget, "options"):
        opts = [o[1] if isinstance(o, tuple) else o for o in widget.options]
        if _is_choice(widget) or len(opts) <= 8:  # a short selection slider: every value
            return opts
        return [opts[0], opts[len(opts) // 2], opts[-1]]
    lo, hi = widget.min, widget.max
    if hasattr(widget, "base"):  # log slider: min and max are exponents
        return [widget.base**lo, widget.base ** ((lo + hi) / 2), widget.base**hi]
    step = widget.step or 1
    return [lo, lo + round((hi - lo) / 2 / step) * step, hi]


def run_chapter(path):
    """Execute the chapter's code cells; return the panels built, as (controls, update) pairs."""
    import matplotlib

    matplotlib.use("Agg")
    import tpde_lib.widgets as tw

    panels = []
    original = tw.live_panel

    def recording(draw, controls, *args, **kwargs):
        panel = original(draw, controls, *args, **kwargs)
        panels.append((controls, panel))
        return panel

    tw.live_panel = recording
    nb = jupytext.read(path)
    cwd = os.getcwd()
    os.chdir(Path(path).parent)
    namespace = {"__name__": "__main__"}
    quiet = contextlib.ExitStack()
    quiet.enter_context(contextlib.redirect_stdout(io.StringIO()))
    quiet.enter_context(contextlib.redirect_stderr(io.StringIO()))
    try:
        for cell in nb.cells:
            if cell.cell_type != "code" or "skip-execution" in cell.metadata.get("tags", []):
                continue
            src = "\n".join(
                line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))
            )
            exec(compile(src, f"{path}:cell", "exec"), namespace)
    finally:
        quiet.close()
        os.chdir(cwd)
        tw.live_panel = original
    return panels


def time_panel(controls, panel, budget=float("inf"), retries=2):
    """Slowest redraw per control: each slider at its ends and middle, for every combination of
    the dropdowns' options; each dropdown change timed on its own.

    A change that takes more than ``budget`` seconds of CPU is made again ``retries`` times
    (from the value before it) and its least CPU time kept: on a shared machine one measurement
    can be inflated by others' load. A panel must therefore not memoise its figures (a repeat
    would then be cheap): it may precompute data, not images.
    """
    image, messages = panel.children[1], panel.children[2]
    defaults = {name: w.value for name, w in controls.items()}
    choices = [n for n, w in controls.items() if _is_choice(w)]
    sliders = [n for n in controls if n not in choices]
    worst, failures, slowest_cpu, by_choice = {}, [], {}, {}

    def timed(widget, value):
        gc.collect()  # a collection owed by earlier work is not this redraw's cost
        start, cpu = time.perf_counter(), time.process_time()
        widget.value = value
        return time.perf_counter() - start, time.process_time() - cpu

    def set_and_time(name, value, where, label):
        widget = controls[name]
        if widget.value == value:
            return
        before, previous = image.value, widget.value
        took, cpu = timed(widget, value)
        for _ in range(retries if cpu > budget else 0):  # over budget: the same change again
            widget.value = previous
            cpu = min(cpu, timed(widget, value)[1])
        if messages.outputs:
            failures.append(f"{where}: output below the figure: {messages.outputs}")
        if image.value == before:
            failures.append(f"{where}: figure unchanged")
        if took > worst.get(name, (0.0, 0.0, ""))[0]:
            worst[name] = (took, cpu, where)
        if cpu > slowest_cpu.get(name, (0.0, ""))[0]:
            slowest_cpu[name] = (cpu, where)
        by_choice[label] = max(by_choice.get(label, 0.0), cpu)

    with contextlib.ExitStack() as held:  # undone on every path, last in first out
        # the objects alive now (the chapter's, the kernel's) are moved out of the collector's
        # reach while timing: the collection before each change then costs a few milliseconds
        # instead of 100-150 ms (it was over half of a sweep). Not where a caller froze some
        # already: their freeze is theirs to undo (``gc.unfreeze`` thaws everything).
        if gc.get_freeze_count() == 0:
            gc.collect()
            gc.freeze()
            held.callback(gc.unfreeze)
        # in a kernel every change would also send its PNG to the page, which decodes it: held
        # (``hold_sync``), only the last state of each widget is sent, when the sweep ends
        for widget in [image, messages, *controls.values()]:
            held.enter_context(widget.hold_sync())
        for combo in itertools.product(*[_values(controls[n]) for n in choices]):
            label = ", ".join(f"{n}={v!r}" for n, v in zip(choices, combo))
            for name, value in zip(choices, combo):
                set_and_time(name, value, label, label)
            for name in sliders:
                for value in _values(controls[name]) + [defaults[name]]:
                    where = f"{label + ', ' if label else ''}{name}={value!r}"
                    set_and_time(name, value, where, label)
        for name, value in defaults.items():
            controls[name].value = value
    return {name: (*worst[name], *slowest_cpu[name]) for name in worst}, failures, by_choice


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chapters", nargs="*")
    ap.add_argument(
        "--budget-ms",
        type=float,
        default=150.0,
        help="most CPU time one redraw of any control may take (default 150 ms)",
    )
    ap.add_argument(
        "--by-choice",
        action="store_true",
        help="also print the worst CPU time for each combination of the dropdowns",
    )
    ap.add_argument(
        "--retries",
        type=int,
        default=2,
        help="times a change over the budget is repeated, keeping its least CPU time",
    )
    args = ap.parse_args(argv)
    if args.chapters:
        chapters = [Path(c).resolve() for c in args.chapters]
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from check_live_lab import toc_notebooks

        chapters = [ROOT / p for p in toc_notebooks() if p.startswith("chapters/")]
    failed, slowest, worst_cpu = [], (0.0, ""), (0.0, "")
    for chapter in chapters:
        start = time.perf_counter()
        panels = run_chapter(chapter)
        print(f"{chapter.name}: ran in {time.perf_counter() - start:.1f} s, {len(panels)} panel(s)")
        for k, (controls, panel) in enumerate(panels):
            with contextlib.redirect_stdout(io.StringIO()):  # clear_output's escapes, no kernel
                worst, failures, by_choice = time_panel(controls, panel, args.budget_ms / 1000, args.retries)
            for name, (took, cpu, where, max_cpu, cpu_where) in worst.items():
                over = 1000 * max_cpu > args.budget_ms
                print(
                    f"  panel {k} {name:12s} worst CPU {1000 * max_cpu:4.0f} ms at {cpu_where}"
                    f"{' OVER BUDGET' if over else ''}; slowest wall {1000 * took:5.0f} ms"
                    f" (CPU {1000 * cpu:4.0f} ms) at {where}"
                )
                if took > slowest[0]:
                    slowest = (took, f"{chapter.name} {where}")
                if max_cpu > worst_cpu[0]:
                    worst_cpu = (max_cpu, f"{chapter.name} {cpu_where}")
                if over:
                    failed.append(
                        f"{chapter.name}: panel {k} control {name!r}: one redraw took "
                        f"{1000 * max_cpu:.0f} ms of CPU at {cpu_where} (budget "
                        f"{args.budget_ms:g} ms)"
                    )
            if args.by_choice and len(by_choice) > 1:
                for label, cpu in by_choice.items():
                    print(f"    with {label}: worst CPU {1000 * cpu:4.0f} ms")
            failed += [f"{chapter.name}: {f}" for f in failures]
    for f in failed:
        print("FAIL", f)
    print(
        f"slowest redraw: {1000 * slowest[0]:.0f} ms wall ({slowest[1]}); "
        f"most CPU: {1000 * worst_cpu[0]:.0f} ms ({worst_cpu[1]}); budget {args.budget_ms:g} ms"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
