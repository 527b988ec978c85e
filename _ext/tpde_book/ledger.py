"""Static view of the book: the documents of ``_toc.yml`` and the ``verdict`` calls in chapters.

Used by the Sphinx extension that builds the claims ledger (which checks exist, and where) and
by the pytest plugin that runs the chapters (which documents are in the book).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jupytext
import yaml

__all__ = ["toc_documents", "toc_top_documents", "toc_chapters", "slug", "calls_in", "collect"]

_ARGS = ("key", "status", "statement", "value", "claim", "kind")
_LITERAL = ("key", "status", "statement", "claim", "kind")


def toc_documents(root):
    """Document names listed in ``root/_toc.yml`` (``root`` and ``file`` entries), in book order."""
    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text(encoding="utf-8")) or {}
    names = []

    def walk(node):
        if isinstance(node, dict):
            names.extend(node[key] for key in ("root", "file") if key in node)
            for value in node.values():
                if isinstance(value, (list, dict)):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc)
    return names


def toc_top_documents(toc_path):
    """The root document and each part's chapters of the ``_toc.yml`` at ``toc_path`` (their
    sections and globs left out), in book order: the book's chapters as a PDF has them."""
    toc = yaml.safe_load(Path(toc_path).read_text(encoding="utf-8")) or {}
    names = [toc["root"]] if "root" in toc else []
    for part in toc.get("parts") or [{"chapters": toc.get("chapters", [])}]:
        names += [c["file"] for c in part.get("chapters", []) if "file" in c]
    return names


def toc_chapters(root):
    """The chapter documents (under ``chapters/``) of ``root/_toc.yml``."""
    return [f for f in toc_documents(root) if f.startswith("chapters/")]


def slug(title):
    """MyST's heading anchor (``myst_heading_anchors``) for a heading's Markdown text.

    MyST slugifies only the heading's plain-text and inline-code parts (inline math is left
    out), lowercased, spaces to hyphens, other punctuation dropped.
    """
    text = re.sub(r"\$[^$]*\$", "", title.strip())  # inline math: not part of the slug
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = text.replace("`", "").replace("**", "").replace("*", "")
    return re.sub(r"[^\w\u4e00-\u9fff\- ]", "", text.lower().replace(" ", "-"))


def calls_in(source):
    """Literal arguments of every ``verdict(...)`` call in ``source``.

    A check the ledger cannot read would silently be missing from it, so a cell that mentions
    ``verdict`` but cannot be read is an error (:class:`ValueError`), not an empty answer: a cell
    that starts with an IPython magic (``%time``, ``%%capture``, ``!cmd``) or has a syntax error,
    and a call whose arguments are unpacked (``verdict(**spec)``, ``verdict(*args)``).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        if not re.search(r"\bverdict\b", source):
            return []
        first = next((line.strip() for line in source.splitlines() if line.strip()), "")
        why = (
            f"it starts with the IPython magic {first.split()[0]!r}"
            if first.startswith(("%", "!"))
            else f"a syntax error at line {err.lineno}: {err.msg}"
        )
        raise ValueError(
            f"the ledger cannot read a cell that calls verdict: {why}; write the check as plain "
            "Python (time it outside the checking cell)"
        ) from err
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
        if name != "verdict":
            continue
        unpacked = [a for a in node.args if isinstance(a, ast.Starred)]
        unpacked += [kw for kw in node.keywords if kw.arg is None]
        if unpacked:
            raise ValueError(
                f"{name}(...) at line {node.lineno}: arguments unpacked with * or ** cannot be "
                "read without running the chapter, so the ledger would miss the check; pass key, "
                f"status, statement, claim and kind as literals: {ast.unparse(node)[:120]}"
            )
        args = {}
        for label, arg in zip(_ARGS, node.args):
            args[label] = arg
        for kw in node.keywords:
            if kw.arg in _ARGS:
                args[kw.arg] = kw.value
        try:
            found.append({k: ast.literal_eval(v) for k, v in args.items() if k in _LITERAL})
        except ValueError as err:
            # a check the ledger cannot read would silently be missing from it: say so
            raise ValueError(
                f"{name}(...) at line {node.lineno}: key, status, statement, claim and kind must "
                "be literals (plain strings, no f-strings or names), so that the ledger can list "
                f"the check without running the chapter: {ast.unparse(node)[:120]}"
            ) from err
    out = []
    for c in found:
        if {"key", "status", "statement"} <= set(c):
            c.setdefault("claim", None)
            c.setdefault("kind", "test")
            c.pop("value", None)
            out.append(c)
    return out


def collect(root):
    """Every ``verdict`` call in the chapters listed in ``root/_toc.yml``, in book order.

    Returns
    -------
    list of dict
        Keys ``key``, ``status``, ``statement``, ``claim``, ``kind``, ``chapter`` (doc name),
        ``title`` (chapter title), ``section`` and ``anchor`` (the nearest heading above the checking cell).
    """
    root = Path(root)
    claims = []
    for doc in toc_chapters(root):
        path = root / (doc if doc.endswith(".md") else doc + ".md")
        nb = jupytext.read(str(path))
        title, section, anchor = doc, "", ""
        seen = set()
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                for line in cell.source.splitlines():
                    m = re.match(r"^(#{1,3})\s+(.*)", line)
                    if m:
                        if len(m.group(1)) == 1 and title == doc:
                            title = m.group(2).strip()
                        section, anchor = m.group(2).strip(), slug(m.group(2))
                        base, k = anchor, 1
                        while anchor in seen:
                            anchor, k = f"{base}-{k}", k + 1
                        seen.add(anchor)
            elif cell.cell_type == "code":
                for call in calls_in(cell.source):
                    claims.append(
                        dict(
                            call, chapter=doc.removesuffix(".md"), title=title, section=section, anchor=anchor
                        )
                    )
    return claims
