"""Headless Debian Chromium for the book's browser checks, with every host but 127.0.0.1 blocked.

Shared by ``check_built_book.py`` (the static book) and ``check_live_lab.py`` (a live
JupyterLab): both must show that the pages work with no network.
"""

from __future__ import annotations

from urllib.parse import urlsplit

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def offline_context(pw, viewport, blocked, blocked_urls=None):
    """(browser, context) whose requests to any host but 127.0.0.1 are aborted and their hosts
    added to the set ``blocked`` (and their URLs appended to the list ``blocked_urls`` if one is
    given); ``data:`` and ``blob:`` URLs pass."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    context = browser.new_context(viewport=viewport)

    def route(r):
        host = urlsplit(r.request.url).hostname
        if r.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            return r.continue_()
        blocked.add(host)
        if blocked_urls is not None:
            blocked_urls.append(r.request.url)
        return r.abort()

    context.route("**/*", route)
    return browser, context
