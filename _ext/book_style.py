"""Sphinx extension: the book's reading style — its stylesheet and the status and claim badges.

- ``_ext/static/tpde.css`` is served with the book: the verdict boxes of
  :func:`tpde_book.verdict`, the status badges, the chapter openers (an admonition with the class
  ``tpde-opener``), and output boxes that wrap instead of scrolling sideways.
- The role ``{status}`paper``` (or ``cited``, ``derived``, ``observed``, ``fails``) shows a statement's
  status as a badge: where a statement of a chapter comes from is visible, not only a bold word.
- An id repeated on a page (sphinx-proof's and sphinx-exercise's, the same for every block of a
  kind; a check listed under several claims) is numbered, the first kept (valid HTML).
- Every figure's image gets its caption's first sentence as alt text (screen readers, and a
  figure that fails to load still says what it showed).
- The role ``{claim}`C6``` shows a claim id as a badge coloured by the claim's status in
  ``claims_map.yml`` and linked to its entry of the claims ledger (``claims.md``, anchor
  ``claim-c6``); an id the map does not have fails the build.
- The role ``{check}`key``` (or ``{check}`text <key>```) links a statement to the verdict box
  that checks it on the same page (anchor ``verdict-<key>``, set by :func:`tpde_book.verdict`);
  a key that no ``verdict(...)`` call of the page records fails the build.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from sphinx.errors import NoUri
from sphinx.util import logging

from tpde_book import BADGES

logger = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
#: the ledger page (document name) and the badge text of the map's extra status
LEDGER = "claims"
_MAP_BADGES = dict(BADGES, **{"not-checkable": "not checkable"})


def _badge(text, status, classes=()):
    return nodes.inline(text, text, classes=["tpde-badge", f"tpde-{status}", *classes])


def status_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    key = text.strip()
    if key not in BADGES:
        msg = inliner.reporter.error(f"{{status}} expects one of {sorted(BADGES)}, got {key!r}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    return [_badge(BADGES[key], key)], []


def _claim_statuses(app, config):
    """{claim id: status} of the claims map (the paper's claims and those beyond it), read once
    per build with the ledger's own reader (the roles look it up)."""
    from claims_ledger import _load_map

    app._tpde_claim_statuses = {
        c["id"]: c["status"]
        for section in ("claims", "beyond")
        for c in _load_map(app.srcdir, config.claims_map, section)
    }


def claim_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    env = inliner.document.settings.env
    cid = text.strip()
    statuses = env.app._tpde_claim_statuses
    if cid not in statuses:
        msg = inliner.reporter.error(f"{{claim}}: no claim {cid!r} in the claims map", line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    status = statuses[cid]
    try:
        uri = env.app.builder.get_relative_uri(env.docname, LEDGER) + f"#claim-{cid.lower()}"
    except NoUri:  # the LaTeX builder knows no URIs while reading: _ext/book_pdf.py sets it
        uri = f"%{LEDGER}#claim-{cid.lower()}"
    ref = nodes.reference(rawtext, "", refuri=uri, internal=True, classes=["tpde-claim-link"])
    ref += _badge(cid, status, ("tpde-claim",))
    ref["reftitle"] = f"{cid}: {_MAP_BADGES.get(status, status)} (claims ledger)"
    return [ref], []


_CHECK = re.compile(r"^(?:(?P<text>.*?)\s*<(?P<key>[^<>]+)>|(?P<bare>[^<>]+))$", re.S)


def _page_check_keys(env, docname):
    """Keys of the ``verdict(...)`` calls in a page's source (read once per page and build)."""
    cache = env.app.__dict__.setdefault("_tpde_page_checks", {})
    if docname not in cache:
        from tpde_book.ledger import calls_in

        path = Path(env.doc2path(docname))
        keys = set()
        if path.suffix == ".md" and path.exists():
            import jupytext

            nb = jupytext.read(str(path))
            for cell in nb.cells:
                if cell.cell_type == "code":
                    keys.update(c["key"] for c in calls_in(cell.source))
        cache[docname] = keys
    return cache[docname]


def check_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{check}`key``` -> a link to the verdict box ``#verdict-key`` of the same page."""
    env = inliner.document.settings.env
    match = _CHECK.match(text.strip())
    key = (match.group("key") or match.group("bare") or "").strip() if match else ""
    label = (match.group("text") or "").strip() if match else ""
    if key not in _page_check_keys(env, env.docname):
        msg = inliner.reporter.error(
            f"{{check}}: no verdict with key {key!r} on this page ({env.docname})", line=lineno
        )
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    ref = nodes.reference(rawtext, "", refuri=f"#verdict-{key}", internal=True, classes=["tpde-check-link"])
    if label:
        ref += nodes.inline(label, label)
    else:
        ref += nodes.literal(key, key)
    ref["reftitle"] = f"the check {key} (its verdict box on this page)"
    return [ref], []


def _forget_page_checks(app, env, docname):
    app.__dict__.get("_tpde_page_checks", {}).pop(docname, None)


def _first_sentence(text):
    text = " ".join(text.split())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return (match.group(1) if match else text)[:300]


def _alt_text(app, doctree):
    """Alt text of each figure's image: its caption's first sentence (where it has none)."""
    for figure in doctree.findall(nodes.figure):
        captions = [c for c in figure.children if isinstance(c, nodes.caption)]
        if not captions:
            continue
        alt = _first_sentence(captions[0].astext())
        for image in figure.findall(nodes.image):
            if not image.get("alt"):
                image["alt"] = alt


def _unique_ids(app, doctree, docname=None):
    """Number an id repeated on a page (``proof``, ``proof-2``, ...), keeping the first.

    sphinx-proof gives every proof the id ``proof`` and every statement body ``proof-content``,
    sphinx-exercise every exercise body ``exercise-content``, and the ledger lists a check under
    each claim it bears on (``check-<key>``): ten proofs on a page made ten elements
    ``id="proof"``, which HTML forbids. A link to such an id reached the first element, and
    still does. Web pages only: the LaTeX builder resolves the whole book as one tree, where
    every document repeats ids that its writer qualifies by document name."""
    if app is not None and app.builder.format != "html":
        return
    seen = {}
    for node in doctree.findall(nodes.Element):
        ids = node.get("ids", [])
        for k, ident in enumerate(ids):
            seen[ident] = seen.get(ident, 0) + 1
            if seen[ident] > 1:
                ids[k] = f"{ident}-{seen[ident]}"


def _titleless_sections_in_codeautolink():
    """Let sphinx-codeautolink read pages with exercises.

    Its block analyser pops a heading off its stack at the end of every section, assuming each
    section opens with a title; sphinx-exercise's exercise and solution bodies are sections
    without one (their titles are subclasses of ``title`` the analyser does not visit), so a page
    with an exercise crashed the build ("pop from empty list"). Pop only for sections that open
    with a plain title, i.e. those whose title the analyser pushed.
    """
    try:
        from sphinx_codeautolink.extension.block import CodeBlockAnalyser
    except ImportError:  # pragma: no cover - the extension is pinned in requirements.txt
        return
    if getattr(CodeBlockAnalyser, "_tpde_titleless_sections", False):
        return
    depart = CodeBlockAnalyser.depart_section

    def depart_section(self, node):
        if node.children and type(node.children[0]) is nodes.title:
            depart(self, node)

    CodeBlockAnalyser.depart_section = depart_section
    CodeBlockAnalyser._tpde_titleless_sections = True


def _static_path(app, config):
    config.html_static_path.append(str(STATIC))


def setup(app):
    _titleless_sections_in_codeautolink()
    app.connect("config-inited", _static_path)
    app.connect("config-inited", _claim_statuses)
    app.connect("doctree-read", _alt_text)
    # after every other handler (the ledger fills its page at doctree-resolved too)
    app.connect("doctree-resolved", _unique_ids, priority=900)
    app.add_css_file("tpde.css")
    app.add_role("status", status_role)
    app.add_role("claim", claim_role)
    app.add_role("check", check_role)
    app.connect("env-purge-doc", _forget_page_checks)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
