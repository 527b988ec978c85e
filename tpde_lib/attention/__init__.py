r"""Attention variants as velocity fields of the Transformer PDE.

A sequence of tokens is a measure :math:`\mu` on :math:`\mathbb R^d` and one attention layer is
the velocity field :math:`\Gamma_\mu`, so that depth is time in

.. math::
    \partial_t \mu + \nabla\cdot(\mu\,\Gamma_\mu) = 0 .

Conventions: tokens are rows of an ``(n, d)`` array; the score of a query :math:`x` against a
key :math:`y` is :math:`\langle Ax, y\rangle = y^\top A x` with :math:`A = K^\top Q/\sqrt k` when
built from query/key matrices :math:`Q, K\in\mathbb R^{k\times d}`; :math:`V\in\mathbb R^{d\times d}`
merges the value and output matrices. Every matrix may be a constant array or a callable
``t -> array`` (layer-dependent weights).

Every variant is a subclass of :class:`Attention` (the protocol is in ``_base.py``). Softmax,
multi-head, unnormalised, sigmoid and ℓ² attention evaluate their interactions with the blocked
engine :func:`kernel_sums`; linear attention needs no kernel (its field is
:math:`\Gamma(x) = V(\sum_j w_j y_j y_j^\top) A x`, matrix products of the second moment,
cumulated over positions when causal); Sinkhorn attention solves for its
potentials with dense kernels (``_dense``) and then calls the engine once.

Modules: ``_base`` (the protocol), ``_kernels`` (the engine), ``_shifts`` (its row shifts),
``_dense`` (the Sinkhorn solver's dense kernels), ``_bilinear`` (softmax, unnormalised, sigmoid,
linear), ``_composite`` (multi-head, ℓ²), ``_sinkhorn`` (Sinkhorn attention and its solver). The
engine's threads and BLAS hold are ``tpde_lib._threads``, the Gaussian closures' right-hand sides
``tpde_lib._closures`` (the base layer, below this package).

Validation happens once per public call: :meth:`Attention.velocity` checks the measure, the
time and the field it gets back, :func:`kernel_sums` its arrays; the steps inside (a variant's
``field``, the engine's private entry ``_kernels.engine_sums``) trust their inputs.
"""

# the imports in reading order: the order of __all__ and of the API reference
# isort: off
from .._exports import public_names as _public_names
from ._base import Attention, GaussianClosure, PROTOCOL
from ._kernels import kernel_sums, KERNELS
from .._threads import set_num_threads, get_num_threads
from ._bilinear import Softmax
from ._composite import MultiHead, L2
from ._sinkhorn import Sinkhorn
from ._bilinear import Sigmoid, Linear, Unnormalised
from ._sinkhorn import sinkhorn_potentials
# isort: on

__all__ = _public_names(globals())  # the names imported above, in that order

# documented here (the API reference, pickling): defined in the base layer's tpde_lib._threads
set_num_threads.__module__ = get_num_threads.__module__ = __name__
