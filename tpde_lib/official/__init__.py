"""Exact reproduction of the authors' released code (their schemes, settings and seeds).

The paper's experiments were run with the authors' own scripts. This subpackage reproduces
what those scripts do, verbatim where it matters for the figures (legacy seeds, step sizes,
stopping rules, retries), so that the book can show the paper's figures and, next to them,
accurate integrations of the same equations.

Modules: ``_projected_euler`` (the scheme), ``_runs`` (settings and a batched runner),
``_variants`` (the code's variant names and scalings, as attentions), ``_experiments`` (the 2-D
experiments E1–E6), ``_histograms`` (the rank-histogram protocol), ``_cache`` (the committed
results of the full histogram protocol and their check). The subpackage builds on
:mod:`tpde_lib.attention` and :mod:`tpde_lib.gaussian` (the closures, the accurate solvers);
neither imports it back.

Examples
--------
The settings of one panel of the authors' rank histograms, and its committed result:

>>> import tpde_lib as tp
>>> setting = tp.official.histogram_setting("softmax", "identity", 3)
>>> setting.variant, setting.V_kind, setting.d
('softmax', 'identity', 3)
>>> ("softmax", "identity", 3) in tp.official.load_histogram_cache()
True
"""

# the imports in reading order: the order of __all__ and of the API reference
# isort: off
from .._exports import public_names as _public_names
from ._projected_euler import ProjectedEulerResult, projected_euler
from ._runs import EulerSettings, EulerRun, run_paper_euler
from ._variants import VARIANTS
from ._experiments import LABELS
from ._variants import paper_parameters, paper_attention, paper_rhs
from ._experiments import PaperExperiment, paper_experiment
from ._histograms import (
    HistogramSetting,
    histogram_setting,
    histogram_inits,
    HistogramRun,
    paper_histogram_ranks,
    EulerBudgetRun,
    histogram_euler_budget,
    AccurateLimits,
    histogram_accurate,
    PairedRanks,
    paired_ranks,
)
from ._cache import (
    HISTOGRAM_CACHE,
    PANELS,
    CachedPanel,
    CacheCheck,
    load_histogram_cache,
    write_histogram_cache,
    check_cached_histogram,
)
# isort: on

__all__ = _public_names(globals())  # the names imported above, in that order
