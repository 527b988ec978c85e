"""The reading-style extension (``_ext/book_style.py``): what it changes in a page's doctree."""

import importlib.util
from pathlib import Path

from docutils import nodes
from docutils.utils import new_document

ROOT = Path(__file__).resolve().parents[1]


def _book_style():
    spec = importlib.util.spec_from_file_location("book_style", ROOT / "_ext" / "book_style.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sphinx_proof_ids_are_numbered_on_a_page():
    """sphinx-proof gives every proof the id "proof" and every statement body "proof-content";
    the page keeps the first and numbers the others, and leaves every other id alone."""
    doc = new_document("page")
    for k in range(3):
        statement = nodes.admonition(ids=[f"thm-{k}"])
        statement += nodes.section(ids=["proof-content"])
        doc += statement
        doc += nodes.admonition(classes=["proof"], ids=["proof"])
    _book_style()._unique_ids(None, doc, "page")
    ids = [i for node in doc.findall(nodes.Element) for i in node.get("ids", [])]
    assert ids == [
        "thm-0", "proof-content", "proof",
        "thm-1", "proof-content-2", "proof-2",
        "thm-2", "proof-content-3", "proof-3",
    ]  # fmt: skip
    assert len(ids) == len(set(ids))


def test_the_one_tree_of_the_printed_book_keeps_its_ids():
    """The LaTeX builder resolves all documents as one tree: their ids repeat there legitimately
    (the writer qualifies each by its document), so they are left alone."""
    from types import SimpleNamespace

    doc = new_document("book")
    doc += nodes.section(ids=["intro"])
    doc += nodes.section(ids=["intro"])
    latex = SimpleNamespace(builder=SimpleNamespace(format="latex"))
    _book_style()._unique_ids(latex, doc, "book")
    assert [n["ids"] for n in doc.findall(nodes.section)] == [["intro"], ["intro"]]
    html = SimpleNamespace(builder=SimpleNamespace(format="html"))
    _book_style()._unique_ids(html, doc, "book")
    assert [n["ids"] for n in doc.findall(nodes.section)] == [["intro"], ["intro-2"]]
