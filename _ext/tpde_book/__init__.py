"""The book's own machinery, kept out of the numerical library: claims recorded by chapters.

A chapter checks a claim in an ``assert`` cell, then calls :func:`record`. The call prints a
one-line confirmation and emits a hidden output (a MyST-NB *glue* output of MIME type
``application/vnd.tpde.claim+json``), so the claim is part of the *executed notebook*: the
Sphinx extension ``_ext/claims_ledger.py`` builds the ledger from the outputs of the notebooks
executed for this build, and a claim whose cell did not run has no output and shows "not run".
Outside a kernel (plain Python) :func:`record` only prints.

Installed with the library (``pip install -e .``) so that chapters import it from anywhere.
"""

from __future__ import annotations

import json
import numbers
import re

__all__ = ["record", "STATUSES", "KINDS", "MIME", "GLUE_PREFIX", "KEY_PREFIX"]

#: where a statement comes from
STATUSES = {
    "paper": "paper's claim, checked numerically",
    "derived": "derived here, checked numerically",
    "observed": "observed numerically",
    "fails": "does not hold as stated (counterexample)",
}
#: what the check is: a test would fail if the statement were false; a consistency check holds by
#: construction (it guards the bookkeeping) and is never counted as evidence
KINDS = {"test": "test", "consistency": "consistency check"}
MIME = "application/vnd.tpde.claim+json"
GLUE_PREFIX = "application/papermill.record/"  # MyST-NB's marker of a hidden glue output
KEY_PREFIX = "claim:"
_KEY = re.compile(r"^[a-z0-9][a-z0-9\-]*$")
_CLAIM = re.compile(r"^C([1-9]|1[0-7])$")


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
        raise ValueError(f"claim must be a paper claim id 'C1' .. 'C17' or None, got {claim!r}")
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


def record(key, status, statement, value=None, claim=None, kind="test"):
    """Record that the check ``key`` passed (call it after the check's ``assert`` lines).

    Parameters
    ----------
    key : str
        Stable identifier, lowercase words joined by hyphens (``"softmax-blowup-time"``).
    status : {"paper", "derived", "observed", "fails"}
        Where the statement comes from (:data:`STATUSES`).
    statement : str
        What was checked, in one sentence.
    value : float or str, optional
        The number the check measured (shown in the ledger).
    claim : str, optional
        The paper's claim this check bears on (``"C1"`` .. ``"C17"``), if any.
    kind : {"test", "consistency"}
        ``"test"``: it would fail if the statement were false; ``"consistency"``: it holds by
        construction (never counted as evidence).

    Returns
    -------
    None
        (so that a ``record`` call ending a cell displays nothing more)
    """
    payload = _payload(key, status, statement, value, claim, kind)
    shown = "" if payload["value"] is None else f" [{payload['value']}]"
    label = STATUSES[status] if kind == "test" else KINDS[kind]
    print(f"checked ({label}): {statement}{shown}")
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python without IPython: nothing to attach the output to
        return None
    if get_ipython() is not None:
        display(
            {GLUE_PREFIX + MIME: json.dumps(payload)},
            raw=True,
            metadata={"scrapbook": {"name": KEY_PREFIX + key, "mime_prefix": GLUE_PREFIX}},
        )
    return None
