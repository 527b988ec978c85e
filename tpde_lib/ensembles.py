r"""Ensembles: many clouds of tokens simulated in one call, :func:`simulate_batch`.

What a study of the Transformer PDE computes most is many small clouds: phase diagrams over
seeds and parameters, plateau statistics, mean-field rates over ``n``, correlations of a particle
system over thousands of draws. :func:`simulate_batch` integrates ``B`` clouds of ``n`` tokens,

.. math::
    \dot x^b_i(t) = \Gamma_{\mu^b(t)}(t, x^b_i(t)), \qquad
    \mu^b(t) = \sum_j w^b_j \delta_{x^b_j(t)}, \qquad b = 1, \dots, B,

under one attention, and returns every member exactly as :func:`~tpde_lib.simulate` would
(bitwise, whatever the thread count): the members never interact, they only share the work.

Where the attention has a batched field (:meth:`~tpde_lib.Attention.field_batch` of its own:
softmax, ℓ², sigmoid, unnormalised and linear attention, multi-head attention and
:class:`~tpde_lib.Layer` of them have one), the fixed-step schemes advance all members
together, one stacked field evaluation per stage, each member computed with exactly the
operations it gets alone (``tpde_lib.attention._batched``); a member whose particles or field
stop being finite is stopped there with its blow-up time, and the others go on; the sphere's
layer retracts every member after each step. For any other attention (a reader's variant without
``field_batch``, Sinkhorn attention, whose solver warm-starts from its previous call) and for
``method="adaptive"`` (each member takes its own steps), the members are simulated one after
the other by :func:`~tpde_lib.simulate`, which is that loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ._checks import WEIGHT_SUM_TOL, as_choice, as_count, as_float_array, as_index, as_times
from .attention import Attention
from .measures import Empirical
from .particles import (
    MAX_STEPS,
    HasVelocity,
    Trajectory,
    _check_step_budget,
    _euler_step,
    _rk4_step,
    _step_counts,
    simulate,
)

__all__ = ["Ensemble", "simulate_batch"]


@dataclass(frozen=True)
class Ensemble:
    """The trajectories of a batch of clouds (the result of :func:`simulate_batch`).

    Attributes
    ----------
    times : ndarray, shape (T,)
        The output times, shared by all members.
    points : ndarray, shape (B, T, n, d)
        ``points[b, k]`` are member ``b``'s tokens at ``times[k]``; NaN at the times a member
        did not reach (after its blow-up).
    weights : ndarray, shape (B, n)
    positions : ndarray, shape (B, n), or None
    blowup_times : ndarray, shape (B,)
        Member ``b``'s blow-up time as ``Trajectory.blowup_time`` gives it (the end of the
        step during which its particles or field stopped being finite); NaN where the member
        reached ``times[-1]``.
    reached : ndarray of int, shape (B,)
        How many of ``times`` each member reached.

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp
    >>> x0 = np.random.default_rng(0).standard_normal((4, 10, 2))
    >>> ens = tp.simulate_batch(tp.Softmax(np.eye(2), -np.eye(2)), x0, [0.0, 1.0])
    >>> ens.points.shape, len(ens), int(ens.reached.min())
    ((4, 2, 10, 2), 4, 2)
    >>> one = tp.simulate(tp.Softmax(np.eye(2), -np.eye(2)), x0[3], [0.0, 1.0])
    >>> np.array_equal(ens.member(3).points, one.points)
    True
    """

    times: np.ndarray
    points: np.ndarray
    weights: np.ndarray
    positions: np.ndarray | None
    blowup_times: np.ndarray
    reached: np.ndarray

    def __post_init__(self):
        for field in ("times", "points", "weights", "positions", "blowup_times", "reached"):
            value = getattr(self, field)
            if isinstance(value, np.ndarray) and value.flags.writeable:
                value = value.copy()
                value.setflags(write=False)
                object.__setattr__(self, field, value)

    def __len__(self) -> int:
        return self.points.shape[0]

    @property
    def n(self) -> int:
        """Tokens per member."""
        return self.points.shape[2]

    @property
    def d(self) -> int:
        """Dimension of token space."""
        return self.points.shape[3]

    def member(self, b: int) -> Trajectory:
        """Member ``b`` as the :class:`~tpde_lib.Trajectory` that ``simulate(...,
        on_blowup="stop")`` returns for it (``IndexError`` outside ``-B <= b < B``)."""
        b = as_index("b", b, len(self), what="members in this ensemble")
        k = int(self.reached[b])
        blowup = self.blowup_times[b]
        return Trajectory(
            self.times[:k],
            self.points[b, :k],
            self.weights[b],
            None if self.positions is None else self.positions[b],
            None if np.isnan(blowup) else float(blowup),
        )


@dataclass(frozen=True)
class _Batch:
    """The members as arrays, each member valid as an :class:`~tpde_lib.Empirical` measure."""

    points: np.ndarray  # (B, n, d)
    weights: np.ndarray  # (B, n)
    positions: np.ndarray | None  # (B, n)

    def measure(self, b):
        p = None if self.positions is None else self.positions[b]
        return Empirical(self.points[b], self.weights[b], p)


def _members(points, weights, positions):
    """The batch, validated as B Empirical measures would be (the same rules and messages, the
    member named): vectorised checks first, a member that fails them rebuilt as an Empirical
    measure, which raises its own error (or accepts it: the quick checks are never looser)."""
    if isinstance(points, (list, tuple)) and points and all(isinstance(p, Empirical) for p in points):
        if weights is not None or positions is not None:
            raise ValueError("weights and positions come with the Empirical members: pass neither")
        shapes = {mu.points.shape for mu in points}
        if len(shapes) != 1:
            raise ValueError(f"the members must all have the same shape (n, d), got {sorted(shapes)}")
        if len({mu.positions is None for mu in points}) != 1:
            raise ValueError("either every member has positions or none has")
        pos = None if points[0].positions is None else np.stack([mu.positions for mu in points])
        return _Batch(np.stack([mu.points for mu in points]), np.stack([mu.weights for mu in points]), pos)
    x = as_float_array("points", points, ndim=3)
    B, n, _ = x.shape
    if B == 0 or n == 0:
        raise ValueError(f"points must have shape (B, n, d) with B, n >= 1, got {x.shape}")

    def per_member(name, value):
        if value is None:
            return None
        arr = as_float_array(name, value)
        if arr.shape == (n,):
            return np.broadcast_to(arr, (B, n))
        if arr.shape != (B, n):
            raise ValueError(f"{name} must have shape ({n},) or ({B}, {n}), got {arr.shape}")
        return arr

    w, p = per_member("weights", weights), per_member("positions", positions)
    if w is None:
        w = np.full((B, n), 1.0 / n)
        ok = np.ones(B, dtype=bool)
    else:
        ok = (w >= 0).all(axis=1) & (np.abs(w.sum(axis=1) - 1.0) <= 0.5 * WEIGHT_SUM_TOL)
    if p is not None:
        ok &= ((p >= 0) & (p <= 1)).all(axis=1)
    for b in np.flatnonzero(~ok):
        try:
            Empirical(x[b], w[b], None if p is None else p[b])
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"member {b}: {exc}") from exc
    return _Batch(x.copy(), np.array(w, dtype=float), None if p is None else np.array(p, dtype=float))


def _batched(att):
    """Whether ``att`` computes its field on a whole batch (a ``field_batch`` of its own class,
    a velocity that is the protocol's, no state kept between calls), and its normalisation
    too (none, or a ``normalise_batch``: the sphere's :class:`~tpde_lib.Layer`)."""
    return (
        isinstance(att, Attention)
        and "velocity" not in getattr(att, "__dict__", {})
        and type(att).velocity is Attention.velocity
        and type(att).field_batch is not Attention.field_batch
        and not getattr(att, "stateful", False)
        and (getattr(att, "normalise", None) is None or _normaliser(att) is not None)
    )


def _normaliser(att):
    """``att.normalise_batch`` (the normalisation of a whole batch, bitwise each member's
    ``normalise``) where ``att.normalise`` is set, else None."""
    if getattr(att, "normalise", None) is None:
        return None
    batch = getattr(att, "normalise_batch", None)
    return batch if callable(batch) else None


def _check_on_manifold(normalise, batch):
    """Every member where ``normalise`` maps it, as :func:`~tpde_lib.simulate` requires of one
    cloud (ValueError naming the first member that is not)."""
    gap = np.abs(normalise(batch.points) - batch.points).max(axis=(1, 2))
    off = ~(gap <= 1e-10)
    if off.any():
        b = int(np.argmax(off))
        raise ValueError(
            f"member {b}: mu0 must lie where att.normalise maps it (e.g. unit vectors for a "
            f"Layer on the sphere): max |normalise(x0) - x0| = {gap[b]:.3g} > 1e-10; pass "
            "tp.to_sphere(x0)"
        )


def simulate_batch(
    att: Attention | HasVelocity,
    points: ArrayLike | list[Empirical],
    times: ArrayLike,
    weights: ArrayLike | None = None,
    positions: ArrayLike | None = None,
    method: str = "rk4",
    h: float | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    ivp_method: str = "DOP853",
    on_blowup: str = "stop",
    max_steps: int | None = None,
) -> Ensemble:
    r"""Simulate a batch of clouds under one attention: :func:`~tpde_lib.simulate` for each.

    Parameters
    ----------
    att : Attention or any object with ``velocity(mu, t) -> (n, d)``
        The attention, shared by every member.
    points : array_like, shape (B, n, d), or a list of B Empirical measures of one shape
        The members' initial tokens.
    times : array_like, shape (T,)
        Strictly increasing output times, shared by every member.
    weights, positions : array_like, shape (n,) or (B, n), optional
        Per-member masses (default uniform) and sequence positions (causal attention); one row
        is shared by every member. Not with Empirical members (they carry their own).
    method, h, rtol, atol, ivp_method, max_steps
        As for :func:`~tpde_lib.simulate` (``max_steps`` caps each member's steps).
    on_blowup : {"stop", "raise"}
        ``"stop"`` (the default here): a member that blows up stops there, its blow-up time in
        ``Ensemble.blowup_times``, and the others finish. ``"raise"``: the first blow-up
        raises ``FloatingPointError`` naming the member and the time.

    Returns
    -------
    Ensemble
        Member ``b`` (:meth:`~tpde_lib.Ensemble.member`) is bitwise
        ``simulate(att, Empirical(points[b], weights[b], positions[b]), times, ...,
        on_blowup="stop")``, whatever the number of threads.

    Raises
    ------
    TypeError, ValueError
        As :func:`~tpde_lib.simulate`; a member's invalid data is named by its index.
    FloatingPointError
        With ``on_blowup="raise"``, a member's blow-up.

    Notes
    -----
    With a batched field (softmax, ℓ², sigmoid and unnormalised attention on clouds of at
    most 181 tokens per head, every weight positive; linear attention without a mask;
    multi-head attention and :class:`~tpde_lib.Layer` of these, a layer with an affine
    feed-forward or on the sphere: :meth:`~tpde_lib.Attention.field_batch`), the ``"euler"``
    and ``"rk4"`` schemes step all the members still running together: the Python work of a
    step is paid once for the batch, and the kernel sums are computed a chunk of members at a
    time, spread over the threads (``benchmarks/ensembles.py`` measures it). The attention is
    validated once, by
    ``att.velocity`` on member 0 (the same checks for every member of one shape), and each
    member's causal positions against its weights. Otherwise (and for an attention that keeps
    state between calls, ``stateful = True``: Sinkhorn attention) the members are simulated one
    after the other.

    Examples
    --------
    Twenty clouds of 16 tokens in :math:`\mathbb R^2`. With :math:`A = 0` and :math:`V = -I`
    every token of a member moves by minus the member's mean :math:`m_t = m_0 e^{-t}`:
    :math:`x_i(t) = x_i(0) - m_0(1 - e^{-t})`.

    >>> import numpy as np, tpde_lib as tp
    >>> x0 = np.random.default_rng(1).standard_normal((20, 16, 2))
    >>> ens = tp.simulate_batch(tp.Softmax(np.zeros((2, 2)), -np.eye(2)), x0, [0.0, 1.0], h=0.01)
    >>> exact = x0 - x0.mean(axis=1, keepdims=True) * (1 - np.exp(-1.0))
    >>> bool(np.allclose(ens.points[:, -1], exact, rtol=1e-9, atol=1e-10))  # RK4 error
    True
    """
    batch = _members(points, weights, positions)
    times = as_times("times", times)
    method = as_choice("method", method, ("euler", "rk4", "adaptive"))
    on_blowup = as_choice("on_blowup", on_blowup, ("raise", "stop"))
    if max_steps is not None:
        max_steps = as_count("max_steps", max_steps, 1)
    options = dict(method=method, h=h, rtol=rtol, atol=atol, ivp_method=ivp_method, max_steps=max_steps)
    if method == "adaptive" or times.size == 1 or not _batched(att):
        return _loop(att, batch, times, on_blowup, options)
    # every option and the attention against the members' shape, as simulate checks them (on
    # one member, one time: no integration)
    simulate(att, batch.measure(0), times[:1], **options)
    return _stepped(att, batch, times, on_blowup, method, h, max_steps)


def _loop(att, batch, times, on_blowup, options):
    B, _, n, d = (len(batch.points), times.size) + batch.points.shape[1:]
    points = np.full((B, times.size, n, d), np.nan)
    blowups, reached = np.full(B, np.nan), np.empty(B, dtype=np.int64)
    for b in range(B):
        try:
            tr = simulate(att, batch.measure(b), times, on_blowup=on_blowup, **options)
        except FloatingPointError as exc:
            raise FloatingPointError(f"member {b}: {exc}") from exc
        points[b, : len(tr)] = tr.points
        reached[b] = len(tr)
        if tr.blowup_time is not None:
            blowups[b] = tr.blowup_time
    return Ensemble(times, points, batch.weights, batch.positions, blowups, reached)


def _stepped(att, batch, times, on_blowup, method, h, max_steps):
    """The fixed-step schemes on every member at once (``att`` has a batched field)."""
    B, n, d = batch.points.shape
    counts, steps = _step_counts(times, h, method)
    budget = MAX_STEPS[method] if max_steps is None else max_steps
    _check_step_budget(math.fsum(counts), budget, method, h)
    counts = counts.astype(np.int64)
    weights, positions = batch.weights, batch.positions
    # what att.velocity checks of a measure, for every member: the attention against the
    # members' shape (on member 0: the same for all), and for causal attention each member's
    # positions against its weights
    try:
        att.velocity(batch.measure(0), times[0])
    except FloatingPointError:
        pass  # member 0 blows up in its first step: found there
    causal_pos = positions if att.causal else None
    if causal_pos is not None:
        first_seen = np.where(weights > 0, causal_pos, np.inf).min(axis=1)
        unseen = (causal_pos < first_seen[:, None]).any(axis=1)
        if unseen.any():
            raise ValueError(
                f"member {int(np.argmax(unseen))}: causal attention: every token needs a token "
                "of positive weight at a position <= its own (positions vs weights)"
            )
    normalise = _normaliser(att)
    if normalise is not None:
        _check_on_manifold(normalise, batch)
    out = np.full((B, times.size, n, d), np.nan)
    out[:, 0] = batch.points
    blowups, reached = np.full(B, np.nan), np.full(B, times.size, dtype=np.int64)
    step = _euler_step if method == "euler" else _rk4_step
    active = np.arange(B)  # the members still running, in order
    x = batch.points.copy()
    bad = np.zeros(B, dtype=bool)  # members whose field or points stopped being finite in a step

    def field(y, t):
        pos = None if causal_pos is None else causal_pos[active]
        v = att.field_batch(y, weights[active], pos, t)
        if type(v) is not np.ndarray or v.dtype.kind != "f" or v.shape != y.shape:
            raise ValueError(
                f"{att.name}.field_batch must return a float array of shape {y.shape}, got "
                f"{getattr(v, 'dtype', type(v).__name__)} {getattr(v, 'shape', '')}"
            )
        finite = np.isfinite(y).all(axis=(1, 2)) & np.isfinite(v).all(axis=(1, 2))
        bad[active[~finite]] = True
        return v

    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(times.size - 1):
            for j in range(counts[k]):
                t = times[k] + j * steps[k]
                x = step(field, x, t, steps[k])
                if normalise is not None:
                    x = normalise(x)
                stopped = bad[active] | ~np.isfinite(x).all(axis=(1, 2))
                if stopped.any():
                    gone = active[stopped]
                    if on_blowup == "raise":
                        raise FloatingPointError(
                            f"member {int(gone[0])}: particles blew up (non-finite positions or "
                            f"field) before t={t + steps[k]:g}"
                        )
                    blowups[gone] = t + steps[k]
                    reached[gone] = k + 1
                    active, x = active[~stopped], x[~stopped]
                    if active.size == 0:
                        break
            out[active, k + 1] = x
            if active.size == 0:
                break
    return Ensemble(times, out, weights, positions, blowups, reached)
