"""Causal attention (tpde_lib.masked._causal): each formula against an independent computation."""

import math

import numpy as np
import pytest
from scipy.integrate import quad, solve_ivp
from scipy.special import iv

import tpde_lib as tp

M = tp.masked


# ---- Rényi centres -----------------------------------------------------------------------------


def test_renyi_centres_match_a_greedy_loop():
    rng = np.random.default_rng(0)
    x = tp.to_sphere(rng.standard_normal((60, 3)))
    for delta in (0.3, 0.7, 1.2):
        for strong in (False, True):
            kept = []
            for k in range(len(x)):
                ref = range(k) if strong else kept
                if all(np.linalg.norm(x[k] - x[j]) >= delta for j in ref):
                    kept.append(k)
            assert M.renyi_centers(x, delta, strong=strong).tolist() == kept
    # strong centres are a subset of the centres, and separation holds among the centres
    c = M.renyi_centers(x, 0.7)
    d = np.linalg.norm(x[c][:, None] - x[c][None], axis=-1)
    assert d[np.triu_indices(len(c), 1)].min() >= 0.7
    assert set(M.renyi_centers(x, 0.7, strong=True)) <= set(c)


def test_renyi_centres_refuse_bad_input():
    with pytest.raises(ValueError, match="delta"):
        M.renyi_centers(np.eye(3), 0.0)
    with pytest.raises(ValueError, match="points"):
        M.renyi_centers(np.ones(3), 0.5)
    with pytest.raises(TypeError, match="strong"):
        M.renyi_centers(np.eye(3), 0.5, strong=1)


# ---- the closed form -----------------------------------------------------------------------------


def _psi_series(c, y, terms=200):
    total, term = 0.0, c
    for k in range(terms):
        total += term
        term *= c * y / ((k + 1) * (k + 2))
    return total


@pytest.mark.parametrize("lam", [0.0, 0.5, 2.0])
def test_closed_form_matches_its_series(lam):
    s = np.array([0.01, 0.2, 0.5, 0.9, 1.0])
    a, t = 0.7, 1.6
    g = M.correlation_closed_form(s, a, t, lam)
    for si, gi in zip(s, g):
        if lam == 0:
            coeff, y = 1.0, -math.log(si)
        else:
            coeff = lam * math.exp(lam * si) / math.expm1(lam)
            y = math.log(math.expm1(lam) / math.expm1(lam * si))
        assert gi == pytest.approx(coeff * _psi_series(a * t, y), rel=1e-12)


def test_closed_form_solves_the_volterra_equation():
    """g solves d/dt g(s) = a (forcing from the source + the integral over (s0, s)): check by
    quadrature of the right-hand side at the query s = 1."""
    a, t, lam, s0 = 0.8, 1.3, 1.5, 0.3

    def E(s):
        return math.expm1(lam * s)

    def dE(s):
        return lam * math.exp(lam * s)

    # g(t; s0 -> sigma) for the query at sigma: coefficient E'(s0)/E(sigma), Y = log(E(sigma)/E(s0))
    def g(tt, sigma):
        y = math.log(E(sigma) / E(s0))
        return dE(s0) / E(sigma) * _psi_series(a * tt, y)

    # d/dt g(t, 1) = a [E'(s0)/E(1) + (1/E(1)) int_{s0}^1 g(t, sigma) E'(sigma) d sigma]
    h = 1e-5
    lhs = (g(t + h, 1.0) - g(t - h, 1.0)) / (2 * h)
    integral, _ = quad(lambda sg: g(t, sg) * dE(sg), s0, 1.0, epsabs=0, epsrel=1e-12)
    rhs = a * (dE(s0) / E(1.0) + integral / E(1.0))
    assert lhs == pytest.approx(rhs, rel=1e-8)
    assert g(t, 1.0) == pytest.approx(M.correlation_closed_form([s0], a, t, lam)[0], rel=1e-12)


@pytest.mark.parametrize("normalised", [False, True])
def test_linear_prediction_tends_to_the_closed_form(normalised):
    """The matrix exponential for n tokens is a Riemann sum of the Volterra operator: its gap to
    the closed form at interior sources shrinks like 1/n."""
    beta, t, lam = 1.0, 1.5, 1.0
    a = M.mode_rates(beta, 1, normalised)[0]
    gaps = []
    for n in (100, 400):
        k = np.array([n // 4, n // 2, 3 * n // 4]) - 1
        lin = M.correlation_linear(n, beta, t, 1, lam, normalised)[k]
        cf = M.correlation_closed_form((k + 1) / n, a, t, lam)
        gaps.append(np.abs(lin / cf - 1).max())
    assert gaps[1] < 0.02
    assert gaps[1] < gaps[0] / 2.5  # about 1/n


def test_linear_prediction_against_an_ode_solve():
    """The linearised laws of 6 tokens, integrated as an ODE (independent of expm)."""
    n, beta, t, lam = 6, 1.3, 0.9, 0.7
    w = np.array([[math.exp(-lam * (j - k) / n) if k <= j else 0.0 for k in range(n)] for j in range(n)])
    i0 = iv(0, beta)
    G = np.array(
        [
            [
                w[j, k] / (beta * (math.exp(beta) * w[j, j] + i0 * w[j, :j].sum())) if k < j else 0.0
                for k in range(n)
            ]
            for j in range(n)
        ]
    )
    growth = 4 * iv(2, beta)
    sol = solve_ivp(lambda _, y: growth * G @ y, (0, t), np.eye(n)[:, 2], rtol=1e-12, atol=1e-14)
    lin = M.correlation_linear(n, beta, t, 2, lam)
    assert lin[2] / n == pytest.approx(sol.y[-1, -1], rel=1e-9)


def test_threshold_is_where_the_end_slope_changes_sign():
    for normalised in (False, True):
        for beta, lam in [(1.0, 1.0), (2.0, 0.5), (0.5, 3.0)]:
            tc = M.retrieval_threshold(beta, lam, normalised=normalised)

            def slope(t, beta=beta, lam=lam, normalised=normalised):
                s = np.array([1 - 1e-6, 1.0])
                S = M.retrieval_profile(s, beta, t, lam, normalised=normalised)
                return (S[1] - S[0]) / 1e-6

            assert slope(0.9 * tc) > 0 > slope(1.1 * tc)


def test_threshold_reproduces_the_published_values():
    # lambda = 1, M = 8, 20 modes, the unnormalised kernel: t_crit(beta) for beta = 1, 2, 3
    got = [round(M.retrieval_threshold(b, 1.0, 8.0, 20, normalised=False), 6) for b in (1.0, 2.0, 3.0)]
    assert got == [2.457489, 0.600716, 0.174018]


def test_profile_is_u_shaped_below_threshold_only():
    s = np.linspace(0.02, 1.0, 981)
    for beta, lam in [(1.0, 1.0), (1.0, 2.0), (2.0, 1.0)]:
        tc = M.retrieval_threshold(beta, lam)
        S = M.retrieval_profile(s, beta, 0.5 * tc, lam)
        interior = np.flatnonzero((S[1:-1] < S[:-2]) & (S[1:-1] < S[2:]))
        assert interior.size == 1 and S[0] > S[interior[0] + 1] < S[-1]
        S_late = M.retrieval_profile(s, beta, 1.5 * tc, lam)
        assert np.argmin(S_late) == s.size - 1  # no recency: the minimum moves to s = 1


def test_mode_rates_scaling_and_large_beta():
    a_u = M.mode_rates(2.0, 3, normalised=False)
    a_n = M.mode_rates(2.0, 3, normalised=True)
    assert np.allclose(a_u / a_n, 2.0 * iv(0, 2.0), rtol=1e-13)
    assert np.all(np.isfinite(M.mode_rates(500.0, 4)))


def test_closed_form_refuses_bad_input():
    with pytest.raises(ValueError, match="s must"):
        M.correlation_closed_form([0.0], 1.0, 1.0)
    with pytest.raises(ValueError, match="s must"):
        M.correlation_closed_form([1.2], 1.0, 1.0)
    with pytest.raises(ValueError, match="rate"):
        M.correlation_closed_form([0.5], -1.0, 1.0)
    with pytest.raises(ValueError, match="lam"):
        M.correlation_closed_form([0.5], 1.0, 1.0, lam=-1.0)
    with pytest.raises(ValueError, match="lam"):
        M.retrieval_threshold(1.0, lam=0.0)
    with pytest.raises(ValueError, match=r"^M must be a finite positive number"):
        M.retrieval_profile([0.5], 1.0, 1.0, M=0.0)
    with pytest.raises(TypeError, match="n_modes"):
        M.mode_rates(1.0, 2.0)
    with pytest.raises(ValueError, match=r"^n must be an integer >= 2"):
        M.correlation_linear(1, 1.0, 1.0)


# ---- the circle dynamics and the particle estimators -----------------------------------------------


def _loop_field(theta, beta, lam, normalised):
    n = len(theta)
    v = np.zeros(n)
    for j in range(n):
        keys = range(j + 1) if normalised else range(j)
        if not keys:
            continue
        pos = np.array([math.exp(-lam * (j - k) / n) for k in keys])
        if not normalised:
            pos /= pos.sum()
        u = np.array([theta[k] - theta[j] for k in keys])
        e = pos * np.exp(beta * np.cos(u))
        v[j] = (e @ np.sin(u)) / e.sum() if normalised else beta * (e @ np.sin(u))
    return v


@pytest.mark.parametrize("normalised", [True, False])
def test_circle_field_matches_a_per_token_loop(normalised):
    th = np.random.default_rng(1).uniform(0, 2 * np.pi, (3, 9))
    v = M.circle_field(th, 2.5, lam=1.3, normalised=normalised)
    for row, vr in zip(th, v):
        assert np.allclose(vr, _loop_field(row, 2.5, 1.3, normalised), rtol=0, atol=1e-13)
    assert v[:, 0].tolist() == [0.0, 0.0, 0.0]  # the first token does not move


def test_circle_field_is_the_causal_sphere_layer():
    """Without the positional bias the softmax dynamics is the library's causal sphere layer."""
    n, beta = 10, 3.0
    th = np.random.default_rng(2).uniform(0, 2 * np.pi, n)
    x = np.c_[np.cos(th), np.sin(th)]
    mu = tp.Empirical(x, positions=np.arange(1, n + 1) / n)
    layer = tp.Layer(tp.Softmax(beta * np.eye(2), np.eye(2), causal=True), normalisation="sphere")
    vel = layer.velocity(mu)
    tangent = np.c_[-np.sin(th), np.cos(th)]
    assert np.allclose((vel * tangent).sum(axis=1), M.circle_field(th, beta), atol=1e-13)


def test_circle_simulate_matches_the_library_integrator():
    """Without positional bias, the batched circle integrator follows tp.simulate of the causal
    sphere layer. Both are RK4 with step 0.1, one in the angles, the other in the plane followed by
    a renormalisation: two discretisations of one flow, apart by O(h^4) (1e-8 measured)."""
    n, beta = 12, 6.0
    th0 = np.random.default_rng(3).uniform(0, 2 * np.pi, (2, n))
    times = [0.0, 1.0, 3.0]
    th = M.circle_simulate(th0, beta, times, h=0.1)
    layer = tp.Layer(tp.Softmax(beta * np.eye(2), np.eye(2), causal=True), normalisation="sphere")
    for d in range(2):
        mu = tp.Empirical(np.c_[np.cos(th0[d]), np.sin(th0[d])], positions=np.arange(1, n + 1) / n)
        ref = tp.simulate(layer, mu, times, h=0.1).points
        got = np.stack([np.cos(th[:, d]), np.sin(th[:, d])], axis=-1)
        assert np.abs(got - ref).max() < 1e-7
    with pytest.raises(ValueError, match="theta0"):
        M.circle_simulate(np.ones((1, 1, 2)), 1.0, [0.0, 1.0])


def test_tangent_estimator_is_the_exact_jacobian():
    """The Jacobian carried by circle_retrieval equals finite differences of its own final angles."""
    n, beta, t, lam = 5, 1.5, 0.6, 1.0
    r = M.circle_retrieval(n, beta, t, lam, draws=2, modes=(1,), seed=4)
    theta0 = np.random.default_rng(4).uniform(0.0, 2.0 * math.pi, (2, n))
    h, steps = t / 6, 6

    def flow(th):
        for _ in range(steps):
            k1 = M.circle_field(th, beta, lam)
            k2 = M.circle_field(th + h / 2 * k1, beta, lam)
            k3 = M.circle_field(th + h / 2 * k2, beta, lam)
            k4 = M.circle_field(th + h * k3, beta, lam)
            th = th + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return th

    assert np.allclose(flow(theta0), r.final, atol=1e-13)
    eps = 1e-6
    fd = np.empty((2, n))
    for k in range(n):
        up, dn = theta0.copy(), theta0.copy()
        up[:, k] += eps
        dn[:, k] -= eps
        fd[:, k] = (flow(up)[:, -1] - flow(dn)[:, -1]) / (2 * eps)
    phase = r.final[:, -1:] - theta0
    expected = (n * np.cos(phase) * fd).mean(axis=0)
    assert np.allclose(r.mean[0], expected, atol=1e-7)


def test_the_two_estimators_agree():
    """Plain and tangent estimators estimate the same expectation (within 4 combined errors)."""
    kw = dict(n=8, beta=1.0, t=1.5, lam=1.0, modes=(1, 2), draws=3000)
    a = M.circle_retrieval(**kw, seed=5, estimator="tangent")
    b = M.circle_retrieval(**kw, seed=6, estimator="plain")
    z = (a.mean - b.mean)[:, :-1] / np.hypot(a.stderr, b.stderr)[:, :-1]
    assert np.abs(z).max() < 4, z
    assert np.all(a.stderr[:, :-1] < b.stderr[:, :-1])  # the point of the tangent estimator


def test_particles_match_the_linear_prediction():
    n, beta, t, lam = 12, 1.0, 1.5, 1.5
    r = M.circle_retrieval(n, beta, t, lam, draws=1500, modes=(1,), seed=7)
    lin = M.correlation_linear(n, beta, t, 1, lam)
    z = (r.mean[0] - lin)[:-1] / r.stderr[0, :-1]
    assert np.abs(z).max() < 4, z


def test_circle_retrieval_refuses_bad_input():
    with pytest.raises(ValueError, match="draws"):
        M.circle_retrieval(4, 1.0, 1.0, draws=1)
    with pytest.raises(ValueError, match="modes"):
        M.circle_retrieval(4, 1.0, 1.0, modes=())
    with pytest.raises(ValueError, match="modes"):
        M.circle_retrieval(4, 1.0, 1.0, modes=(0,))
    with pytest.raises(ValueError, match="estimator"):
        M.circle_retrieval(4, 1.0, 1.0, estimator="exact")
    with pytest.raises(ValueError, match=r"^t must be a finite positive number"):
        M.circle_retrieval(4, 1.0, 0.0)
    with pytest.raises(ValueError, match="theta"):
        M.circle_field(np.ones((2, 2, 2)), 1.0)
    with pytest.raises(ValueError, match="theta"):
        M.circle_field(np.ones(1), 1.0)
