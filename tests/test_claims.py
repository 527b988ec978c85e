"""The claims ledger: records, collection from chapter sources, links that MyST resolves."""

import json
import textwrap

import pytest

from tpde_lib import claims

CHAPTER = textwrap.dedent('''\
    ---
    jupytext:
      text_representation: {extension: .md, format_name: myst}
    kernelspec: {display_name: Python 3, language: python, name: python3}
    ---

    # A chapter

    ## Section with $W_2$ math

    ```{code-cell} ipython3
    from tpde_lib.claims import record
    assert 1 + 1 == 2
    record("demo-one", "derived", "One plus one is two.", value=2.0)
    ```

    ## Second section

    ```{code-cell} ipython3
    assert True
    record("demo-two", "observed", "Nothing fails.")
    ```
    ''')


@pytest.fixture
def book(tmp_path, monkeypatch):
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n"
                                       "  - file: chapters/one\n")
    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters" / "one.md").write_text(CHAPTER)
    monkeypatch.chdir(tmp_path / "chapters")
    return tmp_path


def test_collect_finds_every_record_call_with_its_section(book):
    found = claims.collect(book)
    assert [c["key"] for c in found] == ["demo-one", "demo-two"]
    assert found[0]["status"] == "derived" and found[0]["title"] == "A chapter"
    assert found[1]["section"] == "Second section" and found[1]["anchor"] == "second-section"


def test_ledger_marks_claims_passed_only_once_recorded(book):
    before = claims.ledger_markdown(book)
    assert before.count("not run in this build") == 2
    claims.record("demo-one", "derived", "One plus one is two.", value=2.0)
    data = json.loads((book / "_build" / "claims" / "demo-one.json").read_text())
    assert data["value"] == "2"
    after = claims.ledger_markdown(book)
    assert after.count("not run in this build") == 1 and "✔ passed (2)" in after


@pytest.mark.parametrize("args, match", [
    (("Bad Key", "derived", "x"), "key"),
    (("ok-key", "proved", "x"), "status"),
    (("ok-key", "paper", "  "), "statement"),
])
def test_record_rejects_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        claims.record(*args)


@pytest.mark.parametrize("heading", [
    "Section with $W_2$ math",
    "The role of `x` and **bold**",
    "Sinkhorn ↔ Bures–Wasserstein: a gradient flow?",
])
def test_anchor_equals_the_slug_myst_computes(heading):
    # independent: MyST's own slug function applied to markdown-it's parse of the heading
    from markdown_it import MarkdownIt
    from markdown_it.tree import SyntaxTreeNode
    from mdit_py_plugins.dollarmath import dollarmath_plugin
    from myst_parser.mdit_to_docutils.base import compute_unique_slug

    md = MarkdownIt("commonmark").use(dollarmath_plugin)
    node = SyntaxTreeNode(md.parse(f"## {heading}\n")).children[0]
    assert claims._slug(heading) == compute_unique_slug(node, set())


def test_ledger_rejects_a_key_used_twice(book):
    page = book / "chapters" / "one.md"
    page.write_text(page.read_text().replace('"demo-two"', '"demo-one"'))
    with pytest.raises(ValueError, match="demo-one"):
        claims.ledger_markdown(book)


def test_this_books_claim_keys_are_unique_and_statuses_valid():
    from collections import Counter
    from pathlib import Path

    found = claims.collect(Path(__file__).resolve().parents[1])
    assert found, "no chapter records a claim"
    twice = [k for k, n in Counter(c["key"] for c in found).items() if n > 1]
    assert not twice, f"claim keys used twice: {twice}"
    assert {c["status"] for c in found} <= set(claims.STATUSES)
