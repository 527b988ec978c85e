"""The coupled distance of the masked mean-field limit (tpde_lib.transport)."""

import numpy as np
import pytest

from tpde_lib.masked import sink_positions, with_sink
from tpde_lib.measures import Empirical
from tpde_lib.transport import conditional_wasserstein, coupled_wasserstein, position_quantile_pieces


def line_tokens(n, a):
    """n tokens at k/n on the line (s, 0), with an atom of mass a at the origin if a > 0."""
    s, w = sink_positions(n + 1 if a > 0 else n, a, n_sink=1 if a > 0 else None)
    return Empirical(np.c_[s, np.zeros_like(s)], weights=w, positions=s)


@pytest.mark.parametrize("a", [0.0, 0.25])
@pytest.mark.parametrize("p", [1.0, 2.0, 3.5])
def test_grid_against_refined_grid_has_its_closed_form(a, p):
    # every block of k fine tokens faces one coarse token at the block's right end
    n, k = 9, 4
    want = ((1 - a) * np.mean((np.arange(k) / (k * n)) ** p)) ** (1 / p)
    got = coupled_wasserstein(line_tokens(n, a), line_tokens(k * n, a), p)
    assert got == pytest.approx(want, rel=1e-12)


def test_supremum_is_the_largest_gap():
    assert coupled_wasserstein(line_tokens(5, 0.0), line_tokens(20, 0.0), np.inf) == pytest.approx(
        3 / 20, rel=1e-12
    )


def test_equal_marginals_give_the_conditional_distance():
    rng = np.random.default_rng(0)
    mu = with_sink(rng.standard_normal((30, 2)), 0.2, n_sink=1)
    nu = mu.with_points(mu.points + rng.standard_normal((30, 2)))
    for p in (1.0, 2.0, 4.0):
        assert coupled_wasserstein(mu, nu, p) == pytest.approx(conditional_wasserstein(mu, nu, p), rel=1e-12)


def test_symmetric_and_zero_on_itself():
    mu, nu = line_tokens(7, 0.1), line_tokens(11, 0.1)
    assert coupled_wasserstein(mu, nu) == pytest.approx(coupled_wasserstein(nu, mu), rel=1e-14)
    assert coupled_wasserstein(mu, mu) == 0.0


def test_unsorted_rows_do_not_matter():
    mu, nu = line_tokens(8, 0.2), line_tokens(13, 0.0)
    perm = np.random.default_rng(1).permutation(mu.n)
    shuffled = Empirical(mu.points[perm], weights=mu.weights[perm], positions=mu.positions[perm])
    assert coupled_wasserstein(shuffled, nu) == pytest.approx(coupled_wasserstein(mu, nu), rel=1e-14)


def test_pieces_carry_the_masses():
    mass, i, j = position_quantile_pieces(np.array([0.5, 0.5]), np.array([0.2, 0.3, 0.5]))
    assert mass.sum() == pytest.approx(1.0)
    assert np.allclose(mass, [0.2, 0.3, 0.5]) and list(i) == [0, 0, 1] and list(j) == [0, 1, 2]


def test_bad_input_is_named():
    mu = line_tokens(4, 0.0)
    with pytest.raises(TypeError, match="mu"):
        coupled_wasserstein(mu.points, mu)
    with pytest.raises(ValueError, match="positions"):
        coupled_wasserstein(Empirical(mu.points), mu)
    with pytest.raises(ValueError, match="one token per position"):
        coupled_wasserstein(with_sink(np.zeros((5, 2)), 0.4, n_sink=2), mu)
    with pytest.raises(ValueError, match="p must be"):
        coupled_wasserstein(mu, mu, 0.5)
    with pytest.raises(ValueError, match="dimension"):
        coupled_wasserstein(mu, Empirical(np.zeros((4, 3)), positions=mu.positions))
