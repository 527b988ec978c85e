"""The attention protocol: contract tests every variant must pass, built-in or a reader's.

Each property is checked against an independent computation: the field of a permuted or
duplicated measure, the non-causal field (the last token of a causal measure sees everyone),
and, for the Gaussian closure, moments of the field computed by Gauss-Hermite quadrature of
the Gaussian (no sampling noise: in d = 2 with 50 nodes per axis the quadrature error of these
smooth integrands is at round-off level, measured 1e-15 .. 1e-13, so a tolerance of 1e-9 on the
closure is 4 orders above the error and far below any wrong coefficient).

The contributed variants are defined here through the public API only (``tp.Attention``,
``tp.kernel_sums``): ReLU attention, and softmax on cosine similarities (a subclass of Softmax
that changes the field and must therefore lose Softmax's closure and constants).
"""

import numpy as np
import pytest

import tpde_lib as tp
from tpde_lib.gaussian import gauss_hermite
from tpde_lib.stability import stability_bound

RNG = np.random.default_rng(12)
A2 = np.array([[-0.6, 0.3], [0.1, -0.4]])
V2 = np.array([[0.9, 0.2], [-0.1, 0.7]])


# ---- two variants written as a reader would, with the public API only ------------------------
class ReLU(tp.Attention):
    """Gamma_mu(x) = V int max(<Ax, y>, 0) y dmu(y) (masked: keys at positions <= the query's)."""

    def __init__(self, A, V, causal=False):
        self.A, self.V = np.asarray(A, float), np.asarray(V, float)
        self.d, self.causal = self.A.shape[0], causal

    def field(self, points, weights, positions, t):
        def relu(S):
            np.maximum(S, 0.0, out=S)

        s = tp.kernel_sums(points @ self.A.T, points, points * weights[:, None], relu, positions, positions)
        return s @ self.V.T


class CosineSoftmax(tp.Softmax):
    """Softmax of <A u(x), u(y)> with u(x) = x / |x|, averaging the points y themselves."""

    def field(self, points, weights, positions, t):
        u = points / np.linalg.norm(points, axis=1, keepdims=True)
        S_q = u @ self.A(t).T
        nd = tp.kernel_sums(
            S_q, u, np.hstack([points * weights[:, None], weights[:, None]]), "softmax", positions, positions
        )
        return (nd[:, :-1] / nd[:, -1:]) @ self.V(t).T


class ScaledLinear(tp.Attention):
    """A reader's variant with its own closure (2x linear attention): the batch loops over it."""

    def __init__(self, A, V):
        self.lin = tp.Linear(A, V)
        self.d = self.lin.d

    def field(self, points, weights, positions, t):
        return 2.0 * self.lin.field(points, weights, positions, t)

    def gaussian_rhs(self, mean, cov, t=0.0):
        dm, dc = self.lin.gaussian_rhs(mean, cov, t)
        return 2.0 * dm, 2.0 * dc


def _variants():
    """(id, attention, has_closure)."""
    heads = [tp.Softmax(A2, V2), tp.L2(np.eye(2), 0.5 * np.eye(2), -0.3 * np.eye(2))]
    return [
        ("softmax", tp.Softmax(A2, V2), True),
        ("softmax-causal", tp.Softmax(A2, V2, causal=True), False),
        ("multihead", tp.MultiHead(heads), True),
        ("multihead-causal", tp.MultiHead([tp.Softmax(A2, V2, causal=True)] * 2), False),
        ("L2", tp.L2(np.array([[1.0, 0.2], [0.0, 0.8]]), np.eye(2), V2, tau=2.0), True),
        ("L2-causal", tp.L2(np.eye(2), np.eye(2), V2, causal=True), False),
        ("sinkhorn", tp.Sinkhorn(A2, V2, eps=1.0, tol=1e-12), True),
        ("sigmoid", tp.Sigmoid(A2, V2, bias=-0.5), False),
        ("sigmoid-causal", tp.Sigmoid(A2, V2, causal=True), False),
        ("linear", tp.Linear(A2, V2), True),
        ("linear-causal", tp.Linear(A2, V2, causal=True), False),
        ("unnormalised", tp.Unnormalised(A2, V2), False),
        ("relu (contributed)", ReLU(A2, V2), False),
        ("relu-causal (contributed)", ReLU(A2, V2, causal=True), False),
        ("cosine softmax (subclass)", CosineSoftmax(A2, V2), False),
        ("scaled linear (contributed, own closure)", ScaledLinear(A2, V2), True),
    ]


VARIANTS = _variants()
IDS = [v[0] for v in VARIANTS]
#: Sinkhorn's field is exact only up to its marginal tolerance (1e-12 here)
TOL = {"sinkhorn": 1e-9}


def _measure(att, n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)) * 0.8
    w = rng.uniform(0.5, 1.5, n)
    w /= w.sum()
    s = rng.integers(0, 5, n) / 4.0 if att.causal else None
    if s is not None:
        s[0] = 0.0
    return tp.Empirical(X, w, s)


def _close(a, b, name):
    tol = TOL.get(name, 1e-12)
    return np.allclose(a, b, rtol=tol, atol=tol * max(1.0, np.abs(b).max()))


@pytest.mark.parametrize("name, att, _", VARIANTS, ids=IDS)
def test_field_is_finite_and_of_the_right_shape(name, att, _):
    mu = _measure(att)
    v = att.velocity(mu)
    assert v.shape == (mu.n, 2) and np.isfinite(v).all()


@pytest.mark.parametrize("name, att, _", VARIANTS, ids=IDS)
def test_field_is_permutation_equivariant(name, att, _):
    mu = _measure(att)
    perm = RNG.permutation(mu.n)
    s = None if mu.positions is None else mu.positions[perm]
    mu_p = tp.Empirical(mu.points[perm], mu.weights[perm], s)
    assert _close(att.velocity(mu_p), att.velocity(mu)[perm], name)


@pytest.mark.parametrize("name, att, _", VARIANTS, ids=IDS)
def test_duplicating_every_token_with_half_weights_changes_nothing(name, att, _):
    mu = _measure(att)
    s = None if mu.positions is None else np.tile(mu.positions, 2)
    mu2 = tp.Empirical(np.vstack([mu.points, mu.points]), np.tile(mu.weights, 2) / 2, s)
    v, v2 = att.velocity(mu), att.velocity(mu2)
    assert _close(v2[: mu.n], v, name) and _close(v2[mu.n :], v, name)


@pytest.mark.parametrize("name, att, _", VARIANTS, ids=IDS)
def test_tokens_of_zero_weight_are_not_keys(name, att, _):
    mu = _measure(att)
    extra = RNG.normal(size=(7, 2)) * 3.0
    s = None if mu.positions is None else np.concatenate([mu.positions, np.full(7, 0.5)])
    mu0 = tp.Empirical(np.vstack([mu.points, extra]), np.concatenate([mu.weights, np.zeros(7)]), s)
    v0 = att.velocity(mu0)
    assert _close(v0[: mu.n], att.velocity(mu), name)
    assert np.isfinite(v0[mu.n :]).all()  # zero-weight tokens are still moved by the field


CAUSAL = [v for v in VARIANTS if v[1].causal]


@pytest.mark.parametrize("name, att, _", CAUSAL, ids=[v[0] for v in CAUSAL])
def test_causal_last_token_sees_everyone_and_first_only_its_own_fibre(name, att, _):
    mu = _measure(att)
    s = mu.positions
    last, first = np.argmax(s), np.argmin(s)
    # the last position sees every key: same field as the non-causal measure without positions
    full = type(att).__new__(type(att))
    full.__dict__.update(att.__dict__)
    full.causal = False
    if isinstance(att, tp.MultiHead):
        full.heads = tuple(_uncausal(h) for h in att.heads)
    v = att.velocity(mu)
    assert _close(v[s == s.max()], full.velocity(tp.Empirical(mu.points, mu.weights))[s == s.max()], name), (
        last
    )
    # the first fibre sees only itself: moving every later token leaves its field unchanged
    moved = mu.points.copy()
    later = s > s.min()
    moved[later] += RNG.normal(size=(later.sum(), 2)) * 2.0
    v_moved = att.velocity(tp.Empirical(moved, mu.weights, s))
    assert _close(v_moved[~later], v[~later], name), first
    assert not np.allclose(v_moved[later], v[later])  # ... while later tokens do feel it


def _uncausal(h):
    c = type(h).__new__(type(h))
    c.__dict__.update(h.__dict__)
    c.causal = False
    return c


CLOSURES = [v for v in VARIANTS if v[2]]
NO_CLOSURE = [v for v in VARIANTS if not v[2]]


@pytest.mark.parametrize("name, att, _", CLOSURES, ids=[v[0] for v in CLOSURES])
def test_gaussian_closure_equals_the_moments_of_the_field(name, att, _):
    """alpha' = E[Gamma(x)], Sigma' = E[(x - alpha) Gamma^T + Gamma (x - alpha)^T] for x ~ mu."""
    g = tp.Gaussian([0.4, -0.2], [[0.8, 0.25], [0.25, 0.5]])
    nodes = 30 if name == "sinkhorn" else 50
    mu = gauss_hermite(g, nodes)
    field = att.velocity(mu)
    c = mu.points - g.mean
    dm_q = mu.weights @ field
    M = (c * mu.weights[:, None]).T @ field
    dc_q = M + M.T
    dm, dc = att.gaussian_rhs(g.mean, g.cov)
    tol = 1e-7 if name == "sinkhorn" else 1e-9  # Sinkhorn: 30 nodes, quadrature error ~1e-9
    assert np.allclose(dm, dm_q, atol=tol) and np.allclose(dc, dc_q, atol=tol)


@pytest.mark.parametrize("name, att, _", CLOSURES, ids=[v[0] for v in CLOSURES])
def test_batch_solver_agrees_with_the_single_solver(name, att, _):
    g = tp.Gaussian([0.1, 0.2], [[0.5, 0.1], [0.1, 0.4]])
    times = [0.0, 0.3, 0.6]
    one = tp.simulate_gaussian(att, g, times)
    batch = tp.simulate_gaussian_batch(att, np.stack([g.cov, 0.5 * g.cov]), times, mean0=g.mean)
    assert np.allclose(batch.cov[0], one.cov, atol=1e-7)
    assert np.allclose(batch.mean[0], one.mean, atol=1e-7)


@pytest.mark.parametrize("name, att, _", NO_CLOSURE, ids=[v[0] for v in NO_CLOSURE])
def test_variants_without_a_closure_raise_everywhere(name, att, _):
    g = tp.Gaussian([0.0, 0.0], np.eye(2))
    with pytest.raises(NotImplementedError):
        att.gaussian_rhs(g.mean, g.cov)
    with pytest.raises(NotImplementedError):
        tp.simulate_gaussian(att, g, [0.0, 1.0])
    with pytest.raises(NotImplementedError):
        tp.simulate_gaussian_batch(att, np.eye(2)[None], [0.0, 1.0])


def test_a_subclass_that_changes_the_field_inherits_no_formula():
    att = CosineSoftmax(A2, V2)
    for call, what in [
        (lambda: att.gaussian_rhs(np.zeros(2), np.eye(2)), "gaussian_rhs"),
        (lambda: att.batched_closure(), "batched_closure"),
        (lambda: stability_bound(att, 1.0, 1.0), "growth_rate"),
        (lambda: att.log_lipschitz(1.0), "log_lipschitz"),
        (lambda: att.mobility(), "mobility"),
    ]:
        with pytest.raises(NotImplementedError, match=f"CosineSoftmax.*{what}"):
            call()
    # ... and a multi-head layer with such a head has no closure either
    mh = tp.MultiHead([att, tp.Softmax(A2, V2)])
    with pytest.raises(NotImplementedError, match="CosineSoftmax"):
        tp.simulate_gaussian(mh, tp.Gaussian(np.zeros(2), np.eye(2)), [0.0, 1.0])


def test_a_subclass_that_keeps_the_field_keeps_the_closure():
    class Named(tp.Softmax):
        """Only a new name: same field, so Softmax's closure still holds."""

    a, b = Named(A2, V2), tp.Softmax(A2, V2)
    dm_a, dc_a = a.gaussian_rhs(np.ones(2), np.eye(2))
    dm_b, dc_b = b.gaussian_rhs(np.ones(2), np.eye(2))
    assert np.array_equal(dc_a, dc_b) and np.array_equal(dm_a, dm_b)


def test_a_minimal_variant_needs_only_d_and_field():
    class Zero(tp.Attention):
        def __init__(self):
            self.d = 3

        def field(self, points, weights, positions, t):
            return np.zeros_like(points)

    assert np.array_equal(Zero().velocity(np.ones((4, 3))), np.zeros((4, 3)))
    with pytest.raises(NotImplementedError, match="Zero"):
        Zero().gaussian_rhs(np.zeros(3), np.eye(3))


def test_a_field_of_the_wrong_shape_or_without_d_is_named():
    class Bad(tp.Attention):
        d = 2

        def field(self, points, weights, positions, t):
            return points[:, :1]

    with pytest.raises(
        ValueError, match=r"^Bad.field must return an array of shape \(5, 2\) at t=0, got shape \(5, 1\)$"
    ):
        Bad().velocity(np.ones((5, 2)))

    class NoD(tp.Attention):
        def field(self, points, weights, positions, t):
            return points

    with pytest.raises(TypeError, match="self.d"):
        NoD().velocity(np.ones((5, 2)))


def test_a_readers_exception_propagates_unchanged():
    class Boom(tp.Attention):
        d = 2

        def field(self, points, weights, positions, t):
            raise KeyError("my bug")

        def gaussian_rhs(self, mean, cov, t=0.0):
            raise ValueError("my shape bug")

    with pytest.raises(KeyError, match="my bug"):
        tp.simulate(Boom(), np.ones((3, 2)), [0.0, 0.1])
    with pytest.raises(ValueError, match="my shape bug"):
        tp.simulate_gaussian(Boom(), tp.Gaussian(np.zeros(2), np.eye(2)), [0.0, 1.0])
    with pytest.raises(ValueError, match="my shape bug"):
        tp.simulate_gaussian_batch(Boom(), np.eye(2)[None], [0.0, 1.0])


def test_multihead_accepts_any_attention_and_sums_the_fields():
    heads = [tp.Softmax(A2, V2), ReLU(A2, V2), tp.Linear(A2, 0.3 * V2)]
    mu = _measure(heads[0])
    v = tp.MultiHead(heads).velocity(mu)
    assert np.allclose(v, sum(h.velocity(mu) for h in heads), rtol=1e-13, atol=1e-13)


def test_stability_constants_of_multihead_are_the_sums_of_the_heads():
    heads = [tp.Softmax(A2, V2), tp.Sigmoid(A2, 0.5 * V2)]
    mh = tp.MultiHead(heads)
    assert mh.growth_rate() == pytest.approx(sum(h.growth_rate() for h in heads), rel=1e-14)
    lx, lmu = mh.log_lipschitz(1.5)
    parts = np.array([h.log_lipschitz(1.5) for h in heads])
    assert np.exp(lx) == pytest.approx(np.exp(parts[:, 0]).sum(), rel=1e-12)
    assert np.exp(lmu) == pytest.approx(np.exp(parts[:, 1]).sum(), rel=1e-12)


def test_mobility_methods_match_V_A_inverse():
    B = np.array([[2.0, 0.3], [0.3, 1.0]])
    P = np.array([[1.0, 0.2], [0.2, 0.5]])
    A, V = -B, P @ B  # V A^{-1} = -P
    assert np.allclose(tp.Softmax(A, V).mobility(), P, atol=1e-13)
    assert np.allclose(tp.Unnormalised(A, V).mobility(), P, atol=1e-13)
    assert np.allclose(tp.Sinkhorn(A, V).mobility(), -P, atol=1e-13)
    with pytest.raises(ValueError, match="symmetric"):
        tp.Softmax(A2, V2).mobility()


def test_no_formula_is_inherited_through_a_mixin_a_patch_or_the_instance():
    """The rule is checked at call time: wherever the new field comes from, no parent formula."""

    class ZeroField:
        def field(self, points, weights, positions, t):
            return 0.0 * points

    class Mixed(ZeroField, tp.Softmax):
        pass

    class Patched(tp.Softmax):
        pass

    Patched.field = ZeroField.field
    on_instance = tp.Softmax(A2, V2)
    on_instance.field = lambda points, weights, positions, t: 0.0 * points
    g = tp.Gaussian([0.3, -0.2], [[1.0, 0.3], [0.3, 0.5]])
    for att, where in [
        (Mixed(A2, V2), "in ZeroField"),
        (Patched(A2, V2), "in Patched"),
        (on_instance, "on the instance"),
    ]:
        assert np.array_equal(att.velocity(np.ones((3, 2))), np.zeros((3, 2)))
        with pytest.raises(NotImplementedError, match=where):
            tp.simulate_gaussian(att, g, [0.0, 1.0])
        with pytest.raises(NotImplementedError, match=where):
            stability_bound(att, 1.0, 1.0)
        with pytest.raises(NotImplementedError, match=where):
            att.mobility()


def test_a_subclass_may_add_a_closure_to_an_inherited_field():
    class Centred(ReLU):
        def gaussian_rhs(self, mean, cov, t=0.0):
            mean, cov = self.check_gaussian(mean, cov, t)
            M = 0.5 * self.V @ cov @ self.A
            return np.zeros_like(mean), M @ cov + cov @ M.T

    traj = tp.simulate_gaussian(Centred(A2, V2), tp.Gaussian(np.zeros(2), np.eye(2)), [0, 0.5])
    assert traj.status == "ok" and np.isfinite(traj.cov).all()


def test_field_outputs_and_flags_of_a_readers_variant_are_checked():
    class Complex(tp.Attention):
        d = 2

        def field(self, points, weights, positions, t):
            return points * (1 + 1j)

    with pytest.raises(TypeError, match="dtype complex"):
        Complex().velocity(np.ones((3, 2)))

    class BadFlag(ReLU):
        pass

    att = BadFlag(A2, V2)
    att.causal = "False"
    with pytest.raises(TypeError, match="causal must be True or False"):
        att.velocity(np.ones((3, 2)))
    with pytest.raises(ValueError, match="t contains NaN"):
        tp.Softmax(A2, V2).gaussian_rhs(np.zeros(2), np.eye(2), t=np.nan)
