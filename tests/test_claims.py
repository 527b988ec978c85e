"""The chapters' checks: verdicts as notebook outputs, collection from sources, the claims map."""

import json
import textwrap
from collections import Counter
from pathlib import Path

import nbformat
import numpy as np
import pytest
import yaml
from nbclient import NotebookClient

import tpde_book
from tpde_book.ledger import calls_in, collect, slug

ROOT = Path(__file__).resolve().parents[1]

CHAPTER = textwrap.dedent("""\
    ---
    jupytext:
      text_representation: {extension: .md, format_name: myst}
    kernelspec: {display_name: Python 3, language: python, name: python3}
    ---

    # A chapter

    ## Section with $W_2$ math

    ```{code-cell} ipython3
    from tpde_book import verdict
    verdict("demo-one", "derived", "One plus one is two.", measured="1 + 1", value=2.0,
            at_least=2, reason="exact", claim="C3")
    ```

    ## Second section

    ```{code-cell} ipython3
    verdict("demo-two", "observed", "Nothing fails.", measured="failures", value=0,
            at_most=0, reason="none expected", kind="consistency")
    ```
    """)


@pytest.fixture
def book(tmp_path):
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: chapters/one\n")
    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters" / "one.md").write_text(CHAPTER)
    return tmp_path


def test_collect_finds_every_verdict_call_with_its_section_claim_and_kind(book):
    found = collect(book)
    assert [c["key"] for c in found] == ["demo-one", "demo-two"]
    assert found[0]["status"] == "derived" and found[0]["title"] == "A chapter"
    assert found[0]["claim"] == "C3" and found[0]["kind"] == "test"
    assert found[1]["section"] == "Second section" and found[1]["anchor"] == "second-section"
    assert found[1]["kind"] == "consistency" and found[1]["claim"] is None


def _run(source):
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(source), nbformat.v4.new_code_cell("1 + 1")]
    )
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=60, kernel_name="python3", allow_errors=True).execute()
    return nb


def test_a_verdict_is_a_box_and_a_glue_output_that_myst_nb_recognises():
    """Executed in a real kernel, verdict() shows a box (HTML, with a one-line text form) and
    leaves a hidden output MyST-NB reads as glue data."""
    from myst_nb.ext.glue import extract_glue_data

    nb = _run(
        "from tpde_book import verdict\n"
        "verdict('demo-k', 'paper', 'A statement with $x^2$.', measured='the gap', value=0.5,"
        " below=1, reason='why', claim='C4')"
    )
    glue = extract_glue_data(nb, [0, 1], logger=None)
    assert list(glue) == [tpde_book.KEY_PREFIX + "demo-k"]
    payload = json.loads(glue[tpde_book.KEY_PREFIX + "demo-k"]["data"][tpde_book.MIME])
    assert payload == {
        "key": "demo-k",
        "status": "paper",
        "statement": "A statement with $x^2$.",
        "value": "0.5 < 1",
        "claim": "C4",
        "kind": "test",
    }
    shown = nb.cells[0].outputs[0]
    assert shown["output_type"] == "display_data"
    box = shown["data"]["text/html"]
    assert 'class="tpde-verdict tpde-paper"' in box and 'href="../claims.html#claim-c4"' in box
    assert "<strong>0.5</strong> &lt; 1" in box and r"\(x^2\)" in box
    assert shown["data"]["text/plain"].startswith("✓ paper's claim: A statement")


_CASES = [  # (tolerance, value, fails)
    ("below=1", "0.999", False),
    ("below=1", "1.0", True),
    ("at_most=1", "1.0", False),
    ("at_most=1", "1.001", True),
    ("above=1", "1.0", True),
    ("at_least=1", "1.0", False),
    ("at_least=1", "float('nan')", True),
    ("holds=True", "'x'", False),
    ("holds=False", "'x'", True),
]


def test_a_failing_verdict_raises_and_leaves_no_box_nor_record():
    """One kernel, one cell per case: a failing check is an AssertionError naming its key, and
    shows no box and records nothing; a passing one shows its box and its record."""
    cells = [
        nbformat.v4.new_code_cell(
            "from tpde_book import verdict\n"
            f"verdict('demo-f{k}', 'derived', 'S.', measured='m', value={value}, {bound}, reason='r')"
        )
        for k, (bound, value, _) in enumerate(_CASES)
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=60, kernel_name="python3", allow_errors=True).execute()
    for k, ((bound, value, fails), cell) in enumerate(zip(_CASES, nb.cells)):
        kinds = [o["output_type"] for o in cell.outputs]
        if fails:
            assert kinds == ["error"], (bound, value, kinds)
            assert cell.outputs[0]["ename"] == "AssertionError" and f"demo-f{k}" in cell.outputs[0]["evalue"]
        else:
            assert kinds == ["display_data", "display_data"], (bound, value, kinds)


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        (("Bad Key", "derived", "x"), {}, "key"),
        (("ok-key", "proved", "x"), {}, "status"),
        (("ok-key", "paper", "  "), {}, "statement"),
        (("ok-key", "paper", "x"), {"claim": "C18"}, "claim"),
        (("ok-key", "paper", "x"), {"kind": "evidence"}, "kind"),
        (("ok-key", "paper", "x"), {"measured": " "}, "measured"),
        (("ok-key", "paper", "x"), {"reason": ""}, "reason"),
    ],
)
def test_verdict_rejects_bad_arguments(args, kwargs, match):
    kwargs = {"measured": "m", "value": 0.0, "below": 1.0, "reason": "r", **kwargs}
    with pytest.raises(ValueError, match=match):
        tpde_book.verdict(*args, **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # no tolerance
        {"below": 1.0, "above": 0.0},  # two
        {"below": 1.0, "holds": True},
    ],
)
def test_verdict_needs_exactly_one_tolerance(kwargs):
    with pytest.raises(TypeError, match="exactly one"):
        tpde_book.verdict("ok-key", "paper", "x", measured="m", value=0.5, reason="r", **kwargs)


def test_verdict_compares_only_numbers():
    with pytest.raises(TypeError, match="real number"):
        tpde_book.verdict("ok-key", "paper", "x", measured="m", value="0.5", below=1, reason="r")


@pytest.mark.parametrize(
    "heading",
    [
        "Section with $W_2$ math",
        "The role of `x` and **bold**",
        "Sinkhorn ↔ Bures–Wasserstein: a gradient flow?",
    ],
)
def test_anchor_equals_the_slug_myst_computes(heading):
    # independent: MyST's own slug function applied to markdown-it's parse of the heading
    from markdown_it import MarkdownIt
    from markdown_it.tree import SyntaxTreeNode
    from mdit_py_plugins.dollarmath import dollarmath_plugin
    from myst_parser.mdit_to_docutils.base import compute_unique_slug

    md = MarkdownIt("commonmark").use(dollarmath_plugin)
    node = SyntaxTreeNode(md.parse(f"## {heading}\n")).children[0]
    assert slug(heading) == compute_unique_slug(node, set())


def test_a_check_the_ledger_cannot_read_is_an_error_not_a_gap():
    from tpde_book.ledger import calls_in

    source = 'n = 3\nverdict("k", "derived", f"{n} tokens", measured="m", value=1, below=2, reason="r")'
    with pytest.raises(ValueError, match="literals"):
        calls_in(source)
    assert calls_in(source.replace('f"{n} tokens"', '"three tokens"'))[0]["statement"] == "three tokens"


def test_this_books_check_keys_are_unique_and_statuses_valid():
    found = collect(ROOT)
    assert found, "no chapter records a check"
    twice = [k for k, n in Counter(c["key"] for c in found).items() if n > 1]
    assert not twice, f"check keys used twice: {twice}"
    assert {c["status"] for c in found} <= set(tpde_book.STATUSES)
    assert {c["kind"] for c in found} <= set(tpde_book.KINDS)


def test_the_claims_map_covers_c1_to_c17_with_existing_tests():
    data = yaml.safe_load((ROOT / "claims_map.yml").read_text(encoding="utf-8"))
    claims = data["claims"]
    assert [c["id"] for c in claims] == [f"C{i}" for i in range(1, 18)]
    beyond = data.get("beyond") or []
    assert [c["id"] for c in beyond] == [f"B{i}" for i in range(1, len(beyond) + 1)]
    claims = claims + beyond
    by_key = {c["key"]: c for c in collect(ROOT)}
    for c in claims:
        missing = [k for k in c.get("checks", []) if k not in by_key]
        assert not missing, f"{c['id']} names checks no chapter records: {missing}"
        if c["status"] != "not-checkable":
            tests = [k for k in c.get("checks", []) if by_key[k]["kind"] == "test"]
            assert tests, f"{c['id']} ({c['status']}) has no check of kind 'test'"
        else:
            assert c.get("note"), f"{c['id']} is not checkable but says not why"


def test_a_verdict_prints_as_an_admonition_with_its_badges_and_an_anchor():
    """The printed book (MyST-NB ranks text/markdown first for LaTeX) shows the verdict as an
    admonition: badges, the statement with its TeX kept, the value and bound, the reason; the
    target ``verdict-<key>`` that the {check} role links to; Markdown's punctuation escaped."""
    from tpde_book import _md_text, _payload, _verdict_markdown

    payload = _payload("demo-k", "paper", "A *star* and $x_i^2$.", 0.5, "C4", "test")
    md = _verdict_markdown(payload, "largest |x_i|", "0.5", "< 1", "three standard errors")
    assert md.startswith(":::{admonition} Check passed\n:class: tpde-verdict\n")
    assert "(verdict-demo-k)=\n{status}`paper` {claim}`C4` A \\*star\\* and $x_i^2$." in md
    assert "largest \\|x\\_i\\|: **0.5** \\< 1. *three standard errors*" in md
    consistency = _payload("demo-c", "derived", "Sums to one.", 0.0, None, "consistency")
    assert "{status}" not in _verdict_markdown(consistency, "gap", "0", "≤ 0", "exact")
    assert _md_text("a_b $c_d$ e_f") == "a\\_b $c_d$ e\\_f"
    fails = _payload("demo-f", "fails", "Blows up.", 2.0, None, "test")
    assert _verdict_markdown(fails, "m", "2", "> 1", "r").startswith(
        ":::{admonition} Counterexample confirmed"
    )


def _box(status, kind="test", comparison="< 1"):
    payload = tpde_book._payload("demo-k", status, "S.", 0.5, None, kind)
    return tpde_book._verdict_html(payload, "the gap", "0.5", comparison, "why, and the wrong formula")


def test_a_verdict_box_shows_value_and_bound_and_folds_the_reason():
    box = _box("derived")
    head, folded = box.split("<details", 1)
    assert "<strong>0.5</strong> &lt; 1" in head and "why, and the wrong formula" not in head
    assert "why, and the wrong formula" in folded and 'id="verdict-demo-k"' in head


def test_a_statement_that_fails_as_stated_is_confirmed_without_a_tick():
    box = _box("fails")
    assert tpde_book.COUNTEREXAMPLE in box and "✓" not in box
    assert "✓" in _box("fails", kind="consistency") and "✓" in _box("paper")
    text = tpde_book.verdict  # the one-line text form outside a kernel
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        text("demo-k", "fails", "S.", measured="m", value=2.0, above=1, reason="r")
    assert out.getvalue().startswith(tpde_book.COUNTEREXAMPLE) and "✓" not in out.getvalue()


def test_a_cited_works_result_has_its_own_status_and_badge():
    assert "cited" in tpde_book.STATUSES and tpde_book.BADGES["cited"] == "cited work"
    assert 'class="tpde-badge tpde-cited"' in _box("cited")


@pytest.mark.parametrize(
    "bound", [{"below": "0.5"}, {"below": True}, {"at_least": np.bool_(True)}, {"above": "1"}]
)
def test_a_bound_must_be_a_number_not_a_string_or_a_bool(bound):
    with pytest.raises(TypeError, match="must be a real number"):
        tpde_book.verdict("ok-key", "paper", "x", measured="m", value=0.25, reason="r", **bound)


@pytest.mark.parametrize("value", [True, np.bool_(False), "0.25"])
def test_a_compared_value_must_be_a_number_not_a_bool(value):
    with pytest.raises(TypeError, match="value must be a real number"):
        tpde_book.verdict("ok-key", "paper", "x", measured="m", value=value, below=1, reason="r")


@pytest.mark.parametrize(
    "args, match", [(("a-b\n", "paper", "x"), "key"), (("ok-key", "paper", "x"), "claim")]
)
def test_keys_and_claims_are_matched_to_their_end(args, match):
    claim = "C1\n" if match == "claim" else None
    with pytest.raises(ValueError, match=match):
        tpde_book.verdict(*args, measured="m", value=0.5, below=1, reason="r", claim=claim)


def test_infinite_values_and_bounds_are_reported_not_crashed_on(capsys):
    tpde_book.verdict("ok-key", "derived", "x", measured="m", value=0.5, below=np.inf, reason="r")
    assert "< ∞" in capsys.readouterr().out
    tpde_book.verdict("ok-key", "derived", "x", measured="m", value=np.inf, above=1.0, reason="r")
    assert "= ∞ > 1" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="= ∞, expected < 1"):
        tpde_book.verdict("ok-key", "derived", "x", measured="m", value=np.inf, below=1, reason="r")
    with pytest.raises(AssertionError, match="= −∞, expected > 0"):
        tpde_book.verdict("ok-key", "derived", "x", measured="m", value=-np.inf, above=0, reason="r")


@pytest.mark.parametrize(
    "source, match",
    [
        ("spec = dict(key='k')\nverdict(**spec)", "unpacked"),
        ("verdict(*args, measured='m')", "unpacked"),
        ("%time verdict('k', 'derived', 'S.', measured='m', value=1, below=2, reason='r')", "magic '%time'"),
        ("%%capture\nverdict('k', 'derived', 'S.', measured='m', value=1, below=2, reason='r')", "magic"),
        ("verdict('k', 'derived', 'S.', measured='m', value=1, below=2, reason='r'", "syntax error"),
    ],
)
def test_the_ledger_refuses_a_check_it_cannot_read(source, match):
    with pytest.raises(ValueError, match=match):
        calls_in(source)


def test_the_ledger_ignores_unreadable_cells_without_a_check():
    assert calls_in("%matplotlib inline\nx = 1") == []


# --- the ledger links each claim to its numbered statement -------------------------------------


def _ledger_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("claims_ledger", ROOT / "_ext" / "claims_ledger.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _FakeApp:
    """What _statement_links reads of a Sphinx app: the proofs registry, figure numbers, a
    builder that makes relative links."""

    class config:
        claims_map = "claims_map.yml"

    class builder:
        @staticmethod
        def get_relative_uri(fromdoc, todoc):
            return f"{todoc}.html"

    class env:
        proof_list = {"thm-a": {"docname": "chapters/05", "countertype": "theorem", "realtype": "corollary"}}
        toc_fignumbers = {"chapters/05": {"theorem": {"thm-a": (5, 3)}}}


def test_a_claims_statement_is_linked_as_its_numbered_block():
    ledger = _ledger_module()
    (link,) = ledger._statement_links(_FakeApp, "claims", {"id": "C7", "statement": ["thm-a"]})
    assert link.astext() == "Corollary 5.3" and link["refuri"] == "chapters/05.html#thm-a"


def test_a_statement_label_no_block_carries_fails_the_build():
    from sphinx.errors import ExtensionError

    ledger = _ledger_module()
    with pytest.raises(ExtensionError, match="no prf: block"):
        ledger._statement_links(_FakeApp, "claims", {"id": "C7", "statement": ["thm-missing"]})


def test_every_paper_claim_of_the_map_names_its_statement():
    claims = yaml.safe_load((ROOT / "claims_map.yml").read_text(encoding="utf-8"))["claims"]
    missing = [c["id"] for c in claims if c["status"] != "not-checkable" and not c.get("statement")]
    assert not missing, f"claims without a statement: label: {missing}"


# --- the {check} role: a statement's link to its verdict box on the same page ------------------


def _book_style_module():
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / "_ext"))
    try:
        spec = importlib.util.spec_from_file_location("book_style", ROOT / "_ext" / "book_style.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "_ext"))
    return module


def _role_call(tmp_path, text):
    from types import SimpleNamespace

    from docutils.utils import Reporter

    page = tmp_path / "ch.md"
    page.write_text(
        "```{code-cell} ipython3\nverdict('known-key', 'derived', 'S.', measured='m', value=1,"
        " below=2, reason='r')\n```\n",
        encoding="utf-8",
    )
    env = SimpleNamespace(app=SimpleNamespace(), docname="ch", doc2path=lambda doc: str(page))
    reporter = Reporter("ch", Reporter.WARNING_LEVEL, Reporter.SEVERE_LEVEL + 1)

    class Inliner:
        document = SimpleNamespace(settings=SimpleNamespace(env=env))

        def __init__(self):
            self.reporter = reporter

        def problematic(self, rawtext, text, msg):
            return ("problematic", rawtext)

    return _book_style_module().check_role("check", f"{{check}}`{text}`", text, 1, Inliner())


def test_the_check_role_links_to_the_verdict_box_of_its_page(tmp_path):
    (node,), messages = _role_call(tmp_path, "known-key")
    assert not messages and node["refuri"] == "#verdict-known-key" and node.astext() == "known-key"
    (node,), _ = _role_call(tmp_path, "its check <known-key>")
    assert node["refuri"] == "#verdict-known-key" and node.astext() == "its check"


def test_a_check_role_naming_no_verdict_of_its_page_is_an_error(tmp_path):
    nodes_, messages = _role_call(tmp_path, "unknown-key")
    assert nodes_[0][0] == "problematic" and "no verdict with key 'unknown-key'" in messages[0].astext()


def test_a_value_is_never_shown_equal_to_a_bound_it_differs_from(capsys):
    # three significant digits would print "1 ≤ 1" and "4.03×10^-4 ≤ 4.03×10^-4"
    tpde_book.verdict("ok-key", "derived", "x", measured="m", value=0.99962, at_most=1.0, reason="r")
    assert "= 0.9996 ≤ 1 " in capsys.readouterr().out
    tpde_book.verdict("ok-key", "derived", "x", measured="m", value=4.0299e-4, at_most=4.03e-4, reason="r")
    assert "= 4.0299×10^-4 ≤ 4.0300×10^-4 " in capsys.readouterr().out
    tpde_book.verdict("ok-key", "derived", "x", measured="m", value=1.0, at_most=1.0, reason="r")
    assert "= 1 ≤ 1 " in capsys.readouterr().out  # equal: shown equal
    tpde_book.verdict("ok-key", "derived", "x", measured="m", value=0.123456, below=0.5, reason="r")
    assert "= 0.123 < 0.5 " in capsys.readouterr().out  # apart: three digits


def test_the_top_level_documents_of_the_toc_leave_sections_and_globs_out(tmp_path):
    from tpde_book.ledger import toc_documents, toc_top_documents

    top = toc_top_documents(ROOT / "_toc.yml")
    assert top[0] == "intro" and "chapters/06_clustering" in top and "api/index" in top
    assert "chapters/06b_clustering_general_v" not in top  # a section of chapter 6
    assert set(top) < set(toc_documents(ROOT)) and len(top) == len(set(top))
    flat = "format: jb-book\nroot: a\nchapters:\n- file: b\n  sections:\n  - file: c\n"
    (tmp_path / "_toc.yml").write_text(flat)
    assert toc_top_documents(tmp_path / "_toc.yml") == ["a", "b"]


def test_a_power_of_ten_is_shown_with_a_raised_exponent(capsys):
    """No caret on the page: "1.70×10^-8" is the plain-text form; the box and the ledger raise
    the exponent (HTML <sup>, a docutils superscript), the printed book writes TeX."""
    import importlib.util

    from docutils import nodes

    spec = importlib.util.spec_from_file_location("claims_ledger", ROOT / "_ext" / "claims_ledger.py")
    claims_ledger = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(claims_ledger)

    shown = tpde_book._number(1.7e-8) + " < " + tpde_book._number(1e-6)
    assert shown == "1.70×10^-8 < 1.00×10^-6"
    assert tpde_book._number_html(shown) == "1.70×10<sup>−8</sup> &lt; 1.00×10<sup>−6</sup>"
    parts = claims_ledger._with_powers(shown)
    assert [p.astext() for p in parts if isinstance(p, nodes.superscript)] == ["−8", "−6"]
    assert "^" not in "".join(p if isinstance(p, str) else p.astext() for p in parts)
    payload = {"key": "k", "status": "derived", "claim": None, "kind": "test", "statement": "s"}
    box = tpde_book._verdict_html(payload, "error", "1.70×10^-8", "< 1.00×10^-6", "why")
    assert "^" not in box and "×10<sup>−8</sup>" in box
    assert "$\\times 10^{-8}$" in tpde_book._verdict_markdown(payload, "error", "1.70×10^-8", "", "r")
