r"""The official code's attention variants and scalings, as attentions of :mod:`tpde_lib.attention`.

The released scripts call ``rhs_<variant>(S, Q, K, V, d, H)`` with query/key matrices
:math:`Q, K \in \mathbb R^{k\times d}` (possibly :math:`k < d`). Their scalings differ from
the book's default :meth:`tpde_lib.Softmax.from_qk` and are reproduced here:

* softmax: :math:`A = K^\top Q/\sqrt d` with :math:`d` the **full** dimension;
* ℓ²: kernel :math:`e^{-|Qx/\sqrt d - Ky|^2}`, i.e. ``L2(Q/sqrt(d), K, V, tau=1)``;
* multi-head with :math:`H` heads: :math:`k = d // H`, head :math:`h` uses rows
  :math:`hk{:}(h+1)k` of :math:`Q, K, V`, :math:`A_h = K_h^\top Q_h/\sqrt k` and value-output
  matrix :math:`C_h = V` with the rows outside block :math:`h` set to zero;
* Sinkhorn: :math:`A = K^\top Q` (no scaling), :math:`\varepsilon = 1`.

The variant names are the official scripts' own; :data:`VARIANTS` maps each to its scaling and
its constructor, once. Everything downstream works with the attention objects (their methods
hold the Gaussian closures, :func:`tpde_lib.gaussian.covariance_rhs`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_count, as_float_array
from ..attention import L2, Attention, MultiHead, Sinkhorn, Softmax
from ..gaussian import covariance_rhs


def _softmax_parameters(Q, K, V, H):
    return {"A": np.swapaxes(K, -1, -2) @ Q / np.sqrt(Q.shape[-1]), "V": V}


def _l2_parameters(Q, K, V, H):
    return {"Q": Q / np.sqrt(Q.shape[-1]), "K": K, "V": V, "tau": 1.0}


def _sinkhorn_parameters(Q, K, V, H):
    return {"A": np.swapaxes(K, -1, -2) @ Q, "V": V, "eps": 1.0}


def _multihead_parameters(Q, K, V, H):
    d = Q.shape[-1]
    if d % H:
        raise ValueError(f"H must be a positive integer dividing d={d}, got {H!r}")
    k = d // H
    As, Vs = [], []
    for h in range(H):  # loop over heads (H <= d), not over tokens
        rows = slice(k * h, k * (h + 1))
        As.append(np.swapaxes(K[..., rows, :], -1, -2) @ Q[..., rows, :] / np.sqrt(k))
        C = np.zeros_like(V)
        C[..., rows, :] = V[..., rows, :]
        Vs.append(C)
    return {"As": As, "Vs": Vs}


@dataclass(frozen=True)
class _Variant:
    """One variant of the official code: its scaling and the attention it defines."""

    parameters: Callable  # (Q, K, V, H) -> dict of (possibly batched) arrays
    build: Callable  # dict of one draw's arrays -> Attention


#: The official code's variant names -> scaling and constructor (the one table of names).
VARIANTS = {
    "softmax": _Variant(_softmax_parameters, lambda p: Softmax(p["A"], p["V"])),
    "L2": _Variant(_l2_parameters, lambda p: L2(p["Q"], p["K"], p["V"], tau=p["tau"])),
    "multihead": _Variant(
        _multihead_parameters, lambda p: MultiHead([Softmax(A, C) for A, C in zip(p["As"], p["Vs"])])
    ),
    "sinkhorn": _Variant(_sinkhorn_parameters, lambda p: Sinkhorn(p["A"], p["V"], eps=p["eps"])),
}


def _variant(variant):
    try:
        return VARIANTS[variant]
    except (KeyError, TypeError):
        raise ValueError(f"variant must be one of {tuple(VARIANTS)}, got {variant!r}") from None


def _validated(Q, K, V, H):
    as_count("H", H, 1)  # validated for every variant, even those that ignore it
    Q = as_float_array("Q", Q)
    K = as_float_array("K", K)
    V = as_float_array("V", V)
    if Q.shape != K.shape or Q.ndim not in (2, 3):
        raise ValueError(f"Q and K must have the same shape (k, d) or (n, k, d), got {Q.shape}, {K.shape}")
    d = Q.shape[-1]
    if V.shape != Q.shape[:-2] + (d, d):
        raise ValueError(f"V must have shape {Q.shape[:-2] + (d, d)}, got {V.shape}")
    return Q, K, V


def paper_parameters(Q: ArrayLike, K: ArrayLike, V: ArrayLike, variant: str, H: int = 1) -> dict:
    r"""Our parameters for the official code's ``rhs_<variant>(S, Q, K, V, d, H)``.

    Parameters
    ----------
    Q, K : array_like, shape (k, d) or (n, k, d)
        The code's query/key matrices (``k`` rows, possibly ``k < d``); a leading axis is a
        batch of ``n`` draws.
    V : array_like, shape (d, d) or (n, d, d)
    variant : {"softmax", "L2", "multihead", "sinkhorn"}
    H : int
        Number of heads (multi-head only).

    Returns
    -------
    dict
        * ``"softmax"``: ``A = K^T Q / sqrt(d)`` (full ``d``), ``V``;
        * ``"L2"``: ``Q = Q / sqrt(d)``, ``K``, ``V``, ``tau = 1.0``;
        * ``"multihead"``: ``As``, ``Vs`` (lists of ``(..., d, d)``): ``A_h = K_h^T Q_h/sqrt(k)``,
          ``C_h`` = rows ``hk:(h+1)k`` of ``V`` (others zero), ``k = d // H``. Slices past the
          last row of ``Q`` are empty, as in numpy, so such a head has ``A_h = 0`` (experiment E3);
        * ``"sinkhorn"``: ``A = K^T Q`` (no scaling), ``V``, ``eps = 1.0``.
    """
    entry = _variant(variant)
    return entry.parameters(*_validated(Q, K, V, H), H)


def _draw(params, i):
    """Member ``i`` of every batched array of a parameter dict."""
    return {
        key: (
            [v[i] for v in val]
            if isinstance(val, list)
            else val[i]
            if isinstance(val, np.ndarray) and val.ndim == 3
            else val
        )
        for key, val in params.items()
    }


def paper_attention(
    Q: ArrayLike, K: ArrayLike, V: ArrayLike, variant: str, H: int = 1
) -> Attention | list[Attention]:
    r"""The attention of the official code's ``rhs_<variant>`` with its scalings.

    Parameters
    ----------
    Q, K : array_like, shape (k, d) or (n, k, d)
    V : array_like, shape (d, d) or (n, d, d)
    variant : {"softmax", "L2", "multihead", "sinkhorn"}
    H : int
        Number of heads (multi-head only).

    Returns
    -------
    Attention, or list of n Attentions when the inputs carry a batch axis
    """
    entry = _variant(variant)
    Q, K, V = _validated(Q, K, V, H)
    params = entry.parameters(Q, K, V, H)
    if Q.ndim == 2:
        return entry.build(params)
    return [entry.build(_draw(params, i)) for i in range(Q.shape[0])]


def paper_rhs(
    Q: ArrayLike, K: ArrayLike, V: ArrayLike, variant: str, H: int = 1
) -> Callable[[np.ndarray], np.ndarray]:
    r"""The batched covariance right-hand side ``S (B, d, d) -> S'`` of :func:`paper_attention`.

    :func:`tpde_lib.gaussian.covariance_rhs` of the attention (the covariance ODEs do not
    involve the mean). With batched ``Q, K, V`` member ``b`` of ``S`` uses draw ``b``.
    """
    return covariance_rhs(paper_attention(Q, K, V, variant, H))
