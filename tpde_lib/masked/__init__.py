r"""Masked (causal) attention: positions, the attention sink, the prefix-average bounds, sensitivity.

Masked attention lives on :math:`\mathbb R^d \times [0, 1]`: each token carries a position
:math:`s`, and the token at :math:`s` attends to the tokens at :math:`s' \le s` (the paper,
arXiv:2501.18322, and the book's chapter "Masked attention", section "Tokens with positions and
the causal field"). The dynamics never moves :math:`s`, so the position marginal
:math:`m = (\pi_s)_\#\mu` is fixed and two solutions are compared fibre by fibre, either in the
conditional distance :math:`W_p^{\mathrm{cond}}` (an :math:`L^p(m)` average of the fibre
distances, :func:`tpde_lib.transport.conditional_wasserstein`) or in the supremum over fibres
(:func:`tpde_lib.transport.sup_fibre_distance`). A perturbation reaches the token at :math:`s`
through the *prefix average* of the fibre distances over :math:`[0, s]`
(:func:`prefix_average_matrix`); its norm on :math:`L^p(m)` (:func:`hardy_constant`) decides
which distance needs an atom of :math:`m` at :math:`s = 0`, the *attention sink* (chapter
"Masked attention", equations ``eq-masked-prefix`` to ``eq-masked-stability``).

Modules: ``_positions`` (tokens with positions, the sink, prefix shifts, the sink's share of
attention), ``_bounds`` (the prefix average, its :math:`L^p(m)` norms, the Lipschitz and
stability constants, the linear sink response), ``_sensitivity`` (measured sensitivity and its
sweeps), ``_causal`` (causal attention: Rényi centres, the dynamics on the circle and the
retrieval profile of iid tokens).
"""

# the imports in reading order: the order of __all__ and of the API reference
# isort: off
from .._exports import public_names as _public_names
from ._positions import (
    sink_positions,
    with_sink,
    sink_mass,
    position_marginal,
    shift_prefix,
    sink_attention_share,
)
from ._bounds import (
    prefix_average_matrix,
    lp_operator_norm,
    hardy_constant,
    masked_lipschitz_constant,
    masked_stability_constant,
    linear_sink_response,
)
from ._sensitivity import Sensitivity, sensitivity, sink_mass_sweep, prefix_sweep, fit_exponent
from ._causal import (
    renyi_centers,
    mode_rates,
    correlation_closed_form,
    retrieval_profile,
    retrieval_threshold,
    correlation_linear,
    circle_field,
    circle_simulate,
    Retrieval,
    circle_retrieval,
)
# isort: on

__all__ = _public_names(globals())  # the names imported above, in that order
