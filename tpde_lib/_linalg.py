"""Functions of symmetric matrices through symmetric eigen-decompositions (batched), and ranks.

Used for every matrix square root in the library: ``eigh`` of the symmetrised matrix is stable for
ill-conditioned and singular covariances, where ``scipy.linalg.sqrtm(...).real`` or general
inverses are not.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._checks import as_flag, as_positive, as_square_batch


def sym_fn(S, fn):
    """``fn`` applied to the eigenvalues of the symmetric matrix ``S``, shape (..., d, d)."""
    S = np.asarray(S, dtype=float)
    lam, U = np.linalg.eigh(0.5 * (S + np.swapaxes(S, -1, -2)))
    return (U * fn(lam)[..., None, :]) @ np.swapaxes(U, -1, -2)


def psd_sqrt(S):
    """Symmetric square root of a PSD matrix (round-off negative eigenvalues set to 0), (..., d, d)."""
    return sym_fn(S, lambda lam: np.sqrt(np.clip(lam, 0.0, None)))


def numerical_rank(cov: ArrayLike, tol: float = 1e-1, relative: bool = False) -> NDArray[np.int_]:
    r"""Number of eigenvalues above ``tol`` (batched).

    The histograms of the paper count eigenvalues :math:`> 0.1` (``tol_rank=1e-1``);
    with ``relative=True`` the threshold is ``tol * max(1, lambda_max)`` per matrix.

    Parameters
    ----------
    cov : array_like, shape (..., d, d)
        Symmetric matrices.
    tol : float
        Threshold (> 0).
    relative : bool

    Returns
    -------
    ndarray of int, shape (...)
    """
    cov = as_square_batch("cov", cov)
    tol = as_positive("tol", tol)
    relative = as_flag("relative", relative)
    lam = np.linalg.eigvalsh(0.5 * (cov + np.swapaxes(cov, -1, -2)))
    thr = tol * np.maximum(1.0, lam[..., -1:]) if relative else tol
    return np.sum(lam > thr, axis=-1)
