r"""The attention protocol: :class:`Attention`, the base class of every variant.

A variant is one class. Everything the library knows about it is a method of that class:

========================================  ========================================================
method                                    what it gives (default)
========================================  ========================================================
``field(points, weights, positions, t)``  :math:`\Gamma_\mu(t, x_i)` at the points (required)
``velocity(mu, t)``                       validates ``mu``, calls ``field``, checks finiteness
``field_batch(points, weights, pos, t)``  the field of a batch of clouds (B, n, d) at once, for
                                          :func:`tpde_lib.simulate_batch` (``field`` member by
                                          member)
``gaussian_rhs(mean, cov, t)``            the Gaussian closure :math:`(\alpha', \Sigma')`
                                          (``NotImplementedError``)
``batched_closure()``                     the closure vectorised over a batch, for
                                          :func:`tpde_lib.simulate_gaussian_batch`
                                          (``NotImplementedError``: the batch loops over
                                          ``gaussian_rhs``)
``growth_rate(t)``                        :math:`c(t)` with :math:`|\Gamma_\mu(x)| \le c(t) R` on
                                          :math:`B_R` (``NotImplementedError``)
``support_radius(T, R0, times)``          radius of a ball holding the supports up to ``T``
                                          (from ``growth_rate``)
``log_lipschitz(R, t)``                   :math:`(\log L_x, \log L_\mu)` of the stability
                                          estimate (``NotImplementedError``)
``mobility(t)``                           constant mobility of a gradient-flow structure
                                          (``NotImplementedError``)
========================================  ========================================================

**No inherited formulas.** The closure, the constants and the mobility belong to the class that
defines the field. A subclass that overrides ``field`` (or ``velocity``) without overriding one
of them gets a method that raises ``NotImplementedError`` naming the subclass and the missing
piece, never its parent's formula (:meth:`Attention.__init_subclass__`). The rule is checked
at call time, so it also holds for a field that comes from a mixin, is patched onto the class,
or is set on the instance.

A minimal variant sets ``self.d`` (and ``self.causal``, default False) and implements
``field``; :func:`tpde_lib.kernel_sums` gives it blocked evaluation and causal masking. A
variant whose field keeps state from one call to the next (Sinkhorn attention's warm starts)
sets ``stateful = True``: :func:`tpde_lib.simulate_batch` then simulates a batch of clouds one
member after the other, so that each call finds the state its own member left.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_at_least, as_finite, as_float_array, as_positive, checked_result
from .._params import Param
from .._threads import held_blas
from ..measures import Empirical

#: a parameter of a variant: a constant (d, d) array, or a callable ``t -> array`` (layer weights)
MatrixLike = ArrayLike | Callable[[float], ArrayLike]

#: the methods that belong to the class defining the field (never inherited across a new field)
PROTOCOL = ("gaussian_rhs", "batched_closure", "growth_rate", "support_radius", "log_lipschitz", "mobility")
#: the protocol methods whose arguments are checked on entry (not the closures: they check their
#: own, once per call, on the ODE solvers' hot path)
_CHECKED_METHODS = ("growth_rate", "support_radius", "log_lipschitz", "mobility")


@dataclass(frozen=True)
class GaussianClosure:
    r"""The Gaussian closure of a variant, vectorised over a batch of B members.

    Attributes
    ----------
    key : hashable
        Members of one batch must have equal keys (same right-hand side, same parameter layout).
    params : callable
        ``params(t) -> tuple of ndarrays``: the parameters at time ``t``.
    rhs : callable
        ``rhs(*params, mean, cov) -> (dmean, dcov)`` where each parameter carries an optional
        leading batch axis (B, ...), ``mean`` is (B, d) and ``cov`` (B, d, d).
    constant : bool
        True when the parameters do not depend on time (they are then stacked once).

    Examples
    --------
    Softmax with :math:`A = -I/2`, :math:`V = I` at :math:`\Sigma = I`: :math:`\Sigma' = -\Sigma^2`.

    >>> import numpy as np, tpde_lib as tp
    >>> c = tp.Softmax(-0.5 * np.eye(2), np.eye(2)).batched_closure()
    >>> dmean, dcov = c.rhs(*c.params(0.0), np.zeros((1, 2)), np.eye(2)[None])
    >>> dcov.round(6).tolist()
    [[[-1.0, 0.0], [0.0, -1.0]]]
    """

    key: object
    params: Callable
    rhs: Callable
    constant: bool


def _field_owner(att):
    """Where the field of ``att`` comes from: the instance itself, or the first class of its
    MRO whose body defines ``field`` or ``velocity``."""
    if "field" in vars(att) or "velocity" in vars(att):
        return None  # set on the instance: nobody's formula
    for klass in type(att).__mro__:
        if "field" in klass.__dict__ or "velocity" in klass.__dict__:
            return klass
    return Attention


#: the arguments of the stability and mobility methods, checked before a variant's formula
#: runs (the variant's own and a reader's alike): ``(name, value) -> checked value``
_STABILITY_ARGS = {
    "t": as_finite,
    "R": as_positive,
    "R0": as_positive,
    "T": lambda name, value: as_at_least(name, value, 0.0),
    "times": lambda name, value: as_float_array(name, value, ndim=1),
}


def owns_field(att, cls):
    """Whether a method that ``cls`` defines for its field applies to ``att``: the field of
    ``att`` is ``cls``'s own or one ``cls`` inherits (the rule of :func:`_guarded`)."""
    source = _field_owner(att)
    return source is not None and issubclass(cls, source)


def _stability_checker(func):
    """A function checking the arguments of ``func`` that :data:`_STABILITY_ARGS` names, by name
    (positional or keyword), and returning them checked; None when ``func`` has none."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):  # pragma: no cover - a builtin
        return None
    names = [n for n in sig.parameters if n in _STABILITY_ARGS]
    if not names:
        return None

    def check(self, args, kwargs):
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError:
            return args, kwargs  # the call itself raises its own TypeError
        for name in names:
            if name in bound.arguments:
                bound.arguments[name] = _STABILITY_ARGS[name](name, bound.arguments[name])
        return bound.args[1:], bound.kwargs

    return check


def _guarded(method, func, owner):
    """``func`` (defined in the body of ``owner``) usable only by variants whose field is
    ``owner``'s own or a field that ``owner`` inherits: a formula belongs to the field it was
    derived for. The arguments of the stability and mobility methods (``t``, ``R``, ``R0``,
    ``T``, ``times``) are checked first (:data:`_STABILITY_ARGS`)."""
    check = _stability_checker(func) if method in _CHECKED_METHODS else None

    @functools.wraps(func)
    def guarded(self, *args, **kwargs):
        if check is not None:
            args, kwargs = check(self, args, kwargs)
        source = _field_owner(self)
        if source is None or not issubclass(owner, source):
            where = "on the instance" if source is None else f"in {source.__name__}"
            raise NotImplementedError(
                f"{type(self).__name__} has its own field ({where}), so "
                f"{owner.__name__}.{method}, which belongs to {owner.__name__}'s field, does "
                f"not apply to it. Define {method} for it if the variant has one."
            )
        return func(self, *args, **kwargs)

    guarded.__tpde_owner__ = owner
    return guarded


def as_measure(mu):
    """``mu`` as an :class:`~tpde_lib.measures.Empirical` (an (n, d) array is uniform)."""
    if isinstance(mu, Empirical):
        return mu
    if isinstance(mu, np.ndarray):
        return Empirical(mu)
    raise TypeError(f"mu must be an Empirical measure (or an (n, d) array), got {type(mu).__name__}")


def matrix_param(name, value, shape=None):
    """A matrix parameter, constant or a callable of ``t`` (:class:`~tpde_lib._params.Param`)."""
    return Param(name, value, ndim=2, shape=shape)


def square_param(name, value, d=None, what="A"):
    """A square matrix parameter, of size ``d`` (to match ``what``) when given."""
    p = matrix_param(name, value)
    if p.shape[0] != p.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {p.shape}")
    if p.shape[0] < 1:
        raise ValueError(f"{name} must be a (d, d) matrix with d >= 1, got shape {p.shape}")
    if d is not None and p.shape[0] != d:
        raise ValueError(f"{name} must have shape ({d}, {d}) to match {what}, got {p.shape}")
    return p


class Attention:
    r"""Base class of every attention variant :math:`\mu \mapsto \Gamma_\mu`.

    Subclasses set ``self.d`` (the token dimension) and, for masked attention,
    ``self.causal = True``, and implement :meth:`field`. See the module docstring for the whole
    protocol; every method but ``field`` is optional.

    Examples
    --------
    ReLU attention, :math:`\Gamma_\mu(x) = V\int \max(\langle Ax, y\rangle, 0)\,y\,d\mu(y)`:

    >>> import numpy as np, tpde_lib as tp
    >>> class ReLU(tp.Attention):
    ...     def __init__(self, A, V):
    ...         self.A, self.V, self.d = np.asarray(A), np.asarray(V), len(A)
    ...     def field(self, points, weights, positions, t):
    ...         relu = lambda S: np.maximum(S, 0.0, out=S)
    ...         s = tp.kernel_sums(points @ self.A.T, points, points * weights[:, None], relu)
    ...         return s @ self.V.T
    >>> ReLU(np.eye(2), np.eye(2)).velocity(np.eye(2)).shape
    (2, 2)
    """

    causal = False
    #: True when the field keeps state from one call to the next (Sinkhorn attention's warm
    #: starts): :func:`tpde_lib.simulate_batch` then simulates a batch member by member
    stateful = False

    def __init_subclass__(cls, **kwargs):
        # every protocol method defined in this class body is guarded: it runs only for
        # variants whose field is this class's own (or one this class inherits), whether the
        # field was changed in a subclass, a mixin, by patching the class or on the instance
        super().__init_subclass__(**kwargs)
        for method in PROTOCOL:
            func = cls.__dict__.get(method)
            if func is not None and not hasattr(func, "__tpde_owner__"):
                setattr(cls, method, _guarded(method, func, cls))

    @property
    def name(self):
        """The variant's name in messages (its class name)."""
        return type(self).__name__

    # ---- the field -----------------------------------------------------------------------
    def field(
        self, points: np.ndarray, weights: np.ndarray, positions: np.ndarray | None, t: float
    ) -> np.ndarray:
        r"""The velocity :math:`\Gamma_\mu(t, x_i)` at the points of :math:`\mu = \sum_j w_j\delta_{x_j}`.

        Called by :meth:`velocity` on validated data; implement it in a variant.

        Parameters
        ----------
        points : ndarray, shape (n, d)
            Read-only token positions (queries and keys).
        weights : ndarray, shape (n,)
            Masses, non-negative, summing to 1 (tokens of zero mass are not keys).
        positions : ndarray, shape (n,) or None
            Sequence positions in [0, 1]; None unless ``self.causal``.
        t : float
            Time (depth).

        Returns
        -------
        ndarray, shape (n, d)
        """
        raise NotImplementedError(f"{self.name} must implement field(points, weights, positions, t)")

    def velocity(self, mu: Empirical | np.ndarray, t: float = 0.0) -> np.ndarray:
        r"""The velocity field :math:`\Gamma_{\mu}(t, x_i)` at every point of ``mu``.

        Parameters
        ----------
        mu : Empirical or ndarray of shape (n, d)
            Points (n, d), weights (n,), positions (n,) for causal attention.
        t : float
            Time (depth), used by time-dependent parameters.

        Returns
        -------
        ndarray, shape (n, d)

        Raises
        ------
        ValueError
            ``mu`` of the wrong dimension; causal attention without ``mu.positions``; a field
            of the wrong shape; ``TPDE_NUM_THREADS`` not a positive integer (large calls).
        FloatingPointError
            The field is not finite (e.g. unnormalised attention at large scores).

        Notes
        -----
        A call with :math:`n^2 \ge 2^{18}` runs the field with BLAS held to one thread when the
        engine runs its own threads (:func:`~tpde_lib.set_num_threads`), BLAS's own threads
        restored afterwards: the kernel engine parallelises over row blocks, and BLAS threads
        spinning around its small products slowed a field 1.6 to 2.3 times (benchmarks/NOTES.md).
        """
        mu = as_measure(mu)
        if type(t) is not float or not math.isfinite(t):  # (a finite float: as is)
            t = float(as_float_array("t", t, ndim=0))
        d = getattr(self, "d", None)
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 1:
            raise TypeError(f"{self.name} must set self.d, the token dimension (a positive int), got {d!r}")
        if mu.d != d:
            raise ValueError(f"mu has dimension {mu.d} but the {self.name} parameters act on dimension d={d}")
        causal = getattr(self, "causal", False)
        if not isinstance(causal, (bool, np.bool_)):
            raise TypeError(f"{self.name}.causal must be True or False, got {causal!r}")
        positions = None
        if causal:
            positions = mu.positions
            if positions is None:
                raise ValueError(
                    f"causal {self.name} attention needs token positions: "
                    "pass mu = Empirical(points, positions=...)"
                )
            w = mu.weights
            if np.any(positions < positions[w > 0].min()):
                raise ValueError(
                    "causal attention: every token needs a token of positive weight "
                    "at a position <= its own (positions vs weights)"
                )
        # a large call runs the engine's threads: BLAS on one thread for the whole field (the
        # products before and after the engine's blocks included), restored afterwards
        with held_blas(mu.n * mu.n):
            out = self.field(mu.points, mu.weights, positions, t)
        return checked_result(
            f"{self.name}.field", out, (mu.n, d), when=f" at t={t:g}", nonfinite=FloatingPointError
        )

    def _prepared_field(self, weights, positions):
        """The field ``(points (n, d), t) -> (n, d)`` of clouds carrying ``weights`` (n,) and
        ``positions`` ((n,) when causal, else None) through a whole run of
        :func:`tpde_lib.simulate`: the body of ``self.field(points, weights, positions, t)``
        itself (bitwise the same), with what depends only on the weights and positions done
        once, and a result of the right shape and type by construction (a built-in field:
        only its finiteness is left to check). None, this default, where a variant has none: the
        integrator then calls :meth:`field` and checks its result."""
        return None

    # ---- Gaussian closure ----------------------------------------------------------------
    def field_batch(
        self, points: np.ndarray, weights: np.ndarray, positions: np.ndarray | None, t: float
    ) -> np.ndarray:
        r"""The field of every member of a batch of clouds, shape (B, n, d).

        Member ``b`` is ``field(points[b], weights[b], positions[b], t)``; this default calls
        :meth:`field` member by member. A variant that can compute all members at once (bitwise
        as it computes each alone) overrides it: :func:`tpde_lib.simulate_batch` then steps the
        members together. Called on validated data, like :meth:`field`.

        Parameters
        ----------
        points : ndarray, shape (B, n, d)
        weights : ndarray, shape (B, n)
        positions : ndarray, shape (B, n), or None
            None unless ``self.causal``.
        t : float

        Returns
        -------
        ndarray, shape (B, n, d)
        """
        out = np.empty(points.shape)
        for b in range(points.shape[0]):
            out[b] = self.field(points[b], weights[b], None if positions is None else positions[b], t)
        return out

    def gaussian_rhs(self, mean: ArrayLike, cov: ArrayLike, t: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        r"""Right-hand side :math:`(\alpha', \Sigma')` of the Gaussian closure.

        Raises ``NotImplementedError`` for variants that do not preserve Gaussians.
        """
        raise NotImplementedError(
            f"{self.name} attention has no Gaussian closure (no "
            "mean/covariance ODE): it does not preserve Gaussians, or "
            "its closure is not implemented"
        )

    def batched_closure(self) -> GaussianClosure:
        """The closure vectorised over a batch (:class:`~tpde_lib.GaussianClosure`).

        Raises ``NotImplementedError`` when the variant has none; the batched solver then calls
        :meth:`gaussian_rhs` member by member.
        """
        raise NotImplementedError(f"{self.name} attention has no batched Gaussian closure")

    def check_gaussian(
        self, mean: ArrayLike, cov: ArrayLike, t: float = 0.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """Validate a closure's arguments: ``mean`` (d,), ``cov`` (d, d) symmetric PSD, finite.

        The covariance may be indefinite at round-off level (mid-integration states of
        near-singular covariances): eigenvalues down to -1e-6 times the largest are accepted.
        Causal variants raise ``NotImplementedError``.

        Returns
        -------
        mean : ndarray, shape (d,)
        cov : ndarray, shape (d, d)
        """
        if self.causal:
            raise NotImplementedError(
                f"causal (masked) {self.name} attention does not preserve Gaussians: no mean/covariance ODE"
            )
        as_float_array("t", t, ndim=0)
        m = as_float_array("mean", mean, shape=(self.d,))
        c = as_float_array("cov", cov, shape=(self.d, self.d))
        scale = max(np.abs(c).max(), np.finfo(float).tiny)
        if np.abs(c - c.T).max() > 1e-8 * scale:
            raise ValueError(f"cov must be symmetric (max |cov - cov^T| = {np.abs(c - c.T).max():.3g})")
        lam = np.linalg.eigvalsh(0.5 * (c + c.T))
        if lam[0] < -1e-6 * max(lam[-1], np.finfo(float).tiny):
            raise ValueError(
                f"cov must be positive semi-definite (smallest eigenvalue "
                f"{lam[0]:.3g}; round-off down to -1e-6 x the largest is accepted)"
            )
        return m, c

    @property
    def time_dependent(self):
        """True when some parameter of the variant depends on ``t``."""
        return any(isinstance(v, Param) and not v.is_constant for v in vars(self).values())

    # ---- stability constants -------------------------------------------------------------
    def growth_rate(self, t: float = 0.0) -> float:
        r""":math:`c(t)` such that :math:`|\Gamma_\mu(t, x)| \le c(t)\,R` when
        :math:`\operatorname{supp}\mu \subset B_R` (so supports grow at most like
        :math:`e^{\int c}`)."""
        raise NotImplementedError(
            f"no growth bound for {self.name} attention: define {type(self).__name__}.growth_rate"
        )

    def support_radius(self, T: float, R0: float, times: ArrayLike) -> float:
        r"""Radius :math:`R(T) = R_0 e^{T \max_t c(t)}` of a ball holding every support up to ``T``.

        Parameters
        ----------
        T : float
            Final time, >= 0.
        R0 : float
            Initial radius, > 0.
        times : ndarray
            Grid on :math:`[0, T]` for the supremum of a time-dependent :math:`c(t)`.
        """
        T, R0 = as_at_least("T", T, 0.0), as_positive("R0", R0)
        times = as_float_array("times", times, ndim=1)
        rate = max(self.growth_rate(float(t)) for t in times)
        return R0 * np.exp(rate * T)

    def log_lipschitz(self, R: float, t: float = 0.0) -> tuple[float, float]:
        r"""Logarithms :math:`(\log L_x(R), \log L_\mu(R))` of the Lipschitz constants of the
        field in the point and in the measure (W1) for supports in :math:`B_R`."""
        raise NotImplementedError(
            f"no Lipschitz constants for {self.name} attention: define {type(self).__name__}.log_lipschitz"
        )

    def mobility(self, t: float = 0.0) -> np.ndarray:
        """Constant mobility matrix P of a gradient-flow structure (d, d)."""
        raise NotImplementedError(f"{self.name} attention has no gradient-flow mobility here")

    def __repr__(self):
        flag = ", causal" if self.causal else ""
        return f"{type(self).__name__}(d={getattr(self, 'd', '?')}{flag})"
