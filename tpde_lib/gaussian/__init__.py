r"""Gaussian solutions of the Transformer PDE: closures, ODE solvers, blow-up, closed forms.

For the variants whose field is affine on Gaussians the solution started from a Gaussian stays
Gaussian, and its mean and covariance solve an ODE (the variant's *Gaussian closure*).

Modules: ``tpde_lib._closures`` (every closure's right-hand side, :func:`softmax_rhs` ...
:func:`linear_rhs`, below the attention package whose variants call them), ``_closure`` (a batch
of attentions as one vectorised right-hand side), ``_solve``
(:func:`simulate_gaussian`, :func:`simulate_gaussian_batch`, blow-up detection),
``_closed_forms`` (softmax with :math:`V = vI`), ``_layer`` (a layer: softmax plus the
feed-forward :math:`W = wI` in closed form, and a feed-forward control that steers the
covariance), ``_defect`` (:func:`affine_defect`: does a
variant preserve Gaussians?).

Examples
--------
Softmax with :math:`A = -I, V = I` from :math:`\mathcal N(0, I)`: :math:`\Sigma' = -2\Sigma^2`,
so :math:`\Sigma_t = I/(1 + 2t)`; with :math:`A = I` it blows up at :math:`t = 1/2`:

>>> import numpy as np
>>> import tpde_lib as tp
>>> g0, I = tp.Gaussian([0.0, 0.0], np.eye(2)), np.eye(2)
>>> traj = tp.simulate_gaussian(tp.Softmax(-I, I), g0, [0.0, 1.0])
>>> np.round(traj.cov[-1], 6)
array([[0.333333, 0.      ],
       [0.      , 0.333333]])
>>> traj.blowup_time is None
True
>>> round(tp.simulate_gaussian(tp.Softmax(I, I), g0, [0.0, 1.0]).blowup_time, 6)
0.5

A batch, one right-hand side call per step for all members:

>>> batch = tp.simulate_gaussian_batch([tp.Softmax(-I, I), tp.Softmax(I, I)],
...                                    np.stack([I, I]), [0.0, 1.0])
>>> batch.blowup_time
array([inf, 0.5])
>>> tp.gaussian.softmax_rhs(I, I, np.zeros(2), I)[1]      # Sigma' = 2 Sigma^2
array([[2., 0.],
       [0., 2.]])
"""

# the imports in reading order: the order of __all__ and of the API reference
# isort: off
from .._exports import public_names as _public_names
from .._closures import softmax_rhs, multihead_rhs, l2_rhs, sinkhorn_rhs, linear_rhs, sinkhorn_gain
from ._closure import covariance_rhs
from ._solve import GaussianTrajectory, GaussianBatch, simulate_gaussian, simulate_gaussian_batch
from ._defect import affine_defect, gauss_hermite
from ._closed_forms import (
    softmax_identity_V_closed_form,
    softmax_blowup_time,
    softmax_limit_cov,
    scalar_closed_form,
)
from ._layer import layer_closed_form, layer_blowup_time, layer_equilibrium, steer_covariance
# isort: on

__all__ = _public_names(globals())  # the names imported above, in that order
