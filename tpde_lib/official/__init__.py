"""Exact reproduction of the authors' released code (their schemes, settings and seeds).

The paper's experiments were run with the authors' own scripts. This subpackage reproduces
what those scripts do, verbatim where it matters for the figures (legacy seeds, step sizes,
stopping rules), so that the book can show the paper's figures and, next to them, accurate
integrations of the same equations.
"""

from ._projected_euler import ProjectedEulerResult, projected_euler

__all__ = ["ProjectedEulerResult", "projected_euler"]
