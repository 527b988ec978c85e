"""Tests of tpde_lib.sphere: energy, clusters, plateaus, the two-cluster time.

Oracles: double loops for the energy, a depth-first search for the clusters, the derived
energy derivative sum_i w_i Z_i |P v_i|^2 against finite differences along a trajectory, and a
two-token simulation against the quadrature of the angle ODE.
"""

import math

import numpy as np
import pytest

import tpde_lib as tp
from tpde_lib import sphere


def _sphere_layer(beta, d):
    return tp.Layer(tp.Softmax(beta * np.eye(d), np.eye(d)), normalisation="sphere")


def _cloud(n=12, d=3, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.random(n)
    return tp.to_sphere(rng.standard_normal((n, d))), w / w.sum()


def test_energy_is_the_double_sum():
    x, w = _cloud()
    beta = 2.5
    loop = sum(w[i] * w[j] * math.exp(beta * x[i] @ x[j]) for i in range(len(x)) for j in range(len(x)))
    assert math.isclose(sphere.sphere_energy(x, beta, w), loop / (2 * beta), rel_tol=1e-14)
    traj = np.stack([x, -x])
    np.testing.assert_allclose(sphere.sphere_energy(traj, beta, w), [loop / (2 * beta)] * 2, rtol=1e-14)


@pytest.mark.parametrize("beta", [0.5, 4.0])
def test_energy_never_decreases_and_its_rate_is_the_weighted_squared_speed(beta):
    x, w = _cloud(n=10, d=3, seed=1)
    layer = _sphere_layer(beta, 3)
    h = 1e-3
    traj = tp.simulate(layer, tp.Empirical(x, w), np.arange(0, 2.0 + h / 2, h), h=h)
    E = sphere.sphere_energy(traj.points, beta, w)
    assert np.diff(E).min() >= -1e-13 * E.max()
    # dE/dt = sum_i w_i Z_i |P v_i|^2 with Z_i = sum_j w_j e^{beta <x_i, x_j>} (derived)
    k = 500
    xk = traj.points[k]
    Z = np.exp(beta * xk @ xk.T) @ w
    speed = layer.velocity(tp.Empirical(xk, w))
    rate = np.sum(w * Z * (speed**2).sum(axis=1))
    fd = (E[k + 1] - E[k - 1]) / (2 * h)
    assert math.isclose(fd, rate, rel_tol=1e-5)


def _dfs_count(x, r):
    n, seen, count = len(x), set(), 0
    for s in range(n):
        if s in seen:
            continue
        count += 1
        stack = [s]
        seen.add(s)
        while stack:
            i = stack.pop()
            for j in range(n):
                if j not in seen and np.linalg.norm(x[i] - x[j]) <= r:
                    seen.add(j)
                    stack.append(j)
    return count


@pytest.mark.parametrize("seed", range(6))
def test_cluster_count_matches_a_depth_first_search(seed):
    rng = np.random.default_rng(seed)
    x = tp.to_sphere(rng.standard_normal((25, 3)))
    for r in (0.1, 0.4, 0.8, 1.5):
        assert sphere.count_clusters(x, r) == _dfs_count(x, r)


def test_a_chain_of_close_tokens_is_one_cluster():
    a = np.linspace(0, 3.0, 40)  # steps of 0.077, total arc 3
    x = np.stack([np.cos(a), np.sin(a)], axis=1)
    assert sphere.count_clusters(x, 0.08) == 1
    assert sphere.count_clusters(x, 0.07) == 40


def test_plateaus_cut_at_every_change():
    far = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    two = np.array([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
    one = np.tile([1.0, 0.0], (3, 1))
    runs = sphere.cluster_plateaus([0, 1, 2, 3, 4], [far, two, two, one, two], 0.5)
    assert [(p.clusters, p.start, p.end, p.final) for p in runs] == [
        (3, 0.0, 1.0, False),
        (2, 1.0, 3.0, False),
        (1, 3.0, 4.0, False),
        (2, 4.0, 4.0, True),
    ]
    assert runs[1].duration == 2.0


@pytest.mark.parametrize("m1", [0.5, 0.3])
def test_two_point_clusters_close_as_the_quadrature_says(m1):
    beta, th0, th1 = 3.0, 1.4, 0.5
    x0 = np.array([[1.0, 0.0, 0.0], [math.cos(th0), math.sin(th0), 0.0]])
    T = sphere.two_cluster_time(beta, th0, th1, m1)
    traj = tp.simulate(
        _sphere_layer(beta, 3), tp.Empirical(x0, [m1, 1 - m1]), [0.0, T], method="rk4", h=T / 2000
    )
    a, b = traj.points[-1]
    assert math.isclose(math.acos(a @ b), th1, rel_tol=1e-9)


def test_two_cluster_time_grows_like_exp_beta_one_minus_cos():
    th0 = 1.2
    betas = np.array([40.0, 50.0, 60.0])
    T = np.array([sphere.two_cluster_time(b, th0, 0.1) for b in betas])
    slope = np.polyfit(betas, np.log(betas * T), 1)[0]
    assert abs(slope - (1 - math.cos(th0))) < 0.01 * (1 - math.cos(th0))


def test_caps_are_unit_deterministic_and_separate():
    c = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 2.0]])
    x = sphere.sample_caps(c, [4, 3], 0.02, seed=3)
    assert np.array_equal(x, sphere.sample_caps(c, [4, 3], 0.02, seed=3))
    assert np.abs(np.linalg.norm(x, axis=1) - 1).max() < 1e-15
    assert sphere.count_clusters(x, 0.3) == 2
    assert sphere.count_clusters(x[:4], 0.3) == 1


def test_sphere_errors_name_the_argument():
    with pytest.raises(ValueError, match="beta must be"):
        sphere.sphere_energy(np.eye(2), 0.0)
    with pytest.raises(ValueError, match="weights must be"):
        sphere.sphere_energy(np.eye(2), 1.0, [0.7, 0.7])
    with pytest.raises(ValueError, match="resolution must be"):
        sphere.count_clusters(np.eye(2), -1.0)
    with pytest.raises(ValueError, match="theta1 < theta0"):
        sphere.two_cluster_time(1.0, 0.5, 1.0)
    with pytest.raises(ValueError, match="counts must have 2"):
        sphere.sample_caps(np.eye(2), [3], 0.1)
    with pytest.raises(ValueError, match="points must have shape"):
        sphere.cluster_plateaus([0.0, 1.0], np.zeros((3, 2, 2)) + 1, 0.1)


# ---------------------------------------------------------------------------------------------
# extremes of floating point and bounded memory (issue 41)
# ---------------------------------------------------------------------------------------------


def test_count_clusters_compares_distances_without_cancellation():
    """|x|^2 + |y|^2 - 2<x, y> cancels: it merged two unit vectors 1e-8 apart at r = 1e-9, and
    two tokens 1 apart at 1e8 from the origin at r = 0.5. Distances by differences keep them
    apart; at r just above the distance they are one cluster."""
    a = np.array([[1.0, 0.0], [math.cos(1e-8), math.sin(1e-8)]])
    assert sphere.count_clusters(a, 1e-9) == 2
    assert sphere.count_clusters(a, 2e-8) == 1
    b = np.array([[1e8, 0.0], [1e8 + 1, 0.0]])
    assert sphere.count_clusters(b, 0.5) == 2
    assert sphere.count_clusters(b, 1.0) == 1
    assert sphere.count_clusters(np.array([[1e200, 0.0], [-1e200, 0.0]]), 1e199) == 2


def test_blocked_pairwise_quantities_match_the_dense_formulas(monkeypatch):
    """Small blocks force the blockwise paths (the dense matrix is used up to _DENSE_PAIRS):
    the same counts, the same diameter (its candidates are measured by differences, as the
    dense formula does) and the energy within float64 round-off of its sum."""
    x = sphere.sample_caps(np.eye(3), [40, 30, 30], 0.1, seed=3)
    dense = (
        [sphere.count_clusters(x, r) for r in (0.05, 0.2, 1.0)],
        sphere.diameter(x),
        sphere.sphere_energy(x, 3.0),
    )
    monkeypatch.setattr(sphere, "_BLOCK_PAIRS", 700)
    monkeypatch.setattr(sphere, "_DENSE_PAIRS", 0)
    assert [sphere.count_clusters(x, r) for r in (0.05, 0.2, 1.0)] == dense[0]
    assert sphere.diameter(x) == dense[1]
    assert sphere.sphere_energy(x, 3.0) == pytest.approx(dense[2], rel=1e-14)


def test_pairwise_quantities_stay_in_bounded_memory():
    """n = 6000 tokens: the dense (n, n, d) differences took 864 MB (18.6 GiB at n = 50 000);
    blockwise, each call stays below 64 MiB."""
    import tracemalloc

    x = sphere.sample_caps(np.eye(3), [2000, 2000, 2000], 0.05, seed=0)
    for f, args in ((sphere.count_clusters, (0.3,)), (sphere.sphere_energy, (5.0,)), (sphere.diameter, ())):
        tracemalloc.start()
        f(x, *args)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 64 * 2**20, (f.__name__, peak)


def test_too_many_tokens_are_refused_before_any_allocation():
    x = np.broadcast_to(np.array([1.0, 0.0]), (sphere.MAX_TOKENS + 1, 2))
    for f, args in ((sphere.count_clusters, (0.3,)), (sphere.sphere_energy, (5.0,)), (sphere.diameter, ())):
        with pytest.raises(ValueError, match="at most 200000"):
            f(x, *args)


def test_sphere_energy_in_the_log_domain_and_overflow_reported():
    one = np.tile([0.0, 1.0], (3, 1))
    # e^800 / 1600 exceeds float64: an error saying so, and log=True gives its logarithm
    with pytest.raises(ValueError, match="log=True"):
        sphere.sphere_energy(one, 800.0)
    assert sphere.sphere_energy(one, 800.0, log=True) == pytest.approx(800.0 - math.log(1600.0), rel=1e-15)
    x = sphere.sample_caps(np.eye(2), [5, 5], 0.3, seed=1)
    assert sphere.sphere_energy(x, 2.0, log=True) == pytest.approx(
        math.log(sphere.sphere_energy(x, 2.0)), rel=1e-14
    )
    with pytest.raises(TypeError, match="log"):
        sphere.sphere_energy(x, 2.0, log="yes")


def test_diameter_at_the_extremes_of_floating_point():
    assert sphere.diameter([[1e200, 0.0], [-1e200, 0.0]]) == 2e200
    assert sphere.diameter([[1e-200, 0.0], [-1e-200, 0.0]]) == 2e-200
    with pytest.raises(ValueError, match="exceeds float64"):
        sphere.diameter([[1.5e308, 0.0], [-1.5e308, 0.0]])


def test_two_cluster_time_at_extreme_angles_and_exponents():
    # theta1 = 1e-300: beta -> 0 gives log tan(theta0 / 2) - log tan(theta1 / 2) = 690.86...
    exact = math.log(math.tan(0.5)) - math.log(math.tan(0.5e-300))
    assert sphere.two_cluster_time(1e-9, 1.0, 1e-300) == pytest.approx(exact, rel=1e-8)
    # beta = 1000 at theta0 = 3: e^{1000 (1 - cos 3)} exceeds float64; its log is given
    with pytest.raises(ValueError, match="log=True"):
        sphere.two_cluster_time(1000.0, 3.0, 0.1)
    log_t = sphere.two_cluster_time(1000.0, 3.0, 0.1, log=True)
    # independently: the integral in theta of the speed's inverse with e^{beta(1 - cos 3)}
    # factored out (h = 2 q-free bracket at m1 = 1/2), by quadrature on the last 0.05 rad
    from scipy.integrate import quad

    top = 1000.0 * (1 - math.cos(3.0))

    def scaled(th):
        q = math.exp(-1000.0 * (1 - math.cos(th)))
        return math.exp(1000.0 * (1 - math.cos(th)) - top) / (math.sin(th) * 2 * 0.5 / (0.5 + 0.5 * q))

    rest, _ = quad(scaled, 0.1, 2.95, epsabs=0, epsrel=1e-12, limit=200)
    near, _ = quad(scaled, 2.95, 3.0, epsabs=0, epsrel=1e-12, limit=200)
    assert log_t == pytest.approx(top + math.log(near + rest), rel=1e-12)


def test_two_cluster_time_matches_the_quadrature_in_theta():
    from scipy.integrate import quad

    for beta, t0, t1, m1 in [(1.0, 1.5, 0.1, 0.5), (10.0, 2.0, 0.5, 0.3), (30.0, 1.0, 0.05, 0.8)]:

        def inverse(th, beta=beta, m1=m1):
            return 1.0 / sphere._two_cluster_speed(th, beta, m1)

        ref, _ = quad(inverse, t1, t0, epsabs=0, epsrel=1e-13, limit=400)
        assert sphere.two_cluster_time(beta, t0, t1, m1) == pytest.approx(ref, rel=1e-10)


def test_sample_caps_refuses_a_zero_centre_and_takes_huge_ones():
    with pytest.raises(ValueError, match="centres"):
        sphere.sample_caps([[0.0, 0.0], [1.0, 0.0]], [2, 2], 0.1)
    x = sphere.sample_caps([[1e300, 0.0]], [3], 0.01, seed=2)
    assert np.allclose(x, sphere.sample_caps([[1.0, 0.0]], [3], 0.01, seed=2), rtol=0, atol=0)
