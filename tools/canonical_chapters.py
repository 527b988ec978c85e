"""Rewrite the book's chapters in Jupytext's canonical MyST form (what JupyterLab saves).

JupyterLab saves a Jupytext notebook back through Jupytext's writer, so a chapter that is not
already in that form is rewritten on the first autosave (a dirty checkout after reading). This
script applies the writer once; ``tests/test_chapter_format.py`` checks that nothing is left
to rewrite. The kernel's display name is the one ipykernel registers, which JupyterLab writes.

Usage: ``python tools/canonical_chapters.py [--check] [files...]`` (default: chapters/*.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import jupytext

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def canonical(text):
    """The chapter ``text`` as Jupytext writes it back (MyST format, ipykernel's kernelspec)."""
    nb = jupytext.reads(text, fmt="md:myst")
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    return jupytext.writes(nb, fmt="md:myst")


def main(argv):
    check = "--check" in argv
    files = [Path(a) for a in argv if a != "--check"]
    if not files:
        files = sorted((Path(__file__).resolve().parents[1] / "chapters").glob("*.md"))
    stale = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        new = canonical(text)
        if new != text:
            stale.append(path)
            if not check:
                path.write_text(new, encoding="utf-8")
    for path in stale:
        print(f"{'not canonical' if check else 'rewritten'}: {path}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
