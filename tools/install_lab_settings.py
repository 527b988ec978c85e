"""Install the book's JupyterLab settings into the running Python environment (never into $HOME).

Usage::

    .venv/bin/python tools/install_lab_settings.py [--check]

Writes ``{sys.prefix}/share/jupyter/lab/settings/overrides.d/tpde-book.json``, which the
JupyterLab of this environment (and only it) reads as default settings: a user's own settings
still win. The settings:

- Markdown and MyST files open as notebooks through Jupytext (the chapters are Jupytext MyST
  notebooks), as ``jupytext-config set-default-viewer`` would do, but for this environment only
  and without touching ``.py``, ``.R`` or ``.jl`` files;
- no news fetched from the Internet and no update check at start-up (the book works offline).

The README's setup command and ``binder/postBuild`` run it. ``--check`` only verifies that the
installed file holds these settings (exit 1 otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SETTINGS = {
    "@jupyterlab/docmanager-extension:plugin": {
        "defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"},
    },
    "@jupyterlab/apputils-extension:notification": {"checkForUpdates": False, "fetchNews": "false"},
}


def settings_path(prefix=None):
    """Where this environment's JupyterLab reads namespaced default-setting overrides."""
    prefix = Path(sys.prefix if prefix is None else prefix)
    return prefix / "share" / "jupyter" / "lab" / "settings" / "overrides.d" / "tpde-book.json"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="verify only, write nothing")
    args = ap.parse_args(argv)
    path = settings_path()
    if args.check:
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"JupyterLab settings: cannot read {path}: {exc}")
            return 1
        if found != SETTINGS:
            print(f"JupyterLab settings: {path} differs from tools/install_lab_settings.py")
            return 1
        print(f"JupyterLab settings: ok ({path})")
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(SETTINGS, indent=2) + "\n", encoding="utf-8")
    print(f"JupyterLab settings for this environment written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
