r"""Mean-field experiments: samplers, exact Gaussian flows, convergence-rate fits, step orders.

The chapters on the mean-field limit and on stability, and the tests, compare an :math:`n`-token
system with a limit and fit how the gap closes. This package holds the shared pieces, once:

* ``_samplers``: samplers and quadratures of the uniform disk (:func:`uniform_disk`,
  :func:`sunflower`);
* ``_affine``: the exact characteristic flow :math:`x \mapsto \Phi_t x + c_t` of a Gaussian
  solution whose field is affine, :math:`\Gamma_{\mu_t}(x) = M(t)x + b(t)`
  (:func:`gaussian_affine_flow`);
* ``_rates``: distances between two clouds of the same labelled tokens
  (:func:`coupling_distance`, :func:`moment_errors`) and power-law fits with a confidence
  interval on the exponent (:func:`fit_rate` returning :class:`RateFit`);
* ``_step_order``: the step-order experiment of a time integrator (:func:`step_order`).

Examples
--------
The exponent of an exact power law, with its confidence interval:

>>> import numpy as np
>>> import tpde_lib as tp
>>> n = np.array([100, 200, 400, 800])
>>> fit = tp.meanfield.fit_rate(n, 3.0 / np.sqrt(n))
>>> round(fit.slope, 12), round(fit.prefactor, 12)
(-0.5, 3.0)
>>> tp.meanfield.uniform_disk(1000, seed=0).shape
(1000, 2)
"""

# the imports in reading order: the order of __all__ and of the API reference
# isort: off
from .._exports import public_names as _public_names
from ._samplers import uniform_disk, sunflower
from ._affine import AffineFlow, gaussian_affine_flow
from ._rates import coupling_distance, moment_errors, RateFit, fit_rate
from ._step_order import StepOrder, step_order
# isort: on

__all__ = _public_names(globals())  # the names imported above, in that order
