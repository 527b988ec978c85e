"""Make the downloadable ``.ipynb`` of each page run outside the book's environment.

The download button of a page offers the executed notebook that sphinx-book-theme copies to
``_sources/<page>.ipynb``; the Colab button opens the same file (the publishing workflow pushes
``_sources`` to the repository's ``notebooks`` branch). When the build has finished, this
extension puts a set-up cell first in each of those copies (the chapters' sources are not
touched). The cell installs **the version of the book that built the page**: ``tpde_lib`` (with
its widgets extra) and ``tpde_book`` from the repository at the tag ``v<version>`` when the
build ran on that tag, else at the exact commit; never a branch, so a later push does not change
what an old page runs. It installs only when the installed ``tpde_lib`` is missing or of another
version, checks the imports afterwards and stops with a clear message when they fail. The cell
is marked (``metadata.tpde_setup``) so it is added only once.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import nbformat
from sphinx.util import logging

logger = logging.getLogger(__name__)
MARK = "tpde_setup"
COLAB = "https://colab.research.google.com/github"
NOTEBOOKS_BRANCH = "notebooks"


def _git(srcdir, *args):
    try:
        out = subprocess.run(
            ["git", "-C", str(srcdir), *args], capture_output=True, text=True, timeout=20, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def build_ref(srcdir, version):
    """The git reference the page's set-up cell installs: ``v<version>`` on that tag, else the commit.

    Outside a git checkout (e.g. a source archive) the release tag ``v<version>`` is the best
    description of the sources; a build from uncommitted changes installs their commit.
    """
    commit = _git(srcdir, "rev-parse", "HEAD")
    if not commit:
        return f"v{version}"
    tags = (_git(srcdir, "tag", "--points-at", "HEAD") or "").split()
    return f"v{version}" if f"v{version}" in tags else commit


def setup_source(repo_url, ref, version):
    """The set-up cell's code for a page built from ``repo_url`` at git reference ``ref``."""
    if not repo_url:
        raise ValueError("repo_url: the book's repository URL is needed to pin the set-up cell")
    if not ref or ref in {"main", "master", "HEAD"}:
        raise ValueError(f"ref: expected a tag or a commit, not a branch ({ref!r})")
    base = f"git+{repo_url.rstrip('/')}@{ref}"
    lib = f"tpde_lib[widgets] @ {base}"
    book = f"tpde_book @ {base}#subdirectory=_ext"
    return "\n".join(
        [
            "# Set-up (added to the downloaded notebook). This page was built by tpde_lib",
            f"# {version} from {repo_url} at {ref}; this cell installs exactly that version",
            "# (tpde_lib and the book's tpde_book) unless it is already installed, as it is in the",
            "# repository's environment (its README) and on Binder. The live panels need a running",
            "# kernel; the static twin below each panel plays without one.",
            "import importlib",
            "from importlib.metadata import PackageNotFoundError, version",
            "",
            f'PAGE_VERSION = "{version}"',
            "try:",
            '    installed = version("tpde_lib"), version("tpde_book")',
            "except PackageNotFoundError:",
            "    installed = None",
            "if installed != (PAGE_VERSION, PAGE_VERSION):",
            f'    %pip install --quiet "{lib}" "{book}"',
            "    importlib.invalidate_caches()",
            "try:",
            "    import tpde_book  # noqa: F401",
            "    import tpde_lib",
            "except ImportError as exc:",
            "    raise RuntimeError(",
            '        "tpde_lib could not be installed (see pip\'s message above). Install it by hand "',
            f'        \'with: pip install "{lib}" "{book}"\'',
            "    ) from exc",
            "if tpde_lib.__version__ != PAGE_VERSION:",
            '    print(f"Note: tpde_lib {tpde_lib.__version__} is imported; this page was built with "',
            '          f"{PAGE_VERSION} (restart the kernel if pip has just replaced it).")',
        ]
    )


def add_setup_cell(nb, source):
    """Put the set-up cell first in ``nb`` (a NotebookNode); False when it is already there."""
    if nb.cells and nb.cells[0].get("metadata", {}).get(MARK):
        return False
    cell = nbformat.v4.new_code_cell(source, metadata={MARK: True, "tags": ["setup"]})
    if (nb.nbformat, nb.get("nbformat_minor", 0)) < (4, 5):
        cell.pop("id", None)  # cell ids exist from nbformat 4.5 on
    nb.cells.insert(0, cell)
    return True


def colab_url(repo_url, pagename):
    """Colab's address of the executed notebook of ``pagename`` on the ``notebooks`` branch."""
    parts = repo_url.rstrip("/").split("/")
    if len(parts) < 5 or parts[2] != "github.com":
        return None
    org, repo = parts[3], parts[4]
    return f"{COLAB}/{org}/{repo}/blob/{NOTEBOOKS_BRANCH}/{pagename}.ipynb"


def add_colab_button(app, pagename, templatename, context, doctree):
    """Add "Colab" to the launch menu of a notebook page (after sphinx-book-theme built it)."""
    url = colab_url((app.config.html_theme_options or {}).get("repository_url", ""), pagename)
    if url is None or not context.get("ipynb_source"):
        return
    for group in context.get("header_buttons", []):
        if group.get("label") == "launch-buttons":
            group["buttons"].append(
                {
                    "type": "link",
                    "text": "Colab",
                    "url": url,
                    "tooltip": "Open the executed notebook in Colab",
                    "icon": "_static/images/logo_colab.png",
                }
            )
            return


def inject(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    import tpde_lib

    options = app.config.html_theme_options or {}
    ref = build_ref(app.srcdir, tpde_lib.__version__)
    source = setup_source(options.get("repository_url"), ref, tpde_lib.__version__)
    sources = Path(app.outdir) / "_sources"
    changed = 0
    for path in sorted(sources.rglob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if add_setup_cell(nb, source):
            nbformat.write(nb, path)
            changed += 1
    logger.info(f"download_setup: set-up cell (tpde_lib at {ref}) added to {changed} notebook(s)")


def setup(app):
    app.connect("build-finished", inject)
    # after sphinx-book-theme's launch buttons (priority 500)
    app.connect("html-page-context", add_colab_button, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
