"""The claims ledger: which of the paper's claims the book checks, with what status.

A chapter checks a claim in an ``assert`` cell and then calls :func:`record` with a stable key,
the claim's *status* and a one-line statement. Because :func:`record` runs only after the asserts
above it passed, a record means "checked and passed in this run". The ledger page
(``claims.md``) calls :func:`ledger_markdown`, which lists every :func:`record` call found in the
chapters' sources (so a claim whose check did not run still appears, marked as such) with a link
to the section that checks it and whether the check passed in the current build.

Statuses
--------
``"paper"``: stated in the paper (its abstract, or the authors' code);
``"derived"``: derived here and checked numerically;
``"observed"``: observed numerically only.
"""

from __future__ import annotations

import ast
import json
import numbers
import re
import time
from pathlib import Path

__all__ = ["record", "collect", "ledger_markdown", "STATUSES"]

STATUSES = {
    "paper": "paper's claim",
    "derived": "derived here",
    "observed": "observed numerically",
}
_KEY = re.compile(r"^[a-z0-9][a-z0-9\-]*$")


def _book_root(start=None):
    """The nearest folder at or above ``start`` (default: the working directory) with a _toc.yml."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_toc.yml").exists():
            return folder
    return None


def _records_dir(root):
    return Path(root) / "_build" / "claims"


def record(key, status, statement, value=None):
    """Record that the claim ``key`` was checked (call it after the claim's ``assert`` lines).

    Parameters
    ----------
    key : str
        Stable identifier, lowercase words joined by hyphens (``"softmax-blowup-time"``).
    status : {"paper", "derived", "observed"}
        Where the statement comes from (see the module docstring).
    statement : str
        The claim in one sentence.
    value : float or str, optional
        The number the check measured (shown in the ledger).

    Returns
    -------
    None. Prints a one-line confirmation; inside the book, writes ``_build/claims/<key>.json``.
    """
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError(f"key must be lowercase words joined by hyphens, got {key!r}")
    if status not in STATUSES:
        raise ValueError(f"status must be one of {sorted(STATUSES)}, got {status!r}")
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError("statement must be a non-empty string")
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, numbers.Integral)):
        value = f"{float(value):.3g}"
    shown = "" if value is None else f" [{value}]"
    print(f"checked ({STATUSES[status]}): {statement}{shown}")
    root = _book_root()
    if root is None:
        return
    folder = _records_dir(root)
    folder.mkdir(parents=True, exist_ok=True)
    payload = {"key": key, "status": status, "statement": statement,
               "value": None if value is None else str(value), "time": time.time()}
    (folder / f"{key}.json").write_text(json.dumps(payload), encoding="utf-8")


def toc_documents(root):
    """Document names listed in ``root/_toc.yml`` (``root`` and ``file`` entries), in book order."""
    import yaml

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


def _toc_chapters(root):
    return [f for f in toc_documents(root) if f.startswith("chapters/")]


def _slug(title):
    """MyST's heading anchor (``myst_heading_anchors``) for a heading's Markdown text.

    MyST slugifies only the heading's plain-text and inline-code parts (inline math is left
    out), lowercased, spaces to hyphens, other punctuation dropped.
    """
    text = re.sub(r"\$[^$]*\$", "", title.strip())            # inline math: not part of the slug
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)   # links: their text
    text = text.replace("`", "").replace("**", "").replace("*", "")
    return re.sub(r"[^\w\u4e00-\u9fff\- ]", "", text.lower().replace(" ", "-"))


def _calls_in(source):
    """Literal arguments of every ``record(...)`` / ``claims.record(...)`` call in ``source``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
        if name != "record":
            continue
        args = {}
        for label, arg in zip(("key", "status", "statement"), node.args):
            args[label] = arg
        for kw in node.keywords:
            if kw.arg in ("key", "status", "statement"):
                args[kw.arg] = kw.value
        try:
            found.append({k: ast.literal_eval(v) for k, v in args.items()})
        except ValueError:
            continue
    return [c for c in found if {"key", "status", "statement"} <= set(c)]


def collect(root=None):
    """Every claim checked in the chapters listed in ``_toc.yml``, in book order.

    Returns
    -------
    list of dict
        Keys ``key``, ``status``, ``statement``, ``chapter`` (doc name), ``title`` (chapter
        title), ``section`` and ``anchor`` (the nearest heading above the checking cell).
    """
    import jupytext

    root = Path(root) if root is not None else _book_root()
    if root is None:
        raise ValueError("root must be the book's folder (none with a _toc.yml found)")
    claims = []
    for doc in _toc_chapters(root):
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
                        section, anchor = m.group(2).strip(), _slug(m.group(2))
                        base, k = anchor, 1
                        while anchor in seen:
                            anchor, k = f"{base}-{k}", k + 1
                        seen.add(anchor)
            elif cell.cell_type == "code":
                for call in _calls_in(cell.source):
                    claims.append(dict(call, chapter=doc.removesuffix(".md"), title=title,
                                       section=section, anchor=anchor))
    return claims


def ledger_markdown(root=None):
    """The ledger as a Markdown table (MyST), one row per claim, with links and build status."""
    root = Path(root) if root is not None else _book_root()
    claims = collect(root)
    seen = {}
    for c in claims:
        if c["key"] in seen:
            raise ValueError(f"claim key {c['key']!r} is used twice: in {seen[c['key']]} and "
                             f"{c['chapter']}")
        seen[c["key"]] = c["chapter"]
    folder = _records_dir(root)
    rows = ["| claim | status | checked in | passed in this build |",
            "|---|---|---|---|"]
    counts = {s: 0 for s in STATUSES}
    passed = 0
    for c in claims:
        counts[c["status"]] = counts.get(c["status"], 0) + 1
        rec = folder / f"{c['key']}.json"
        ok = rec.exists()
        if ok:
            data = json.loads(rec.read_text(encoding="utf-8"))
            src = root / (c["chapter"] + ".md")
            ok = data["time"] >= src.stat().st_mtime  # a record older than its chapter is stale
            value = f" ({data['value']})" if ok and data.get("value") not in (None, "None") else ""
        passed += ok
        mark = f"✔ passed{value}" if ok else "✘ not run in this build"
        short = c["title"].split(":")[0]  # the chapter title before its subtitle
        link = f"[{short} › {c['section']}](chapters/{Path(c['chapter']).name}.md#{c['anchor']})"
        statement = c["statement"].replace("|", "\\|")
        rows.append(f"| {statement} | {STATUSES[c['status']]} | {link} | {mark} |")
    summary = (f"**{len(claims)} claims checked**, {passed} passed in this build: "
               + ", ".join(f"{n} {STATUSES[s]}" for s, n in counts.items()) + ".")
    return summary + "\n\n" + "\n".join(rows) + "\n"
