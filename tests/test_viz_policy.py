"""The figure helpers of tp.viz apply the input policy: bad input raises ValueError/TypeError
naming the argument, instead of drawing nothing, drawing something wrong or failing inside
matplotlib or numpy."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tpde_lib as tp  # noqa: E402


@pytest.fixture(scope="module")
def traj():
    x0 = np.random.default_rng(0).standard_normal((5, 2))
    return tp.simulate(tp.Softmax(np.eye(2), np.eye(2)), tp.Empirical(x0), [0, 0.5, 1.0], method="rk4", h=0.1)


@pytest.fixture
def fig():
    f = plt.figure()
    yield f
    plt.close(f)


CASES = [
    ("points", TypeError, lambda f, t: tp.viz.plot_cloud(f.add_subplot(111), np.ones((3, 2)) * 1j)),
    ("points", ValueError, lambda f, t: tp.viz.plot_cloud(f.add_subplot(111), np.full((3, 2), np.nan))),
    ("points", ValueError, lambda f, t: tp.viz.plot_cloud(f.add_subplot(111), np.ones((3, 1)))),
    ("weights", ValueError, lambda f, t: tp.viz.plot_cloud(f.add_subplot(111), np.ones((3, 2)), [-1, 1, 1])),
    ("weights", ValueError, lambda f, t: tp.viz.plot_cloud(f.add_subplot(111), np.ones((3, 2)), [1, 1])),
    (
        "base_size",
        TypeError,
        lambda f, t: tp.viz.plot_cloud(f.add_subplot(111), np.ones((3, 2)), base_size="a"),
    ),
    ("traj", TypeError, lambda f, t: tp.viz.plot_paths(f.add_subplot(111), "x")),
    ("alpha", ValueError, lambda f, t: tp.viz.plot_paths(f.add_subplot(111), t, alpha=2.0)),
    ("pad", ValueError, lambda f, t: tp.viz.common_limits([t], pad=np.nan)),
    ("quantile", ValueError, lambda f, t: tp.viz.common_limits([t], quantile=2)),
    ("trajs", ValueError, lambda f, t: tp.viz.common_limits([])),
    ("ncols", ValueError, lambda f, t: tp.viz.cloud_panels(f, [t], ncols=0)),
    ("titles", ValueError, lambda f, t: tp.viz.cloud_panels(f, [t], titles=["a", "b"])),
    ("interval", ValueError, lambda f, t: tp.viz.animate_clouds([t], interval=-1)),
    ("scale", ValueError, lambda f, t: tp.viz.draw_cone(f.add_subplot(111, projection="3d"), -1)),
    ("rows", TypeError, lambda f, t: tp.viz.plot_rank_histograms(f, {("a", 3): [1]}, rows="ab")),
    ("ranks", ValueError, lambda f, t: tp.viz.plot_rank_histograms(f, {("a", 3): [1]}, rows=["b"])),
    ("n", ValueError, lambda f, t: tp.viz.subplots(0)),
    ("width", ValueError, lambda f, t: tp.viz.subplots(2, width=12.0)),
]


@pytest.mark.parametrize("name, error, call", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_raises_naming_the_argument(fig, traj, name, error, call):
    with pytest.raises(error, match=name):
        call(fig, traj)
    plt.close("all")


def test_good_input_still_draws(fig, traj):
    axes = tp.viz.cloud_panels(fig, {"softmax": traj}, titles=["softmax"], ncols=1)
    assert len(axes) == 1 and axes[0].get_title() == "softmax"
    lo, hi = tp.viz.common_limits([traj], pad=0.0, quantile=1.0)
    assert np.all(hi > lo)
