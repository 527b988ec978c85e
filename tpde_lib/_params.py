"""Parameters that may be constant arrays or callables of time (layer-dependent weights).

The paper's framework allows the attention matrices to depend on depth ``t``.
A :class:`Param` wraps either a fixed array (validated once) or a callable ``t -> array``
(validated, with the same checks, each time it is evaluated). The checks are those of the
library's input policy (:mod:`tpde_lib._checks`): real numeric (no bool, complex or strings),
finite, every axis of length >= 1, the expected shape; ``t`` must be a finite real number.
"""

from __future__ import annotations

import numpy as np

from ._checks import as_finite, as_float_array


class Param:
    """A named matrix or vector parameter, constant or time-dependent.

    Parameters
    ----------
    name : str
        Name used in error messages (e.g. ``"A"``).
    value : array_like or callable
        A fixed array, or a function ``t -> array``.
    ndim : int, optional
        Required number of dimensions of the value.
    shape : tuple, optional
        Required shape (``None`` entries match anything).
    """

    def __init__(self, name, value, ndim=None, shape=None):
        self.name, self.ndim, self.shape = name, ndim, shape
        if callable(value):
            self._fn = value
            self._const = None
            probe = self(0.0)  # validate early, at t = 0
            self.shape = probe.shape
        else:
            self._fn = None
            self._const = np.array(as_float_array(name, value, ndim=ndim, shape=shape), copy=True)
            self._const.setflags(write=False)
            self.shape = self._const.shape

    @property
    def is_constant(self):
        """True when the parameter does not depend on time."""
        return self._fn is None

    def __call__(self, t=0.0):
        """The value at time ``t``, shape ``self.shape``."""
        if self._fn is None:
            return self._const
        t = as_finite("t", t)
        return as_float_array(f"{self.name}(t={t:g})", self._fn(t), ndim=self.ndim, shape=self.shape)

    def __repr__(self):
        kind = "constant" if self.is_constant else "time-dependent"
        return f"Param({self.name}, {kind}, shape={self.shape})"
