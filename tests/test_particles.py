"""Tests of the particle simulator.

Oracles: hand-written residual layers x <- x + h Gamma(x) with the per-token loop field, a
tightly-toleranced DOP853 reference for convergence orders, the support bound of chapter 1, and the
isolated s = 0 fibre for masked attention.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpde_lib.attention import Sinkhorn, Softmax, Unnormalised
from tpde_lib.layer import AffineFeedForward, Layer
from tpde_lib.measures import Empirical
from tpde_lib.particles import Trajectory, depth, simulate


def _cloud(n=12, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    A = rng.standard_normal((d, d)) / math.sqrt(d)
    V = rng.standard_normal((d, d)) / math.sqrt(d)
    return X, A, V


def _loop_softmax(A, V, X, w):
    """Per-token softmax field: V sum_j w_j e^{<A x_i, x_j>} x_j / sum_j w_j e^{<A x_i, x_j>}."""
    out = np.zeros_like(X)
    for i in range(X.shape[0]):
        k = np.array([w[j] * np.exp(X[j] @ A @ X[i]) for j in range(X.shape[0])])
        out[i] = V @ (k @ X / k.sum())
    return out


def test_euler_step_is_one_residual_layer_exactly():
    X, A, V = _cloud()
    w = np.full(len(X), 1 / len(X))
    h, layers = 0.1, 5
    traj = simulate(Softmax(A, V), Empirical(X), np.arange(layers + 1) * h, method="euler", h=h)
    x = X.copy()
    for layer in range(layers):
        x = x + h * _loop_softmax(A, V, x, w)  # a residual attention layer
        np.testing.assert_allclose(traj.points[layer + 1], x, rtol=1e-12, atol=1e-13)
    assert depth(traj.times, h) == layers


def test_time_dependent_weights_enter_at_each_layer():
    X, A, V = _cloud(seed=1)
    w = np.full(len(X), 1 / len(X))
    A_t = lambda t: A * (1.0 + t)
    h = 0.25
    traj = simulate(Softmax(A_t, V), Empirical(X), [0.0, 1.0], method="euler", h=h)
    x = X.copy()
    for layer in range(4):
        x = x + h * _loop_softmax(A_t(layer * h), V, x, w)
    np.testing.assert_allclose(traj.points[-1], x, rtol=1e-12)


def _errors(method, hs, T=1.0):
    X, A, V = _cloud(n=10, seed=2)
    att, mu = Softmax(A, V), Empirical(X)
    ref = simulate(att, mu, [0.0, T], method="adaptive", rtol=1e-13, atol=1e-13).points[-1]
    return np.array(
        [np.abs(simulate(att, mu, [0.0, T], method=method, h=h).points[-1] - ref).max() for h in hs]
    )


def test_euler_error_is_first_order_in_the_step():
    hs = np.array([0.1, 0.05, 0.025, 0.0125])
    slope = np.polyfit(np.log(hs), np.log(_errors("euler", hs)), 1)[0]
    assert 0.8 <= slope <= 1.2, slope


def test_rk4_error_is_fourth_order_in_the_step():
    # errors ~1e-5..1e-7, far above the ~1e-12 error of the DOP853 reference
    hs = np.array([0.2, 0.1, 0.05])
    errs = _errors("rk4", hs)
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    assert 3.5 <= slope <= 4.5, (slope, errs)


def test_adaptive_agrees_with_rk4():
    X, A, V = _cloud(seed=3)
    att, mu, times = Softmax(A, V), Empirical(X), np.linspace(0, 2, 5)
    a = simulate(att, mu, times, method="adaptive", rtol=1e-10, atol=1e-12)
    b = simulate(att, mu, times, method="rk4", h=0.01)
    # RK4 with h = 0.01: error ~ C h^4 ~ 1e-8 for O(1) fields
    np.testing.assert_allclose(a.points, b.points, atol=1e-7)


def test_softmax_particles_obey_support_bound():
    # |x_i(t)| <= max_j |x_j(0)| e^{||V||_2 t}: V expanding, so the bound bites
    X, A, _ = _cloud(n=40, seed=4)
    V = np.array([[1.0, 0.5], [0.0, 0.8]])
    times = np.linspace(0, 2, 11)
    traj = simulate(Softmax(A, V), Empirical(X), times, method="rk4", h=0.02)
    R = np.linalg.norm(traj.points, axis=2).max(axis=1)
    bound = np.linalg.norm(X, axis=1).max() * np.exp(np.linalg.norm(V, 2) * times)
    assert np.all(R <= bound * (1 + 1e-12))
    assert R[-1] > R[0]  # the cloud does expand: the bound is not vacuous here


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 15), seed=st.integers(0, 2**16), h=st.floats(0.05, 1.0))
def test_residual_layers_obey_discrete_support_bound(n, seed, h):
    # |Gamma(x)| <= ||V|| max_j |x_j| (convex combination), so one layer grows the radius by
    # at most the factor 1 + h ||V||: R_l <= R_0 (1 + h ||V||)^l  (derived here from the support bound)
    X, A, V = _cloud(n=n, seed=seed)
    traj = simulate(Softmax(3 * A, V), Empirical(X), [0.0, h, 2 * h, 3 * h], method="euler", h=h)
    R = np.linalg.norm(traj.points, axis=2).max(axis=1)
    bound = R[0] * (1 + h * np.linalg.norm(V, 2)) ** np.arange(4)
    assert np.all(R <= bound * (1 + 1e-12))


def test_weights_and_positions_travel_with_the_points():
    X, A, V = _cloud(n=8, seed=5)
    w = np.arange(1, 9) / 36.0
    s = np.array([0.0, 0.0, 0.2, 0.4, 0.4, 0.6, 0.8, 1.0])
    traj = simulate(Softmax(A, V, causal=True), Empirical(X, w, s), [0.0, 0.5, 1.0], h=0.05)
    assert isinstance(traj, Trajectory) and len(traj) == 3 and traj.points.shape == (3, 8, 2)
    mu = traj.measure(-1)
    np.testing.assert_array_equal(mu.weights, w)
    np.testing.assert_array_equal(mu.positions, s)
    np.testing.assert_array_equal(mu.points, traj.points[2])
    # the s = 0 fibre moves as if alone, weights renormalised
    alone = simulate(Softmax(A, V), Empirical(X[:2], w[:2] / w[:2].sum()), [0.0, 0.5, 1.0], h=0.05)
    np.testing.assert_allclose(traj.points[:, :2], alone.points, rtol=1e-12, atol=1e-14)


def test_sinkhorn_simulation_warm_starts_between_steps():
    X, A, V = _cloud(n=30, seed=6)
    A = A + A.T
    iterations = []

    class Recording(Sinkhorn):
        def velocity(self, mu, t=0.0):
            out = super().velocity(mu, t)
            iterations.append(self.last_iterations)
            return out

    times = [0.0, 0.1, 0.2]
    traj = simulate(Recording(A, V, eps=0.5, tol=1e-11), Empirical(X), times, h=0.05)
    assert max(iterations[1:]) < iterations[0]
    # same trajectory as a cold start at every evaluation (result independent of the start)

    class Cold(Sinkhorn):
        def velocity(self, mu, t=0.0):
            self.reset()
            return super().velocity(mu, t)

    cold = simulate(Cold(A, V, eps=0.5, tol=1e-11), Empirical(X), times, h=0.05)
    np.testing.assert_allclose(traj.points, cold.points, atol=1e-9)


def test_blow_up_is_reported_with_its_time():
    X = np.array([[1.0, 0.0], [2.0, 0.5], [-1.0, 0.3]])
    # e^{10 x.y} overflows within the first Euler step: the field at t = 0.1 (the second step's
    # start) is the first that is not finite, and the message says so (not any blow-up time)
    blown = r"^Unnormalised\.field returned NaN or infinite values at t=0\.1$"
    with pytest.raises(FloatingPointError, match=blown):
        simulate(Unnormalised(10 * np.eye(2), np.eye(2)), Empirical(X), [0.0, 5.0], method="euler", h=0.1)


def test_bad_arguments_raise_naming_them():
    X, A, V = _cloud()
    att, mu = Softmax(A, V), Empirical(X)
    with pytest.raises(ValueError, match="times must be strictly increasing"):
        simulate(att, mu, [0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="h=0.3 must divide"):
        simulate(att, mu, [0.0, 1.0], method="euler", h=0.3)
    with pytest.raises(ValueError, match="h must be"):
        simulate(att, mu, [0.0, 1.0], method="rk4", h=-0.1)
    with pytest.raises(ValueError, match="method"):
        simulate(att, mu, [0.0, 1.0], method="midpoint")
    with pytest.raises(TypeError, match="att"):
        simulate(np.eye(2), mu, [0.0, 1.0])
    with pytest.raises(TypeError, match="mu0"):
        simulate(att, [[0.0, 1.0]], [0.0, 1.0])


def test_default_steps_land_exactly_on_uneven_times():
    X, A, V = _cloud(seed=7)
    times = [0.0, 0.07, 0.3]
    traj = simulate(Softmax(A, V), Empirical(X), times, method="euler")
    # steps of 0.07/7 = 0.01 then 0.23/23 = 0.01: same as Euler with h = 0.01
    ref = simulate(Softmax(A, V), Empirical(X), times, method="euler", h=0.01)
    np.testing.assert_allclose(traj.points, ref.points, rtol=1e-12)


@pytest.mark.parametrize("method", ["euler", "rk4", "adaptive"])
def test_blow_up_can_stop_the_simulation_and_keep_the_times_reached(method):
    # unnormalised attention, one token pair: blows up in finite time; the stopped trajectory
    # must equal the first times of a run that ends before the blow-up
    X = np.array([[1.0, 0.0], [0.5, 0.5], [-1.0, 0.3]])
    att = Unnormalised(0.5 * np.eye(2), np.eye(2))  # blows up near t = 0.76
    times = np.linspace(0.0, 5.0, 51)
    traj = simulate(att, Empirical(X), times, method=method, h=0.01, on_blowup="stop")
    assert traj.blowup_time is not None and 1 < len(traj) < 51
    assert traj.times[-1] <= traj.blowup_time <= times[len(traj)] + 1e-12
    ok = simulate(att, Empirical(X), times[: len(traj)], method=method, h=0.01)
    np.testing.assert_array_equal(traj.points, ok.points)
    assert ok.blowup_time is None


def test_cloud_limits_hold_a_cloud_far_from_the_origin():
    from tpde_lib.viz.clouds import common_limits

    pts = np.random.default_rng(0).normal(size=(50, 2)) * 0.1 + np.array([10.0, -10.0])
    traj = simulate(Softmax(np.zeros((2, 2)), np.zeros((2, 2))), Empirical(pts), [0.0, 0.1])
    lo, hi = common_limits([traj])
    assert np.all(lo <= pts.min(axis=0)) and np.all(pts.max(axis=0) <= hi)


# ---------------------------------------------------------------------------------------------
# validation once per call; a reader's field and heads checked where their results come back
# ---------------------------------------------------------------------------------------------
class _LateField(Softmax):
    """Softmax's field until t > 0.5, then ``bad(v)`` (a reader's variant gone wrong)."""

    def __init__(self, bad):
        super().__init__(np.eye(2), 0.5 * np.eye(2))
        self.bad = bad

    def field(self, points, weights, positions, t):
        v = Softmax.field(self, points, weights, positions, t)
        return self.bad(v) if t > 0.5 else v


@pytest.mark.parametrize("method", ["rk4", "euler", "adaptive"])
def test_the_measure_is_validated_once_per_simulate_call(method, monkeypatch):
    # the old simulate went through Attention.velocity (measure and result re-validated) at
    # every stage: 4 x 20 calls for rk4 here
    import tpde_lib.attention._base as base

    calls = []
    protocol = base.Attention.velocity

    def counted(self, mu, t=0.0):
        calls.append(t)
        return protocol(self, mu, t)

    monkeypatch.setattr(base.Attention, "velocity", counted)
    X, A, V = _cloud()
    att = Softmax(A, V)
    traj = simulate(att, Empirical(X), [0.0, 1.0], method=method, h=0.05)
    assert calls == [0.0]
    monkeypatch.setattr(base.Attention, "velocity", protocol)
    again = simulate(att, Empirical(X), [0.0, 1.0], method=method, h=0.05)
    assert np.array_equal(traj.points, again.points)


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (
            lambda v: v[:, :1],
            ValueError,
            r"^_LateField\.field must return an array of shape \(12, 2\) at t=0\.55, "
            r"got shape \(12, 1\)$",
        ),
        (
            lambda v: v + 1j,
            TypeError,
            r"^_LateField\.field must return an array of real numbers of shape \(12, 2\) "
            r"at t=0\.55, got dtype complex128$",
        ),
        (
            lambda v: v * np.nan,
            FloatingPointError,
            r"^_LateField\.field returned NaN or infinite values at t=0\.55$",
        ),
    ],
)
def test_a_field_that_goes_wrong_mid_run_is_named_with_its_time(bad, error, match):
    X = _cloud()[0]
    with pytest.raises(error, match=match):
        simulate(_LateField(bad), Empirical(X), [0.0, 1.0], method="euler", h=0.05)


def test_a_field_that_turns_non_finite_stops_with_its_time():
    X = _cloud()[0]
    traj = simulate(
        _LateField(lambda v: v * np.inf),
        Empirical(X),
        np.linspace(0, 1, 5),
        method="euler",
        h=0.05,
        on_blowup="stop",
    )
    assert traj.blowup_time == pytest.approx(0.6) and traj.times.tolist() == [0.0, 0.25, 0.5]
    assert np.isfinite(traj.points).all()


# ---------------------------------------------------------------------------------------------
# the prepared field: a run's set-up done once, the arithmetic of ``field`` unchanged
# ---------------------------------------------------------------------------------------------
def _prepared_cases():
    X, A, V = _cloud(n=9, d=3, seed=4)
    w = np.random.default_rng(4).uniform(0.5, 1.0, 9)
    w /= w.sum()
    pos = np.linspace(0.1, 0.9, 9)
    on_sphere = X / np.linalg.norm(X, axis=1, keepdims=True)
    ff = AffineFeedForward(lambda t: -(1 + t) * np.eye(3), 0.1 * np.ones(3))
    return [
        (Softmax(A, V), X, w, None),
        (Softmax(A, V, causal=True), X, w, pos),
        (Softmax(lambda t: (1 + t) * A, lambda t: np.cos(t) * V), X, w, None),
        (Softmax([[0.7]], [[-1.0]]), X[:, :1], w, None),
        (Layer(Softmax(A, np.eye(3)), normalisation="sphere"), on_sphere, w, None),
        (Layer(Softmax(A, np.eye(3), causal=True), normalisation="sphere"), on_sphere, w, pos),
        (Layer(Softmax(A, V), ff), X, w, None),
        (Layer(Softmax(A, V, causal=True), lambda x, t: np.sin(t) * x), X, w, pos),
    ]


@pytest.mark.parametrize("case", range(8))
def test_the_prepared_field_is_bitwise_the_field(case):
    att, X, w, pos = _prepared_cases()[case]
    field = att._prepared_field(w, pos)
    assert field is not None
    for t, x in [(0.0, X), (0.3, 1.5 * X), (1.7, X[::-1].copy())]:
        assert np.array_equal(field(x, t), att.field(x, w, pos, t))


@pytest.mark.parametrize("method", ["rk4", "euler", "adaptive"])
@pytest.mark.parametrize("case", range(8))
def test_simulate_runs_on_the_prepared_field_bitwise_as_on_field(case, method, monkeypatch):
    import tpde_lib.attention._base as base

    att, X, w, pos = _prepared_cases()[case]
    mu, kw = Empirical(X, w, pos), ({} if method == "adaptive" else {"h": 0.05})
    calls = []
    field = type(att).field
    monkeypatch.setattr(type(att), "field", lambda *a: calls.append(1) or field(*a))
    fast = simulate(att, mu, [0.0, 0.5, 1.0], method=method, **kw)
    assert len(calls) == 1  # the first evaluation, through velocity; then the prepared field
    monkeypatch.setattr(type(att), "_prepared_field", base.Attention._prepared_field)
    slow = simulate(att, mu, [0.0, 0.5, 1.0], method=method, **kw)
    assert len(calls) > 10 and np.array_equal(fast.points, slow.points)


def test_no_prepared_field_where_the_field_is_not_the_built_in_dense_one():
    X, A, V = _cloud(n=9, d=3)
    w = np.full(9, 1 / 9)
    assert Softmax(A, V)._prepared_field(np.r_[w[:-1], 0.0], None) is None  # a massless key
    big = np.full(200, 1 / 200)  # 40 000 scores: the blocked engine's
    assert Softmax(A, V)._prepared_field(big, None) is None
    assert _LateField(lambda v: v)._prepared_field(w[:9], None) is None  # a reader's field
    assert Layer(Unnormalised(A, V))._prepared_field(w, None) is None


def test_a_readers_feedforward_is_still_checked_on_the_prepared_path():
    X = _cloud()[0]
    layer = Layer(Softmax(np.eye(2), np.eye(2)), lambda x, t: x[:, :1] if t > 0.5 else -x)
    assert layer._prepared_field(np.full(12, 1 / 12), None) is not None
    match = r"^Layer's feedforward must return an array of shape \(12, 2\) at t=0\.55, got"
    with pytest.raises(ValueError, match=match):
        simulate(layer, Empirical(X), [0.0, 1.0], method="euler", h=0.05)


def test_a_prepared_field_that_turns_non_finite_is_named_with_its_time():
    # V = 1e308 I from t = 0.5 on: the average of tokens of size ~1 times V overflows
    V = Softmax(np.eye(2), lambda t: (1e308 if t > 0.5 else 0.5) * np.eye(2))
    assert V._prepared_field(np.full(12, 1 / 12), None) is not None
    match = r"^Softmax\.field returned NaN or infinite values at t=0\.55$"
    with pytest.raises(FloatingPointError, match=match), np.errstate(over="ignore"):
        simulate(V, Empirical(_cloud()[0] + 3.0), [0.0, 1.0], method="euler", h=0.05)


def test_the_field_hook_gets_read_only_points():
    class Writes(Softmax):
        def field(self, points, weights, positions, t):
            points[0, 0] = 1.0
            return Softmax.field(self, points, weights, positions, t)

    with pytest.raises(ValueError, match="read-only"):
        simulate(Writes(np.eye(2), np.eye(2)), Empirical(_cloud()[0]), [0.0, 1.0], h=0.5)


def test_a_readers_feedforward_gets_read_only_points_on_the_prepared_path():
    def writes(points, t):
        if t > 0:  # after the first evaluation, which goes through velocity
            points[0, 0] = 1.0
        return -points

    layer = Layer(Softmax(np.eye(2), np.eye(2)), writes)
    assert layer._prepared_field(np.full(12, 1 / 12), None) is not None
    with pytest.raises(ValueError, match="read-only"):
        simulate(layer, Empirical(_cloud()[0]), [0.0, 1.0], h=0.5)


class _BadHead(Softmax):
    """A head whose field is ``bad(v)``; its closure returns ``bad`` of the covariance part."""

    def __init__(self, bad):
        super().__init__(np.eye(2), np.eye(2))
        self.bad = bad

    def field(self, points, weights, positions, t):
        return self.bad(Softmax.field(self, points, weights, positions, t))

    def gaussian_rhs(self, mean, cov, t=0.0):
        return np.zeros(2), self.bad(np.zeros((2, 2)))


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (lambda v: v[0], ValueError, r" must return a field of shape \(12, 2\) at t=0, got shape \(2,\)$"),
        (lambda v: v[0, 0], ValueError, r" must return a field of shape \(12, 2\) at t=0, got shape \(\)$"),
        (
            lambda v: v[:, :1],
            ValueError,
            r" must return a field of shape \(12, 2\) at t=0, got shape \(12, 1\)$",
        ),
        (
            lambda v: v + 1j,
            TypeError,
            r" must return a field of real numbers of shape \(12, 2\) at t=0, got dtype complex128$",
        ),
        (lambda v: v * np.nan, FloatingPointError, " returned NaN or infinite values in a field at t=0$"),
    ],
)
def test_a_multihead_head_returning_the_wrong_field_is_named(bad, error, match):
    # the old sum broadcast shapes (2,), () and (12, 1) and dropped the imaginary part
    from tpde_lib.attention import MultiHead

    X = _cloud()[0]
    for heads, i in (
        ([Softmax(np.eye(2), np.eye(2)), _BadHead(bad)], 1),
        ([_BadHead(bad), Softmax(np.eye(2), np.eye(2))], 0),
        ([Softmax(np.eye(2), np.eye(2)), Softmax(-np.eye(2), np.eye(2)), _BadHead(bad)], 2),
    ):
        with pytest.raises(error, match=rf"^MultiHead heads\[{i}\] \(_BadHead\)" + match):
            MultiHead(heads).velocity(X)


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (lambda c: c[0], ValueError, r" a covariance derivative of shape \(2, 2\) at t=0, got shape \(2,\)$"),
        (lambda c: 0.0, ValueError, r" a covariance derivative of shape \(2, 2\) at t=0, got shape \(\)$"),
        (lambda c: c + 1j, TypeError, r" a covariance derivative of real numbers .* got dtype complex128$"),
    ],
)
def test_a_multihead_head_returning_the_wrong_closure_is_named(bad, error, match):
    from tpde_lib.attention import MultiHead

    mh = MultiHead([Softmax(-np.eye(2), np.eye(2)), _BadHead(bad)])
    with pytest.raises(error, match=r"^MultiHead heads\[1\] \(_BadHead\) must return" + match):
        mh.gaussian_rhs(np.zeros(2), np.eye(2))


def test_multihead_rejects_heads_of_different_or_missing_dimensions():
    from tpde_lib.attention import MultiHead

    with pytest.raises(ValueError, match=r"same dimension, got \[2, 3\]"):
        MultiHead([Softmax(np.eye(2), np.eye(2)), Softmax(np.eye(3), np.eye(3))])
    headless = Softmax(np.eye(2), np.eye(2))
    headless.d = 2.0
    with pytest.raises(TypeError, match=r"heads\[1\] \(Softmax\) must set d"):
        MultiHead([Softmax(np.eye(2), np.eye(2)), headless])


def test_a_variant_overriding_velocity_is_called_through_it_at_every_stage():
    calls = []

    class Logged(Softmax):
        def velocity(self, mu, t=0.0):
            calls.append(t)
            return super().velocity(mu, t)

    X, A, V = _cloud()
    traj = simulate(Logged(A, V), Empirical(X), [0.0, 1.0], h=0.25)
    assert len(calls) == 4 * 4
    assert np.array_equal(traj.points, simulate(Softmax(A, V), Empirical(X), [0.0, 1.0], h=0.25).points)
