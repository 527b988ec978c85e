"""pytest plugin: execute the book's Jupytext MyST chapters (``.md``) under nbval.

nbval only collects ``.ipynb`` files. This plugin collects every Jupytext MyST notebook that the
book's ``_toc.yml`` lists (or, where no ``_toc.yml`` exists, every Jupytext MyST notebook), reads
it with ``jupytext`` and hands it to nbval's own collector, so each code cell becomes a test item
``chapters/x.md::Cell N`` run in a kernel whose working directory is the chapter's folder.

Enabled with ``-p tests.nbmyst`` (see ``addopts`` in ``pyproject.toml``) together with
``--nbval`` or ``--nbval-lax``.

Each chapter executes once per CI run: when the book build's jupyter-cache
(``_build/.jupyter_cache``) holds an execution of the chapter's current source made with the
current code (same jupyter-cache hash, same fingerprint of ``tpde_lib``, ``tpde_book``, the
versions of the pinned packages, and Python: ``_ext/execution_cache.py``), the chapter's items check that
stored execution instead of running the kernel again: ``Cell N`` passes when the stored cell
shows no error (a cell tagged ``raises-exception`` must show one), and ``widget outputs``
fails on an error captured inside a widget (an ``interact`` callback that raised, which the
build does not report). jupyter-cache keeps only executions that raised nothing, so the check
can fail only on widget errors or tags; everything else was checked when the build ran.
Otherwise (no build, another library, ``--nbmyst-execute``) the chapter runs under nbval.
The closing summary says which chapters were reused and which executed.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import types
from collections import defaultdict
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml
from nbval import plugin as nbval_plugin

from tpde_book.ledger import toc_documents

_spec = importlib.util.spec_from_file_location(
    "execution_cache", Path(__file__).resolve().parents[1] / "_ext" / "execution_cache.py"
)
execution_cache = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(execution_cache)


def is_myst_notebook(path):
    """True when ``path`` is a Markdown file whose front matter declares a Jupytext MyST notebook."""
    path = Path(path)
    if path.suffix != ".md":
        return False
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---"):
        return False
    end = text.find("\n---", 3)
    if end < 0:
        return False
    try:
        meta = yaml.safe_load(text[3:end]) or {}
    except yaml.YAMLError:
        return False
    fmt = (meta.get("jupytext") or {}).get("text_representation", {}).get("format_name")
    return fmt == "myst" and "kernelspec" in meta


def toc_files(root):
    """The documents listed in ``root/_toc.yml`` as resolved paths (``None`` without a toc)."""
    if not (Path(root) / "_toc.yml").exists():
        return None
    resolved = set()
    for name in toc_documents(root):
        p = Path(root) / name
        resolved.add((p if p.suffix else p.with_suffix(".md")).resolve())
    return resolved


class MystNotebookFile(nbval_plugin.IPyNbFile):
    """nbval's notebook collector, fed from a Jupytext MyST source instead of ``.ipynb``."""

    reason = None

    def collect(self):
        _note(self, "executed", f"under nbval: {self.reason}")
        notebook = jupytext.read(str(self.fspath))
        # nbval reads through the module-level name ``nbformat`` in nbval.plugin: divert only its
        # ``read`` while nbval collects this file, and restore it afterwards.
        shim = types.SimpleNamespace(read=lambda *args, **kwargs: notebook, from_dict=nbformat.from_dict)
        original = nbval_plugin.nbformat
        nbval_plugin.nbformat = shim
        try:
            yield from super().collect()
        finally:
            nbval_plugin.nbformat = original


def _note(node, what, detail):
    """Remember for the closing summary what happened to a chapter (when it is collected: pytest
    also makes collectors for files next to the requested ones, then drops them)."""
    rel = node.path.relative_to(node.config.rootpath).as_posix()
    node.config._tpde_chapters[what].append(f"{rel} ({detail})")


def _options(cell):
    """nbval's options of a code cell (tags and comment markers), as nbval reads them."""
    options = defaultdict(bool, nbval_plugin.find_metadata_tags(cell.metadata))
    options.update(dict(nbval_plugin.find_comment_markers(cell.source)))
    return options


def _errors(outputs):
    return [o for o in outputs if o.get("output_type") == "error"]


def _widget_errors(notebook):
    """Error outputs held in the notebook's embedded widget state (e.g. an Output widget of an
    ``interact`` whose callback raised), as (model id, error name, value)."""
    state = (
        notebook.metadata.get("widgets", {})
        .get("application/vnd.jupyter.widget-state+json", {})
        .get("state", {})
    )
    return [
        (model, e.get("ename"), e.get("evalue"))
        for model, widget in state.items()
        for e in _errors(widget.get("state", {}).get("outputs", []) or [])
    ]


class CachedCell(pytest.Item):
    """One code cell of a chapter, checked in the book build's stored execution."""

    def __init__(self, *, cell_num, cell, options, **kwargs):
        super().__init__(**kwargs)
        self.cell_num, self.cell, self.options = cell_num, cell, options

    def runtest(self):
        if self.options["skip"]:
            pytest.skip("nbval-skip")
        errors = _errors(self.cell.get("outputs", []))
        if self.options["check_exception"]:
            if not errors:
                raise AssertionError(
                    f"Cell {self.cell_num} is tagged raises-exception but the stored execution raised nothing"
                )
        elif errors:  # not stored by jupyter-cache normally; kept in case of a foreign cache
            e = errors[0]
            raise AssertionError(
                f"Cell {self.cell_num} raised {e.get('ename')}: {e.get('evalue')}\n{self.cell.source}"
            )

    def reportinfo(self):
        return self.path, None, f"{self.parent.name}::{self.name} (book build's execution)"


class WidgetOutputs(pytest.Item):
    """No error inside the chapter's widgets (the build embeds them without failing)."""

    def runtest(self):
        found = _widget_errors(self.parent.notebook)
        if found:
            raise AssertionError(
                "errors shown inside widgets: "
                + "; ".join(f"{name}: {value} (model {model})" for model, name, value in found)
            )


class CachedNotebookFile(pytest.File):
    """A chapter whose current source the book build executed with the current code."""

    notebook = record = None

    def collect(self):
        _note(self, "reused", f"jupyter-cache record {self.record.pk}")
        cell_num = 0
        for cell in self.notebook.cells:
            if cell.cell_type == "code":
                yield CachedCell.from_parent(
                    self, name=f"Cell {cell_num}", cell_num=cell_num, cell=cell, options=_options(cell)
                )
                cell_num += 1
        yield WidgetOutputs.from_parent(self, name="widget outputs")


def pytest_addoption(parser):
    parser.getgroup("nbmyst").addoption(
        "--nbmyst-execute",
        action="store_true",
        help="execute every chapter under nbval, even one whose current source the book build "
        "executed with the current code (_build/.jupyter_cache)",
    )


def pytest_configure(config):
    # plain tracebacks in failure reports: a profile that turns off IPython's ANSI colours
    if "IPYTHONDIR" not in os.environ:
        ipdir = Path(tempfile.mkdtemp(prefix="tpde-ipython-"))
        profile = ipdir / "profile_default"
        profile.mkdir(parents=True)
        (profile / "ipython_kernel_config.py").write_text("c.InteractiveShell.colors = 'nocolor'\n")
        os.environ["IPYTHONDIR"] = str(ipdir)
    config._tpde_toc = toc_files(config.rootpath)
    config._tpde_chapters = {"reused": [], "executed": []}
    config._tpde_fingerprints = {}  # per folder: where that folder's kernels import from


def pytest_collect_file(file_path, parent):
    opt = parent.config.option
    if not (opt.nbval or opt.nbval_lax) or file_path.suffix != ".md":
        return None
    listed = parent.config._tpde_toc
    if listed is not None and file_path.resolve() not in listed:
        return None
    if not is_myst_notebook(file_path):
        return None
    config = parent.config
    if not opt.nbmyst_execute:
        folder = file_path.parent
        if folder not in config._tpde_fingerprints:
            config._tpde_fingerprints[folder] = execution_cache.fingerprint(folder)
        notebook, record = execution_cache.cached_execution(
            file_path, config.rootpath / execution_cache.CACHE, config._tpde_fingerprints[folder]
        )
        if notebook is not None:
            node = CachedNotebookFile.from_parent(parent, path=file_path)
            node.notebook, node.record = notebook, record
            return node
        reason = record
    else:
        reason = "--nbmyst-execute"
    node = MystNotebookFile.from_parent(parent, path=file_path)
    node.reason = reason
    return node


def pytest_terminal_summary(terminalreporter, config):
    chapters = getattr(config, "_tpde_chapters", None)
    if not chapters or not any(chapters.values()):
        return
    terminalreporter.section("chapters (tests/nbmyst.py)")
    for what, label in (("reused", "checked in the book build's execution"), ("executed", "executed")):
        for line in chapters[what]:
            terminalreporter.write_line(f"{label}: {line}")
