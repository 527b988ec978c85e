"""Animations as self-contained HTML: matplotlib's ``to_jshtml`` without its one outside request.

``FuncAnimation.to_jshtml`` writes a player whose buttons are Font Awesome 4 icons, loaded by a
``<link>`` to a CDN stylesheet: a page that shows the animation then sends a request to another
host, and offline the buttons are empty. :func:`animation_html` drops that link and writes each
button as plain text (Unicode arrows), so the player needs nothing but the page. Its frames are
PNGs with ``scale`` times the figure's pixels, shown at the figure's size (``width`` of the
image), so that they are sharp on high-density screens, as the book's other figures are.
"""

from __future__ import annotations

import re

import matplotlib
from matplotlib.animation import Animation

#: the player's Font Awesome icons -> text that every font has
_ICONS = {
    "minus": "\u2212",  # slower
    "fast-backward": "|\u25c0\u25c0",  # first frame
    "step-backward": "|\u25c0",  # previous frame
    "play fa-flip-horizontal": "\u25c0",  # play backwards
    "pause": "\u275a\u275a",
    "play": "\u25b6",
    "step-forward": "\u25b6|",  # next frame
    "fast-forward": "\u25b6\u25b6|",  # last frame
    "plus": "+",  # faster
}
_LINK = re.compile(r'<link rel="stylesheet"\s+href="[^"]*font-awesome[^"]*">\s*')
_ICON = re.compile(r'<i class="fa fa-([a-z -]+?)"></i>')
_IMG = re.compile(r'<img id="(_anim_img[0-9a-f]+)">')


def animation_html(anim: Animation, scale: float = 2.0, **kwargs) -> str:
    """``anim.to_jshtml(**kwargs)`` with no stylesheet from another host, text buttons, and
    frames of ``scale`` times the figure's pixels shown at the figure's size.

    Raises ``ValueError`` if matplotlib's player has an icon this function does not know, or its
    image tag is not the one expected (so a changed template is noticed, not shown broken).
    """
    fig = anim._fig
    width = int(round(fig.get_figwidth() * fig.dpi))
    with matplotlib.rc_context({"savefig.dpi": scale * fig.dpi}):
        html = _LINK.sub("", anim.to_jshtml(**kwargs))
    html, n_img = _IMG.subn(
        lambda m: f'<img id="{m.group(1)}" width="{width}" style="max-width: 100%; height: auto;" alt="">',
        html,
    )
    if n_img != 1:
        raise ValueError(f"animation_html: expected one frame image in matplotlib's player, found {n_img}")

    def text(match):
        name = match.group(1).strip()
        if name not in _ICONS:
            raise ValueError(f"animation_html: unknown player icon {name!r}")
        return f'<span aria-hidden="true">{_ICONS[name]}</span>'

    return _ICON.sub(text, html)
