"""Check the book's PDF: it exists, holds every chapter, has no unresolved reference, no LaTeX error.

Usage::

    python tools/check_pdf.py [_build/latex/tpde-book.pdf] [--toc _toc.yml] [--max-mb 30]
    python tools/check_pdf.py --self-test

The PDF is built by ``jupyter-book build . --builder pdflatex`` (after the HTML build, whose
executions it reads from the jupyter-cache). Its text is extracted page by page with
``pdftotext`` (poppler-utils), and its LaTeX log (the ``.log`` beside it) is read. One
``FAIL [rule] ...`` line per finding:

- ``[exists]`` no PDF at the path, or not a PDF;
- ``[size]`` the PDF is larger than ``--max-mb`` megabytes (the book's figures are PNGs at twice
  the screen's pixels: about 200 dpi at the text width);
- ``[chapter]`` a chapter of the table of contents (the root page and every ``file`` under a
  part's ``chapters``, read from ``_toc.yml``) has no page: its title, read from its source's
  first heading, is found on no page of the PDF other than a contents page (a page naming more
  than three chapters). Titles are compared on their letters and digits only (LaTeX breaks and
  hyphenates lines; TeX in a title is dropped);
- ``[unresolved]`` the text shows ``??`` (LaTeX's mark of an unresolved reference), or the log
  reports an undefined reference or citation;
- ``[latex]`` the log holds a TeX error (a line starting with ``!``: latexmk runs in
  non-stop mode and writes a PDF past errors);
- ``[glyph]`` the log reports a missing character (XeTeX's ``Missing character: There is no ...
  in font``): a character that the font does not have, printed as nothing.

It prints the page count and size of a PDF that passes. ``--self-test`` compiles two small books
with XeLaTeX (one breaks every rule but ``[exists]``, one passes them all by a near miss: a
title hyphenated across lines, TeX in a title, a question mark in the text, a section of a
chapter that has no page of its own, a size just under its limit; the failing book names the
missing chapter on its contents page only) and checks that the checker finds
exactly the planted failures; it also checks a missing and a non-PDF file.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tpde_book.ledger import toc_top_documents

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PDF = ROOT / "_build" / "latex" / "tpde-book.pdf"
#: the largest the book's PDF may be (megabytes); measured at about a third of it
DEFAULT_MAX_MB = 30.0
#: a page naming more chapters than this is a contents page
CONTENTS_PAGE = 3

#: LaTeX's warnings of an undefined label or citation (its log wraps lines at 79 characters)
_UNDEFINED = re.compile(
    r"^LaTeX Warning: (Reference|Citation|Hyper reference) `[^']*' on page \S+\s+undefined", re.M
)
_MISSING = re.compile(r"^Missing character: There is no (.+?) in font (.+?)!?$", re.M)


def title_of(source: Path) -> str:
    """The first heading of a MyST Markdown (``# Title``) or reStructuredText source."""
    text = source.read_text(encoding="utf-8")
    if source.suffix == ".md":
        text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)  # front matter
        for line in text.splitlines():
            if line.startswith("# "):
                return line[2:].strip()
    else:
        lines = text.splitlines()
        for above, line in zip(lines, lines[1:]):
            if above.strip() and re.fullmatch(r"([=\-~^#*])\1{2,}", line.strip()):
                return above.strip()
    raise ValueError(f"{source}: no title (first heading) found")


def _source(root: Path, name: str) -> Path:
    for suffix in (".md", ".rst", ".ipynb"):
        if (root / f"{name}{suffix}").exists():
            return root / f"{name}{suffix}"
    raise FileNotFoundError(f"_toc.yml names {name!r}, which has no .md, .rst or .ipynb source")


def _key(text: str) -> str:
    """Letters and digits only, lower case: how a title is compared with the PDF's text."""
    return re.sub(r"[\W_]+", "", text).lower()


def _title_keys(title: str) -> list[str]:
    """The keys of a title's parts between its TeX (typeset, not extracted as written)."""
    return [k for k in map(_key, re.split(r"\$[^$]*\$", title)) if k]


def _on(title_keys: list[str], page_key: str) -> bool:
    return all(k in page_key for k in title_keys)


def pdf_pages(pdf: Path) -> list[str]:
    """The text of each page (``pdftotext``, pages split at form feeds)."""
    if shutil.which("pdftotext") is None:
        raise RuntimeError("pdftotext not found: install poppler-utils (apt-get install poppler-utils)")
    out = subprocess.run(["pdftotext", "-enc", "UTF-8", str(pdf), "-"], check=True, capture_output=True)
    pages = out.stdout.decode("utf-8", "replace").split("\f")
    return pages[:-1] if pages and not pages[-1].strip() else pages


def check(pdf: Path, toc: Path, max_mb: float, log: Path | None = None) -> tuple[list[str], dict]:
    """Findings (``[rule] message``) and facts (pages, size) of the PDF at ``pdf``."""
    pdf = Path(pdf)
    if not pdf.is_file():
        return [f"[exists] no PDF at {pdf}"], {}
    if pdf.read_bytes()[:5] != b"%PDF-":
        return [f"[exists] {pdf} is not a PDF"], {}
    found = []
    size = pdf.stat().st_size
    facts = {"bytes": size}
    if size > max_mb * 1e6:
        found.append(f"[size] {size / 1e6:.1f} MB, above the limit of {max_mb:g} MB")
    pages = pdf_pages(pdf)
    facts["pages"] = len(pages)
    keys = [_key(p) for p in pages]
    root = Path(toc).parent
    titles = {name: title_of(_source(root, name)) for name in toc_top_documents(toc)}
    tkeys = {name: _title_keys(t) for name, t in titles.items()}
    contents = {i for i, k in enumerate(keys) if sum(_on(t, k) for t in tkeys.values()) > CONTENTS_PAGE}
    for name, t in tkeys.items():
        where = [i + 1 for i, k in enumerate(keys) if _on(t, k) and i not in contents]
        if not where:
            found.append(f"[chapter] {name} ({titles[name]!r}) has no page")
    for i, page in enumerate(pages):
        for line in page.splitlines():
            if "??" in line:
                found.append(f"[unresolved] page {i + 1}: {' '.join(line.split())[:80]!r}")
    log = Path(log) if log else pdf.with_suffix(".log")
    if not log.is_file():
        found.append(f"[latex] no LaTeX log at {log}")
        return found, facts
    text = log.read_text(encoding="utf-8", errors="replace")
    for m in _UNDEFINED.finditer(text):
        found.append(f"[unresolved] log: {' '.join(m.group(0).split())[:120]}")
    for line in text.splitlines():
        if line.startswith("! "):
            found.append(f"[latex] log: {line[:100]}")
    missing = {}
    for m in _MISSING.finditer(text):
        missing.setdefault(m.group(1), m.group(2))
    for char, font in missing.items():
        found.append(f"[glyph] log: no {char} in font {font}")
    return found, facts


# ---------------------------------------------------------------------------------------------
# self-test
# ---------------------------------------------------------------------------------------------

_TEX = r"""\documentclass{report}
\usepackage{fontspec}
\setmainfont{FreeSerif}
\begin{document}
\tableofcontents
%s
\end{document}
"""


def _compile(folder: Path, name: str, body: str) -> Path:
    tex = folder / f"{name}.tex"
    tex.write_text(_TEX % body, encoding="utf-8")
    for _ in range(2):  # twice: the contents page and references
        subprocess.run(
            ["xelatex", "-interaction=nonstopmode", tex.name],
            cwd=folder,
            capture_output=True,
            timeout=120,
        )
    return folder / f"{name}.pdf"


def self_test() -> int:
    if shutil.which("xelatex") is None:
        print("self-test needs xelatex (apt-get install texlive-xetex)")
        return 1
    problems = []
    with tempfile.TemporaryDirectory(prefix="check_pdf_") as tmp:
        root = Path(tmp)
        (root / "_toc.yml").write_text(
            "format: jb-book\nroot: intro\nparts:\n  - caption: One\n    chapters:\n"
            "      - file: a\n      - file: b\n        sections:\n          - file: s\n"
            "  - caption: Two\n    chapters:\n      - file: c\n      - file: d\n",
            encoding="utf-8",
        )
        (root / "intro.md").write_text("---\ntitle: x\n---\n# The book's front page\n", encoding="utf-8")
        (root / "a.md").write_text("# Clustering versus blow-up of the $\\Sigma$ flow\n", encoding="utf-8")
        (root / "b.rst").write_text("Transport of measures\n=====================\n", encoding="utf-8")
        (root / "s.md").write_text("# A section, not a chapter\n", encoding="utf-8")
        (root / "c.md").write_text("# Gradient flows\n", encoding="utf-8")
        (root / "d.md").write_text("# Derivations\n", encoding="utf-8")
        others = r"\chapter{Transport of measures}\chapter{Gradient flows}\chapter{Derivations}"
        good = _compile(
            root,
            "good",
            r"\chapter{The book's front page} Is it? Yes.\chapter{Clustering versus blow\-up of the"
            r" $\Sigma$ flow}\label{a}See chapter~\ref{a}." + others,
        )
        bad = _compile(
            root,
            "bad",
            r"\chapter{The book's front page} See \ref{nowhere} and \cite{nobody}."
            r"\addcontentsline{toc}{chapter}{Clustering versus blow-up of the $\Sigma$ flow}"
            + others
            + "\\undefinedcommand{} \U0001f600",
        )
        if not good.is_file() or not bad.is_file():
            print("self-test: xelatex did not write its PDFs")
            return 1
        size = good.stat().st_size
        found, facts = check(good, root / "_toc.yml", max_mb=(size + 1) / 1e6)
        if found:
            problems += [f"good: unexpected {f}" for f in found]
        found, _ = check(bad, root / "_toc.yml", max_mb=(bad.stat().st_size - 1) / 1e6)
        rules = {}
        for f in found:
            rule = f.split("]")[0] + "]"
            rules[rule] = rules.get(rule, 0) + 1
        for rule in ("[size]", "[chapter]", "[unresolved]", "[latex]", "[glyph]"):
            if rule not in rules:
                problems.append(f"bad: {rule} not found")
        if not any("a (" in f for f in found if f.startswith("[chapter]")):
            problems.append("bad: the missing chapter a not named")
        if any("s (" in f or "b (" in f for f in found if f.startswith("[chapter]")):
            problems.append("bad: a present chapter, or a section, reported missing")
        for path, rule in ((root / "missing.pdf", "[exists]"), (root / "_toc.yml", "[exists]")):
            found, _ = check(path, root / "_toc.yml", max_mb=1)
            if [f.split("]")[0] + "]" for f in found] != [rule]:
                problems.append(f"{path.name}: expected {rule} only, got {found}")
    for p in problems:
        print("FAIL self-test:", p)
    print(
        "self-test passed: rules size, chapter, unresolved, latex, glyph and exists each found where "
        "broken, nothing found in the book that passes them by a near miss"
        if not problems
        else f"self-test failed: {len(problems)} differences"
    )
    return 1 if problems else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pdf", nargs="?", default=str(DEFAULT_PDF))
    ap.add_argument("--toc", default=str(ROOT / "_toc.yml"))
    ap.add_argument("--log", default=None, help="the LaTeX log (default: the .log beside the PDF)")
    ap.add_argument("--max-mb", type=float, default=DEFAULT_MAX_MB)
    ap.add_argument("--self-test", action="store_true", help="check the checker on two small books, exit")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    found, facts = check(Path(args.pdf), Path(args.toc), args.max_mb, args.log)
    for f in found:
        print("FAIL", f)
    if found:
        print(f"{args.pdf}: {len(found)} finding(s)")
        return 1
    print(
        f"{args.pdf}: {facts['pages']} pages, {facts['bytes'] / 1e6:.1f} MB: every chapter, "
        "no unresolved reference, no LaTeX error, no missing glyph"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
