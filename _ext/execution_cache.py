"""Tie each executed notebook in the book's jupyter-cache to the code that produced it.

jupyter-cache (``execute_notebooks: cache``) keys an execution by the notebook's code cells only:
after a change to ``tpde_lib`` a rebuild would show the old outputs, and a chapter broken by the
change would still pass. This extension adds the *fingerprint* of everything else a chapter's
kernel runs (:func:`fingerprint`): at ``builder-inited`` it removes from the cache every record
that does not carry the current fingerprint, and marks those pages outdated (so an incremental
build executes them again), and at
``build-finished`` it writes the fingerprint into the records this build created (the
record's ``data``, next to myst-nb's ``execution_seconds``). jupyter-cache stores only
executions that raised nothing (myst-nb with ``allow_errors: false``), so a record carrying the
current fingerprint says: this source, run against this library in this environment, raised
nothing.

``tests/nbmyst.py`` (the pytest plugin that runs the chapters under nbval) reuses such a
record instead of executing the chapter a second time, and executes it under nbval otherwise.

Usable without Sphinx: ``fingerprint()`` and ``cached_execution(path)`` are what the plugin calls.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import re
import subprocess
import sys
from pathlib import Path

from packaging.utils import canonicalize_name

KEY = "tpde_fingerprint"
#: the packages whose source a chapter's kernel imports from this repository: hashed wherever
#: the import system finds them (a mutant's copy of ``tpde_lib`` first on ``PYTHONPATH`` differs)
PACKAGES = ("tpde_lib", "tpde_book")
#: the folder that jupyter-book gives jupyter-cache (``_build/.jupyter_cache``)
CACHE = Path("_build") / ".jupyter_cache"
#: the files that pin the book's environment (README command 1 installs them)
PIN_FILES = tuple(
    Path(__file__).resolve().parents[1] / f for f in ("requirements.txt", "requirements-model.txt")
)


_PROBE = (
    "import importlib.util as u, json, sys; print(json.dumps("
    "[list(u.find_spec(n).submodule_search_locations)[0] for n in sys.argv[1:]]))"
)


def package_dirs(packages=PACKAGES, cwd="."):
    """Where a kernel started in ``cwd`` (this interpreter, this environment: ``PYTHONPATH``
    included, and the folder itself first on ``sys.path``) imports ``packages`` from. Asked of
    a child process: this process's own ``sys.path`` may differ (``python -m pytest`` puts the
    repository first, where a mutant's copy of the library comes first in the kernel)."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *packages], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout
    return [Path(p).resolve() for p in json.loads(out)]


def pinned_names(files=PIN_FILES):
    """The distributions the book's environment pins (one ``name==version`` a line of
    ``files``; comments, options and local paths skipped), normalised as in PEP 503
    (``packaging``'s ``canonicalize_name``)."""
    names = set()
    for file in files:
        for line in file.read_text().splitlines():
            m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^]]*\])?\s*==", line)
            if m:
                names.add(canonicalize_name(m.group(1)))
    return sorted(names)


def _installed_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def fingerprint(cwd=".", packages=PACKAGES):
    """SHA-256 of what a chapter's kernel started in ``cwd`` runs besides the chapter: the
    Python version, the installed version of every distribution the book's environment pins
    (:data:`PIN_FILES`), and every file (path and bytes) of ``packages`` where that kernel
    imports them from (``__pycache__`` excluded).

    Tools installed beside the book (the browser check's Playwright, the release checks) are
    not pinned there and leave the fingerprint, so the executions stored by a build, alone;
    a pinned distribution at another version, or absent, changes it."""
    h = hashlib.sha256()
    h.update(f"{sys.version}|{platform.platform()}\n".encode())
    h.update("\n".join(f"{n}=={_installed_version(n)}" for n in pinned_names()).encode())
    for name, root in zip(packages, package_dirs(packages, cwd)):
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(f"\n{name}/{path.relative_to(root).as_posix()}\n".encode())
                h.update(path.read_bytes())
    return h.hexdigest()


def cached_execution(path, cache_dir, current=None):
    """The executed notebook that the book build stored for ``path``'s current source and the
    current fingerprint, with its record; ``(None, reason)`` when there is none."""
    import jupytext
    from jupyter_cache import get_cache

    if not (Path(cache_dir) / "global.db").exists():
        return None, f"no jupyter-cache at {cache_dir}"
    cache = get_cache(str(cache_dir))
    try:
        record = cache.match_cache_notebook(jupytext.read(str(path)))
    except KeyError:
        return None, "no execution of this source in the cache"
    current = current or fingerprint(Path(path).parent)
    if (record.data or {}).get(KEY) != current:
        return None, "the cached execution ran other code (fingerprint differs)"
    return cache.get_cache_bundle(record.pk).nb, record


# ---------------------------------------------------------------------------------------------
# Sphinx hooks
# ---------------------------------------------------------------------------------------------


def _cache(app):
    from jupyter_cache import get_cache

    if app.config.nb_execution_mode != "cache":
        return None
    return get_cache(app.config.nb_execution_cache_path or str(Path(app.srcdir) / CACHE))


def _kernel_dir(app):
    """The folder the chapters' kernels start in (myst-nb runs each in its page's folder)."""
    chapters = Path(app.srcdir) / "chapters"
    return chapters if chapters.is_dir() else Path(app.srcdir)


def _builder_inited(app):
    from sphinx.util import logging

    cache = _cache(app)
    if cache is None:
        return
    app._tpde_fingerprint = fingerprint(_kernel_dir(app))
    stale = [r for r in cache.list_cache_records() if (r.data or {}).get(KEY) != app._tpde_fingerprint]
    app._tpde_stale_sources = [r.uri for r in stale]
    for record in stale:
        cache.remove_cache(record.pk)
    if stale:
        logging.getLogger(__name__).info(
            f"execution_cache: {len(stale)} cached execution(s) ran other code: removed"
        )


def _outdated(app, env, added, changed, removed):
    """Pages whose cached execution was dropped: read (so executed) again, even when their
    source did not change (Sphinx would otherwise keep the old outputs of an incremental build)."""
    docs = {env.path2doc(uri) for uri in getattr(app, "_tpde_stale_sources", [])}
    return sorted(d for d in docs if d and d in env.found_docs and d not in added | changed)


def _build_finished(app, exception):
    from jupyter_cache.cache.db import NbCacheRecord, session_context
    from sphinx.util import logging

    cache = _cache(app)
    if cache is None or not hasattr(app, "_tpde_fingerprint"):
        return
    if fingerprint(_kernel_dir(app)) != app._tpde_fingerprint:
        logging.getLogger(__name__).warning(
            "execution_cache: the library changed during the build; executions not tagged"
        )
        return
    with session_context(cache.db) as session:
        for record in session.query(NbCacheRecord).all():
            if (record.data or {}).get(KEY) is None:
                record.data = {**(record.data or {}), KEY: app._tpde_fingerprint}
        session.commit()


def setup(app):
    app.connect("builder-inited", _builder_inited, priority=100)  # before myst-nb executes
    app.connect("env-get-outdated", _outdated)
    app.connect("build-finished", _build_finished)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
