"""The library's machinery that chapter 1 used to check in its pages, checked here instead.

The chapters check mathematical statements; these checks are of the engine behind them (the
kernel engine's log-sum-exp shift, the multi-head fusion of softmax heads). Each compares the
library with the formula written in numpy.
"""

import numpy as np

import tpde_lib as tp


def _softmax_formula(P, A, V):
    S = P @ A.T @ P.T
    E = np.exp(S - S.max(axis=1, keepdims=True))
    return E @ P @ V.T / E.sum(axis=1, keepdims=True)


def test_softmax_field_with_scores_beyond_exp_overflow_is_the_shifted_formula():
    """200 tokens (n m = 40000 query-key pairs, past the engine's 32768 exact-maximum limit, so
    the engine decides the shift) with scores in the thousands, far beyond exp's overflow at
    709: a wrong decision to skip the shift gives inf or NaN."""
    rng = np.random.default_rng(9)
    X = 30 * rng.uniform(0.3, 1.0, (200, 1)) * rng.standard_normal((200, 2))
    V = np.array([[0.0, -1.0], [1.0, 0.0]])
    field = tp.Softmax(np.eye(2), V).velocity(tp.Empirical(X))
    want = _softmax_formula(X, np.eye(2), V)
    assert np.abs(X @ X.T).max() > 709
    assert np.isfinite(field).all()
    assert np.abs(field - want).max() / np.abs(want).max() < 1e-12


def test_multihead_with_a_subclass_head_equals_the_sum_of_its_heads():
    """A multi-head layer fuses its plain softmax heads into one engine call; a subclass of
    Softmax with its own field (here doubled) must keep that field, not be fused."""

    class DoubledSoftmax(tp.Softmax):
        def field(self, points, weights, positions, t):
            return 2.0 * super().field(points, weights, positions, t)

    rng = np.random.default_rng(0)
    A = rng.standard_normal((2, 2)) / 2
    V = np.array([[0.0, -1.0], [1.0, 0.0]])
    heads = tp.MultiHead([tp.Softmax(A, V), DoubledSoftmax(A.T, V), tp.Softmax(-A, 0.5 * V)])
    for P in (rng.standard_normal((300, 2)), rng.standard_normal((60, 2))):
        want = _softmax_formula(P, A, V) + 2 * _softmax_formula(P, A.T, V) + _softmax_formula(P, -A, 0.5 * V)
        assert np.abs(heads.velocity(tp.Empirical(P)) - want).max() < 1e-12
