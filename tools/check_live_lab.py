"""Check the book the way a reader uses it in JupyterLab: open, run, move the panels, close.

Usage::

    .venv/bin/python tools/check_live_lab.py [chapters/01_transformer_pde.md ...]

Starts JupyterLab from this Python's environment (the README's ``.venv``) on 127.0.0.1, with
empty user-level Jupyter folders (so only the environment's settings apply, as on a fresh
account), and drives it with headless Chromium (Debian's ``/usr/bin/chromium``, Playwright),
every address other than 127.0.0.1 blocked. For every Jupytext notebook listed in ``_toc.yml``
(default) it

1. opens the file through JupyterLab's default viewer and checks that it opens as a notebook;
2. runs all cells and checks that every code cell ran and that no output is an error or
   stderr, and that no MyST role (the book's ``{status}`` and ``{claim}`` badges included) shows
   as raw text in the rendered Markdown (jupyterlab-myst);
3. for each live panel (``tpde_lib.widgets.live_panel``): steps every slider one notch by a key
   press (the main control, which the static twin sweeps, first) and selects every option of
   every dropdown, checks each time that a new figure arrives and prints how long it took from
   the key press (or selection) to the new image decoded in the page; an error or warning
   shown in the panel fails; then, in the chapter's kernel (no second execution of the
   chapter), moves every control over its whole range as ``tools/time_panels.py`` does and
   prints every control's worst redraw, failing above ``--cpu-budget-ms`` (150) of the
   kernel's CPU time (times ``--cpu-fail-factor``, default 1: the budget itself);
4. closes the notebook without saving (``--save``: saves it first, as JupyterLab's autosave
   would), shutting its kernel down.

At the end ``git status --porcelain`` must be what it was before: opening, running and closing
chapters (with JupyterLab's autosave on) changes no file. Key press -> figure times are compared
with the budget of 0.3 s; one above ``--fail-factor`` times it (default 3: the wall time of a
round trip through the browser on a shared machine) fails. Prints
one line per failure and a closing ``N passed, N failed`` line (one verdict per notebook); exits 1 on any
failure.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from offline_browser import offline_context

from tpde_book.ledger import toc_documents

ROOT = Path(__file__).resolve().parents[1]
# keypress -> new figure budget (seconds), every panel (issue 31)
BUDGET = 0.3
RAW_MYST = re.compile(r"\{(cite(:[pt])?|eq|ref|numref|doc|term|math|download|abbr|status|claim)\}")
# the user-level settings of the test only: cells outside the viewport stay in the page (JupyterLab
# renders only the visible cells by default), so outputs and Markdown can be inspected everywhere
USER_SETTINGS = {"@jupyterlab/notebook-extension/tracker.jupyterlab-settings": '{"windowingMode": "none"}'}


def toc_notebooks(root=ROOT):
    """Files of ``_toc.yml`` (in order) that are Jupytext notebooks, as paths relative to root."""
    out = []
    for name in toc_documents(root):  # the book's one _toc.yml walker
        path = root / (name if name.endswith(".md") else f"{name}.md")
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        if text.startswith("---") and "jupytext:" in text.split("\n---", 1)[0]:
            out.append(path.relative_to(root).as_posix())
    return out


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(tmp):
    """JupyterLab of this environment on 127.0.0.1; returns (process, base URL, token)."""
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ)
    for name in (
        "JUPYTER_CONFIG_DIR",
        "JUPYTER_DATA_DIR",
        "JUPYTER_RUNTIME_DIR",
        "IPYTHONDIR",
        "JUPYTERLAB_SETTINGS_DIR",
        "JUPYTERLAB_WORKSPACES_DIR",
        "MPLCONFIGDIR",
    ):
        env[name] = str(Path(tmp) / name.lower())
        Path(env[name]).mkdir(parents=True, exist_ok=True)
    settings = Path(env["JUPYTERLAB_SETTINGS_DIR"])
    for rel, text in USER_SETTINGS.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(text, encoding="utf-8")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    lab = Path(sys.executable).parent / "jupyter-lab"
    log = open(Path(tmp) / "lab.log", "w")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(
        [
            str(lab),
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--ServerApp.root_dir={ROOT}",
            f"--IdentityProvider.token={token}",
            "--LabApp.expose_app_in_browser=True",
            "--ServerApp.open_browser=False",
            "--allow-root",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            tail = "\n".join(Path(log.name).read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"JupyterLab exited ({proc.returncode}):\n{tail}")
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            return proc, base, token, log
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError("JupyterLab did not answer within 120 s")


_OPEN = """
async (path) => {
  const app = window.jupyterapp;
  const widget = await app.commands.execute('docmanager:open', {path});
  await widget.context.ready;
  const isNotebook = widget.hasClass('jp-NotebookPanel') && !!widget.content
                     && typeof widget.content.widgets !== 'undefined';
  return {isNotebook, factory: widget.context && app.docRegistry.defaultWidgetFactory(path).name,
          cls: widget.node.className, dirty: widget.context.model.dirty};
}
"""

_RUN_ALL = """
async (path) => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  if (!panel || panel.context.path !== path) { return {error: 'notebook not current'}; }
  await panel.sessionContext.ready;
  const t0 = performance.now();
  await app.commands.execute('notebook:run-all-cells');
  // then wait for the kernel to go idle (widget messages may still be flowing)
  for (let k = 0; k < 600; k++) {
    const status = panel.sessionContext.session && panel.sessionContext.session.kernel
                   && panel.sessionContext.session.kernel.status;
    if (status === 'idle') break;
    await new Promise(r => setTimeout(r, 100));
  }
  const seconds = (performance.now() - t0) / 1000;
  const cells = panel.content.widgets;
  const problems = [];
  let nCode = 0;
  cells.forEach((cell, i) => {
    if (cell.model.type !== 'code') return;
    nCode += 1;
    if (cell.model.executionCount === null) problems.push(`cell ${i}: did not run`);
    for (const out of cell.model.outputs.toJSON()) {
      if (out.output_type === 'error') {
        problems.push(`cell ${i}: ${out.ename}: ${String(out.evalue).slice(0, 200)}`);
      } else if (out.output_type === 'stream' && out.name === 'stderr') {
        problems.push(`cell ${i}: stderr: ${String(out.text).slice(0, 200)}`);
      }
    }
  });
  // jupyterlab-myst renders Markdown asynchronously: a notebook whose code runs in a fraction of
  // a second can be idle before its Markdown is rendered (seen once on execution.md); wait until
  // the count of rendered blocks is non-zero and steady over 0.3 s, at most 15 s
  const countMyst = () => panel.content.node.querySelectorAll('.jp-MarkdownCell .myst').length;
  for (let k = 0, last = -1, steady = 0; k < 150 && steady < 3; k++) {
    const now = countMyst();
    steady = now > 0 && now === last ? steady + 1 : 0;
    last = now;
    await new Promise(r => setTimeout(r, 100));
  }
  const rawMyst = [];
  const rendered = panel.content.node.querySelectorAll(
      '.jp-MarkdownCell .jp-RenderedMarkdown, .jp-MarkdownCell .myst');
  rendered.forEach(el => {
    const m = el.textContent.match(new RegExp(RAW_MYST));
    if (m) rawMyst.push(m[0] + ' in: ' + el.textContent.trim().slice(0, 80));
  });
  const nMyst = countMyst();
  return {seconds, nCode, problems, rawMyst, nMyst,
          panels: panel.content.node.querySelectorAll('.tpde-live-panel').length};
}
""".replace("RAW_MYST", repr(RAW_MYST.pattern))

PANELS = ".jp-NotebookPanel:not(.lm-mod-hidden) .tpde-live-panel"
_ARM = """
([panelIndex, timeoutMs]) => {
  const panel = document.querySelectorAll(PANELS)[panelIndex];
  const img = panel.querySelector('img.tpde-figure');
  const before = img.src;
  window.__tpdeT0 = null;
  const mark = () => { if (window.__tpdeT0 === null) window.__tpdeT0 = performance.now(); };
  panel.addEventListener('keydown', mark, {capture: true, once: true});
  panel.addEventListener('change', mark, {capture: true, once: true});
  window.__tpdeResult = new Promise(resolve => {
    const timer = setTimeout(() => { obs.disconnect(); resolve({changed: false}); }, timeoutMs);
    const obs = new MutationObserver(() => {
      if (img.src === before) return;
      obs.disconnect();
      clearTimeout(timer);
      const done = () => resolve({changed: true, ms: performance.now() - window.__tpdeT0});
      img.decode().then(done, done);
    });
    obs.observe(img, {attributes: true, attributeFilter: ['src']});
  });
}
""".replace("PANELS", repr(PANELS))

_PANEL_MESSAGES = """
(panelIndex) => {
  const panel = document.querySelectorAll(PANELS)[panelIndex];
  // anything the panel's output area shows (warnings, errors, prints of draw) is a failure
  return [...panel.querySelectorAll('.jp-OutputArea-output')]
    .map(o => o.textContent.trim().slice(0, 200)).filter(t => t);
}
""".replace("PANELS", repr(PANELS))

_CLOSE = """
async ([path, save]) => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  if (!panel || panel.context.path !== path) return 'notebook not current';
  if (save) await panel.context.save();   // what autosave would write
  await panel.sessionContext.shutdown();
  panel.context.model.dirty = false;   // close without saving
  panel.close();
  return 'closed';
}
"""


_KERNEL_EXEC = """
async ([path, code]) => {
  const panel = window.jupyterapp.shell.currentWidget;
  if (!panel || panel.context.path !== path) return {error: 'notebook not current'};
  const future = panel.sessionContext.session.kernel.requestExecute({code, store_history: false});
  let out = '', error = null;
  future.onIOPub = (msg) => {
    if (msg.header.msg_type === 'stream' && msg.content.name === 'stdout') out += msg.content.text;
    if (msg.header.msg_type === 'error') error = msg.content.ename + ': ' + msg.content.evalue;
  };
  await future.done;
  return {out, error};
}
"""

# run in the chapter's kernel once its cells ran: every live panel's controls over their whole
# range, each redraw's CPU time (tools/time_panels.py's measure, in the reader's kernel: no
# second execution of the chapter)
_TIME_PANELS = """
import contextlib as _c, gc as _gc, io as _io, json as _json, sys as _sys
_sys.path.insert(0, {tools!r})
import ipywidgets as _w
import time_panels as _tp
_found = [o for o in _gc.get_objects()
          if isinstance(o, _w.VBox) and "tpde-live-panel" in o._dom_classes]
_report = []
for _k, _panel in enumerate(_found):
    _controls = {{(c.description or f"control {{i}}"): c
                 for i, c in enumerate(_panel.children[0].children)}}
    with _c.redirect_stdout(_io.StringIO()):
        _worst, _failures, _ = _tp.time_panel(_controls, _panel, {budget!r}, 2)
    _report.append({{"worst": {{n: [v[3], v[4]] for n, v in _worst.items()}}, "failures": _failures}})
print(_json.dumps(_report))
"""


def time_panels_in_kernel(page, path, budget_ms, fail_factor, report, fail):
    """Every control of every live panel over its whole range, timed in the chapter's kernel
    (CPU time per redraw, ``tools/time_panels.py``); prints OVER BUDGET above ``budget_ms`` and
    fails above ``fail_factor`` times it."""
    code = _TIME_PANELS.format(tools=str(ROOT / "tools"), budget=budget_ms / 1000)
    result = page.evaluate(_KERNEL_EXEC, [path, code])
    if result.get("error"):
        fail(f"timing the panels in the kernel raised {result['error']}")
        return
    import json

    for k, panel in enumerate(json.loads(result["out"].strip().splitlines()[-1])):
        for name, (cpu, where) in panel["worst"].items():
            over = 1000 * cpu > budget_ms
            report(
                f"    panel {k} {name}: worst redraw {1000 * cpu:4.0f} ms of kernel CPU over its range "
                f"(at {where}; budget {budget_ms:g} ms){'  OVER BUDGET' if over else ''}"
            )
            if 1000 * cpu > fail_factor * budget_ms:
                fail(
                    f"panel {k} {name}: a redraw took {1000 * cpu:.0f} ms of CPU at {where} "
                    f"(> {fail_factor:g} x budget {budget_ms:g} ms)"
                )
        for f in panel["failures"]:
            fail(f"panel {k}: {f}")


def exercise_panels(page, n_panels, budget, fail_factor, report, fail):
    """Step every control of every live panel; print and check the times."""
    timeout_ms = int(max(30.0, 10 * budget) * 1000)
    panels = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .tpde-live-panel")
    for k in range(n_panels):
        panel = panels.nth(k)
        panel.scroll_into_view_if_needed()
        controls = panel.locator(".tpde-controls > *")
        n = controls.count()
        order = sorted(
            range(n), key=lambda i: "tpde-main-control" not in (controls.nth(i).get_attribute("class") or "")
        )
        for i in order:
            control = controls.nth(i)
            label = control.locator(".widget-label").first.inner_text().strip() or f"control {i}"
            main = "tpde-main-control" in (control.get_attribute("class") or "")
            actions = []
            select = control.locator("select")
            handle = control.locator(".noUi-handle")
            if select.count():
                options = select.locator("option").all_inner_texts()
                current = select.input_value()
                values = select.locator("option").evaluate_all("os => os.map(o => o.value)")
                actions = [
                    (f"= {text}", select.select_option, {"value": v})
                    for v, text in zip(values, options)
                    if v != current
                ]
                actions.append(
                    (f"= {options[values.index(current)]} (back)", select.select_option, {"value": current})
                )
            elif handle.count():
                h = handle.first
                at_max = h.get_attribute("aria-valuenow") == h.get_attribute("aria-valuemax")
                key, back = ("ArrowLeft", "ArrowRight") if at_max else ("ArrowRight", "ArrowLeft")
                actions = [
                    (f"{key} key", h.press, {"key": key}),
                    (f"{back} key (back)", h.press, {"key": back}),
                ]
            else:
                report(f"    panel {k} {label}: no slider or dropdown found (not exercised)")
                continue
            for what, act, kwargs in actions:
                page.evaluate(_ARM, [k, timeout_ms])
                act(**kwargs)
                result = page.evaluate("window.__tpdeResult")
                tag = " (main control)" if main else ""
                if not result["changed"]:
                    fail(f"panel {k} {label}{tag} {what}: no new figure in {timeout_ms // 1000} s")
                    continue
                took = result["ms"] / 1000
                flag = ""
                if took > fail_factor * budget:
                    fail(f"panel {k} {label} {what}: {took:.2f} s > {fail_factor} x budget {budget} s")
                    flag = "  FAIL"
                elif took > budget:
                    flag = "  SLOW"
                report(
                    f"    panel {k} {label}{tag} {what}: {1000 * took:6.0f} ms "
                    f"(budget {1000 * budget:.0f} ms){flag}"
                )
        for msg in page.evaluate(_PANEL_MESSAGES, k):
            fail(f"panel {k}: error or warning shown in the panel: {msg!r}")


def git_status():
    return subprocess.run(
        ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", help="paths relative to the repository (default: _toc.yml)")
    ap.add_argument(
        "--fail-factor",
        type=float,
        default=3.0,
        help="a key press -> figure time above this many times its budget (0.3 s) fails",
    )
    ap.add_argument(
        "--cpu-fail-factor",
        type=float,
        default=1.0,
        help="a redraw's kernel CPU time above this many times --cpu-budget-ms fails",
    )
    ap.add_argument(
        "--cpu-budget-ms",
        type=float,
        default=150.0,
        help="most kernel CPU time one redraw of any control may take over its whole range "
        "(tools/time_panels.py, run in each chapter's kernel; 0: not measured)",
    )
    ap.add_argument(
        "--save", action="store_true", help="save each notebook (as autosave would) before closing it"
    )
    args = ap.parse_args(argv)
    notebooks = args.notebooks or toc_notebooks()
    from playwright.sync_api import sync_playwright

    status_before = git_status()
    failures, verdicts, blocked = [], {}, set()
    with tempfile.TemporaryDirectory(prefix="tpde-lab-") as tmp:
        proc, base, token, log = start_lab(tmp)
        try:
            with sync_playwright() as pw:
                browser, context = offline_context(pw, {"width": 1400, "height": 1000}, blocked)
                page = context.new_page()
                page.set_default_timeout(60_000)
                start = time.perf_counter()
                page.goto(f"{base}/lab?token={token}", wait_until="load", timeout=120_000)
                page.wait_for_function(
                    "window.jupyterapp && window.jupyterapp.started !== undefined", timeout=120_000
                )
                page.evaluate("window.jupyterapp.started")
                page.wait_for_selector(".jp-DirListing", timeout=120_000)
                print(f"JupyterLab up in {time.perf_counter() - start:.1f} s at {base}")
                for path in notebooks:
                    failed = []

                    def fail(msg, path=path, failed=failed):
                        failed.append(msg)
                        failures.append(f"{path}: {msg}")

                    t_open = time.perf_counter()
                    opened = page.evaluate(_OPEN, path)
                    if not opened["isNotebook"]:
                        fail(f"opened with {opened['factory']!r}, not as a notebook ({opened['cls']})")
                        verdicts[path] = False
                        page.evaluate("window.jupyterapp.commands.execute('application:close')")
                        continue
                    run = page.evaluate(_RUN_ALL, path)
                    if "error" in run:
                        fail(run["error"])
                    else:
                        print(
                            f"{path}: opened as a notebook ({opened['factory']}) in "
                            f"{time.perf_counter() - t_open - run['seconds']:.1f} s, "
                            f"{run['nCode']} code cells ran in {run['seconds']:.1f} s, "
                            f"{run['nMyst']} MyST-rendered blocks, {run['panels']} live panel(s)"
                        )
                        for p in run["problems"]:
                            fail(p)
                        for m in run["rawMyst"]:
                            fail(f"MyST not rendered: {m!r}")
                        if not run["nMyst"]:
                            fail("no Markdown cell rendered by jupyterlab-myst")
                        if not run["problems"]:
                            exercise_panels(page, run["panels"], BUDGET, args.fail_factor, print, fail)
                            if run["panels"] and args.cpu_budget_ms > 0:
                                time_panels_in_kernel(
                                    page, path, args.cpu_budget_ms, args.cpu_fail_factor, print, fail
                                )
                    closed = page.evaluate(_CLOSE, [path, args.save])
                    if closed != "closed":
                        fail(f"could not close: {closed}")
                    verdicts[path] = not failed
                browser.close()
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
            if failures:
                print("---- JupyterLab log (last lines) ----")
                print("\n".join(Path(log.name).read_text(errors="replace").splitlines()[-30:]))
    status_after = git_status()
    if status_after != status_before:
        changed = sorted(set(status_after.splitlines()) - set(status_before.splitlines()))
        failures.append(f"git status changed by opening/running/closing: {changed}")
        for path in verdicts:
            if any(path in line for line in changed):
                verdicts[path] = False
    if blocked:
        print("requests to other hosts blocked:", ", ".join(sorted(h for h in blocked if h)))
    for f in failures:
        print("FAIL", f)
    print(
        f"load average at the end (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in os.getloadavg())}"
        f" on {os.cpu_count()} cores (times above include waiting for a busy machine)"
    )
    n_fail = sum(not ok for ok in verdicts.values())
    if failures and not n_fail:
        n_fail = 1  # a failure that no single notebook owns
    print(f"live-lab: {len(verdicts) - n_fail} passed, {n_fail} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
