"""The built-book checker's rules as pure functions (tools/check_built_book.py), without a browser.

The browser half (the same rules measured in Chromium on a small book that breaks each rule
once and passes each by a near miss) is ``python tools/check_built_book.py --self-test``: CI
installs the browser only after pytest has run.
"""

import importlib.util
import io
from collections import Counter
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_built_book", ROOT / "tools" / "check_built_book.py")
cbb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cbb)


def figure(natural, shown, width_attr=None, dpi=None, svg=False):
    return {
        "natural": natural,
        "shown": shown,
        "widthAttr": width_attr,
        "dpi": dpi,
        "svg": svg,
        "where": "code cell 1",
        "label": "fig",
    }


def layout(page_height=10_000, code=1_000.0, article=9_000.0, overflows=(), controls=()):
    return {
        "pageHeight": page_height,
        "codeHeight": code,
        "articleHeight": article,
        "overflows": list(overflows),
        "controls": list(controls),
    }


def rules(findings):
    return Counter(rule for _, rule, _ in findings)


# --- a PNG's resolution -----------------------------------------------------------------------


def test_png_dpi_reads_what_matplotlib_and_pillow_wrote():
    fig = Figure(figsize=(3, 2))
    FigureCanvasAgg(fig)
    fig.add_subplot(1, 1, 1).plot([0, 1], [1, 0])
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=200)
    data = buf.getvalue()
    # PNG stores whole dots per metre: rounding moves the dpi by at most 0.5 * 0.0254 = 0.0127
    assert cbb.png_dpi(data) == pytest.approx(200, abs=0.0127)
    assert cbb.png_dpi(data[:4096]) == pytest.approx(200, abs=0.0127)  # the head the page fetches
    buf = io.BytesIO()
    Image.new("RGB", (30, 20)).save(buf, format="png", dpi=(150, 150))
    assert cbb.png_dpi(buf.getvalue()) == pytest.approx(150, abs=0.0127)


def test_png_dpi_is_none_without_a_resolution():
    buf = io.BytesIO()
    Image.new("RGB", (30, 20)).save(buf, format="png")  # Pillow writes no pHYs by default
    assert cbb.png_dpi(buf.getvalue()) is None
    assert cbb.png_dpi(b"<svg xmlns='http://www.w3.org/2000/svg'/>") is None
    assert cbb.png_dpi(cbb.png_bytes(10, 10, 200)[:20]) is None  # cut before the chunk


def test_the_self_test_pngs_carry_their_dpi_and_size_for_an_independent_reader():
    with Image.open(io.BytesIO(cbb.png_bytes(120, 30, 200))) as img:
        assert img.size == (120, 30)
        assert img.info["dpi"][0] == pytest.approx(200, abs=0.0127)


# --- figures: drawn width, sharpness, scale ---------------------------------------------------


def test_drawn_width_takes_the_attribute_then_the_resolution_then_the_natural_width():
    assert cbb.drawn_width(1000, 400, 200) == 400
    assert cbb.drawn_width(1000, None, 200) == pytest.approx(500)  # 5 in at 100 px/in
    assert cbb.drawn_width(1000, None, 100) == pytest.approx(1000)
    assert cbb.drawn_width(1000, None, None) == 1000


def test_width_attribute_in_pixels_only():
    assert cbb._parse_width_attr("640") == 640
    assert cbb._parse_width_attr("640px") == 640
    assert cbb._parse_width_attr("100%") is None
    assert cbb._parse_width_attr(None) is None
    assert cbb._parse_width_attr("0") is None


def test_sharpness_and_scale_thresholds_are_inclusive():
    assert rules(cbb.figure_findings("p", [figure(1500, 1000, width_attr=1000)])) == Counter()
    assert rules(cbb.figure_findings("p", [figure(1490, 1000, width_attr=1000)])) == Counter(["sharpness"])
    assert rules(cbb.figure_findings("p", [figure(1600, 750, width_attr=1000)])) == Counter()
    assert rules(cbb.figure_findings("p", [figure(1600, 740, width_attr=1000)])) == Counter(["scale"])


def test_retina_and_high_dpi_pngs_pass_at_their_drawn_width_and_fail_when_shrunk():
    retina = figure(1200, 600, width_attr=600, dpi=200)
    assert cbb.figure_ratios(retina) == (2.0, 1.0)
    no_attr = figure(1200, 600, dpi=200)  # the same PNG without the attribute: drawn at 600 px too
    assert cbb.figure_ratios(no_attr) == (2.0, 1.0)
    shrunk = figure(1200, 400, dpi=200)
    assert rules(cbb.figure_findings("p", [shrunk])) == Counter(["scale"])


def test_a_100_dpi_png_without_width_attribute_cannot_pass_both_rules():
    # sharpness >= 1.5 needs shown <= 667 px, scale >= 0.75 needs shown >= 750 px
    for shown in range(100, 1200, 7):
        assert cbb.figure_findings("p", [figure(1000, shown, dpi=100)]), shown


def test_svg_has_no_sharpness_but_a_scale():
    sharp, scale = cbb.figure_ratios(figure(400, 200, svg=True))
    assert sharp is None and scale == 0.5
    assert rules(cbb.figure_findings("p", [figure(400, 400, svg=True)])) == Counter()
    assert cbb._image_head_info(None, "x/figure.svg?v=1") == (True, None)
    svg_head = "PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciLz4="  # <svg xmlns=...
    assert cbb._image_head_info(svg_head, "blob:abc") == (True, None)


# --- layout, requests, pages ------------------------------------------------------------------


def test_code_share_and_height_judged_on_chapters_only():
    at_limit = layout(page_height=25_000, code=2_500.0, article=10_000.0)
    assert rules(cbb.layout_findings("chapters/x.html", at_limit)) == Counter()
    over = layout(page_height=25_001, code=2_501.0, article=10_000.0)
    assert rules(cbb.layout_findings("chapters/x.html", over)) == Counter(["code", "height"])
    assert rules(cbb.layout_findings("api/x.html", over)) == Counter()


def test_overflows_and_controls_are_one_finding_each():
    m = layout(
        overflows=[{"cell": 3, "el": "pre", "content": 1200, "box": 784, "text": "checked (...)"}],
        controls=["div.widget-slider 'n' (code cell 4)", "div.widget-dropdown 'variant' (code cell 4)"],
    )
    found = cbb.layout_findings("intro.html", m)
    assert rules(found) == Counter({"overflow": 1, "control": 2})
    assert "code cell 3" in found[0][2] and "checked (...)" in found[0][2]


def test_requests_reported_once_per_url():
    found = cbb.request_findings(
        "p", ["https://cdn/x.css", "https://cdn/x.css"], ["404 a.woff", "404 b.woff"]
    )
    assert rules(found) == Counter({"outside": 1, "missing": 2})


def test_pages_glob_selects_a_subset(tmp_path):
    for rel in ("index.html", "intro.html", "chapters/a.html", "chapters/b.html", "_static/x.html"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("<html></html>")
    assert [p.as_posix() for p in cbb.book_pages(tmp_path)] == [
        "chapters/a.html",
        "chapters/b.html",
        "intro.html",
    ]
    assert [p.as_posix() for p in cbb.book_pages(tmp_path, ["chapters/*"])] == [
        "chapters/a.html",
        "chapters/b.html",
    ]


# --- the self-test's book ---------------------------------------------------------------------


def test_self_test_book_breaks_every_rule_of_the_issue_and_one_page_passes_all(tmp_path):
    expected = cbb.write_fixture_book(tmp_path)
    broken = set().union(*expected.values())
    assert {"overflow", "sharpness", "scale", "control", "outside", "missing", "code", "height"} <= broken
    assert expected["chapters/good.html"] == Counter()
    assert all((tmp_path / page).exists() for page in expected)


def test_compare_findings_reports_missing_and_unexpected_findings():
    expected = {"a.html": Counter(["overflow"]), "b.html": Counter()}
    assert cbb.compare_findings(expected, [("a.html", "overflow", "")]) == []
    problems = cbb.compare_findings(expected, [("b.html", "scale", "")])
    assert problems == [
        "a.html: [overflow] expected 1 finding(s), got 0",
        "b.html: [scale] expected 0 finding(s), got 1",
    ]


# --- the content rules (no browser): control characters, numbered statements ------------------


def _write(tmp_path, rel, body):
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(cbb._page(body), encoding="utf-8")
    return Path(rel)


_THEOREM = '<span class="caption-number">Proposition 3.2 </span>'


@pytest.mark.parametrize(
    "body",
    [
        '<span class="math">\\(\x08eta\\)</span>',  # the backspace of a non-raw "\beta"
        "bell\x07",
        "escape &#27; as an entity",
        "hex entity &#x1b;",
        "delete \x7f",
    ],
)
def test_a_control_character_in_a_page_is_a_finding(tmp_path, body):
    page = _write(tmp_path, "chapters/a.html", _THEOREM + body)
    assert [rule for _, rule, _ in cbb.check_content(tmp_path, [page])] == ["ctrlchar"]


def test_tabs_newlines_and_their_entities_are_not_control_findings(tmp_path):
    page = _write(tmp_path, "chapters/a.html", _THEOREM + "a\tb\r\nc &#9; &#10; &#x0d; &#32;")
    assert cbb.check_content(tmp_path, [page]) == []


def test_a_chapter_needs_a_numbered_statement_a_definition_is_not_one(tmp_path):
    bare = _write(tmp_path, "chapters/a.html", '<span class="caption-number">Definition 1.1 </span>')
    other = _write(tmp_path, "claims.html", "no statement, not a chapter")
    found = cbb.check_content(tmp_path, [bare, other])
    assert [(page, rule) for page, rule, _ in found] == [("chapters/a.html", "statement")]
    for kind in ("Theorem", "Lemma", "Corollary", "Observation", "Proposition"):
        ok = _write(tmp_path, "chapters/b.html", f'<span class="caption-number">{kind} 6.10 </span>')
        assert cbb.check_content(tmp_path, [ok]) == []


def test_the_self_test_book_breaks_the_content_rules_on_its_bad_page_only(tmp_path):
    expected = cbb.write_fixture_book(tmp_path)
    found = cbb.check_content(tmp_path, cbb.book_pages(tmp_path))
    assert Counter(rule for _, rule, _ in found) == Counter(["ctrlchar", "statement", "dupid"])
    assert {page for page, _, _ in found} == {"chapters/bad.html"}
    assert expected["chapters/bad.html"]["mathjax"] == 1  # found in the browser (mjx-merror)


def test_no_page_source_of_the_book_holds_a_control_character():
    """The sources' side of [ctrlchar]: a literal backspace (a non-raw "\\beta") shows as a
    MathJax "Math input error" in the built page."""
    from tpde_book.ledger import toc_documents

    found = []
    for name in toc_documents(ROOT):
        path = ROOT / (name if name.endswith(".md") else f"{name}.md")
        if path.exists():
            text = path.read_text(encoding="utf-8")
            found += [(name, m.group()) for m in cbb._CONTROL.finditer(text)]
    assert not found, found


def test_an_id_repeated_on_a_page_is_found_once_per_id(tmp_path):
    page = _write(tmp_path, "p.html", '<a id="x"></a><b id="x"></b><i id="x"></i><p id="y"></p>')
    found = cbb.check_content(tmp_path, [page])
    assert [(rule, msg) for _, rule, msg in found] == [("dupid", "id 'x' on 3 elements")]
    once = _write(tmp_path, "q.html", '<a id="x"></a><b id="x-2"></b><i data-id="x"></i>')
    assert cbb.check_content(tmp_path, [once]) == []
