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

from .._exports import public_names as _public_names
from ._cache import (
    HISTOGRAM_CACHE,
    PANELS,
    CacheCheck,
    CachedPanel,
    check_cached_histogram,
    load_histogram_cache,
    write_histogram_cache,
)
from ._experiments import LABELS, PaperExperiment, paper_experiment
from ._histograms import (
    AccurateLimits,
    EulerBudgetRun,
    HistogramRun,
    HistogramSetting,
    PairedRanks,
    histogram_accurate,
    histogram_euler_budget,
    histogram_inits,
    histogram_setting,
    paired_ranks,
    paper_histogram_ranks,
)
from ._projected_euler import ProjectedEulerResult, projected_euler
from ._runs import EulerRun, EulerSettings, run_paper_euler
from ._variants import VARIANTS, paper_attention, paper_parameters, paper_rhs

__all__ = _public_names(globals())  # the names imported above, in that order
