"""Sphinx extension: the book as a PDF (``jupyter-book build . --builder pdflatex``).

The LaTeX build reads the same executed notebooks as the HTML build (MyST-NB takes them from the
jupyter-cache that the HTML build filled: no chapter runs again) and sphinx-jupyterbook-latex
turns the notebook structure into a book (parts, chapters, no input for ``hide-input`` cells).
This extension adds what the book needs on top:

- the class ``_ext/latex/tpdebook.cls`` in place of sphinx-jupyterbook-latex's own, which loads
  packages that Debian ships only in its 1.4 GB ``texlive-fonts-extra`` (``bbm``, ``pgfplots``)
  and that the book does not use;
- no ``unicode-math`` (see :func:`_latex_config`);
- status and claim badges (the roles ``{status}`` and ``{claim}``) as framed labels whose text
  says the status, with ``fails`` reversed (white on black): legible in black and white;
- a target for every container with an id (the ledger's claim cards ``claim-c6``), so the links
  of the claim badges resolve in the PDF as they do on the web.

On the web pages (HTML build) it sets the header menus: the download menu's ``.pdf`` entry,
which only opened the browser's print dialog on one page, links the book's PDF as the publishing
workflow deploys it beside the site (``<book_url>/tpde-book.pdf``); the launch menu of a
notebook page gets a last entry, the executed notebook, saying that its first cell installs the
version of ``tpde_lib`` that built the page (``_ext/download_setup.py`` adds that cell).

Outputs choose their own printed face: a verdict and a panel carry a ``text/markdown`` face
(:func:`tpde_book.verdict`, :func:`tpde_lib.widgets.panel_bundle`) that MyST-NB ranks above
``text/plain`` for LaTeX, while the web page shows their HTML.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform

CLASS_FILE = Path(__file__).parent / "latex" / "tpdebook.cls"
#: the PDF's file name (``latex.latex_documents.targetname`` of ``_config.yml``, ``.pdf``), in
#: ``_build/latex`` and, published, at the site's root
PDF_NAME = "tpde-book.pdf"
#: the claims ledger's document (the claim badges link to its cards)
LEDGER = "claims"

#: LaTeX for missing glyphs and the badges: \DUrole{tpde-badge,tpde-<status>}{text} (Sphinx's writer joins the
#: classes of an inline node with commas)
PREAMBLE = r"""
% characters that the book's fonts (FreeSerif italic, FreeMono) lack
\usepackage{newunicodechar}
\newunicodechar{ᵀ}{\textsuperscript{T}}
% The book's badges (roles {status} and {claim}): a framed label; "fails" reversed.
\newcommand{\tpdebadge}[1]{{\setlength{\fboxsep}{1.2pt}\setlength{\fboxrule}{0.5pt}%
  \fbox{\sffamily\footnotesize\strut #1}}}
\newcommand{\tpdebadgereversed}[1]{{\setlength{\fboxsep}{1.7pt}%
  \colorbox{black}{\color{white}\sffamily\bfseries\footnotesize\strut #1}}}
% \tpdebadgerole{<classes>}{<command>}: \DUrole{<classes>}{text} is <command>{text}
\newcommand{\tpdebadgerole}[2]{\expandafter\def\csname DUrole#1\endcsname##1{#2{##1}}}
\tpdebadgerole{tpde-badge,tpde-paper}{\tpdebadge}
\tpdebadgerole{tpde-badge,tpde-cited}{\tpdebadge}
\tpdebadgerole{tpde-badge,tpde-derived}{\tpdebadge}
\tpdebadgerole{tpde-badge,tpde-observed}{\tpdebadge}
\tpdebadgerole{tpde-badge,tpde-fails}{\tpdebadgereversed}
\tpdebadgerole{tpde-badge,tpde-consistency}{\tpdebadge}
\tpdebadgerole{tpde-badge,tpde-paper,tpde-claim}{\tpdebadge}
\tpdebadgerole{tpde-badge,tpde-cited,tpde-claim}{\tpdebadge}
\tpdebadgerole{tpde-badge,tpde-derived,tpde-claim}{\tpdebadge}
\tpdebadgerole{tpde-badge,tpde-observed,tpde-claim}{\tpdebadge}
\tpdebadgerole{tpde-badge,tpde-not-checkable,tpde-claim}{\tpdebadge}
\tpdebadgerole{tpde-badge,tpde-fails,tpde-claim}{\tpdebadgereversed}
"""


def _latex_config(app, config):
    """After sphinx-jupyterbook-latex (priority 500) set its class: use the book's."""
    config.latex_theme = "tpdebook"
    config.latex_additional_files = [*config.latex_additional_files, str(CLASS_FILE)]
    # no general index nor module index (whose XeLaTeX route needs xindy, and clisp with it)
    config.latex_domain_indices = False
    config.latex_use_xindy = False
    elements = config.latex_elements
    elements["papersize"] = "a4paper"
    elements["makeindex"] = ""
    elements["printindex"] = ""
    # unicode-math (loaded by sphinx-jupyterbook-latex) breaks a prime in a table's math
    # (tabulary typesets its cells twice: "Double superscript"); the book writes math in TeX
    # commands, which amsmath's fonts have
    preamble = elements.get("preamble", "").replace(r"\usepackage{unicode-math}", "")
    elements["preamble"] = preamble + PREAMBLE


def _container_targets(app, doctree, docname):
    """A LaTeX label for each container (and statement block) that has ids (Sphinx's writer
    labels sections and targets, not containers), so references to them resolve. At
    ``doctree-resolved``, after the ledger fills its cards."""
    if app.builder.format != "latex":
        return
    for node in list(doctree.findall(nodes.container)):
        if node.get("ids"):
            node.insert(0, nodes.target("", "", ids=list(node["ids"])))
            node["ids"] = []
    # a sphinx-proof block labels only its own :label: in LaTeX, and Sphinx's writer leaves the
    # labels of a numbered block to its visitor: a target written just before the block
    # (``(name)=``, whose id docutils moves onto it) gets its label here, as raw LaTeX
    from sphinx_proof.nodes import NODE_TYPES, unenumerable_node

    blocks = (unenumerable_node, *NODE_TYPES.values())
    for node in list(doctree.findall(lambda n: isinstance(n, blocks))):
        doc = node.parent
        while doc is not None and not isinstance(doc, addnodes.start_of_file):
            doc = doc.parent
        docname = doc["docname"] if doc is not None else docname
        labels = "".join(
            rf"\phantomsection\label{{\detokenize{{{docname}:{i}}}}}"
            for i in node.get("ids", [])
            if i != node.get("label")  # its own label: sphinx-proof writes it
        )
        if labels:
            node.parent.insert(node.parent.index(node), nodes.raw("", labels + "%\n", format="latex"))


class ClaimLinks(SphinxPostTransform):
    """The claim badges' links as LaTeX reads them (``%claims#claim-c6``: the label
    ``claims:claim-c6``), whatever builder read the page (the doctrees are shared with the
    HTML build, whose links are relative addresses of pages)."""

    default_priority = 900
    formats = ("latex",)

    def run(self, **kwargs):
        for ref in self.document.findall(nodes.reference):
            if "tpde-claim-link" in ref.get("classes", []) and "#" in ref.get("refuri", ""):
                ref["refuri"] = "%" + LEDGER + "#" + ref["refuri"].split("#", 1)[1]


def pdf_url(app):
    """Where the publishing workflow deploys the PDF: at the root of the book's site."""
    return app.tpde_release["book_url"] + PDF_NAME


def _install_label(app):
    """What a downloaded notebook's first cell installs, e.g. ``tpde_lib 1.2.0 (v1.2.0)``."""
    if not hasattr(app, "_tpde_install_label"):
        from download_setup import build_ref

        version = app.tpde_release["version"]
        ref = build_ref(app.srcdir, version)
        app._tpde_install_label = f"tpde_lib {version} ({ref if ref.startswith('v') else ref[:10]})"
    return app._tpde_install_label


def _header_buttons(app, pagename, templatename, context, doctree):
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            for button in group["buttons"]:
                if button.get("label") == "download-pdf-button":
                    button.pop("javascript", None)
                    button.update(
                        type="link",
                        url=pdf_url(app),
                        text="book (PDF)",
                        tooltip="The whole book as a PDF, published with the site",
                    )
        if group.get("label") == "launch-buttons" and context.get("ipynb_source"):
            label = _install_label(app)
            group["buttons"].append(
                {
                    "type": "link",
                    "text": f"Download: its first cell installs {label}",
                    "url": f"{context['pathto']('_sources', 1)}/{context['ipynb_source']}",
                    "tooltip": (
                        f"The executed notebook; its first cell installs {label}, the version "
                        "that built this page, where it is missing"
                    ),
                    "icon": "fas fa-download",
                    "label": "download-setup-button",
                }
            )


def _proof_labels_of_sections(app, exception):
    """sphinx-proof labels a block as ``docname:label`` with the document whose section title
    it finds; in a document included as a section of another (chapter 6b) it finds none and
    writes ``None:label``, which no reference names. The registry of the blocks knows each
    label's document: the LaTeX sources are mended with it before LaTeX runs."""
    if exception is not None or app.builder.format != "latex":
        return
    proofs = getattr(app.env, "proof_list", {})

    def mend(match):
        entry = proofs.get(match.group(1))
        if entry is None:
            return match.group(0)
        return "\\label{" + f"{entry['docname']}:{match.group(1)}" + "}"

    for tex in Path(app.outdir).glob("*.tex"):
        text = tex.read_text(encoding="utf-8")
        mended = re.sub(r"\\label\{None:([^}]+)\}", mend, text)
        if mended != text:
            tex.write_text(mended, encoding="utf-8")


def setup(app):
    app.connect("config-inited", _latex_config, priority=900)
    app.connect("html-page-context", _header_buttons, priority=600)
    app.connect("doctree-resolved", _container_targets, priority=900)
    app.connect("build-finished", _proof_labels_of_sections)
    app.add_post_transform(ClaimLinks)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
