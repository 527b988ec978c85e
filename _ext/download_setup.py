"""Make the downloadable ``.ipynb`` of each page run outside the book's environment.

The download button of a page offers the executed notebook that sphinx-book-theme copies to
``_sources/<page>.ipynb``. When the build has finished, this extension puts a set-up cell first
in each of those copies (the chapters' sources are not touched): a guarded ``%pip install`` of
``tpde_lib`` from the book's repository when it cannot be imported, and a note on where the
live panels come from. The cell is marked (``metadata.tpde_setup``) so it is added only once.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from sphinx.util import logging

logger = logging.getLogger(__name__)
MARK = "tpde_setup"


def setup_source(repo_url=None, branch="main"):
    """The set-up cell's code for a book whose repository is ``repo_url`` (None: unknown)."""
    if repo_url:
        where = f"from the book's repository, {repo_url}"
        install = f'    %pip install --quiet "tpde_lib @ git+{repo_url.rstrip("/")}@{branch}"'
    else:
        where = "from the book's repository"
        install = '    raise ImportError("tpde_lib is missing: install the book\'s repository with pip")'
    return "\n".join([
        "# Set-up (added to the downloaded notebook). This notebook needs tpde_lib, the book's",
        f"# library, {where}.",
        "# In the repository's environment (its README) or on Binder it is already installed;",
        "# elsewhere this cell installs it with pip when the import fails.",
        "# The live panels are ipywidgets built by tpde_lib.widgets.explore: they need a running",
        "# kernel, so run the notebook (a panel opened without one shows only as text, such as",
        "# 'VBox(children=...)'); the static twin below each panel plays without a kernel.",
        "try:",
        "    import tpde_lib  # noqa: F401",
        "except ImportError:",
        install,
    ])


def add_setup_cell(nb, source):
    """Put the set-up cell first in ``nb`` (a NotebookNode); False when it is already there."""
    if nb.cells and nb.cells[0].get("metadata", {}).get(MARK):
        return False
    cell = nbformat.v4.new_code_cell(source, metadata={MARK: True, "tags": ["setup"]})
    if (nb.nbformat, nb.get("nbformat_minor", 0)) < (4, 5):
        cell.pop("id", None)  # cell ids exist from nbformat 4.5 on
    nb.cells.insert(0, cell)
    return True


def inject(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    options = app.config.html_theme_options or {}
    source = setup_source(options.get("repository_url"), options.get("repository_branch") or "main")
    sources = Path(app.outdir) / "_sources"
    changed = 0
    for path in sorted(sources.rglob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if add_setup_cell(nb, source):
            nbformat.write(nb, path)
            changed += 1
    logger.info(f"download_setup: set-up cell added to {changed} downloadable notebook(s)")


def setup(app):
    app.connect("build-finished", inject)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
