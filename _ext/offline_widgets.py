"""Serve the ipywidgets JavaScript with the book, so widgets render without network access.

By default MyST-NB loads RequireJS and the Jupyter widget manager (``@jupyter-widgets/html-manager``)
from CDNs. At build time this extension fetches both packages from the npm registry with
``npm pack`` (pinned versions, cached in ``_build/.offline_js``; nothing is committed), copies
them into the built site under ``_offline/`` and points MyST-NB at those copies. Without ``npm``
(or if the fetch fails) it leaves MyST-NB's CDN defaults in place and says so.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

PACKAGES = {"html-manager": "@jupyter-widgets/html-manager@1.0.6", "requirejs": "requirejs@2.3.8"}
SITE_DIR = "_offline"


def _fetch(cache):
    """Unpack the pinned npm packages into ``cache`` (once); return True when both are there."""
    done = cache / "complete"
    if done.exists():
        return True
    npm = shutil.which("npm")
    if npm is None:
        logger.info("offline_widgets: npm not found; ipywidgets JavaScript will load from CDNs")
        return False
    cache.mkdir(parents=True, exist_ok=True)
    for name, spec in PACKAGES.items():
        try:
            out = subprocess.run(
                [npm, "pack", spec, "--pack-destination", str(cache), "--silent"],
                check=True,
                capture_output=True,
                text=True,
                timeout=300,
            )
        except (subprocess.SubprocessError, OSError) as exc:
            logger.info(f"offline_widgets: npm pack {spec} failed ({exc}); using CDNs")
            return False
        tarball = cache / out.stdout.strip().splitlines()[-1]
        with tarfile.open(tarball) as tar:
            tar.extractall(cache / name, filter="data")
        tarball.unlink()
    done.touch()
    return True


def configure(app, config):
    cache = Path(app.outdir).parent / ".offline_js"
    if not _fetch(cache):
        return
    app._offline_widgets_cache = cache
    config.nb_ipywidgets_js = {
        f"{SITE_DIR}/require.min.js": {},
        f"{SITE_DIR}/html-manager/embed-amd.js": {"data-jupyter-widgets-cdn": f"{SITE_DIR}/"},
    }


def copy_assets(app, exception):
    cache = getattr(app, "_offline_widgets_cache", None)
    if exception is not None or cache is None or app.builder.format != "html":
        return
    site = Path(app.outdir) / "_static" / SITE_DIR  # Sphinx resolves relative JS under _static
    site.mkdir(parents=True, exist_ok=True)
    shutil.copy2(cache / "requirejs" / "package" / "require.js", site / "require.min.js")
    shutil.copytree(cache / "html-manager" / "package" / "dist", site / "html-manager", dirs_exist_ok=True)


def setup(app):
    app.connect("config-inited", configure)
    app.connect("build-finished", copy_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
