"""Cases of the older input batteries that issue 41 lists (each raised a cryptic error or
returned a wrong value): each now raises a ValueError naming the argument."""

import numpy as np
import pytest

import tpde_lib as tp
from tpde_lib.energy import symmetry_defect


@pytest.mark.parametrize("which", ["queries", "keys", "values"])
def test_kernel_sums_refuses_nan_inputs(which):
    """NaN keys returned NaN sums silently."""
    args = {"queries": np.ones((3, 2)), "keys": np.ones((4, 2)), "values": np.ones((4, 1))}
    args[which] = args[which].copy()
    args[which][1, 0] = np.nan
    with pytest.raises(ValueError, match=rf"{which} contains NaN.*\(1, 0\)"):
        tp.kernel_sums(args["queries"], args["keys"], args["values"], "softmax")


def test_bures_wasserstein_geodesic_refuses_times_outside_0_1():
    g0, g1 = tp.Gaussian([0.0, 0.0], np.eye(2)), tp.Gaussian([1.0, 0.0], 2 * np.eye(2))
    with pytest.raises(ValueError, match=r"s must lie in \[0, 1\].*2\.0"):
        tp.transport.bures_wasserstein_geodesic(g0, g1, [0.0, 2.0])
    with pytest.raises(ValueError, match="s must lie"):
        tp.transport.bures_wasserstein_geodesic(g0, g1, [-1e-9])
    means, _ = tp.transport.bures_wasserstein_geodesic(g0, g1, [0.0, 1.0])
    assert np.array_equal(means, [[0.0, 0.0], [1.0, 0.0]])


def test_symmetry_defect_names_a_singular_mobility():
    """numpy's bare LinAlgError("Singular matrix") before."""
    with pytest.raises(ValueError, match="mobility_matrix must be invertible"):
        symmetry_defect(np.eye(4), np.full(2, 0.5), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="mobility_matrix must be invertible"):
        symmetry_defect(np.eye(4), np.full(2, 0.5), [[1.0, 1.0], [1.0, 1.0]])
    assert symmetry_defect(np.eye(4), np.full(2, 0.5), 2 * np.eye(2)) == 0.0


def test_a_gaussian_with_a_negative_variance_is_refused():
    """-1e-9 passed the eigenvalue test (which allows -1e-8 of round-off); a variance's own
    round-off is about 1e-16 of the largest entry."""
    with pytest.raises(ValueError, match=r"cov must have non-negative variances.*cov\[1, 1\] = -1e-09"):
        tp.Gaussian([0.0, 0.0], [[1.0, 0.0], [0.0, -1e-9]])
    with pytest.raises(ValueError, match="non-negative variances"):
        tp.Gaussian([0.0, 0.0], [[1e-300, 0.0], [0.0, -1e-309]])
    # round-off of a computed rank-one covariance is still accepted
    v = np.array([0.6, 0.8])
    assert tp.Gaussian([0.0, 0.0], np.outer(v, v) - 1e-17 * np.eye(2)).d == 2
