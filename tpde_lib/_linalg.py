"""Functions of symmetric matrices through symmetric eigen-decompositions (batched).

Used for every matrix square root in the library: ``eigh`` of the symmetrised matrix is stable for
ill-conditioned and singular covariances, where ``scipy.linalg.sqrtm(...).real`` or general
inverses are not.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sym_fn", "psd_sqrt"]


def sym_fn(S, fn):
    """``fn`` applied to the eigenvalues of the symmetric matrix ``S``, shape (..., d, d)."""
    S = np.asarray(S, dtype=float)
    lam, U = np.linalg.eigh(0.5 * (S + np.swapaxes(S, -1, -2)))
    return (U * fn(lam)[..., None, :]) @ np.swapaxes(U, -1, -2)


def psd_sqrt(S):
    """Symmetric square root of a PSD matrix (round-off negative eigenvalues set to 0), (..., d, d)."""
    return sym_fn(S, lambda lam: np.sqrt(np.clip(lam, 0.0, None)))
