"""Property-based tests of the input policy (tpde_lib._checks) over the public API.

For random shapes, dtypes (int, float, bool, complex, str, object), scales 1e-300 ... 1e300,
NaN/inf placement, weights, positions and scalar arguments, every call must either raise the
policy's error (TypeError or ValueError, or IndexError for an index, naming the argument) or
return a finite value that agrees with an independent computation: a sorted matching in 1-D,
a brute-force minimum over permutations, a per-token loop with scipy's softmax, exact scaling by
powers of two. Settings are derandomised (reproducible in CI) with bounded examples and a
per-example deadline; the whole module runs in well under two minutes.
"""

import itertools
import math

import numpy as np
import ot
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays
from scipy.special import softmax as scipy_softmax

import tpde_lib as tp

POLICY = settings(
    max_examples=150,
    deadline=2000,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)

# ----------------------------------------------------------------------------- strategies
BAD_DTYPES = [np.bool_, np.complex128, np.str_, np.object_]
GOOD_DTYPES = [np.int32, np.int64, np.float32, np.float64]


def any_array(shape_strategy):
    """Arrays of any dtype, real or not, of the given shapes (small integer entries)."""

    def build(dtype, shape):
        if dtype is np.object_:
            return arrays(np.object_, shape, elements=st.sampled_from([1.0, "a", None, 2]))
        if dtype is np.str_:
            return arrays(np.dtype("<U3"), shape, elements=st.sampled_from(["1", "2.5", "x"]))
        return arrays(dtype, shape, elements=st.integers(-5, 5).map(lambda v: dtype(v)))

    return st.tuples(st.sampled_from(BAD_DTYPES + GOOD_DTYPES), shape_strategy).flatmap(lambda ds: build(*ds))


#: scalar arguments of every kind: valid and invalid numbers, bools, strings, complex, None
ANY_SCALAR = st.one_of(
    st.integers(-3, 5),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.booleans(),
    st.sampled_from(["1", "rk4", "", "0.5"]),
    st.complex_numbers(max_magnitude=3),
    st.none(),
    st.just(np.float64(0.5)),
    st.just(np.int64(3)),
)


def _real_numeric(arr):
    """The policy's notion of a real array: int/float dtype, or objects that are all int/float."""
    if arr.dtype.kind == "O":
        return all(_is_real_number(v) for v in arr.ravel())
    return arr.dtype.kind in "iuf"


def _is_real_number(x):
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _raises_naming(fn, name, types=(TypeError, ValueError)):
    """Call ``fn``; if it raises, it must be one of ``types`` with a message starting with ``name``."""
    try:
        return fn(), None
    except types as exc:
        assert str(exc).startswith(name), f"error does not name {name!r}: {exc}"
        return None, exc


# ----------------------------------------------------------------------------- arrays: dtype and shape
@POLICY
@given(any_array(array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4)))
def test_empirical_accepts_exactly_the_real_nonempty_2d_arrays(points):
    real = _real_numeric(points)
    good_shape = points.ndim == 2 and points.size > 0
    out, exc = _raises_naming(lambda: tp.Empirical(points), "points")
    if real and good_shape:
        assert exc is None, exc
        np.testing.assert_array_equal(out.points, points.astype(float))
    elif not real and points.size > 0:
        assert isinstance(exc, TypeError), (points.dtype, exc)
    else:
        assert exc is not None, "wrongly accepted"


@POLICY
@given(st.integers(1, 5), st.integers(1, 3), st.data())
def test_nan_or_inf_anywhere_is_named(n, d, data):
    field = data.draw(st.sampled_from(["points", "weights", "positions"]))
    pts = np.zeros((n, d))
    w = np.full(n, 1.0 / n)
    s = np.linspace(0, 1, n)
    target = {"points": pts, "weights": w, "positions": s}[field]
    idx = data.draw(st.integers(0, target.size - 1))
    target.flat[idx] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    with pytest.raises(ValueError, match=f"^{field} contains NaN or infinite"):
        tp.Empirical(pts, weights=w, positions=s)


@POLICY
@given(st.integers(1, 6), st.data())
def test_weights_are_accepted_iff_a_probability_vector(n, data):
    w = data.draw(arrays(float, n, elements=st.floats(-1, 1)))
    normalise = data.draw(st.booleans())
    if normalise and w.sum() > 1e-3:
        w = w / w.sum()
    valid = bool(np.all(w >= 0) and abs(w.sum() - 1) <= 1e-9)
    out, exc = _raises_naming(lambda: tp.Empirical(np.zeros((n, 2)), weights=w), "weights")
    assert (exc is None) == valid, (w, exc)


@POLICY
@given(any_array(array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=3)))
def test_gaussian_mean_of_any_dtype(mean):
    real = _real_numeric(mean)
    out, exc = _raises_naming(lambda: tp.Gaussian(mean, np.eye(mean.shape[-1])), "mean")
    if real and mean.ndim == 1:
        assert exc is None
        np.testing.assert_array_equal(out.mean, mean.astype(float))
    else:
        assert exc is not None


# ----------------------------------------------------------------------------- moments at every scale
@POLICY
@given(
    arrays(float, st.tuples(st.integers(1, 6), st.integers(1, 3)), elements=st.floats(-1e3, 1e3)),
    st.integers(-990, 990),
)
def test_moments_scale_exactly_by_powers_of_two(X, k):
    # scaling by c = 2^k is exact in floating point, so mean(cX) = c mean(X) and
    # cov(cX) = c^2 cov(X) up to the rounding of the result itself; when c^2 cov(X) is not
    # representable, cov must raise FloatingPointError (never return inf)
    c = math.ldexp(1.0, k)
    mu, scaled = tp.Empirical(X), tp.Empirical(X * c)
    np.testing.assert_allclose(scaled.mean(), mu.mean() * c, rtol=1e-15, atol=1e-300)
    ref = mu.cov()
    big = np.abs(ref).max()
    if big > 0 and math.log2(big) + 2 * k > 1023.9:
        with pytest.raises(FloatingPointError, match="cov"):
            scaled.cov()
    else:
        got = scaled.cov()
        assert np.all(np.isfinite(got))
        # tolerance: 1e-12 of the largest entry, plus the smallest normal (subnormal results)
        tol = 1e-12 * big * c * c + 3e-308 if big > 0 else 3e-308
        assert np.abs(got - ref * c * c).max() <= tol


# ----------------------------------------------------------------------------- Wasserstein
def _sorted_matching(x, y, p):
    """W_p of two uniform 1-D samples of equal size: the sorted matching, stable at any p."""
    gaps = np.abs(np.sort(x) - np.sort(y))
    top = gaps.max()
    if top == 0:
        return 0.0
    return float(top * np.mean((gaps / top) ** p) ** (1 / p))


@POLICY
@given(
    st.integers(1, 6),
    st.data(),
    st.sampled_from([1.0, 1.5, 2.0, 3.0, 10.0, 100.0, 1000.0]),
    st.integers(-990, 990),
    st.integers(0, 2**30),
)
def test_wasserstein_in_1d_is_the_sorted_matching_at_every_scale_and_offset(n, data, p, k, offset):
    # integer-valued points plus an integer offset up to 1e9 are exact floats; the scale 2^k is
    # exact too, so the sorted matching of the unscaled integers is the reference
    ints = st.integers(-50, 50)
    x = np.array(data.draw(st.lists(ints, min_size=n, max_size=n)), dtype=float)
    y = np.array(data.draw(st.lists(ints, min_size=n, max_size=n)), dtype=float)
    c = math.ldexp(1.0, k)
    want = _sorted_matching(x, y, p) * c
    shifted = (x + offset) * c, (y + offset) * c
    assume(np.all(np.isfinite(shifted[0])) and np.all(np.isfinite(shifted[1])))
    mu, nu = tp.Empirical(shifted[0][:, None]), tp.Empirical(shifted[1][:, None])
    got = tp.wasserstein(mu, nu, p=p)
    # 1e-9 relative: offsets up to 2^30 times 2^k leave about 1e-7 of the smallest gap to
    # round-off in the points' own representation only when the offset dwarfs the gaps
    assert got == pytest.approx(want, rel=1e-9, abs=1e-300)
    sliced = tp.wasserstein(mu, nu, p=p, method="sliced", n_projections=3)
    assert sliced == pytest.approx(want, rel=1e-9, abs=1e-300)  # d = 1: sliced = exact


@POLICY
@given(st.integers(1, 4), st.integers(1, 3), st.data(), st.floats(1.0, 1e4))
def test_exact_wasserstein_is_the_best_permutation(n, d, data, p):
    # uniform weights, equal sizes: an optimal plan is a permutation (Birkhoff), so W_p is the
    # minimum over all n! matchings; each matching's cost is evaluated stably (in units of its
    # largest distance, then compared in the log domain)
    pts = st.floats(-10, 10, allow_subnormal=False)
    x = data.draw(arrays(float, (n, d), elements=pts))
    y = data.draw(arrays(float, (n, d), elements=pts))
    best = math.inf
    for perm in itertools.permutations(range(n)):
        dist = np.linalg.norm(x - y[list(perm)], axis=1)
        top = dist.max()
        value = 0.0 if top == 0 else float(top * np.mean((dist / top) ** p) ** (1 / p))
        best = min(best, value)
    got = tp.wasserstein(tp.Empirical(x), tp.Empirical(y), p=p)
    assert got == pytest.approx(best, rel=1e-7, abs=1e-12)


def _weights(n):
    return arrays(float, n, elements=st.floats(0.05, 1.0)).map(lambda w: w / w.sum())


@POLICY
@given(
    st.integers(1, 6),
    st.integers(1, 6),
    st.data(),
    st.sampled_from([1.0, 2.0, 3.5, 50.0, 400.0]),
    st.integers(-900, 900),
)
def test_weighted_1d_exact_and_sliced_agree(n, m, data, p, k):
    # d = 1: the network simplex on the full cost matrix and the quantile matching of the sliced
    # code are two independent algorithms for the same number, at scales 2^k
    c = math.ldexp(1.0, k)
    pts = st.integers(-20, 20).map(float)
    x = np.array(data.draw(st.lists(pts, min_size=n, max_size=n)))[:, None] * c
    y = np.array(data.draw(st.lists(pts, min_size=m, max_size=m)))[:, None] * c
    mu = tp.Empirical(x, weights=data.draw(_weights(n)))
    nu = tp.Empirical(y, weights=data.draw(_weights(m)))
    exact = tp.wasserstein(mu, nu, p=p)
    sliced = tp.wasserstein(mu, nu, p=p, method="sliced", n_projections=2)
    assert math.isfinite(exact) and sliced == pytest.approx(exact, rel=1e-7, abs=1e-300)


@POLICY
@given(st.integers(1, 6), st.integers(1, 6), st.integers(2, 3), st.data(), st.sampled_from([1.0, 2.0, 3.0]))
def test_sliced_matches_pot_on_the_same_directions(n, m, d, data, p):
    # POT's ot.sliced_wasserstein_distance (its own quantile code) on the directions the library
    # draws, rebuilt here from the documented recipe: default_rng(seed), normalised columns
    seed, L = data.draw(st.integers(0, 1000)), 7
    coords = st.floats(-10, 10, allow_subnormal=False)
    x = data.draw(arrays(float, (n, d), elements=coords))
    y = data.draw(arrays(float, (m, d), elements=coords))
    a, b = data.draw(_weights(n)), data.draw(_weights(m))
    theta = np.random.default_rng(seed).standard_normal((d, L))
    theta /= np.linalg.norm(theta, axis=0, keepdims=True)
    want = float(ot.sliced_wasserstein_distance(x, y, a, b, p=p, projections=theta))
    got = tp.wasserstein(
        tp.Empirical(x, weights=a),
        tp.Empirical(y, weights=b),
        p=p,
        method="sliced",
        n_projections=L,
        seed=seed,
    )
    assert got == pytest.approx(want, rel=1e-7, abs=1e-9)


@POLICY
@given(ANY_SCALAR, ANY_SCALAR, ANY_SCALAR, st.sampled_from(["exact", "sliced", "EXACT", 3, None]))
def test_wasserstein_arguments_follow_the_policy(p, n_projections, seed, method):
    mu = tp.Empirical([[0.0, 0.0], [1.0, 0.0]])
    nu = tp.Empirical([[0.0, 1.0]])
    valid = {
        "p": _is_real_number(p) and math.isfinite(p) and p >= 1,
        "method": method in ("exact", "sliced"),
        "n_projections": _is_int(n_projections) and n_projections >= 1,
        "seed": _is_int(seed) and seed >= 0,
    }
    try:
        out = tp.wasserstein(mu, nu, p=p, method=method, n_projections=n_projections, seed=seed)
    except (TypeError, ValueError) as exc:
        named = str(exc).split(" ")[0]
        assert named in valid and not valid[named], exc
        return
    assert all(valid.values()), ("wrongly accepted", valid)
    assert math.isfinite(out) and out >= 0


# ----------------------------------------------------------------------------- sampling
@POLICY
@given(ANY_SCALAR, ANY_SCALAR)
def test_gaussian_sample_counts_and_seeds(n, seed):
    g = tp.Gaussian([0.0, 1.0], np.eye(2))
    valid_n = _is_int(n) and n >= 1
    valid_seed = _is_int(seed) and seed >= 0
    try:
        mu = g.sample(n, seed=seed)
    except (TypeError, ValueError) as exc:
        named = str(exc).split(" ")[0]
        assert (named == "n" and not valid_n) or (named == "seed" and not valid_seed), exc
        return
    assert valid_n and valid_seed
    assert mu.n == n and np.all(np.isfinite(mu.points))


# ----------------------------------------------------------------------------- simulate
@POLICY
@given(st.sampled_from(["rk4", "euler", "adaptive"]), ANY_SCALAR, ANY_SCALAR, ANY_SCALAR, ANY_SCALAR)
def test_simulate_validates_every_argument_for_every_method(method, h, rtol, atol, max_steps):
    att = tp.Softmax(np.eye(2), -np.eye(2))
    mu = tp.Empirical([[0.0, 1.0], [1.0, 0.0]])
    positive = lambda v: _is_real_number(v) and math.isfinite(v) and v > 0
    valid = {
        "h": h is None or positive(h),
        "rtol": positive(rtol),
        "atol": positive(atol),
        "max_steps": max_steps is None or (_is_int(max_steps) and max_steps >= 1),
    }
    if valid["h"] and h is not None and method != "adaptive":
        # h must also divide the interval [0, 0.5] and fit in the cap: not the policy under test
        h = 0.25
    try:
        traj = tp.simulate(att, mu, [0.0, 0.5], method=method, h=h, rtol=rtol, atol=atol, max_steps=max_steps)
    except (TypeError, ValueError) as exc:
        named = str(exc).split(" ")[0]
        if named == "simulate":  # the step cap: only legitimate for a small valid max_steps
            assert valid["max_steps"] and "max_steps" in str(exc), exc
            return
        assert named in valid and not valid[named], exc
        return
    assert all(valid.values()), ("wrongly accepted", valid)
    assert np.all(np.isfinite(traj.points))


@POLICY
@given(st.integers(1, 4), st.integers(-8, 8))
def test_trajectory_measure_index_in_range_or_index_error(T, k):
    traj = tp.simulate(
        tp.Softmax(np.eye(1), -np.eye(1)),
        tp.Empirical([[1.0], [2.0]]),
        np.arange(T) * 0.1,
        method="euler",
        h=0.05,
    )
    if -T <= k < T:
        np.testing.assert_array_equal(traj.measure(k).points, traj.points[k])
    else:
        with pytest.raises(IndexError, match=rf"^k={k} is out of range"):
            traj.measure(k)


# ----------------------------------------------------------------------------- attention velocity
def _loop_softmax(A, V, X, w):
    """Per-token softmax field with scipy's (max-shifted) softmax: V sum_j p_ij x_j."""
    out = np.empty_like(X)
    for i in range(X.shape[0]):
        scores = np.array([X[j] @ A @ X[i] for j in range(X.shape[0])])
        probs = scipy_softmax(scores + np.log(w))
        out[i] = V @ (probs @ X)
    return out


@POLICY
@given(st.integers(1, 5), st.integers(1, 3), st.data(), st.integers(-300, 300))
def test_softmax_velocity_is_finite_and_correct_or_raises(n, d, data, e):
    # points of magnitude 10^(e/2) and unit matrices: scores of order 10^e. The field must equal
    # the per-token loop (when the loop itself is finite) or raise FloatingPointError
    unit = st.floats(-1, 1, allow_subnormal=False)
    X = data.draw(arrays(float, (n, d), elements=unit)) * 10.0 ** (e / 2)
    A = data.draw(arrays(float, (d, d), elements=unit))
    V = data.draw(arrays(float, (d, d), elements=unit))
    w = np.full(n, 1.0 / n)
    with np.errstate(all="ignore"):
        ref = _loop_softmax(A, V, X, w)
    try:
        got = tp.Softmax(A, V).velocity(tp.Empirical(X))
    except FloatingPointError as exc:
        assert "t=" in str(exc)
        return
    assert np.all(np.isfinite(got))
    if np.all(np.isfinite(ref)):
        scale = np.abs(X).max() * max(np.abs(V).max(), 1e-300) + 1e-300
        assert np.abs(got - ref).max() <= 1e-9 * scale


@POLICY
@given(st.integers(1, 5), st.data(), st.sampled_from([1.0, 2.0, 3.0, 60.0]), st.integers(-900, 900))
def test_conditional_wasserstein_is_homogeneous_and_above_plain_wasserstein(n, data, p, k):
    # both sides carry the same positions (so the same position marginal). Scaling the points by
    # c = 2^k scales the distance by c exactly (up to round-off); coupling only tokens at equal
    # positions can only cost more than the unconstrained coupling
    s = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=n, max_size=n)))
    coords = st.integers(-20, 20).map(float)
    x = data.draw(arrays(float, (n, 2), elements=coords))
    y = data.draw(arrays(float, (n, 2), elements=coords))
    c = math.ldexp(1.0, k)
    base = tp.conditional_wasserstein(tp.Empirical(x, positions=s), tp.Empirical(y, positions=s), p=p)
    mu, nu = tp.Empirical(x * c, positions=s), tp.Empirical(y * c, positions=s)
    scaled = tp.conditional_wasserstein(mu, nu, p=p)
    assert math.isfinite(scaled)
    assert scaled == pytest.approx(base * c, rel=1e-12, abs=1e-300)
    assert scaled >= tp.wasserstein(mu, nu, p=p) * (1 - 1e-9)


@POLICY
@given(any_array(st.just((2, 2))), st.floats(0, 1))
def test_time_dependent_parameters_follow_the_array_policy(value, t):
    # a callable parameter is validated at every evaluation, with the same rules as an array
    real = _real_numeric(value)
    try:
        att = tp.Softmax(lambda s: value, np.eye(2))
        out = att.velocity(tp.Empirical([[0.0, 1.0], [1.0, 0.0]]), t=t)
    except (TypeError, ValueError) as exc:
        assert not real and isinstance(exc, TypeError) and str(exc).startswith("A(t="), exc
        return
    assert real and np.all(np.isfinite(out))
