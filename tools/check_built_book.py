"""Check the built book the way a reader meets it: internal links, then every page in a browser.

Usage::

    python tools/check_built_book.py [_build/html] [--links-only]

1. **Links** (no network, no browser): every relative ``href``/``src`` of every page points to a
   file of the build, and every ``#fragment`` to an element id of its target page.
2. **Browser**: headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright) loads
   each page from a server on 127.0.0.1 with every other address blocked, and fails the page if
   it shows raw TeX (MathJax did not render), a figure that did not load, an error output,
   embedded widgets that do not render, or a static twin (``to_jshtml`` animation) that does not
   play. A screenshot of each page is kept
   in ``_build/screenshots/``.

Prints one line per failure and a closing ``N passed, N failed`` line; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

SKIP_PAGES = {"genindex.html", "search.html", "index.html"}  # index: a redirect to the root page


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


def book_pages(html_dir):
    pages = []
    for path in sorted(html_dir.rglob("*.html")):
        rel = path.relative_to(html_dir)
        if rel.parts[0] in ("_static", "_sources", "_images") or str(rel) in SKIP_PAGES:
            continue
        pages.append(rel)
    return pages


def check_links(html_dir, pages):
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
                failures.append(f"{rel}: broken link {link!r}")
                continue
            if parts.fragment and target.suffix == ".html":
                trel = target.relative_to(html_dir.resolve())
                if unquote(parts.fragment) not in parse(trel).ids:
                    failures.append(f"{rel}: link {link!r}: no element with id {parts.fragment!r} in {trel}")
    return failures, n_links


def _serve(html_dir):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(html_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
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
  const anims = [...document.querySelectorAll('.animation')].length;
  // embedded widget views: the widget manager (served with the book) must render them
  const views = document.querySelectorAll(
      'script[type="application/vnd.jupyter.widget-view+json"]').length;
  let widgets = 0;
  for (let k = 0; views && k < 50 && !widgets; k++) {
    await new Promise(r => setTimeout(r, 200));
    widgets = document.querySelectorAll('.jupyter-widgets').length;
  }
  return {rawMath, broken, errors, anims, views, widgets, nMath: maths.length};
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


def check_in_browser(html_dir, pages, shots_dir):
    from offline_browser import offline_context
    from playwright.sync_api import sync_playwright

    shots_dir.mkdir(parents=True, exist_ok=True)
    server = _serve(html_dir)
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    failures, blocked = [], set()
    with sync_playwright() as pw:
        browser, context = offline_context(pw, {"width": 1280, "height": 1000}, blocked)
        page = context.new_page()
        for rel in pages:
            page.goto(base + str(rel), wait_until="load", timeout=60_000)
            report = page.evaluate(_PAGE_REPORT)
            for tex in report["rawMath"]:
                failures.append(f"{rel}: raw TeX shown (MathJax did not render): {tex!r}")
            for src in report["broken"]:
                failures.append(f"{rel}: figure did not load: {src!r}")
            for err in report["errors"]:
                failures.append(f"{rel}: error output: {err!r}")
            if report["views"] and not report["widgets"]:
                failures.append(f"{rel}: {report['views']} embedded widgets did not render")
            if report["anims"]:
                for k, outcome in enumerate(page.evaluate(_PLAY_ANIMATIONS)):
                    if outcome != "ok":
                        failures.append(f"{rel}: static twin #{k}: {outcome}")
            page.screenshot(path=str(shots_dir / (str(rel).replace("/", "__") + ".png")), full_page=True)
            print(
                f"  {rel}: {report['nMath']} formulas, {report['anims']} animations, "
                f"{report['views']} widget views ({report['widgets']} widget elements rendered)"
            )
        browser.close()
    server.shutdown()
    if blocked:
        print(
            "  requests to other hosts blocked (not needed to read the book):",
            ", ".join(sorted(h for h in blocked if h)),
        )
    return failures


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("html_dir", nargs="?", default="_build/html")
    ap.add_argument("--links-only", action="store_true")
    args = ap.parse_args(argv)
    html_dir = Path(args.html_dir)
    if not (html_dir / "index.html").exists():
        print(f"no built book at {html_dir} (run the README's build command first)")
        return 1
    pages = book_pages(html_dir)
    link_failures, n_links = check_links(html_dir, pages)
    print(f"links: {n_links} internal links checked on {len(pages)} pages")
    failures = list(link_failures)
    if not args.links_only:
        failures += check_in_browser(html_dir, pages, html_dir.parent / "screenshots")
    for f in failures:
        print("FAIL", f)
    # one verdict per page: a page passes when neither its links nor its rendering failed
    failed_pages = len({f.split(":")[0] for f in failures})
    print(f"browser-check: {len(pages) - failed_pages} passed, {failed_pages} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
