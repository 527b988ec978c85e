"""The chapters are stored exactly as JupyterLab (through Jupytext) would save them.

Opening a chapter in JupyterLab and saving it must not change the file: otherwise a reader's
checkout is dirty after reading. JupyterLab saves through Jupytext's MyST writer with the running
kernel's spec, which is what Jupytext's own command line writes:

    jupytext --to md:myst --set-kernel python3 chapters/*.md

(also a ``repo: local`` pre-commit hook, ``.pre-commit-config.yaml``). This test runs that
command on copies of the chapters and fails, naming the chapter and the first differing lines,
when one would be rewritten.
"""

import difflib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))
COMMAND = ["--to", "md:myst", "--set-kernel", "python3", "--quiet"]


def jupytext_rewrite(paths, folder):
    """Copies of ``paths`` in ``folder``, rewritten by Jupytext's CLI (one process for all)."""
    copies = []
    for path in paths:
        copies.append(Path(folder) / path.name)
        shutil.copyfile(path, copies[-1])
    subprocess.run(
        [sys.executable, "-m", "jupytext", *COMMAND, *map(str, copies)],
        check=True,
        capture_output=True,
        text=True,
    )
    return {path: copy.read_text(encoding="utf-8") for path, copy in zip(paths, copies)}


def variants():
    """Non-canonical versions of chapter 1: a flow-style header, another kernel display name."""
    text = CHAPTERS[0].read_text(encoding="utf-8")
    head, body = text.split("\n---\n", 1)
    return [
        "---\njupytext:\n  text_representation: {extension: .md, format_name: myst}\n"
        "kernelspec: {display_name: Python 3, language: python, name: python3}\n---\n" + body,
        text.replace("display_name: Python 3 (ipykernel)", "display_name: Python 3"),
    ]


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    """The chapters and the variants, rewritten by one Jupytext process."""
    folder = tmp_path_factory.mktemp("variants")
    paths = []
    for k, variant in enumerate(variants()):
        paths.append(folder / f"variant{k}.md")
        paths[-1].write_text(variant, encoding="utf-8")
    return jupytext_rewrite(CHAPTERS + paths, tmp_path_factory.mktemp("jupytext"))


def test_there_are_chapters():
    assert len(CHAPTERS) >= 7


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_is_in_jupytext_canonical_form(path, rewritten):
    text, new = path.read_text(encoding="utf-8"), rewritten[path]
    if new != text:
        diff = list(difflib.unified_diff(text.splitlines(), new.splitlines(), lineterm="", n=0))
        pytest.fail(
            f"{path.name} would be rewritten on save (run jupytext "
            f"{' '.join(COMMAND[:-1])} chapters/{path.name}):\n" + "\n".join(diff[:12])
        )


def test_canonical_form_detects_a_rewrite(rewritten):
    """The check is not vacuous: each variant is rewritten, into the chapter as it is stored."""
    text = CHAPTERS[0].read_text(encoding="utf-8")
    found = {p.name: new for p, new in rewritten.items() if p.name.startswith("variant")}
    assert len(found) == len(variants())
    for k, variant in enumerate(variants()):
        assert variant != text
        assert found[f"variant{k}.md"] == text


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
    assert not long, (
        (
            f"{path.name}: {len(long)} lines over 88 characters in code cells, e.g. "
            f"line {long[0][0]}: {long[0][1]!r}"
        )
        if long
        else ""
    )
