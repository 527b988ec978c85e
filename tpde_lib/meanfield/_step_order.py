r"""The order of a fixed-step time integrator (a residual network is explicit Euler).

:func:`step_order` measures the error of a scheme against a reference at several step sizes
and fits its order (:class:`StepOrder`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_choice, as_float_array, as_instance, as_positive
from ..measures import Empirical
from ..particles import simulate
from ._rates import RateFit, coupling_distance, fit_rate

if TYPE_CHECKING:
    from ..attention import Attention


@dataclass(frozen=True)
class StepOrder:
    """Errors of a fixed-step integrator against a reference, and the fitted order.

    Attributes
    ----------
    steps : ndarray, shape (M,)
    errors : ndarray, shape (M,)
        Distance at ``T`` between the tokens of the scheme and those of the reference.
    fit : RateFit
        ``fit.slope`` is the observed order.
    """

    steps: np.ndarray
    errors: np.ndarray
    fit: RateFit

    @property
    def order(self):
        """The fitted order (slope of log error against log step)."""
        return self.fit.slope


def step_order(
    att: Attention,
    mu0: Empirical,
    steps: ArrayLike,
    T: float = 1.0,
    method: str = "euler",
    reference_h: float | None = None,
    norm: str = "rms",
    reference_rtol: float = 1e-12,
) -> StepOrder:
    r"""Error at time ``T`` of the particle system integrated with each step, and its order.

    Runs :func:`~tpde_lib.particles.simulate` with ``method`` and each ``h`` in ``steps`` and
    compares token by token with a reference: RK4 with step ``reference_h`` when given, else
    the adaptive DOP853 integrator at ``rtol = atol = reference_rtol``. With ``method="euler"``
    this is the depth experiment (a residual network of depth :math:`T/h`): the order is 1.

    Parameters
    ----------
    att : attention
        Any object with ``velocity(mu, t)``.
    mu0 : Empirical
        Initial tokens, shape (n, d).
    steps : array_like, shape (M,)
        Steps, each dividing ``T``.
    T : float, default 1
    method : {"euler", "rk4"}
    reference_h : float, optional
        Step of an RK4 reference; None: adaptive reference.
    norm : {"rms", "max"}
        ``"rms"``: :func:`coupling_distance` of the two clouds (an upper bound of :math:`W_2`);
        ``"max"``: the largest coordinate difference.
    reference_rtol : float
        Tolerance of the adaptive reference.

    Returns
    -------
    StepOrder
    """
    steps = as_float_array("steps", steps, ndim=1)
    T = as_positive("T", T)
    reference_rtol = as_positive("reference_rtol", reference_rtol)
    if reference_h is not None:
        reference_h = as_positive("reference_h", reference_h)
    method = as_choice("method", method, ("euler", "rk4"))
    norm = as_choice("norm", norm, ("rms", "max"))
    mu0 = as_instance("mu0", mu0, Empirical, "an Empirical measure")
    times = [0.0, T]
    if reference_h is None:
        ref = simulate(att, mu0, times, method="adaptive", rtol=reference_rtol, atol=reference_rtol).points[
            -1
        ]
    else:
        ref = simulate(att, mu0, times, method="rk4", h=reference_h).points[-1]
    errors = []
    for h in steps:
        x = simulate(att, mu0, times, method=method, h=float(h)).points[-1]
        if norm == "rms":
            errors.append(coupling_distance(x, ref, mu0.weights))
        else:
            errors.append(float(np.abs(x - ref).max()))
    errors = np.array(errors)
    return StepOrder(steps, errors, fit_rate(steps, errors))
