"""The book's own machinery, kept out of the numerical library: the chapters' checks.

A chapter checks a statement with one call, :func:`verdict`: it compares the measured value with
its tolerance (raising :class:`AssertionError` when the check fails, so that the chapter fails
under nbval and in the build), shows the reader a compact verdict box (status, what was
measured, the value, the tolerance and its reason), and emits a hidden output (a MyST-NB *glue*
output of MIME type ``application/vnd.tpde.claim+json``), so the check is part of the *executed
notebook*: the Sphinx extension ``_ext/claims_ledger.py`` builds the ledger from the outputs of
the notebooks executed for this build, and a check whose cell did not run has no output and
shows "not run". Outside a kernel (plain Python) :func:`verdict` prints its one-line form.

Installed with the library (``pip install -e ./_ext``) so that chapters import it from anywhere.
"""

from __future__ import annotations

import json
import math
import numbers
import re

__all__ = [
    "verdict",
    "STATUSES",
    "BADGES",
    "KINDS",
    "COUNTEREXAMPLE",
    "MIME",
    "GLUE_PREFIX",
    "KEY_PREFIX",
]

#: where a statement comes from
STATUSES = {
    "paper": "paper's claim, checked numerically",
    "cited": "a cited work's result, checked numerically",
    "derived": "derived here, checked numerically",
    "observed": "observed numerically",
    "fails": "does not hold as stated (counterexample)",
}
#: the short label of each status, as its badge shows it
BADGES = {
    "paper": "paper's claim",
    "cited": "cited work",
    "derived": "derived here",
    "observed": "observed",
    "fails": "fails as stated",
}
#: what the check is: a test would fail if the statement were false; a consistency check holds by
#: construction (it guards the bookkeeping) and is never counted as evidence
KINDS = {"test": "test", "consistency": "consistency check"}
MIME = "application/vnd.tpde.claim+json"
GLUE_PREFIX = "application/papermill.record/"  # MyST-NB's marker of a hidden glue output
KEY_PREFIX = "claim:"
_KEY = re.compile(r"[a-z0-9][a-z0-9\-]*\Z")
#: the paper's claims C1-C17, and the book's own results beyond the paper B1, B2, ...
_CLAIM = re.compile(r"(C([1-9]|1[0-7])|B[1-9][0-9]?)\Z")


def _payload(key, status, statement, value, claim, kind):
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError(f"key must be lowercase words joined by hyphens, got {key!r}")
    if status not in STATUSES:
        raise ValueError(f"status must be one of {sorted(STATUSES)}, got {status!r}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError("statement must be a non-empty string")
    if claim is not None and not (isinstance(claim, str) and _CLAIM.match(claim)):
        raise ValueError(f"claim must be a claim id 'C1' .. 'C17' or 'B1', 'B2', ... or None, got {claim!r}")
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, numbers.Integral)):
        value = f"{float(value):.3g}"
    return {
        "key": key,
        "status": status,
        "statement": statement,
        "value": None if value is None else str(value),
        "claim": claim,
        "kind": kind,
    }


#: the comparisons a verdict can make: keyword -> (symbol shown, test)
_BOUNDS = {
    "below": ("<", lambda v, b: v < b),
    "at_most": ("≤", lambda v, b: v <= b),
    "above": (">", lambda v, b: v > b),
    "at_least": ("≥", lambda v, b: v >= b),
}


def _number(x, digits=3):
    """A measured value or bound as the reader sees it (``digits`` significant digits for
    floats, 3 unless a value and its bound would read alike)."""
    if isinstance(x, (bool, _np_bool_types())):
        return "yes" if x else "no"
    if isinstance(x, numbers.Integral):
        return str(int(x))
    if isinstance(x, numbers.Real):
        x = float(x)
        if math.isnan(x):
            return "NaN"
        if math.isinf(x):
            return "∞" if x > 0 else "−∞"
        if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e5):
            mant, exp = f"{x:.{digits - 1}e}".split("e")
            return f"{mant}×10^{int(exp)}"
        return f"{x:.{digits}g}"
    return str(x)


#: a power of ten as :func:`_number` writes it ("1.7×10^-8"); the exponent is group 1
POWER = re.compile(r"×10\^(-?\d+)")


def _number_html(text):
    """HTML of a shown number or comparison: a power of ten's exponent as a superscript
    ("1.7×10<sup>−8</sup>")."""
    import html

    return POWER.sub(lambda m: f"×10<sup>{m.group(1).replace('-', '−')}</sup>", html.escape(text))


def _is_real(x):
    """A real number (int, float, numpy scalar), not a bool (numpy's included) nor a string."""
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, *_np_bool_types()))


def _np_bool_types():
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency of the book
        return ()
    return (np.bool_,)


def _math_html(text):
    """HTML of a sentence whose ``$...$`` parts are TeX (left to MathJax, as Sphinx marks math)."""
    import html

    parts = re.split(r"(\$[^$]+\$)", text)
    out = []
    for part in parts:
        if len(part) > 2 and part.startswith("$") and part.endswith("$"):
            out.append(f'<span class="math notranslate nohighlight">\\({html.escape(part[1:-1])}\\)</span>')
        else:
            out.append(html.escape(part))
    return "".join(out)


#: what the box says of a check that passed: a tick, except for a statement that fails as
#: stated, whose check confirms a counterexample (a green tick would read as a contradiction)
COUNTEREXAMPLE = "counterexample confirmed"


def _verdict_html(payload, measured, shown, comparison, reason):
    """The verdict box: the statement, the measured value and its bound visible; the reason for
    the bound (and the wrong formula it rejects) folded under them."""
    status, claim = payload["status"], payload["claim"]
    kind = payload["kind"]
    badge = BADGES[status] if kind == "test" else KINDS[kind]
    klass = status if kind == "test" else "consistency"
    counter = kind == "test" and status == "fails"
    claim_html = ""
    if claim is not None:
        claim_html = (
            f' <a class="tpde-badge tpde-claim" href="../claims.html#claim-{claim.lower()}">{claim}</a>'
        )
    measure = f"{_math_html(measured)}: <strong>{_number_html(shown)}</strong>"
    if comparison:
        measure += f" {_number_html(comparison)}"
    if counter:
        measure = f'<span class="tpde-verdict-counter">{COUNTEREXAMPLE}</span> · {measure}'
        mark = '<span class="tpde-verdict-mark tpde-verdict-mark-counter" aria-hidden="true">⚑</span>'
    else:
        mark = '<span class="tpde-verdict-mark" aria-hidden="true">✓</span>'
    summary = "why this bound" if comparison else "the criterion"
    reason_html = (
        f'<details class="tpde-verdict-why"><summary>{summary}</summary>'
        f'<p class="tpde-verdict-reason">{_math_html(reason)}</p></details>'
    )
    return (
        f'<div class="tpde-verdict tpde-{klass}" id="verdict-{payload["key"]}">'
        f"{mark}"
        f'<div class="tpde-verdict-body">'
        f'<p class="tpde-verdict-head"><span class="tpde-badge tpde-{klass}">{badge}</span>{claim_html} '
        f'<span class="tpde-verdict-statement">{_math_html(payload["statement"])}</span></p>'
        f'<p class="tpde-verdict-measure">{measure}</p>'
        f"{reason_html}</div></div>"
    )


def _md_text(text):
    """MyST Markdown of a sentence whose ``$...$`` parts are TeX: Markdown's punctuation
    outside the math is escaped."""
    parts = re.split(r"(\$[^$]+\$)", text)
    return "".join(
        part
        if len(part) > 2 and part.startswith("$") and part.endswith("$")
        else re.sub(r"([\\`*_{}\[\]<>#|~])", r"\\\1", part)
        for part in parts
    )


def _verdict_markdown(payload, measured, shown, comparison, reason):
    """The verdict box as MyST Markdown (an admonition), for the printed book: MyST-NB ranks
    ``text/markdown`` above ``text/plain`` for LaTeX (the web page shows the HTML box)."""
    status, claim, kind = payload["status"], payload["claim"], payload["kind"]
    title = "Check passed" if kind == "test" else "Consistency check (not evidence)"
    if kind == "test" and status == "fails":
        title = COUNTEREXAMPLE.capitalize()
    badges = f"{{status}}`{status}` " if kind == "test" else ""
    badges += f"{{claim}}`{claim}` " if claim is not None else ""

    def number(text):  # "1.7×10^-8" as TeX
        return POWER.sub(r"$\\times 10^{\1}$", _md_text(text))

    measure = f"{_md_text(measured)}: **{number(shown)}**" + (f" {number(comparison)}" if comparison else "")
    return (
        f":::{{admonition}} {title}\n:class: tpde-verdict\n\n"
        f"(verdict-{payload['key']})=\n{badges}{_md_text(payload['statement'])}\n\n"
        f"{measure}. *{_md_text(reason)}*\n:::\n"
    )


def verdict(
    key,
    status,
    statement,
    *,
    measured,
    value,
    below=None,
    at_most=None,
    above=None,
    at_least=None,
    holds=None,
    reason,
    claim=None,
    kind="test",
):
    """Check a statement, show the reader its verdict, and record it for the ledger.

    The check passes when ``value`` satisfies its one bound (``below``, ``at_most``, ``above`` or
    ``at_least``), or, for a check that is not one comparison, when ``holds`` is true. A check
    that fails raises :class:`AssertionError` naming the key, the value and the tolerance: the
    chapter fails (nbval, the book's build), nothing is recorded and no box is shown.

    Parameters
    ----------
    key : str
        Stable identifier, lowercase words joined by hyphens (``"softmax-blowup-time"``).
    status : {"paper", "cited", "derived", "observed", "fails"}
        Where the statement comes from (:data:`STATUSES`).
    statement : str
        What is checked, in one sentence; ``$...$`` parts are TeX.
    measured : str
        What ``value`` is, in a few words (``"largest deviation, in standard errors"``).
    value : float, int, bool or str
        The number the check measured (shown in the box and the ledger).
    below, at_most, above, at_least : float, optional
        The tolerance: exactly one of them, or ``holds``.
    holds : bool, optional
        The outcome of a check that is not one comparison of ``value``.
    reason : str
        Why the tolerance is what it is and the plausible wrong formula it rejects (or, with
        ``holds``, what the criterion is); the box folds it under the measured value.
    claim : str, optional
        The paper's claim (``"C1"`` .. ``"C17"``) or the book's result beyond the paper
        (``"B1"``, ...) the check bears on.
    kind : {"test", "consistency"}
        ``"test"``: it would fail if the statement were false; ``"consistency"``: it holds by
        construction (never counted as evidence).

    Returns
    -------
    None

    Examples
    --------
    >>> verdict("two-plus-two", "derived", "2 + 2 is 4", measured="|2 + 2 - 4|",
    ...         value=0.0, at_most=0.0, reason="exact integer arithmetic")
    ✓ derived here: 2 + 2 is 4 — |2 + 2 - 4| = 0 ≤ 0 (exact integer arithmetic)
    """
    bounds = {
        name: b
        for name, b in (("below", below), ("at_most", at_most), ("above", above), ("at_least", at_least))
        if b is not None
    }
    if len(bounds) + (holds is not None) != 1:
        raise TypeError(
            "verdict needs exactly one of below=, at_most=, above=, at_least= or holds=, "
            f"got {sorted(bounds) + (['holds'] if holds is not None else [])}"
        )
    if not isinstance(measured, str) or not measured.strip():
        raise ValueError("measured must be a non-empty string saying what value is")
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("reason must be a non-empty string saying why the tolerance is what it is")
    payload = _payload(key, status, statement, value, claim, kind)
    shown = _number(value)
    if bounds:
        ((name, bound),) = bounds.items()
        symbol, test = _BOUNDS[name]
        if not _is_real(bound):
            raise TypeError(f"{name}= must be a real number (not a string or a bool), got {bound!r}")
        if math.isnan(float(bound)):
            raise ValueError(f"{name}= must not be NaN")
        if not _is_real(value):
            raise TypeError(f"value must be a real number to compare with {name}=, got {value!r}")
        digits = 3
        # a value that differs from its bound is never shown equal to it ("1 <= 1")
        while (
            digits < 9 and float(value) != float(bound) and _number(value, digits) == _number(bound, digits)
        ):
            digits += 1
        shown = _number(value, digits)
        comparison = f"{symbol} {_number(bound, digits)}"
        passed = bool(test(float(value), float(bound)))
    else:
        if not isinstance(holds, (bool, *_np_bool_types())):
            raise TypeError(f"holds must be a bool, got {type(holds).__name__}")
        comparison, passed = "", bool(holds)
    if not passed:
        raise AssertionError(
            f"check {key!r} failed: {measured} = {shown}"
            + (f", expected {comparison}" if comparison else ", criterion not met")
            + f" ({reason})"
        )
    payload["value"] = shown + (f" {comparison}" if comparison else "")
    label = STATUSES[status].split(",")[0] if kind == "test" else KINDS[kind]
    mark = f"{COUNTEREXAMPLE} ·" if kind == "test" and status == "fails" else "✓"
    text = f"{mark} {label}: {statement} — {measured} = {shown}"
    text += f" {comparison} ({reason})" if comparison else f" ({reason})"
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python without IPython
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print(text)
        return None
    display(
        {
            "text/plain": text,
            "text/html": _verdict_html(payload, measured, shown, comparison, reason),
            "text/markdown": _verdict_markdown(payload, measured, shown, comparison, reason),
        },
        raw=True,
    )
    display(
        {GLUE_PREFIX + MIME: json.dumps(payload)},
        raw=True,
        metadata={"scrapbook": {"name": KEY_PREFIX + key, "mime_prefix": GLUE_PREFIX}},
    )
    return None
