"""Check the built book the way a reader meets it: internal links, then every page in a browser.

Usage::

    python tools/check_built_book.py [_build/html] [--links-only] [--pages GLOB] [--report-only]
    python tools/check_built_book.py --self-test

1. **Links and content** (no network, no browser): every relative ``href``/``src`` of every page
   points to a file of the build, and every ``#fragment`` to an element id of its target page;
   ``[ctrlchar]`` a page holds a control character (U+0000–U+001F other than tab, newline and
   carriage return, or U+007F, raw or as a numeric entity: e.g. the backspace a non-raw string
   makes of ``"\\beta"``, which MathJax shows as "Math input error"); ``[statement]`` a chapter
   page holds no numbered statement (a sphinx-proof theorem, proposition, lemma, corollary or
   observation: ``<span class="caption-number">Theorem 5.1``); ``[dupid]`` an element id that
   a page repeats (HTML forbids it; a link reaches only the first).
2. **Browser**: headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright) loads
   each page at a 1400 px wide viewport from a server on 127.0.0.1, every other address
   blocked, and fails the page on each of these findings (one ``FAIL page: [rule] ...`` line
   each, naming the element):

   - ``[tex]`` raw TeX shown (MathJax did not render); ``[mathjax]`` a MathJax error (an
     ``mjx-merror`` element: "Math input error", an undefined control sequence, ...);
     ``[figure]`` a figure that did not load; ``[error]`` an error output; ``[widgets]``
     embedded widgets that do not render; ``[twin]`` a static twin (``to_jshtml`` animation)
     that does not play;
   - ``[overflow]`` a cell output a reader must scroll sideways: the ``.cell_output`` or one of
     its elements that scrolls or clips (``overflow-x`` not ``visible``: a ``pre``, a table's
     wrapper, a widget box) whose content is wider than its box (``scrollWidth > clientWidth +
     1``), or an output reaching past the article's right edge. (A descendant spilling visibly
     but inside the output, such as MathJax glyphs in a caption, is counted only through the
     output's own ``scrollWidth``; a formula is measured by its typeset box, ``mjx-math``.)
     One finding per output, with its code cell's number on the page (1 = the page's first
     code cell) and the first 60 characters of its text;
   - ``[sharpness]`` and ``[scale]``: every visible ``<img>`` of the article (cell outputs,
     figures, the frames of the static twins, images of widgets) shown at least 32 px wide
     (narrower ones are icons, such as the module index's toggles), see *Figures* below;
   - ``[control]`` a visible control of the embedded ipywidgets (slider, dropdown, button, ...,
     or an ``input``/``select``/``button``/``textarea`` inside a rendered widget area): it moves
     but changes nothing, as no kernel is behind it. The controls of the static twins (the
     ``.animation`` player) are legitimate and not counted; controls hidden by CSS (``display:
     none``, ``visibility: hidden``, ``opacity: 0``, a folded ``<details>``, zero size, clipped
     away by an ancestor's ``overflow``) pass;
   - ``[outside]`` a request to a host other than 127.0.0.1 (aborted: the book must not need
     it), and ``[missing]`` a request answered with an HTTP error (404: a font, stylesheet,
     script or image the build does not ship) or that failed on 127.0.0.1; both per page;
   - on each page under ``chapters/`` only: ``[code]`` the code inputs shown take more than
     25 % of the article's height, and ``[height]`` the page is taller than 25 000 px
     (``document.documentElement.scrollHeight``).

   Code share: the summed height of the visible code-cell inputs (``.cell_input``) over the
   height of the page's article. A folded input (myst-nb's ``hide-input``, a closed
   ``<details>``) counts only what it shows, its toggle (``<summary>``); an unfolded one counts
   its toggle and its code.

   A screenshot (JPEG) of each page is kept in ``--screenshots`` (default: ``screenshots/``
   next to the HTML folder; none with ``--no-screenshots``).

Figures
-------
Two ratios per image, measured after the page (MathJax, widgets, fonts) has settled:

- **sharpness** = ``naturalWidth / shown width`` (image pixels per CSS pixel, the shown width
  from ``getBoundingClientRect``), must be >= 1.5 so that a figure stays crisp on a
  high-density screen. Not measured for SVG images (vector).
- **scale** = ``shown width / drawn width``, must be >= 0.75, where the *drawn width* is the
  width, in CSS pixels, at which the figure was designed to be shown (its text at the sizes
  chosen):

  1. the image's ``width`` attribute, when the output sets one (a matplotlib-inline "retina"
     PNG is saved at twice the figure's dpi and carries ``width = naturalWidth / 2``);
  2. else, for a PNG that records its resolution (a ``pHYs`` chunk, which matplotlib always
     writes): its size in inches times 100 px per inch, matplotlib's screen convention (a
     figure shown at ``figure.dpi = 100`` puts one image pixel on one CSS pixel). A PNG saved
     at 100 dpi is thus drawn at its natural width, one saved at 200 dpi at half of it, the same
     as a retina PNG's ``width`` attribute;
  3. else (no attribute, no resolution: an SVG, another raster): its natural width (for an
     SVG, the intrinsic CSS size of its ``width``).

  Consequence: a 100-dpi PNG without ``width`` passes both rules only if shown between 0.75
  and 0.67 of its natural width, which is impossible: such a figure is either blurry on a
  high-density screen or shrunk. A figure passes when it is saved at >= 1.5 times the
  resolution it is shown at (``dpi >= 150`` or retina) and not shrunk below 0.75 of the size
  it was drawn at (so its text keeps at least 3/4 of its designed size).

Prints one line per finding, a table of the chapters (height, code share, figures, worst
sharpness and scale, and the count of findings of each kind) and a closing ``N passed, N
failed`` line (one verdict per page); exits 1 on any finding (0 with ``--report-only``).

``--self-test`` writes a small book of three pages into a temporary folder (one that breaks
every rule but ``[widgets]`` and ``[height]``, one too long, and one that passes every rule by
a near miss: a wrapped long line, a retina PNG, a 200-dpi PNG without ``width``, an SVG, a
folded code input, widget controls hidden by ``display: none`` and by a folded panel, a static
twin's player) and checks that the checker finds exactly the expected number of findings of
each rule on each page; exits 1 if not. It shows that each rule can fail and can pass, in
about 10 s. (``[widgets]``, embedded widgets that never render, is left out: it fails only
after waiting 10 s for them.)
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import functools
import http.server
import re
import struct
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

SKIP_PAGES = {"genindex.html", "search.html", "index.html"}  # index: a redirect to the root page
VIEWPORT = {"width": 1400, "height": 1000}
MIN_SHARPNESS = 1.5  # image pixels per CSS pixel shown
MIN_SCALE = 0.75  # shown width over drawn width
MAX_CODE_SHARE = 0.25  # visible code inputs over the article's height (chapters)
MAX_PAGE_HEIGHT = 25_000  # CSS px at VIEWPORT's width (chapters)
PX_PER_INCH = 100  # matplotlib's figure.dpi: CSS px per inch of a figure shown at its drawn size
LOCAL_HOST = "127.0.0.1"


class _PageParser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key) and not (tag == "link" and attrs.get("rel") == "preload"):
                self.links.append(attrs[key])


#: a control character other than tab, newline and carriage return, raw or as a numeric entity
_CONTROL = re.compile(
    r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|&#0*(?:[0-8]|1[124-9]|2[0-9]|3[01]|127);"
    r"|&#x0*(?:[0-8]|[bcef]|1[0-9a-f]|7f);",
    re.I,
)
#: the number sphinx-proof gives a statement (not a definition): "Theorem 5.1"
_STATEMENT = re.compile(
    r'<span class="caption-number">(?:Theorem|Proposition|Lemma|Corollary|Observation) \d'
)


#: an element's id attribute in a page's HTML
_ID = re.compile(r'\sid="([^"]+)"')


def check_content(html_dir, pages):
    """``[ctrlchar]``, ``[statement]`` and ``[dupid]`` findings of the pages' HTML (no browser)."""
    failures = []
    for rel in pages:
        text = (html_dir / rel).read_text(encoding="utf-8", errors="replace")
        repeated = [(i, k) for i, k in Counter(_ID.findall(text)).items() if k > 1]
        for ident, k in repeated[:3]:
            failures.append((str(rel), "dupid", f"id {ident!r} on {k} elements"))
        for m in list(_CONTROL.finditer(text))[:3]:
            line = text.count("\n", 0, m.start()) + 1
            around = text[max(0, m.start() - 30) : m.end() + 30].replace("\n", " ")
            failures.append(
                (str(rel), "ctrlchar", f"control character {m.group()!r} at line {line}: {around!r}")
            )
        if is_chapter(rel) and not _STATEMENT.search(text):
            failures.append(
                (
                    str(rel),
                    "statement",
                    "chapter without a numbered statement (prf:theorem, proposition, lemma, "
                    "corollary or observation)",
                )
            )
    return failures


def book_pages(html_dir, patterns=None):
    """Pages to check (paths relative to ``html_dir``), optionally only those matching one of the
    glob ``patterns`` (``fnmatch`` on the relative path, e.g. ``chapters/*``)."""
    pages = []
    for path in sorted(html_dir.rglob("*.html")):
        rel = path.relative_to(html_dir)
        if rel.parts[0] in ("_static", "_sources", "_images") or str(rel) in SKIP_PAGES:
            continue
        if patterns and not any(fnmatch.fnmatch(rel.as_posix(), p) for p in patterns):
            continue
        pages.append(rel)
    return pages


def is_chapter(rel) -> bool:
    """Whether the page is a chapter (the code share and length rules apply)."""
    return Path(rel).parts[0] == "chapters"


def check_links(html_dir, pages):
    """Findings ``(page, "links", message)`` and the number of internal links checked."""
    parsed = {}

    def parse(rel):
        if rel not in parsed:
            parser = _PageParser()
            parser.feed((html_dir / rel).read_text(encoding="utf-8"))
            parsed[rel] = parser
        return parsed[rel]

    failures, n_links = [], 0
    for rel in pages:
        for link in parse(rel).links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith(("//", "mailto:", "javascript:", "data:")):
                continue  # external: not checked here (no network)
            n_links += 1
            target = (html_dir / rel) if not parts.path else (html_dir / rel.parent / unquote(parts.path))
            target = target.resolve()
            if not target.exists():
                failures.append((str(rel), "links", f"broken link {link!r}"))
                continue
            if parts.fragment and target.suffix == ".html":
                trel = target.relative_to(html_dir.resolve())
                if unquote(parts.fragment) not in parse(trel).ids:
                    failures.append(
                        (str(rel), "links", f"link {link!r}: no element with id {parts.fragment!r} in {trel}")
                    )
    return failures, n_links


# ---------------------------------------------------------------------------------------------
# Figures: resolution of a PNG, drawn width, the two ratios


def png_dpi(data: bytes) -> float | None:
    """Horizontal resolution (dots per inch) in a PNG's ``pHYs`` chunk; None if the bytes are not
    a PNG, the chunk is absent (it must come before the image data) or its unit is not the metre.
    ``data`` may be only the file's first bytes."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return None
    pos = 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"pHYs":
            if pos + 17 > len(data):
                return None
            per_metre, _, unit = struct.unpack(">IIB", data[pos + 8 : pos + 17])
            return per_metre * 0.0254 if unit == 1 and per_metre > 0 else None
        if kind in (b"IDAT", b"IEND"):
            return None
        pos += 12 + length
    return None


def drawn_width(natural: float, width_attr: float | None, dpi: float | None) -> float:
    """Width (CSS px) a figure was designed to be shown at: the ``width`` attribute if set, else
    its size in inches times ``PX_PER_INCH`` if its resolution is known, else its natural width
    (see the module docstring)."""
    if width_attr:
        return float(width_attr)
    if dpi:
        return natural * PX_PER_INCH / dpi
    return float(natural)


def figure_ratios(fig: dict) -> tuple[float | None, float]:
    """(sharpness, scale) of one measured figure (a dict with ``natural``, ``shown``,
    ``widthAttr``, ``svg`` and ``dpi``); sharpness is None for an SVG."""
    sharp = None if fig["svg"] else fig["natural"] / fig["shown"]
    scale = fig["shown"] / drawn_width(fig["natural"], fig["widthAttr"], fig["dpi"])
    return sharp, scale


def _parse_width_attr(value) -> float | None:
    """The pixel width of an ``<img width=...>`` attribute ("640", "640px"); None otherwise."""
    if value is None:
        return None
    text = str(value).strip().removesuffix("px")
    try:
        width = float(text)
    except ValueError:
        return None
    return width if width > 0 else None


def _image_head_info(head_b64: str | None, src: str) -> tuple[bool, float | None]:
    """(is SVG, dpi) from the base64 of an image's first bytes (fetched in the page) and its URL."""
    head = base64.b64decode(head_b64) if head_b64 else b""
    svg = src.split("?")[0].lower().endswith(".svg") or src.startswith("data:image/svg")
    svg = svg or head.lstrip()[:5] in (b"<?xml", b"<svg ") or b"<svg" in head[:512]
    return svg, png_dpi(head)


def figure_findings(rel: str, figures: list[dict]) -> list[tuple[str, str, str]]:
    """``[sharpness]`` and ``[scale]`` findings of a page's measured figures."""
    out = []
    for k, fig in enumerate(figures, 1):
        sharp, scale = figure_ratios(fig)
        where = fig["where"]
        name = f"figure {k} ({where}, {fig['label']!r})"
        if sharp is not None and sharp < MIN_SHARPNESS:
            dpi = f", saved at {fig['dpi']:.0f} dpi" if fig["dpi"] else ""
            out.append(
                (
                    rel,
                    "sharpness",
                    f"{name}: {fig['natural']} px wide{dpi}, shown at {fig['shown']:.0f} px: "
                    f"{sharp:.2f} image px per CSS px < {MIN_SHARPNESS}",
                )
            )
        if scale < MIN_SCALE:
            drawn = drawn_width(fig["natural"], fig["widthAttr"], fig["dpi"])
            out.append(
                (
                    rel,
                    "scale",
                    f"{name}: shown at {fig['shown']:.0f} px, {scale:.2f} of the {drawn:.0f} px it was "
                    f"drawn at < {MIN_SCALE}",
                )
            )
    return out


def layout_findings(rel: str, m: dict) -> list[tuple[str, str, str]]:
    """``[overflow]``, ``[control]``, ``[code]`` and ``[height]`` findings of a page's layout
    measurement ``m`` (see ``_MEASURE``)."""
    out = []
    for o in m["overflows"]:
        out.append(
            (
                rel,
                "overflow",
                f"code cell {o['cell']}: output runs past its box ({o['el']}: {o['content']} px of "
                f"content in {o['box']} px): {o['text']!r}",
            )
        )
    for c in m["controls"]:
        out.append((rel, "control", f"visible widget control in a static page: {c}"))
    if is_chapter(rel):
        share = code_share(m)
        if share > MAX_CODE_SHARE:
            out.append(
                (
                    rel,
                    "code",
                    f"code inputs shown take {100 * share:.1f} % of the page ({m['codeHeight']:.0f} of "
                    f"{m['articleHeight']:.0f} px) > {100 * MAX_CODE_SHARE:.0f} %",
                )
            )
        if m["pageHeight"] > MAX_PAGE_HEIGHT:
            out.append(
                (
                    rel,
                    "height",
                    f"page is {m['pageHeight']} px tall at {VIEWPORT['width']} px wide "
                    f"> {MAX_PAGE_HEIGHT} px",
                )
            )
    return out


def code_share(m: dict) -> float:
    return m["codeHeight"] / m["articleHeight"] if m["articleHeight"] else 0.0


def request_findings(rel: str, outside: list[str], missing: list[str]) -> list[tuple[str, str, str]]:
    """``[outside]`` and ``[missing]`` findings, one per distinct URL."""
    out = [(rel, "outside", f"request to another host: {url}") for url in dict.fromkeys(outside)]
    out += [(rel, "missing", f"asset not served: {what}") for what in dict.fromkeys(missing)]
    return out


def summary_row(rel: str, m: dict, figures: list[dict], kinds: Counter) -> str:
    """One line of the chapters' table."""
    ratios = [figure_ratios(f) for f in figures]
    sharps = [s for s, _ in ratios if s is not None]
    scales = [c for _, c in ratios]
    worst_sharp = f"{min(sharps):.2f}" if sharps else "-"
    worst_scale = f"{min(scales):.2f}" if scales else "-"
    return (
        f"{rel:<36} {m['pageHeight']:>7} {100 * code_share(m):>6.1f} {len(figures):>5} "
        f"{kinds['sharpness']:>6} {kinds['scale']:>6} {worst_sharp:>6} {worst_scale:>6} "
        f"{kinds['overflow']:>5} {kinds['control']:>5} {kinds['outside']:>5} {kinds['missing']:>5}"
    )


SUMMARY_HEADER = (
    f"{'chapter page':<36} {'height':>7} {'code%':>6} {'figs':>5} {'<1.5x':>6} {'<0.75':>6} "
    f"{'sharp':>6} {'scale':>6} {'ovfl':>5} {'ctrl':>5} {'out':>5} {'404':>5}"
)


# ---------------------------------------------------------------------------------------------
# The browser


def _serve(html_dir):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(html_dir))
    server = http.server.ThreadingHTTPServer((LOCAL_HOST, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


_PAGE_REPORT = """
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const maths = [...document.querySelectorAll('.math, span.math, div.math')];
  const rawMath = maths.filter(m => !m.querySelector('mjx-container'))
                       .map(m => m.textContent.trim().slice(0, 60));
  const imgs = [...document.querySelectorAll('article img, .bd-article img')];
  const broken = imgs.filter(i => !(i.complete && i.naturalWidth > 0))
                     .map(i => (i.getAttribute('src') || '').slice(0, 80));
  const errors = [...document.querySelectorAll('.output.traceback, .output.error, .output.stderr')]
                 .map(e => e.textContent.trim().slice(0, 200))
                 .filter(t => /Error|Traceback|Exception/.test(t));
  const mathErrors = [...document.querySelectorAll('mjx-merror')]
      .map(e => ((e.getAttribute('data-mjx-error') || '') + ' ' + e.textContent).trim().slice(0, 80));
  const anims = [...document.querySelectorAll('.animation')].length;
  // embedded widget views: the widget manager (served with the book) must render them
  const views = document.querySelectorAll(
      'script[type="application/vnd.jupyter.widget-view+json"]').length;
  let widgets = 0;
  for (let k = 0; views && k < 50 && !widgets; k++) {
    await new Promise(r => setTimeout(r, 200));
    widgets = document.querySelectorAll('.jupyter-widgets').length;
  }
  return {rawMath, mathErrors, broken, errors, anims, views, widgets, nMath: maths.length};
}
"""

# Layout of the settled page (after _PAGE_REPORT: MathJax typeset, widgets rendered).
_MEASURE = """
async () => {
  await document.fonts.ready;
  const art = document.querySelector('article.bd-article') || document.querySelector('article')
              || document.body;
  const artRect = art.getBoundingClientRect();
  const visible = e => e.checkVisibility({checkOpacityProperty: true, checkVisibilityCSS: true,
                                          contentVisibilityAuto: true})
                       && e.getBoundingClientRect().width > 0 && e.getBoundingClientRect().height > 0;
  // shown: visible and not clipped away by an ancestor that hides its overflow (a panel folded
  // to max-height: 0, say)
  const shown = e => {
    if (!visible(e)) return false;
    const r = e.getBoundingClientRect();
    for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
      if (getComputedStyle(a).overflow === 'visible') continue;
      const c = a.getBoundingClientRect();
      if (Math.min(r.right, c.right) - Math.max(r.left, c.left) < 1
          || Math.min(r.bottom, c.bottom) - Math.max(r.top, c.top) < 1) return false;
    }
    return true;
  };
  const cells = [...art.querySelectorAll('div.cell')];
  const cellOf = e => { const c = e.closest('div.cell'); return c ? cells.indexOf(c) + 1 : 0; };
  const describe = e => e.tagName.toLowerCase()
      + [...e.classList].filter(c => !/^(lm|p)-/.test(c)).slice(0, 3).map(c => '.' + c).join('');
  const text = e => (e.innerText || e.textContent || '').replace(/\\s+/g, ' ').trim().slice(0, 60);

  // 1. outputs a reader must scroll sideways (one per output: its first offending element): the
  // output itself (its scrollWidth counts what its descendants spill), or a descendant that
  // scrolls or clips (overflow-x not visible); a descendant spilling visibly inside the output
  // (MathJax glyphs in a caption) is not a finding
  const overflows = [];
  const clips = e => getComputedStyle(e).overflowX !== 'visible';
  for (const out of art.querySelectorAll('.cell_output')) {
    if (!visible(out)) continue;
    let hit = null;
    for (const e of [out, ...out.querySelectorAll('*')]) {
      if (e.closest('.animation, mjx-container') || !e.clientWidth) continue;
      // a formula: the width of its typeset box (its scrollWidth also counts MathJax's glyph
      // overhangs and hidden assistive MathML, which a reader does not see)
      const formula = e.matches('.math') ? e.querySelector('mjx-math') : null;
      const content = formula ? Math.round(formula.getBoundingClientRect().width) : e.scrollWidth;
      if (content > e.clientWidth + 1 && (e === out || clips(e)) && visible(e)) {
        hit = {el: describe(e), content, box: e.clientWidth}; break;
      }
    }
    const r = out.getBoundingClientRect();
    if (!hit && r.right > artRect.right + 1) {
      hit = {el: describe(out) + ' past the article', content: Math.round(r.right - artRect.left),
             box: Math.round(artRect.width)};
    }
    if (hit) overflows.push({...hit, cell: cellOf(out), text: text(out)});
  }

  // 2. figures: every visible image of the article, with its first bytes (resolution, SVG)
  const figures = [];
  for (const img of art.querySelectorAll('img')) {
    if (!shown(img) || !img.naturalWidth || img.getBoundingClientRect().width < 32) continue;
    let head = null;
    try {
      const buf = await (await fetch(img.currentSrc || img.src)).arrayBuffer();
      const bytes = new Uint8Array(buf.slice(0, 4096));
      head = btoa(String.fromCharCode(...bytes));
    } catch (err) { head = null; }
    const anim = img.closest('.animation');
    const inWidget = img.closest('.widget-subarea, .jupyter-widgets');
    const cell = cellOf(img);
    figures.push({
      natural: img.naturalWidth, shown: img.getBoundingClientRect().width,
      widthAttr: img.getAttribute('width'), head, src: (img.currentSrc || img.src).slice(0, 40),
      where: (anim ? 'static twin, ' : inWidget ? 'widget, ' : '')
             + (cell ? 'code cell ' + cell : 'text'),
      label: (text(img.closest('figure')?.querySelector('figcaption') || img) || img.getAttribute('alt')
              || (img.getAttribute('src') || '').split('/').pop() || '').slice(0, 50),
    });
  }

  // 3. visible controls of the embedded widgets (not the static twins' player)
  const controlSel = ['.widget-slider', '.widget-dropdown', '.widget-select', '.widget-select-multiple',
    '.widget-button', '.widget-toggle-button', '.widget-toggle-buttons', '.widget-checkbox',
    '.widget-text', '.widget-textarea', '.widget-play', '.widget-radio', '.widget-radio-box',
    '.widget-colorpicker', '.widget-datepicker', '.widget-combobox', '.widget-upload',
    '.widget-tagsinput'].join(', ');
  const areas = '.widget-subarea, .jupyter-widgets';
  const candidates = [...art.querySelectorAll(controlSel),
    ...[...art.querySelectorAll('input, select, button, textarea')].filter(e => e.closest(areas))]
    .filter(e => !e.closest('.animation') && !e.classList.contains('copybtn'));
  const outer = candidates.filter(e => !candidates.some(o => o !== e && o.contains(e)));
  const controls = [...new Set(outer)].filter(shown).map(e => {
    const label = e.querySelector('.widget-label');
    const name = (label && label.textContent.trim()) || e.getAttribute('aria-label')
                 || e.getAttribute('title') || e.getAttribute('name') || text(e);
    return `${describe(e)} ${JSON.stringify(name || '')} (code cell ${cellOf(e)})`;
  });

  // 5. code share: what the code inputs show (a folded input: its toggle only)
  let codeHeight = 0;
  const toggles = new Set();
  for (const inp of art.querySelectorAll('.cell_input')) {
    if (visible(inp)) codeHeight += inp.getBoundingClientRect().height;
    const det = inp.closest('details');
    const summary = det && art.contains(det) ? det.querySelector(':scope > summary') : null;
    if (summary && !toggles.has(summary) && visible(summary)) {
      toggles.add(summary);
      codeHeight += summary.getBoundingClientRect().height;
    }
  }
  return {overflows, figures, controls, codeHeight, articleHeight: artRect.height,
          pageHeight: document.documentElement.scrollHeight};
}
"""

_PLAY_ANIMATIONS = """
async () => {
  const results = [];
  for (const anim of document.querySelectorAll('.animation')) {
    const img = anim.querySelector('img');
    const slider = anim.querySelector('input[type=range]');
    const play = [...anim.querySelectorAll('button')].find(b => /play/i.test(b.title || '')
                  && !/reverse/i.test(b.title || ''));
    if (!img || !slider || !play) { results.push('incomplete animation widget'); continue; }
    const before = img.src, frame0 = slider.value;
    play.click();
    await new Promise(r => setTimeout(r, 2500));
    const pause = [...anim.querySelectorAll('button')].find(b => /pause/i.test(b.title || ''));
    if (pause) pause.click();
    const moved = img.src !== before && slider.value !== frame0;
    const isImage = img.src.startsWith('data:image');
    results.push(moved && isImage ? 'ok' : `did not play (frame ${frame0} -> ${slider.value})`);
  }
  return results;
}
"""


def _figures_of(measured: list[dict]) -> list[dict]:
    figures = []
    for f in measured:
        svg, dpi = _image_head_info(f["head"], f["src"])
        width_attr = _parse_width_attr(f["widthAttr"])
        figures.append({**f, "svg": svg, "dpi": dpi, "widthAttr": width_attr})
    return figures


def check_in_browser(html_dir, pages, shots_dir=None, rows=None):
    """Findings ``(page, rule, message)`` of every page; appends the chapters' table lines to
    ``rows`` (a list) if given; screenshots go to ``shots_dir`` unless it is None."""
    from offline_browser import offline_context
    from playwright.sync_api import sync_playwright

    if shots_dir is not None:
        shots_dir.mkdir(parents=True, exist_ok=True)
    server = _serve(html_dir)
    base = f"http://{LOCAL_HOST}:{server.server_address[1]}/"
    failures, blocked, outside, missing = [], set(), [], []

    def on_response(resp):
        if resp.status >= 400 and urlsplit(resp.url).hostname == LOCAL_HOST:
            missing.append(f"{resp.status} {resp.url.removeprefix(base)}")

    def on_failed(req):
        # a request aborted because another host answered nothing is an [outside] one; a local one
        # that failed without an HTTP error status (counted above) is missing
        url = req.url
        if urlsplit(url).hostname == LOCAL_HOST and not any(
            m.endswith(" " + url.removeprefix(base)) for m in missing
        ):
            missing.append(f"failed ({req.failure}) {url.removeprefix(base)}")

    with sync_playwright() as pw:
        browser, context = offline_context(pw, VIEWPORT, blocked, outside)
        page = context.new_page()
        page.on("response", on_response)
        page.on("requestfailed", on_failed)
        for rel in pages:
            t0 = time.perf_counter()
            outside.clear()
            missing.clear()
            page.goto(base + rel.as_posix(), wait_until="load", timeout=60_000)
            report = page.evaluate(_PAGE_REPORT)
            r = str(rel)
            found = [(r, "tex", f"raw TeX shown (MathJax did not render): {t!r}") for t in report["rawMath"]]
            found += [(r, "mathjax", f"MathJax error: {t!r}") for t in report["mathErrors"]]
            found += [(r, "figure", f"figure did not load: {src!r}") for src in report["broken"]]
            found += [(r, "error", f"error output: {err!r}") for err in report["errors"]]
            if report["views"] and not report["widgets"]:
                found.append((r, "widgets", f"{report['views']} embedded widgets did not render"))
            m = page.evaluate(_MEASURE)
            figures = _figures_of(m["figures"])
            found += layout_findings(r, m)
            found += figure_findings(r, figures)
            if report["anims"]:
                for k, outcome in enumerate(page.evaluate(_PLAY_ANIMATIONS)):
                    if outcome != "ok":
                        found.append((r, "twin", f"static twin #{k}: {outcome}"))
            if shots_dir is not None:
                shot = shots_dir / (str(rel).replace("/", "__").removesuffix(".html") + ".jpg")
                page.screenshot(path=str(shot), full_page=True, type="jpeg", quality=70, timeout=120_000)
            found += request_findings(r, outside, missing)
            failures += found
            print(
                f"  {rel}: {report['nMath']} formulas, {len(figures)} figures, {report['anims']} animations, "
                f"{report['views']} widget views ({report['widgets']} widget elements rendered), "
                f"{len(found)} findings ({time.perf_counter() - t0:.1f} s)"
            )
            if rows is not None and is_chapter(rel):
                rows.append(summary_row(r, m, figures, Counter(rule for _, rule, _ in found)))
        browser.close()
    server.shutdown()
    return failures


# ---------------------------------------------------------------------------------------------
# Self-test: a tiny book with every rule broken once, and one page passing each by a near miss


def png_bytes(width: int, height: int, dpi: float | None) -> bytes:
    """A grey RGB PNG of the given size, with a ``pHYs`` chunk for ``dpi`` unless it is None."""

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    phys = chunk(b"pHYs", struct.pack(">IIB", round(dpi / 0.0254), round(dpi / 0.0254), 1)) if dpi else b""
    rows = b"".join(b"\x00" + bytes([170, 170, 170]) * width for _ in range(height))
    return b"\x89PNG\r\n\x1a\n" + header + phys + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


_FIXTURE_STYLE = """<style>
body { margin: 0; font: 16px/20px sans-serif; }
article.bd-article { display: block; width: 800px; margin: 0 auto; }
.cell_output img { max-width: 100%; }
pre { margin: 0; }
</style>"""

_FIXTURE_PLAYER = """<div class="animation">
  <img id="frame" src="data:image/png;base64,{frame0}" width="200" alt="twin frame">
  <input type="range" id="slider" min="0" max="1" value="0">
  <button title="Play" onclick="setTimeout(() => {{
      document.getElementById('frame').src = 'data:image/png;base64,{frame1}';
      document.getElementById('slider').value = 1; }}, 100)">play</button>
  <button title="Pause">pause</button>
</div>"""


def _page(body: str) -> str:
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'>{_FIXTURE_STYLE}</head><body>{body}</body></html>"
    )


def _prose(n: int) -> str:
    return "".join(f"<p>Paragraph {k} of the text a reader reads between the cells.</p>" for k in range(n))


def write_fixture_book(root: Path) -> dict[str, Counter]:
    """Write the self-test's pages under ``root``; return the findings expected per page, as
    counts per rule."""
    (root / "chapters").mkdir(parents=True, exist_ok=True)
    (root / "index.html").write_text(_page("<a href='chapters/good.html'>book</a>"), encoding="utf-8")
    (root / "retina.png").write_bytes(png_bytes(800, 200, 200))  # shown at its width attribute 400
    (root / "hidpi.png").write_bytes(png_bytes(1300, 200, 200))  # drawn at 650 px, shown at 800
    (root / "lowdpi.png").write_bytes(png_bytes(600, 150, 100))  # shown at 600 px: 1.0 px per px
    (root / "shrunk.png").write_bytes(png_bytes(1000, 150, 200))  # drawn at 500 px, shown at 300
    (root / "vector.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" width="400" height="100"><rect width="400" '
        'height="100" fill="#888"/></svg>',
        encoding="utf-8",
    )
    frames = [base64.b64encode(png_bytes(400, 100, 200 + k)).decode() for k in range(2)]
    widget_view = '<script type="application/vnd.jupyter.widget-view+json">{"model_id": "x"}</script>'
    long_line = "checked (" + "a measured value next to its tolerance, " * 8 + ")"
    statement = (
        '<div class="proof theorem"><p class="admonition-title">'
        '<span class="caption-number">Theorem 1.1 </span></p></div>'
    )
    good = _page(
        '<article class="bd-article"><h1>Good</h1>'
        + statement
        + '<p>Tab\tand&#10;newline &#x9; pass; so does <span class="math">\\(\\beta\\)'
        "<mjx-container>β</mjx-container></span> (rendered: the fixture has no MathJax).</p>"
        + _prose(30)
        + '<div class="cell"><div class="cell_input"><pre>x = 1</pre></div>'
        f'<div class="cell_output"><div class="output"><pre style="white-space: pre-wrap">{long_line}'
        "</pre></div></div></div>"
        + _prose(10)
        + '<div class="cell"><details class="hide above-input"><summary>Show code cell source</summary>'
        '<div class="cell_input"><pre>' + "folded = 1\n" * 80 + "</pre></div></details>"
        '<div class="cell_output"><img src="../retina.png" width="400" alt="retina">'
        '<img src="../hidpi.png" alt="200 dpi"><img src="../vector.svg" alt="vector">'
        f'<div class="widget-subarea" style="display: none">{widget_view}'
        '<div class="jupyter-widgets widget-slider"><input type="range"></div></div>'
        '<div class="widget-subarea" style="max-height: 0; overflow: hidden">'
        '<div class="jupyter-widgets widget-dropdown"><select><option>a</option></select></div></div>'
        + _FIXTURE_PLAYER.format(frame0=frames[0], frame1=frames[1])
        + "</div></div>"
        + _prose(10)
        + "</article>"
    )
    bad = _page(
        '<link rel="stylesheet" href="http://example.invalid/font.css">'
        '<link rel="stylesheet" href="../missing.css">'
        '<article class="bd-article"><h1>Bad</h1>'
        '<div class="proof definition"><span class="caption-number">Definition 1.1 </span></div>'
        '<div class="proof admonition" id="proof"></div><div class="proof admonition" id="proof"></div>'
        '<p><span class="math">\\(x^2 + \x08eta\\)</span></p>'
        '<mjx-container><mjx-merror data-mjx-error="Math input error">Math input error</mjx-merror>'
        "</mjx-container>"
        '<div class="cell"><div class="cell_input"><pre>' + "code = 1\n" * 20 + "</pre></div>"
        f'<div class="cell_output"><div class="output"><pre style="overflow: auto">{long_line}</pre>'
        "</div></div></div>"
        '<div class="cell"><div class="cell_input"><pre>plot()</pre></div><div class="cell_output">'
        '<img src="../lowdpi.png" alt="low dpi"><img src="../shrunk.png" style="width: 300px" alt="shrunk">'
        '<img src="../absent.png" alt="absent"></div></div>'
        f'<div class="cell"><div class="cell_output"><div class="widget-subarea">{widget_view}'
        '<div class="jupyter-widgets widget-dropdown"><label class="widget-label">variant</label>'
        "<select><option>a</option></select></div></div>"
        '<div class="animation"><img src="../retina.png" width="400" alt="no player"></div>'
        '<div class="output error">Traceback: ValueError</div></div></div>'
        "</article>"
    )
    long = _page(
        '<article class="bd-article"><h1>Long</h1>'
        + statement
        + _prose(5)
        + '<div style="height: 26000px"></div></article>'
    )
    for name, html in (("good", good), ("bad", bad), ("long", long)):
        (root / "chapters" / f"{name}.html").write_text(html, encoding="utf-8")
    bad_rules = [
        *("links",) * 2,  # missing.css, absent.png
        "tex",
        "mathjax",
        "ctrlchar",
        "statement",
        "dupid",
        "figure",
        "error",
        "twin",
        "overflow",
        "sharpness",
        "scale",
        "control",
        "outside",
        *("missing",) * 2,
        "code",
    ]
    return {
        "chapters/good.html": Counter(),
        "chapters/bad.html": Counter(bad_rules),
        "chapters/long.html": Counter(["height"]),
    }


def compare_findings(expected: dict[str, Counter], failures: list[tuple[str, str, str]]) -> list[str]:
    """Differences between the expected counts per page and rule and the findings: [] if equal."""
    got = {page: Counter() for page in expected}
    for page, rule, _ in failures:
        got.setdefault(page, Counter())[rule] += 1
    problems = []
    for page in sorted(got):
        want = expected.get(page, Counter())
        for rule in sorted(set(want) | set(got[page])):
            if want[rule] != got[page][rule]:
                problems.append(f"{page}: [{rule}] expected {want[rule]} finding(s), got {got[page][rule]}")
    return problems


def self_test() -> int:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="check_built_book_") as tmp:
        root = Path(tmp)
        expected = write_fixture_book(root)
        pages = book_pages(root)
        failures, _ = check_links(root, pages)
        failures += check_content(root, pages)
        failures += check_in_browser(root, pages)
    for page, rule, message in failures:
        print(f"  found {page}: [{rule}] {message}")
    problems = compare_findings(expected, failures)
    for p in problems:
        print("FAIL self-test:", p)
    rules = sorted({rule for c in expected.values() for rule in c})
    verdict = "failed" if problems else "passed"
    print(
        f"self-test {verdict} in {time.perf_counter() - start:.1f} s: rules {', '.join(rules)} each "
        "found where broken, nothing found on the page that passes them by a near miss"
        if not problems
        else f"self-test {verdict}: {len(problems)} differences"
    )
    return 1 if problems else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("html_dir", nargs="?", default="_build/html")
    ap.add_argument("--links-only", action="store_true")
    ap.add_argument("--pages", action="append", metavar="GLOB", help="check only pages matching GLOB")
    ap.add_argument("--report-only", action="store_true", help="print every finding, exit 0")
    ap.add_argument("--screenshots", type=Path, help="screenshot folder (default: next to html_dir)")
    ap.add_argument("--no-screenshots", action="store_true", help="take no screenshots (faster)")
    ap.add_argument("--self-test", action="store_true", help="check the checker on a small book, exit")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    html_dir = Path(args.html_dir)
    if not (html_dir / "index.html").exists():
        print(f"no built book at {html_dir} (run the README's build command first)")
        return 1
    start = time.perf_counter()
    pages = book_pages(html_dir, args.pages)
    failures, n_links = check_links(html_dir, pages)
    print(f"links: {n_links} internal links checked on {len(pages)} pages")
    failures += check_content(html_dir, pages)
    rows = []
    if not args.links_only:
        shots = None if args.no_screenshots else args.screenshots or html_dir.parent / "screenshots"
        failures += check_in_browser(html_dir, pages, shots, rows)
    for page, rule, message in failures:
        print(f"FAIL {page}: [{rule}] {message}")
    if rows:
        print(
            f"chapters at {VIEWPORT['width']} px (limits: height {MAX_PAGE_HEIGHT} px, code "
            f"{100 * MAX_CODE_SHARE:.0f} %, sharpness {MIN_SHARPNESS}x, scale {MIN_SCALE}):"
        )
        print(SUMMARY_HEADER)
        print("\n".join(rows))
    kinds = Counter(rule for _, rule, _ in failures)
    if kinds:
        print("findings by rule:", ", ".join(f"{rule} {n}" for rule, n in sorted(kinds.items())))
    # one verdict per page: a page passes when neither its links nor its rendering failed
    failed_pages = len({page for page, _, _ in failures})
    print(
        f"browser-check: {len(pages) - failed_pages} passed, {failed_pages} failed "
        f"({time.perf_counter() - start:.0f} s)"
    )
    if args.report_only:
        return 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
