"""pytest plugin: execute the book's Jupytext MyST chapters (``.md``) under nbval.

nbval only collects ``.ipynb`` files. This plugin collects every Jupytext MyST notebook that the
book's ``_toc.yml`` lists (or, where no ``_toc.yml`` exists, every Jupytext MyST notebook), reads
it with ``jupytext`` and hands it to nbval's own collector, so each code cell becomes a test item
``chapters/x.md::Cell N`` run in a kernel whose working directory is the chapter's folder.

Enabled with ``-p tests.nbmyst`` (see ``addopts`` in ``pyproject.toml``) together with
``--nbval`` or ``--nbval-lax``.
"""

from __future__ import annotations

import os
import tempfile
import types
from pathlib import Path

import jupytext
import nbformat
import yaml
from nbval import plugin as nbval_plugin

from tpde_book.ledger import toc_documents


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

    def collect(self):
        notebook = jupytext.read(str(self.fspath))
        # nbval reads through the module-level name ``nbformat`` in nbval.plugin: divert only its
        # ``read`` while nbval collects this file, and restore it afterwards.
        shim = types.SimpleNamespace(read=lambda *args, **kwargs: notebook,
                                     from_dict=nbformat.from_dict)
        original = nbval_plugin.nbformat
        nbval_plugin.nbformat = shim
        try:
            yield from super().collect()
        finally:
            nbval_plugin.nbformat = original


def pytest_configure(config):
    # plain tracebacks in failure reports: a profile that turns off IPython's ANSI colours
    if "IPYTHONDIR" not in os.environ:
        ipdir = Path(tempfile.mkdtemp(prefix="tpde-ipython-"))
        profile = ipdir / "profile_default"
        profile.mkdir(parents=True)
        (profile / "ipython_kernel_config.py").write_text(
            "c.InteractiveShell.colors = 'nocolor'\n")
        os.environ["IPYTHONDIR"] = str(ipdir)
    config._tpde_toc = toc_files(config.rootpath)


def pytest_collect_file(file_path, parent):
    opt = parent.config.option
    if not (opt.nbval or opt.nbval_lax) or file_path.suffix != ".md":
        return None
    listed = parent.config._tpde_toc
    if listed is not None and file_path.resolve() not in listed:
        return None
    if not is_myst_notebook(file_path):
        return None
    return MystNotebookFile.from_parent(parent, path=file_path)
