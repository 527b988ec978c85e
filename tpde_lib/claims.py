"""Moved: the claims ledger is the book's machinery, not the library's (``tpde_book``).

``from tpde_lib.claims import record`` keeps working for one release; use
``from tpde_book import record``.
"""

from tpde_book import STATUSES, record  # noqa: F401

__all__ = ["record", "STATUSES"]
