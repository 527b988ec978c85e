"""Test configuration: every hypothesis test draws the same examples on every run.

The book's tests must be deterministic (CONTRIBUTING.md, "House rules"): a random search that finds a
new example on one CI run and not on the next would make CI flaky. ``derandomize`` makes
hypothesis derive its examples from the test itself; a failure it finds is reproducible.
"""

from hypothesis import settings

settings.register_profile("book", derandomize=True, print_blob=True)
settings.load_profile("book")
