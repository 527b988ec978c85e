r"""Clustering versus blow-up of Gaussian covariances under softmax attention: the analysis.

For a Gaussian :math:`\mathcal N(\alpha, \Sigma)` the softmax covariance solves the Riccati
equation :math:`\Sigma' = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top` (chapter "Gaussian
solutions"). This module holds what the chapter "Clustering versus blow-up" computes with it:

* ranks and limits: :func:`numerical_rank`, :func:`predicted_limit_rank`;
* Lyapunov functions: :func:`lyapunov`, :func:`lyapunov_matrix` ({eq}`eq-clustering-lyapunov`,
  {eq}`eq-clustering-lyapunov-general`);
* outcomes and phase pictures: :func:`classify_outcome`, :func:`phase_diagram`;
* general :math:`V`: random ensembles (:func:`random_value_matrices`,
  :func:`pairs_with_sign_condition`), a batched survey of their fates (:func:`blowup_survey`),
  a seeded counterexample search (:func:`sign_condition_counterexamples`), the universal lower
  bound on the blow-up time (:func:`blowup_time_lower_bound`) and the change of variables that
  leaves the dynamics invariant (:func:`congruence`).

Notation: :math:`A` is the score matrix (score :math:`\langle Ax, y\rangle`,
:math:`A = K^\top Q/\sqrt k`), :math:`V` the value matrix.

The 2×2 cone geometry lives in :mod:`tpde_lib.psd_cone`, the reproduction of the authors' code
(experiments E1–E6, the histogram protocol) in :mod:`tpde_lib.official`.

Modules: ``_analysis`` (ranks, limits, Lyapunov functions, outcomes, the phase picture),
``_general_v`` (ensembles, surveys, counterexamples, the lower bound, the change of variables).
"""

# the imports in reading order: the order of __all__ and of the API reference
# isort: off
from .._exports import public_names as _public_names
from .._linalg import numerical_rank
from ._analysis import (
    predicted_limit_rank,
    lyapunov,
    lyapunov_matrix,
    CONVERGES,
    BLOWS_UP,
    GROWS,
    OUTCOME_NAMES,
    classify_outcome,
    PhaseDiagram,
    phase_diagram,
)
from ._general_v import (
    random_value_matrices,
    pairs_with_sign_condition,
    BlowupSurvey,
    blowup_survey,
    ensemble_survey,
    Counterexamples,
    sign_condition_counterexamples,
    blowup_time_lower_bound,
    congruence,
)
# isort: on

__all__ = _public_names(globals())  # the names imported above, in that order
