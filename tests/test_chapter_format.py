"""The chapters are stored exactly as JupyterLab (through Jupytext) would save them.

Opening a chapter in JupyterLab and saving it must not change the file: otherwise a reader's
checkout is dirty after reading. ``tools/canonical_chapters.py`` rewrites a chapter into that
form; this test fails, naming the chapter and the first differing line, when one is not.
"""

import difflib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))

_spec = importlib.util.spec_from_file_location("canonical_chapters",
                                               ROOT / "tools" / "canonical_chapters.py")
canonical_chapters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(canonical_chapters)


def test_there_are_chapters():
    assert len(CHAPTERS) >= 7


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_is_in_jupytext_canonical_form(path):
    text = path.read_text(encoding="utf-8")
    new = canonical_chapters.canonical(text)
    if new != text:
        diff = list(difflib.unified_diff(text.splitlines(), new.splitlines(), lineterm="", n=0))
        pytest.fail(f"{path.name} would be rewritten on save (run tools/canonical_chapters.py):\n"
                    + "\n".join(diff[:12]))


def test_canonical_form_detects_a_rewrite():
    """The check is not vacuous: a flow-style header (as the chapters had) is not canonical."""
    text = CHAPTERS[0].read_text(encoding="utf-8")
    head, body = text.split("\n---\n", 1)
    flow = ("---\njupytext:\n  text_representation: {extension: .md, format_name: myst}\n"
            "kernelspec: {display_name: Python 3, language: python, name: python3}\n---\n" + body)
    assert canonical_chapters.canonical(flow) != flow


PAGES = CHAPTERS + sorted((ROOT / "appendix").glob("*.md")) + [ROOT / "execution.md"]


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_code_cells_fit_the_page(path):
    """At most 88 characters per line inside code cells, their option blocks (captions)
    included: the book's page shows them without scrolling. Counted in UTF-8 bytes, the
    stricter measure (a caption's Greek letters and subscripts count two or three)."""
    long, inside = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```{code-cell}"):
            inside = True
        elif inside and line.startswith("```"):
            inside = False
        elif inside and len(line.encode("utf-8")) > 88:
            long.append((number, line))
    assert not long, (f"{path.name}: {len(long)} lines over 88 characters in code cells, e.g. "
                      f"line {long[0][0]}: {long[0][1]!r}") if long else ""
