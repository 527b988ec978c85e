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
