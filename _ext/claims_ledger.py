"""Sphinx extension: the claims ledger, built from the notebooks executed for this build.

The page that holds the directive ``{claims-ledger}`` gets three sections:

1. **The paper's claims** (C1–C17, the ``claims`` of ``claims_map.yml``): one card per claim (id
   ``claim-c1`` ...) with its status badge, the claim (``$...$`` rendered as math), the numbered
   statements that state it in the book (the map's ``statement:``, labels of ``prf:`` blocks,
   shown as "Theorem 5.1" linked to the block), its note, and its checks folded under it (tests
   apart from consistency checks);
2. **Beyond the paper** (B1, B2, ..., the map's ``beyond``): the same cards for the results of
   the chapters that go beyond the paper;
3. **Every check of the book**: the ``tpde_book.verdict(...)`` calls found in the chapters'
   sources, chapter by chapter (folded), each with its status, statement, measured value, the
   section that holds it (id ``check-<key>``) and whether it passed.

A check *passed in this build* when the executed notebook of its chapter carries its verdict's
hidden output (a MyST-NB glue output named ``claim:<key>``, emitted only once the check passed).
MyST-NB keeps the glue keys of each document it reads in the environment, and the tables are
filled at ``doctree-resolved``, i.e. after every document has been read, whatever the order of
reading. A check whose cell did not run has no output and shows "not run": there are no files or
timestamps to go stale. Duplicate keys, unknown keys in the map, claims of the map without a
check of the stated kind, a paper's claim (other than not checkable) without a ``statement:``, and
a ``statement:`` label that no ``prf:`` block of the book carries fail the build.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import yaml
from docutils import nodes
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

from tpde_book import BADGES, COUNTEREXAMPLE, KEY_PREFIX, MIME, POWER, STATUSES
from tpde_book.ledger import collect

#: statuses of the paper's claims in the map (those of the checks, plus "not checkable")
MAP_STATUSES = dict(STATUSES, **{"not-checkable": "not checkable here"})
#: their badges
MAP_BADGES = dict(BADGES, **{"not-checkable": "not checkable"})


class claims_ledger_node(nodes.General, nodes.Element):
    """Placeholder replaced by the ledger's tables once every document is read."""


class ClaimsLedger(SphinxDirective):
    has_content = False

    def run(self):
        return [claims_ledger_node()]


def _load_map(root, name, section="claims"):
    """The entries of one section of the map: ``claims`` (the paper's C1-C17) or ``beyond``
    (the book's results beyond the paper, B1, B2, ...)."""
    path = Path(root) / name
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    claims = data.get(section, []) or []
    for c in claims:
        labels = c.get("statement", [])
        labels = [labels] if isinstance(labels, str) else labels
        if not isinstance(labels, list) or not all(isinstance(x, str) and x for x in labels):
            raise ExtensionError(
                f"{name}: claim {c.get('id', '?')}: statement must be a label or a list of labels, "
                f"got {c.get('statement')!r}"
            )
        c["statement"] = labels
        for field in ("id", "claim", "status"):
            if field not in c:
                raise ExtensionError(f"{name}: claim {c.get('id', '?')} has no {field!r}")
        if c["status"] not in MAP_STATUSES:
            raise ExtensionError(
                f"{name}: claim {c['id']} has status {c['status']!r}, expected one of {sorted(MAP_STATUSES)}"
            )
    return claims


def _passed(app):
    """{key: payload} of every verdict output of the documents read for this build."""
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


def _inline(text):
    """Docutils nodes of a sentence whose ``$...$`` parts are TeX (inline math nodes)."""
    out = []
    for part in re.split(r"(\$[^$]+\$)", text):
        if len(part) > 2 and part.startswith("$") and part.endswith("$"):
            out.append(nodes.math(part, part[1:-1]))
        elif part:
            out.append(nodes.Text(part))
    return out


def _para(*parts, classes=()):
    p = nodes.paragraph(classes=list(classes))
    for part in parts:
        if isinstance(part, nodes.Node):
            p += part
        else:
            p.extend(_inline(part))
    return p


def _badge(text, status):
    return nodes.inline(text, text, classes=["tpde-badge", f"tpde-{status}"])


def _raw(html):
    return nodes.raw("", html, format="html")


def _details(summary, body, classes=""):
    """``<details>`` holding ``body`` (a list of nodes), folded under ``summary``."""
    return [_raw(f'<details class="{classes}"><summary>{summary}</summary>'), *body, _raw("</details>")]


#: TeX in headings, shown as plain text in the ledger's links
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


def _mark(ok, status, kind):
    """A passed check's mark: a tick, or for a statement that fails as stated the words
    "counterexample confirmed" (a tick would read as a contradiction)."""
    if not ok:
        return "✘ not run · "
    return f"{COUNTEREXAMPLE} · " if kind == "test" and status == "fails" else "✔ "


def _with_powers(text):
    """Text and superscript nodes for a measured value ("1.7×10^-8": the exponent raised)."""
    parts = POWER.split(text)  # text, exponent, text, ...
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out += ["×10", nodes.superscript(part, part.replace("-", "−"))]
        elif part:
            out.append(part)
    return out


def _check_item(app, docname, c, passed):
    """One check as a line: mark, status badge, statement, measured value, where."""
    ok = c["key"] in passed
    value = passed.get(c["key"], {}).get("value")
    kind = _kind(c)
    status = c["status"] if kind == "test" else "consistency"
    label = BADGES.get(c["status"], c["status"]) if kind == "test" else "consistency check"
    item = nodes.list_item(ids=[f"check-{c['key']}"], classes=["tpde-check"])
    para = _para(
        nodes.inline("", _mark(ok, c["status"], kind), classes=["tpde-check-mark"]),
        _badge(label, status),
        " ",
        c["statement"],
        classes=["tpde-check-line"],
    )
    item += para
    detail = [nodes.literal(c["key"], c["key"]), " · "]
    if ok and value not in (None, "None"):
        detail += ["measured ", *_with_powers(value), " · "]
    detail.append(_link(app, docname, c))
    item += _para(*detail, classes=["tpde-check-detail"])
    return item


def _statement_links(app, fromdoc, cl):
    """Links to the numbered ``prf:`` blocks that state a claim ("Theorem 5.1"), resolved from
    sphinx-proof's registry once every document is read; an unknown label fails the build."""
    proofs = getattr(app.env, "proof_list", {})
    out = []
    for label in cl["statement"]:
        info = proofs.get(label)
        if info is None:
            raise ExtensionError(
                f"{app.config.claims_map}: claim {cl['id']} names the statement {label!r}, "
                "but no prf: block of the book has that :label:"
            )
        doc = info["docname"]
        number = app.env.toc_fignumbers.get(doc, {}).get(info["countertype"], {}).get(label)
        text = info["realtype"].title()
        if number and not info.get("nonumber"):
            text += " " + ".".join(map(str, number))
        uri = app.builder.get_relative_uri(fromdoc, doc) + "#" + label
        if out:
            out.append(", ")
        out.append(nodes.reference("", text, refuri=uri, internal=True, classes=["tpde-statement-link"]))
    return out


def _card(app, docname, cl, by_key, passed):
    """A claim as a card: id and status badges, the claim, its note, its checks folded."""
    keys = cl.get("checks", []) or []
    tests = [by_key[k] for k in keys if _kind(by_key[k]) == "test"]
    cons = [by_key[k] for k in keys if _kind(by_key[k]) == "consistency"]
    card = nodes.container(
        ids=[f"claim-{cl['id'].lower()}"], classes=["tpde-claim-card", f"tpde-{cl['status']}"]
    )
    card += _para(
        _badge(cl["id"], cl["status"]),
        " ",
        _badge(MAP_BADGES[cl["status"]], cl["status"]),
        " ",
        cl["claim"],
        classes=["tpde-claim-head"],
    )
    stated = _statement_links(app, docname, cl)
    if stated:
        card += _para("Stated as ", *stated, classes=["tpde-claim-where"])
    if cl.get("note"):
        card += _para(cl["note"], classes=["tpde-claim-note"])
    where = [_link(app, docname, by_key[k]) for k in keys[:1]] if keys else []
    if not where and cl.get("where"):
        where = [nodes.Text(cl["where"])]
    if where:
        card += _para("Where: ", *where, classes=["tpde-claim-where"])
    if tests or cons:
        n_ok = sum(1 for c in tests + cons if c["key"] in passed)
        listing = nodes.bullet_list(classes=["tpde-check-list"])
        for c in tests + cons:
            listing += _check_item(app, docname, c, passed)
        summary = (
            f"{len(tests)} test{'s' * (len(tests) != 1)}"
            + (f" and {len(cons)} consistency check{'s' * (len(cons) != 1)}" if cons else "")
            + f" · {n_ok} passed in this build"
        )
        card.extend(_details(summary, [listing], "tpde-checks"))
    return card


def _claims_section(app, docname, claims, by_key, passed, ident, title, intro):
    section = nodes.section(ids=[ident])
    section += nodes.title(text=title)
    section += _para(intro)
    for cl in claims:
        section += _card(app, docname, cl, by_key, passed)
    return section


def _validate(app, claims, by_key):
    mapped = set()
    for cl in claims:
        keys = cl.get("checks", []) or []
        for k in keys:
            if k not in by_key:
                raise ExtensionError(
                    f"{app.config.claims_map}: claim {cl['id']} names the check {k!r}, "
                    "which no chapter records"
                )
        mapped.update(keys)
        if cl["id"].startswith("C") and cl["status"] != "not-checkable" and not cl["statement"]:
            raise ExtensionError(
                f"{app.config.claims_map}: claim {cl['id']} has no statement: (the label of the "
                "prf: block that states it in the book)"
            )
        if cl["status"] != "not-checkable" and not any(_kind(by_key[k]) == "test" for k in keys):
            raise ExtensionError(
                f"{app.config.claims_map}: claim {cl['id']} has status {cl['status']!r} "
                "but no check of kind 'test'"
            )
    return mapped


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
    claims = _load_map(root, app.config.claims_map, "claims")
    beyond = _load_map(root, app.config.claims_map, "beyond")
    mapped = _validate(app, claims, by_key) | _validate(app, beyond, by_key)
    n_tests = sum(1 for c in checks if _kind(c) == "test")
    n_pass = sum(1 for c in checks if c["key"] in passed)
    sections = [
        _claims_section(
            app,
            docname,
            claims,
            by_key,
            passed,
            "the-papers-claims",
            "The paper's claims",
            f"{len(claims)} claims of the paper; {len(checks)} checks in the chapters "
            f"({n_tests} tests, {len(checks) - n_tests} consistency checks), "
            f"{n_pass} passed in this build. Each card's checks are folded under it.",
        )
    ]
    if beyond:
        sections.append(
            _claims_section(
                app,
                docname,
                beyond,
                by_key,
                passed,
                "beyond-the-paper",
                "Beyond the paper",
                f"{len(beyond)} results of the chapters that go beyond the paper, each with its "
                "source (a cited work's claim, derived here, or observed) and its checks.",
            )
        )
    every = nodes.section(ids=["every-check-of-the-book"])
    every += nodes.title(text="Every check of the book")
    unmapped = len([c for c in checks if c["key"] not in mapped])
    every += _para(
        f"All {len(checks)} checks, chapter by chapter; {unmapped} of them are the book's own "
        "results (derived or observed) rather than checks of a numbered claim."
    )
    chapters = {}
    for c in checks:
        chapters.setdefault((c["chapter"], c["title"]), []).append(c)
    for (_chapter, title), group in chapters.items():
        listing = nodes.bullet_list(classes=["tpde-check-list"])
        for c in group:
            listing += _check_item(app, docname, c, passed)
        n_ok = sum(1 for c in group if c["key"] in passed)
        summary = f"{html.escape(_plain(title))} · {len(group)} checks · {n_ok} passed"
        every.extend(_details(summary, [listing], "tpde-checks"))
    for ph in placeholders:
        ph.replace_self([s.deepcopy() for s in sections] + [every.deepcopy()])


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
