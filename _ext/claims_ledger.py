"""Sphinx extension: the claims ledger, built from the notebooks executed for this build.

The page that holds the directive ``{claims-ledger}`` gets two tables:

1. **The paper's claims** (C1–C17, from ``claims_map.yml``): where the book treats each, its
   status, and its checks, tests apart from consistency checks;
2. **Every check of the book**: the ``tpde_book.record(...)`` calls found in the chapters'
   sources, with the section that holds them, their kind, and whether they passed.

A check *passed in this build* when the executed notebook of its chapter carries its record
output (a hidden MyST-NB glue output named ``claim:<key>``, emitted only after the check's
asserts ran). MyST-NB keeps the glue keys of each document it reads in the environment, and the
tables are filled at ``doctree-resolved``, i.e. after every document has been read, whatever the
order of reading. A check whose cell did not run has no output and shows "not run": there are
no files or timestamps to go stale. Duplicate keys, unknown keys in the map, and claims of the
map without a check of the stated kind fail the build.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from docutils import nodes
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

from tpde_book import KEY_PREFIX, KINDS, MIME, STATUSES
from tpde_book.ledger import collect

#: statuses of the paper's claims in the map (those of the checks, plus "not checkable")
MAP_STATUSES = dict(STATUSES, **{"not-checkable": "not checkable here"})


class claims_ledger_node(nodes.General, nodes.Element):
    """Placeholder replaced by the ledger's tables once every document is read."""


class ClaimsLedger(SphinxDirective):
    has_content = False

    def run(self):
        return [claims_ledger_node()]


def _load_map(root, name):
    path = Path(root) / name
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    claims = data.get("claims", [])
    for c in claims:
        for field in ("id", "claim", "status"):
            if field not in c:
                raise ExtensionError(f"{name}: claim {c.get('id', '?')} has no {field!r}")
        if c["status"] not in MAP_STATUSES:
            raise ExtensionError(
                f"{name}: claim {c['id']} has status {c['status']!r}, expected one of {sorted(MAP_STATUSES)}"
            )
    return claims


def _passed(app):
    """{key: payload} of every record output of the documents read for this build."""
    from myst_nb.sphinx_ import NbMetadataCollector

    out = {}
    folder = Path(app.outdir).parent / "jupyter_execute"
    for docname, data in NbMetadataCollector.get_doc_data(app.env).items():
        keys = [k[len(KEY_PREFIX) :] for k in data.get("glue", []) if k.startswith(KEY_PREFIX)]
        if not keys:
            continue
        glue_file = folder.joinpath(*docname.split("/")).with_suffix(".glue.json")
        values = {}
        if glue_file.exists():
            glued = json.loads(glue_file.read_text(encoding="utf-8"))
            for k in keys:
                raw = glued.get(KEY_PREFIX + k, {}).get("data", {}).get(MIME)
                values[k] = json.loads(raw) if isinstance(raw, str) else (raw or {})
        for k in keys:
            out[k] = values.get(k, {})
    return out


def _para(*parts):
    p = nodes.paragraph()
    for part in parts:
        p += part if isinstance(part, nodes.Node) else nodes.Text(part)
    return p


def _table(header, rows, widths):
    table = nodes.table(classes=["claims-ledger"])
    group = nodes.tgroup(cols=len(header))
    table += group
    for w in widths:
        group += nodes.colspec(colwidth=w)
    head = nodes.thead()
    group += head
    row = nodes.row()
    for h in header:
        row += nodes.entry("", _para(h))
    head += row
    body = nodes.tbody()
    group += body
    for cells in rows:
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            for item in cell if isinstance(cell, list) else [cell]:
                entry += item if isinstance(item, nodes.Element) else _para(item)
            row += entry
        body += row
    return table


#: TeX in headings, shown as plain text in the tables' links
_TEX = [
    ("\\top", "ᵀ"),
    ("\\left", ""),
    ("\\right", ""),
    ("\\ell", "ℓ"),
    ("^2", "²"),
    ("\\mu", "μ"),
    ("\\Sigma", "Σ"),
    ("\\alpha", "α"),
    ("\\Gamma", "Γ"),
    ("\\to", "→"),
    ("\\infty", "∞"),
    ("\\le", "≤"),
    ("\\{", "{"),
    ("\\}", "}"),
    ("$", ""),
]


def _plain(text):
    for tex, plain in _TEX:
        text = text.replace(tex, plain)
    return text.replace("\\", "")


def _section_id(app, check):
    """The HTML id of the section holding ``check``: MyST maps each heading's slug (what the
    chapter sources give) to the section's docutils id (which differs for headings with math)."""
    slugs = app.env.metadata.get(check["chapter"], {}).get("myst_slugs", {})
    entry = slugs.get(check["anchor"])
    if entry is None:
        raise ExtensionError(
            f"claims ledger: no section {check['anchor']!r} in {check['chapter']} (check {check['key']!r})"
        )
    return entry[1]


def _link(app, fromdoc, check, text=None):
    uri = app.builder.get_relative_uri(fromdoc, check["chapter"]) + "#" + _section_id(app, check)
    short = check["title"].split(":")[0]
    label = text or f"{_plain(short)} › {_plain(check['section'])}"
    return nodes.reference("", label, refuri=uri, internal=True)


def _kind(check):
    return check.get("kind", "test")


def _fill(app, doctree, docname):
    placeholders = list(doctree.findall(claims_ledger_node))
    if not placeholders:
        return
    root = Path(app.srcdir)
    checks = collect(root)
    by_key = {}
    for c in checks:
        if c["key"] in by_key:
            raise ExtensionError(
                f"claims ledger: check key {c['key']!r} is used twice "
                f"({by_key[c['key']]['chapter']} and {c['chapter']})"
            )
        by_key[c["key"]] = c
    passed = _passed(app)
    claims = _load_map(root, app.config.claims_map)
    mapped = set()
    rows = []
    for cl in claims:
        keys = cl.get("checks", []) or []
        for k in keys:
            if k not in by_key:
                raise ExtensionError(
                    f"{app.config.claims_map}: claim {cl['id']} names the check "
                    f"{k!r}, which no chapter records"
                )
        mapped.update(keys)
        tests = [by_key[k] for k in keys if _kind(by_key[k]) == "test"]
        cons = [by_key[k] for k in keys if _kind(by_key[k]) == "consistency"]
        if cl["status"] != "not-checkable" and not tests:
            raise ExtensionError(
                f"{app.config.claims_map}: claim {cl['id']} has status "
                f"{cl['status']!r} but no check of kind 'test'"
            )
        where = [_link(app, docname, by_key[k]) for k in keys[:1]] if keys else []
        if not where and cl.get("where"):
            where = [nodes.Text(cl["where"])]
        check_items = []
        for c in tests + cons:
            ok = c["key"] in passed
            label = "test" if _kind(c) == "test" else "consistency (not evidence)"
            mark = "✔" if ok else "✘ not run"
            check_items.append(_para(f"{mark} {label}: ", _link(app, docname, c, c["key"])))
        status = MAP_STATUSES[cl["status"]]
        note = cl.get("note")
        status_cell = [_para(status)] + ([_para(note)] if note else [])
        rows.append(
            [
                _para(nodes.strong(text=cl["id"]), " " + cl["claim"]),
                [_para(w) for w in where] or _para("—"),
                status_cell,
                check_items or _para("—"),
            ]
        )
    n_tests = sum(1 for c in checks if _kind(c) == "test")
    n_pass = sum(1 for c in checks if c["key"] in passed)
    summary = _para(
        f"{len(claims)} claims of the paper; {len(checks)} checks in the chapters "
        f"({n_tests} tests, {len(checks) - n_tests} consistency checks), "
        f"{n_pass} passed in this build."
    )
    claims_table = _table(["claim of the paper", "where", "status", "checks"], rows, [38, 18, 20, 24])
    own = []
    for c in checks:
        ok = c["key"] in passed
        value = passed.get(c["key"], {}).get("value")
        mark = (
            ("✔ passed" + (f" ({value})" if value not in (None, "None") else ""))
            if ok
            else "✘ not run in this build"
        )
        kind = KINDS[_kind(c)] if _kind(c) in KINDS else _kind(c)
        own.append(
            [
                _para(c["statement"]),
                _para(STATUSES.get(c["status"], c["status"])),
                _para(kind),
                _para(_link(app, docname, c)),
                _para(mark),
            ]
        )
    own_table = _table(["check", "status", "kind", "where", "in this build"], own, [40, 15, 10, 20, 15])
    unmapped = len([c for c in checks if c["key"] not in mapped])
    for ph in placeholders:
        section_1 = nodes.section(ids=["the-papers-claims"])
        section_1 += nodes.title(text="The paper's claims")
        section_1 += summary.deepcopy()
        section_1 += claims_table.deepcopy()
        section_2 = nodes.section(ids=["every-check-of-the-book"])
        section_2 += nodes.title(text="Every check of the book")
        section_2 += _para(
            f"All {len(checks)} checks, in book order; {unmapped} of them are the "
            "book's own results (derived or observed) rather than checks of a "
            "numbered claim."
        )
        section_2 += own_table.deepcopy()
        ph.replace_self([section_1, section_2])


def _always_reread(app, env, added, changed, removed):
    """The ledger page depends on every chapter: re-read it at every build."""
    return [d for d in env.found_docs if _has_directive(app, d)]


def _has_directive(app, docname):
    path = Path(app.srcdir) / (docname + ".md")
    return path.exists() and "{claims-ledger}" in path.read_text(encoding="utf-8")


def setup(app):
    app.add_config_value("claims_map", "claims_map.yml", "env")
    app.add_node(claims_ledger_node)
    app.add_directive("claims-ledger", ClaimsLedger)
    app.connect("env-get-outdated", _always_reread)
    app.connect("doctree-resolved", _fill)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
