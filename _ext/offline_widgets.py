"""Serve the ipywidgets JavaScript with the book, so widgets render without network access.

By default MyST-NB loads RequireJS and the Jupyter widget manager (``@jupyter-widgets/html-manager``)
from CDNs. At build time this extension fetches both packages from the npm registry with
``npm pack`` (pinned versions, cached in ``_build/.offline_js``; nothing is committed), copies
them into the built site under ``_offline/`` and points MyST-NB at those copies. Without ``npm``
(or if the fetch fails) it leaves MyST-NB's CDN defaults in place and says so.

The widget manager's stylesheet loads its icon fonts from its *public path*, which its bundle
takes from RequireJS's module address: ``@jupyter-widgets/html-manager/dist/`` relative to the
page. The fonts are therefore also copied there, next to every page that loads the manager
(otherwise each such page asks for six fonts that are not served).
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
#: the manager's icon fonts (Font Awesome, bundled by the package: nothing is fetched elsewhere)
_FONTS = {".woff", ".woff2", ".ttf", ".eot", ".svg"}


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
    fonts = [f for f in (site / "html-manager").iterdir() if f.suffix in _FONTS]
    outdir = Path(app.outdir)
    folders = {
        page.parent
        for page in outdir.rglob("*.html")
        if "_static" not in page.parts and "html-manager/embed-amd.js" in page.read_text(encoding="utf-8")
    }
    for folder in folders:
        target = folder / "@jupyter-widgets" / "html-manager" / "dist"
        target.mkdir(parents=True, exist_ok=True)
        for font in fonts:
            shutil.copy2(font, target / font.name)


def setup(app):
    app.connect("config-inited", configure)
    app.connect("build-finished", copy_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
