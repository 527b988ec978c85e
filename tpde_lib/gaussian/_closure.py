r"""A batch of attentions as one vectorised Gaussian closure, and its covariance part.

Used in the chapter "Gaussian solutions". The right-hand sides of each variant
(:func:`~tpde_lib.gaussian.softmax_rhs` ... :func:`~tpde_lib.gaussian.linear_rhs`) live in
``tpde_lib._closures``, below the attention package whose variants call them.

* :class:`BatchRhs`, a batch of B attentions as one vectorised right-hand side: through their
  :meth:`~tpde_lib.Attention.batched_closure` when every member has one with the same key (one
  call of a numpy-vectorised formula), member by member through
  :meth:`~tpde_lib.Attention.gaussian_rhs` otherwise; and :func:`covariance_rhs`, its
  covariance part for the authors' projected Euler scheme. Nothing here dispatches on variants:
  it only calls their methods.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import as_instance, as_real_array
from ..attention import Attention


def check_attention(att: object, name: str = "att") -> Attention:
    """``att`` if it is a :class:`tpde_lib.Attention`, TypeError naming ``name`` otherwise."""
    return as_instance(name, att, Attention, "a tpde_lib Attention")


def as_attention_list(att: Attention | Sequence[Attention]) -> list[Attention]:
    """``att`` as a non-empty list of attentions (TypeError/ValueError otherwise)."""
    atts = list(att) if isinstance(att, (list, tuple)) else [att]
    if not atts:
        raise ValueError("att must be an attention or a non-empty sequence of attentions")
    single = len(atts) == 1 and not isinstance(att, (list, tuple))
    for i, a in enumerate(atts):
        check_attention(a, "att" if single else f"att[{i}]")
    return atts


def _closures(atts):
    """The members' batched closures, or None (then loop) when one has none or they differ."""
    try:
        closures = [a.batched_closure() for a in atts]
    except NotImplementedError:
        return None
    if len({cl.key for cl in closures}) != 1:
        return None  # different variants: solved member by member
    return closures


class BatchRhs:
    """Vectorised ``(t, mean (b, d), cov (b, d, d), idx) -> (dmean, dcov)`` for B attentions.

    Constant parameters are stacked once (and re-indexed only when the active set ``idx``
    changes); time-dependent ones are evaluated at each member's own time. Exceptions raised by
    a member's ``gaussian_rhs`` propagate unchanged, except ``LinAlgError`` from a batched
    linear solve, which falls back to the member-by-member loop.

    Raises
    ------
    TypeError
        A member is not an :class:`~tpde_lib.Attention`.
    NotImplementedError
        A member has no Gaussian closure (its own message).
    """

    def __init__(self, atts):
        self.atts = as_attention_list(atts)
        self.d = self.atts[0].d
        for a in self.atts:
            if a.causal:
                a.check_gaussian(np.zeros(a.d), np.eye(a.d))  # raises NotImplementedError
        self.closures = _closures(self.atts)
        if self.closures is None:
            for a in self.atts:  # surfaces the variant's own NotImplementedError now
                a.gaussian_rhs(np.zeros(a.d), np.eye(a.d), 0.0)
            self.const = False
            return
        self.rhs_fn = self.closures[0].rhs
        self.const = all(cl.constant for cl in self.closures)
        self._shared = len(self.atts) == 1
        self._idx_key, self._sub = None, None
        if self.const:
            per_member = [tuple(np.asarray(p, dtype=float) for p in cl.params(0.0)) for cl in self.closures]
            self._stacked = [np.stack(vals) for vals in zip(*per_member)]

    @property
    def generic(self):
        """True when the batch loops over the members' ``gaussian_rhs``."""
        return self.closures is None

    def values(self, t, idx):
        """The closure's parameters for the members ``idx`` (stacked on a leading axis)."""
        if self.const:
            if self._shared:
                return [v[0] for v in self._stacked]
            key = (idx.size, hash(idx.tobytes()))
            if key != self._idx_key:
                self._idx_key, self._sub = key, [v[idx] for v in self._stacked]
            return self._sub
        tt = np.broadcast_to(np.asarray(t, dtype=float), idx.shape)
        members = idx if len(self.atts) > 1 else np.zeros_like(idx)
        per_member = [
            tuple(np.asarray(p, dtype=float) for p in self.closures[b].params(float(tb)))
            for b, tb in zip(members, tt)
        ]
        return [np.stack(vals) for vals in zip(*per_member)]

    def __call__(self, t, mean, cov, idx):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if self.generic:
                return self._loop(t, mean, cov, idx)
            try:
                return self.rhs_fn(*self.values(t, idx), mean, cov)
            except np.linalg.LinAlgError:
                return self._loop(t, mean, cov, idx)

    def _loop(self, t, mean, cov, idx):
        """Member by member (variants without a batched closure, or a failed batched solve)."""
        tt = np.broadcast_to(np.asarray(t, dtype=float), idx.shape)
        dm, dc = np.full_like(mean, np.nan), np.full_like(cov, np.nan)
        for i, (b, tb) in enumerate(zip(idx, tt)):
            att = self.atts[b if len(self.atts) > 1 else 0]
            try:
                dm[i], dc[i] = att.gaussian_rhs(mean[i], cov[i], float(tb))
            except np.linalg.LinAlgError:
                pass  # a singular stage state: NaN derivative, the step is rejected
        return dm, dc


def covariance_rhs(att: Attention | Sequence[Attention]) -> Callable[[ArrayLike], NDArray[np.float64]]:
    r"""The covariance right-hand side :math:`\Sigma \mapsto \Sigma'` of an attention, batched.

    The mean is set to 0 (softmax, multi-head, ℓ² and Sinkhorn covariance ODEs do not involve
    the mean; for linear attention this is the :math:`\alpha = 0` case). Parameters are evaluated
    at ``t = 0``. Meant for :func:`tpde_lib.official.projected_euler`.

    Parameters
    ----------
    att : Attention or sequence of B Attentions of the same variant

    Returns
    -------
    callable
        ``rhs(S)`` with ``S`` of shape (B, d, d) (or (d, d) for one attention), returning the
        same shape. With a sequence, member ``b`` of ``S`` uses ``att[b]``. ``S`` must be real
        of that shape (``TypeError``/``ValueError`` naming it); non-finite entries pass through
        (the scheme that calls it reports them with their step).
    """
    f = BatchRhs(att)
    d, members = f.d, None if len(f.atts) == 1 else len(f.atts)

    def rhs(S):
        S = as_real_array("S", S)
        if (
            S.ndim not in (2, 3)
            or S.shape[-2:] != (d, d)
            or (S.ndim == 3 and members not in (None, S.shape[0]))
        ):
            want = f"({d}, {d}) or (B, {d}, {d})" if members is None else f"({members}, {d}, {d})"
            raise ValueError(f"S (the covariances) must have shape {want}, got {S.shape}")
        single = S.ndim == 2
        Sb = S[None] if single else S
        idx = np.arange(Sb.shape[0])
        out = f(0.0, np.zeros(Sb.shape[:-1]), Sb, idx)[1]
        return out[0] if single else out

    return rhs
