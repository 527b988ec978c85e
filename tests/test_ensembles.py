"""Batched simulation (tpde_lib.simulate_batch): every member bitwise equal to simulate alone.

The reference is the loop the batch replaces: ``simulate(att, member, times, ...,
on_blowup="stop")`` for each member, compared with ``np.array_equal`` (no tolerance: the
stacked computation is meant to perform each member's floating-point operations exactly).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import tpde_lib as tp
from tpde_lib.attention import _batched


def _cloud(seed, B, n, d, causal=False):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, n, d))
    pos = None
    if causal:
        pos = np.sort(rng.uniform(0.0, 1.0, (B, n)), axis=1)
        pos[:, 0] = 0.0
    return x, pos


def _assert_members_equal_loop(att, x, times, weights=None, positions=None, **kw):
    # the loop runs on a copy made before the batch: a variant with state (Sinkhorn's warm
    # starts) then starts both runs from the same state, and the loop is in the batch's order
    loop_att = copy.deepcopy(att)
    ens = tp.simulate_batch(att, x, times, weights=weights, positions=positions, **kw)
    assert ens.points.shape == (x.shape[0], len(times)) + x.shape[1:]
    for b in range(x.shape[0]):
        w = None if weights is None else (weights if np.ndim(weights) == 1 else weights[b])
        p = None if positions is None else positions[b]
        alone = tp.simulate(loop_att, tp.Empirical(x[b], w, p), times, on_blowup="stop", **kw)
        member = ens.member(b)
        assert np.array_equal(member.points, alone.points), b
        assert np.array_equal(member.times, alone.times)
        assert member.blowup_time == alone.blowup_time
    return ens


def _matrices(seed, d):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((d, d)), rng.standard_normal((d, d))


@pytest.mark.parametrize("d", [2, 3, 16])
@pytest.mark.parametrize("method", ["rk4", "euler"])
def test_softmax_members_bitwise_equal_to_the_loop(d, method):
    A, V = _matrices(d, d)
    x, _ = _cloud(1, 12, 20, d)
    _assert_members_equal_loop(tp.Softmax(A / d, V / d), x, [0.0, 0.5, 1.0], method=method)


def test_causal_softmax_with_per_member_positions_and_weights():
    A, V = _matrices(3, 3)
    x, pos = _cloud(2, 9, 24, 3, causal=True)
    w = np.random.default_rng(3).uniform(0.2, 1.0, (9, 24))
    w /= w.sum(axis=1, keepdims=True)
    att = tp.Softmax(A, V, causal=True)
    assert tp.simulate_batch(att, x, [0.0, 1.0], weights=w, positions=pos).positions.shape == (9, 24)
    _assert_members_equal_loop(att, x, [0.0, 0.5, 1.0], weights=w, positions=pos)


def test_multihead_and_time_dependent_weights():
    A, V = _matrices(4, 3)
    heads = [tp.Softmax(A, V), tp.Softmax(lambda t: np.cos(t) * A.T, 0.5 * V)]
    x, _ = _cloud(5, 8, 16, 3)
    _assert_members_equal_loop(tp.MultiHead(heads), x, [0.0, 0.3, 0.6])


@pytest.mark.parametrize("kind", ["softmax", "exp", "sigmoid"])
@pytest.mark.parametrize("masked", [False, True])
def test_batched_kernel_sums_match_the_engine_member_by_member(kind, masked):
    # the engine alone (no integrator): each member's stacked sums equal engine_sums bitwise,
    # for the sizes around the dense path's limit (181 * 181 = 32761 <= 32768 < 182 * 182)
    from tpde_lib.attention._kernels import engine_sums

    rng = np.random.default_rng(6)
    for n in (1, 7, 181):
        q, k = rng.standard_normal((5, n, 3)), rng.standard_normal((5, n, 3))
        q[1] *= 40.0  # member 1's scores beyond e^709 unless shifted
        v = rng.standard_normal((5, n, 4))
        qp = kp = None
        if masked:
            qp, kp = rng.uniform(0.0, 1.0, (5, n)), rng.uniform(0.0, 1.0, (5, n))
        assert _batched.fits(n, n)
        got = _batched.dense_sums(q, k, v, kind, qp, kp)
        for b in range(5):
            pos = () if qp is None else (qp[b], kp[b])
            alone = engine_sums(q[b], k[b], v[b], kind, *pos)
            if kind == "exp":
                assert np.array_equal(got[0][b], alone[0], equal_nan=True)
                assert np.array_equal(got[1][b], alone[1])
            else:
                assert np.array_equal(got[b], alone, equal_nan=True)
    assert not _batched.fits(182, 182)


def test_members_too_large_for_the_dense_path_go_member_by_member():
    A, V = _matrices(7, 2)
    x, _ = _cloud(7, 3, 200, 2)
    _assert_members_equal_loop(tp.Softmax(0.3 * A, 0.3 * V), x, [0.0, 0.2])


@pytest.mark.parametrize(
    "make",
    [
        lambda A, V, c: tp.Sigmoid(A, V, bias=-0.5, causal=c),
        lambda A, V, c: tp.Unnormalised(0.1 * A, 0.1 * V, causal=c),
        lambda A, V, c: tp.Linear(0.2 * A, 0.2 * V, causal=c),
        lambda A, V, c: tp.L2(A[:2], A[1:], V, tau=0.7, causal=c),
        lambda A, V, c: tp.MultiHead([tp.Sigmoid(A, V, causal=c), tp.Softmax(A.T, V, causal=c)]),
        lambda A, V, c: tp.MultiHead(
            [tp.Softmax(A, V, causal=c), tp.L2(A, A, V, causal=c), tp.Softmax(A.T, V, causal=c)]
        ),
    ],
)
@pytest.mark.parametrize("causal", [False, True])
def test_built_in_variants_stacked_bitwise_equal_to_the_loop(make, causal, monkeypatch):
    A, V = _matrices(12, 3)
    x, pos = _cloud(12, 7, 15, 3, causal=causal)
    att = make(A, V, causal)
    w = np.random.default_rng(13).uniform(0.5, 1.0, (7, 15))
    w /= w.sum(axis=1, keepdims=True)
    if not (causal and isinstance(att, tp.Linear)):  # stacked, never member by member

        def refuse(*args):
            raise AssertionError("member by member")

        monkeypatch.setattr(tp.Attention, "field_batch", refuse)
    _assert_members_equal_loop(att, x, [0.0, 0.25, 0.5], weights=w, positions=pos)
    _assert_members_equal_loop(att, x, [0.0, 0.25], positions=pos, method="euler")


@pytest.mark.parametrize(
    "make",
    [
        lambda A, V: tp.Sinkhorn(0.3 * A, V),
        lambda A, V: tp.Layer(tp.Softmax(A, V), lambda x, t: np.tanh(x)),
        lambda A, V: tp.Layer(tp.Sinkhorn(0.3 * A, V), normalisation="sphere"),
        lambda A, V: tp.MultiHead([tp.Softmax(A, V), tp.Sinkhorn(0.3 * A, V)]),
    ],
)
def test_variants_without_a_batched_field_are_the_loop(make):
    A, V = _matrices(8, 3)
    x, _ = _cloud(8, 4, 10, 3)
    att = make(A, V)
    if isinstance(att, tp.Layer):
        x = x / np.linalg.norm(x, axis=2, keepdims=True)
    _assert_members_equal_loop(att, x, [0.0, 0.25, 0.5])


@pytest.mark.parametrize(
    "make",
    [
        lambda A, V: tp.Layer(tp.Softmax(A, V), normalisation="sphere"),
        lambda A, V: tp.Layer(
            tp.MultiHead([tp.Softmax(A, V), tp.Softmax(A.T, V)]),
            tp.AffineFeedForward(0.5 * V, [0.1, 0.0, -0.2]),
        ),
        lambda A, V: tp.Layer(tp.L2(A, A, V), tp.AffineFeedForward(V), normalisation="sphere"),
    ],
)
def test_layers_stacked_bitwise_equal_to_the_loop(make, monkeypatch):
    A, V = _matrices(15, 3)
    x, _ = _cloud(15, 6, 12, 3)
    att = make(A, V)
    if att.normalisation == "sphere":
        x = x / np.linalg.norm(x, axis=2, keepdims=True)

    def refuse(*args):
        raise AssertionError("member by member")

    monkeypatch.setattr(tp.Attention, "field_batch", refuse)
    _assert_members_equal_loop(att, x, [0.0, 0.25, 0.5])
    if att.normalisation == "sphere":
        x[4, 3] *= 1.01
        with pytest.raises(ValueError, match=r"member 4: mu0 must lie where att\.normalise"):
            tp.simulate_batch(att, x, [0.0, 0.25])


def test_adaptive_method_is_the_loop():
    A, V = _matrices(9, 2)
    x, _ = _cloud(9, 3, 12, 2)
    _assert_members_equal_loop(tp.Softmax(A, V), x, [0.0, 0.5], method="adaptive")


class _ReLU(tp.Attention):
    """A reader's variant with a field only (the batch loops over it)."""

    def __init__(self, A):
        self.A, self.d = np.asarray(A), len(A)

    def field(self, points, weights, positions, t):
        relu = lambda S: np.maximum(S, 0.0, out=S)  # noqa: E731
        return tp.kernel_sums(points @ self.A.T, points, points * weights[:, None], relu)


class _BatchedReLU(_ReLU):
    """The same variant with a batched field of its own: the batch steps the members together."""

    calls = 0

    def field(self, points, weights, positions, t):
        return super().field(points, weights, positions, t)

    def field_batch(self, points, weights, positions, t):
        type(self).calls += 1
        return np.stack([self.field(p, w, None, t) for p, w in zip(points, weights)])


def test_readers_variants_with_and_without_a_batched_field():
    x, _ = _cloud(10, 5, 9, 2)
    A = -0.5 * np.eye(2)
    _assert_members_equal_loop(_ReLU(A), x, [0.0, 0.5])
    _assert_members_equal_loop(_BatchedReLU(A), x, [0.0, 0.5])
    assert _BatchedReLU.calls > 0  # its field_batch was used


def test_a_subclass_with_its_own_field_does_not_get_the_softmax_batch():
    class Doubled(tp.Softmax):
        def field(self, points, weights, positions, t):
            return 2.0 * super().field(points, weights, positions, t)

    A, V = _matrices(11, 2)
    x, _ = _cloud(11, 3, 8, 2)
    att = Doubled(A, V)
    w = np.full((3, 8), 1 / 8)
    assert np.array_equal(att.field_batch(x, w, None, 0.0)[1], att.field(x[1], w[1], None, 0.0))
    _assert_members_equal_loop(att, x, [0.0, 0.5])


@pytest.mark.filterwarnings("ignore:overflow encountered")  # the loop's own member 2
def test_one_member_blows_up_the_others_finish():
    # softmax with V = 40 I moves a member at 1e306 out of range within a few steps; the
    # others stay finite
    x, _ = _cloud(12, 4, 6, 2)
    x[2] *= 1e306
    att = tp.Softmax(np.zeros((2, 2)), 40.0 * np.eye(2))
    ens = _assert_members_equal_loop(att, x, [0.0, 0.5, 1.0])
    assert np.isnan(ens.blowup_times[[0, 1, 3]]).all()
    assert 0.0 < ens.blowup_times[2] <= 0.5
    assert ens.reached.tolist() == [3, 3, 1, 3]
    assert np.isnan(ens.points[2, 1:]).all()
    with pytest.raises(FloatingPointError, match=r"member 2: .* before t=0\.\d+"):
        tp.simulate_batch(att, x, [0.0, 0.5, 1.0], on_blowup="raise")


def test_non_finite_initial_points_are_refused():
    x, _ = _cloud(13, 3, 5, 2)
    x[0, 0] = np.inf
    with pytest.raises(ValueError, match="points"):
        tp.simulate_batch(tp.Softmax(np.eye(2), np.eye(2)), x, [0.0, 1.0])


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    yield
    tp.set_num_threads(None)


@pytest.mark.parametrize(
    "make",
    [
        lambda A, V: tp.Softmax(A, V),
        lambda A, V: tp.L2(A, A.T, V),
        lambda A, V: tp.Sigmoid(A, V, bias=-1.0),
        lambda A, V: tp.Unnormalised(0.2 * A, 0.2 * V),
    ],
)
def test_bitwise_equal_whatever_the_thread_count(two_threads, make):
    # 300 members of 32 tokens: 307 200 scores per field, above the engine's threading threshold
    A, V = _matrices(14, 3)
    x, _ = _cloud(14, 300, 32, 3)
    att = make(A, V)
    tp.set_num_threads(1)
    one = tp.simulate_batch(att, x, [0.0, 0.2])
    tp.set_num_threads(2)
    two = tp.simulate_batch(att, x, [0.0, 0.2])
    assert np.array_equal(one.points, two.points, equal_nan=True)  # NaN after a blow-up
    assert np.array_equal(one.blowup_times, two.blowup_times, equal_nan=True)


def test_bad_input_is_named():
    att = tp.Softmax(np.eye(2), np.eye(2))
    x, _ = _cloud(15, 3, 4, 2)
    with pytest.raises(ValueError, match=r"points .*3"):
        tp.simulate_batch(att, x[0], [0.0, 1.0])
    with pytest.raises(ValueError, match=r"weights must have shape \(4,\) or \(3, 4\)"):
        tp.simulate_batch(att, x, [0.0, 1.0], weights=np.ones((2, 4)) / 4)
    with pytest.raises(ValueError, match=r"member 1: .*weights"):
        w = np.full((3, 4), 0.25)
        w[1, 0] = -0.25
        tp.simulate_batch(att, x, [0.0, 1.0], weights=w)
    with pytest.raises(ValueError, match="same shape"):
        tp.simulate_batch(att, [tp.Empirical(x[0]), tp.Empirical(x[1, :3])], [0.0, 1.0])
    with pytest.raises(ValueError, match="causal"):
        tp.simulate_batch(tp.Softmax(np.eye(2), np.eye(2), causal=True), x, [0.0, 1.0])
    with pytest.raises(ValueError, match="h=0.3 must divide"):
        tp.simulate_batch(att, x, [0.0, 1.0], h=0.3)
    with pytest.raises(IndexError):
        tp.simulate_batch(att, x, [0.0, 1.0]).member(3)


def test_a_batched_field_of_the_wrong_shape_is_refused():
    class Bad(_ReLU):
        def field_batch(self, points, weights, positions, t):
            return points[:, :1]

    x, _ = _cloud(16, 3, 4, 2)
    with pytest.raises(ValueError, match=r"Bad.field_batch must return a float array of shape"):
        tp.simulate_batch(Bad(np.eye(2)), x, [0.0, 1.0])


def test_empirical_members_carry_their_weights():
    x, _ = _cloud(17, 2, 5, 2)
    w = np.array([0.4, 0.3, 0.1, 0.1, 0.1])
    mus = [tp.Empirical(x[0], w), tp.Empirical(x[1], w[::-1])]
    ens = tp.simulate_batch(tp.Softmax(np.eye(2), -np.eye(2)), mus, [0.0, 1.0])
    assert np.array_equal(ens.weights[1], w[::-1])
    alone = tp.simulate(tp.Softmax(np.eye(2), -np.eye(2)), mus[1], [0.0, 1.0])
    assert np.array_equal(ens.member(1).points, alone.points)
    with pytest.raises(ValueError, match="pass neither"):
        tp.simulate_batch(tp.Softmax(np.eye(2), -np.eye(2)), mus, [0.0, 1.0], weights=w)
