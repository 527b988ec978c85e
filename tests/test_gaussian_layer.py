"""A layer's Gaussian closed forms (softmax with V = vI plus W = wI) and the covariance steering,
each against an independent computation: scipy's ODE solver on the covariance equation."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import tpde_lib as tp


def _riccati(cov0, A, w, v, t_end, events=None):
    S = A + A.T
    d = cov0.shape[0]

    def rhs(t, y):
        c = y.reshape(d, d)
        return (v * c @ S @ c + 2 * w * c).ravel()

    return solve_ivp(
        rhs,
        (0, t_end),
        cov0.ravel(),
        method="DOP853",
        rtol=1e-12,
        atol=1e-14,
        dense_output=True,
        events=events,
    )


def _random_case(seed, d=3):
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((d, d))
    cov0 = B @ B.T / d + 0.2 * np.eye(d)
    A = rng.standard_normal((d, d)) / d
    return cov0, A


@pytest.mark.parametrize("w", [-0.8, 0.0, 0.6])
@pytest.mark.parametrize("v", [1.0, 0.5])
def test_closed_form_solves_the_covariance_ode(w, v):
    cov0, A = _random_case(1)
    t_star = tp.gaussian.layer_blowup_time(cov0, A, w, v)
    times = np.linspace(0, min(2.0, 0.9 * t_star), 7)
    ref = _riccati(cov0, A, w, v, times[-1]).sol(times).T.reshape(-1, 3, 3)
    got = tp.gaussian.layer_closed_form(cov0, A, w, times, v)
    # solver at rtol 1e-12; near 0.9 t* the solution has grown ~10x
    assert np.abs(got - ref).max() <= 1e-8 * np.abs(ref).max()


def test_w_zero_is_the_attentions_own_closed_form_and_blowup_time():
    cov0, A = _random_case(2)
    t_star = tp.gaussian.softmax_blowup_time(cov0, A)
    assert tp.gaussian.layer_blowup_time(cov0, A, 0.0) == pytest.approx(t_star, rel=1e-14)
    times = np.linspace(0, 0.8 * min(t_star, 3.0), 5)
    np.testing.assert_allclose(
        tp.gaussian.layer_closed_form(cov0, A, 0.0, times),
        tp.gaussian.softmax_identity_V_closed_form(cov0, A, times),
        rtol=1e-12,
        atol=1e-14,
    )


@pytest.mark.parametrize("w", [0.7, -0.3])
def test_blowup_time_is_where_the_ode_solution_explodes(w):
    cov0 = np.array([[0.5, 0.1], [0.1, 0.3]])
    A = np.array([[0.6, 0.9], [-0.5, 0.2]])
    t_star = tp.gaussian.layer_blowup_time(cov0, A, w)
    assert np.isfinite(t_star)

    def big(t, y):
        return np.abs(y).max() - 1e7

    big.terminal = True
    sol = _riccati(cov0, A, w, 1.0, 10 * t_star, events=big)
    # ||Sigma|| ~ c / (t* - t): reaching 1e7 puts t within ~1e-6 of t*
    assert sol.t_events[0][0] == pytest.approx(t_star, rel=1e-5)


def test_no_blowup_when_the_contraction_wins():
    cov0 = np.array([[0.5, 0.1], [0.1, 0.3]])
    A = np.array([[0.6, 0.9], [-0.5, 0.2]])
    p_max = np.linalg.eigvalsh(
        tp.gaussian._closed_forms._whitened(cov0, A)[0]
        @ (A + A.T)
        @ tp.gaussian._closed_forms._whitened(cov0, A)[0]
    ).max()
    w = -0.51 * p_max  # 2|w| > p_max
    assert tp.gaussian.layer_blowup_time(cov0, A, w) == np.inf
    end = _riccati(cov0, A, w, 1.0, 40.0).y[:, -1]
    assert np.abs(end).max() < 1e-2 * np.abs(cov0).max()


def test_equilibrium_is_a_zero_of_the_riccati_field_and_attracts():
    A = np.array([[-1.0, 0.6], [-0.2, -0.5]])
    star = tp.gaussian.layer_equilibrium(A, 0.5)
    S = A + A.T
    assert np.abs(star @ S @ star + 2 * 0.5 * star).max() < 1e-13
    assert np.linalg.eigvalsh(star).min() > 0
    far = _riccati(np.diag([3.0, 0.01]), A, 0.5, 1.0, 40.0).y[:, -1].reshape(2, 2)
    assert np.abs(far - star).max() < 1e-7


def test_equilibrium_refuses_when_there_is_none():
    with pytest.raises(ValueError, match="positive definite"):
        tp.gaussian.layer_equilibrium(np.array([[1.0, 0.0], [0.0, -1.0]]), 0.5)
    with pytest.raises(ValueError, match="positive definite"):
        tp.gaussian.layer_equilibrium(-np.eye(2), -0.5)


def test_closed_form_refuses_times_past_the_blowup():
    with pytest.raises(ValueError, match="blow-up time"):
        tp.gaussian.layer_closed_form(np.eye(2), np.eye(2), 0.5, [0.0, 1.0])


def test_steered_control_reaches_the_target_in_an_independent_integration():
    A = np.array([[0.6, 0.9], [-0.5, 0.2]])
    V = np.array([[0.8, 0.4], [-0.3, 1.0]])
    cov0, target = np.diag([0.5, 0.3]), np.array([[0.2, -0.3], [-0.3, 1.5]])
    Ws = tp.gaussian.steer_covariance(tp.Softmax(A, V), cov0, target, T=1.0, pieces=3)
    g = tp.Gaussian([0.0, 0.0], cov0)
    for k, W in enumerate(Ws):
        layer = tp.Layer(tp.Softmax(A, V), tp.AffineFeedForward(W))
        g = tp.simulate_gaussian(layer, g, [k / 3, (k + 1) / 3]).gaussian(-1)
    assert np.abs(g.cov - target).max() < 1e-6


def test_steering_refuses_a_target_of_another_rank_and_bad_arguments():
    att = tp.Softmax(-np.eye(2), np.eye(2))
    line = np.array([[1.0, 1.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="rank"):
        tp.gaussian.steer_covariance(att, line, np.eye(2), T=1.0)
    with pytest.raises(ValueError, match=r"^T must be a finite positive number"):
        tp.gaussian.steer_covariance(att, np.eye(2), np.eye(2), T=0.0)
    with pytest.raises((ValueError, TypeError), match="pieces"):
        tp.gaussian.steer_covariance(att, np.eye(2), np.eye(2), T=1.0, pieces=0)
    with pytest.raises(TypeError, match="closure"):
        tp.gaussian.steer_covariance(tp.Sigmoid(np.eye(2), np.eye(2)), np.eye(2), np.eye(2), T=1.0)


def test_layer_blowup_time_when_v_p_exceeds_float64():
    """v p = 2e600: t* = log(1 + 2w/p) / (2w) ~ 1/p underflows to 0 (was inf, "never")."""
    I = np.eye(2)
    assert tp.gaussian.layer_blowup_time(I, 1e300 * I, 1.0, v=1e300) == 0.0
    assert tp.gaussian.layer_blowup_time(I, 1e300 * I, 1.0, v=-1e300) == np.inf


def test_layer_closed_form_with_a_strongly_contracting_feedforward():
    """w = -400: e^{-2wt} = e^800 overflowed (NaN at t = 1). Exact: Sigma_t = 1/(e^{800 t} -
    2 g(t)) for Sigma0 = A = I, v = 1, g = (e^{800 t} - 1) / 800: about e^{-800 t}."""
    S = tp.gaussian.layer_closed_form(np.eye(2), np.eye(2), -400.0, [0.0, 0.5, 1.0])
    assert np.all(np.isfinite(S))
    t = np.array([0.5, 1.0])
    # 1 / (e^{800 t} (1 - 2 (1 - e^{-800 t}) / 800)) in the log domain
    expected = np.exp(-800.0 * t - np.log1p(-2 * (-np.expm1(-800.0 * t)) / 800.0))
    assert np.allclose(S[1:, 0, 0], expected, rtol=1e-13, atol=0)
    assert np.array_equal(S[1:, 0, 1], [0.0, 0.0])


def test_steer_covariance_stops_at_its_budget():
    att = tp.Softmax(-np.eye(2), np.eye(2))
    with pytest.raises(ValueError, match="max_evals=2000"):
        tp.gaussian.steer_covariance(att, np.eye(2), 1e6 * np.eye(2), 1.0, pieces=1, max_evals=2000)
    with pytest.raises(TypeError, match="max_evals"):
        tp.gaussian.steer_covariance(att, np.eye(2), np.eye(2), 1.0, max_evals=1.5)
