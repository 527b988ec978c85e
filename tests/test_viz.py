"""The figure helpers (tpde_lib.viz): one ellipse plotter, checked inputs, no silent wrapping."""

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tpde_lib.particles import Trajectory
from tpde_lib.viz.clouds import cloud_panels, common_limits, plot_paths
from tpde_lib.viz.ellipses import draw_ellipses, ellipse_points


def new_axes():
    fig = Figure()
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def test_ellipse_points_lie_on_the_quadratic_form_level_set():
    rng = np.random.default_rng(0)
    B = rng.standard_normal((3, 3))
    S = B @ B.T + 0.1 * np.eye(3)
    m = rng.standard_normal(3)
    pts = ellipse_points(m, S, n_std=1.5, dims=(2, 0))
    block = S[np.ix_([2, 0], [2, 0])]
    r = pts - m[[2, 0]]
    q = np.einsum("ni,ij,nj->n", r, np.linalg.inv(block), r)
    assert np.allclose(q, 1.5**2, rtol=1e-12)  # (x-a)^T S^-1 (x-a) = n_std^2


def test_draw_ellipses_subsamples_normalises_and_centres():
    covs = np.array([np.diag([1.0 + k, 1.0]) for k in range(10)])
    means = np.arange(20.0).reshape(10, 2)
    _, ax = new_axes()
    lines = draw_ellipses(ax, covs, means, n_std=1.0, n_max=4, normalise=True)
    assert len(lines) == 4
    for line, k in zip(lines, [0, 3, 6, 9]):  # evenly spaced, ends included
        xy = line.get_xydata() - means[k]
        S = covs[k] / np.trace(covs[k])
        q = np.einsum("ni,ij,nj->n", xy, np.linalg.inv(S), xy)
        assert np.allclose(q, 1.0, rtol=1e-12)
    assert len(draw_ellipses(ax, covs)) == 10  # default: every one, at the origin


@pytest.mark.parametrize(
    "covs, match",
    [
        (np.array([[[1.0, 0.0], [0.0, -0.5]]]), "covs must be positive semi-definite"),
        (np.array([[[1.0, 0.5], [0.0, 1.0]]]), "covs must be symmetric"),
        (np.array([[[1.0, np.nan], [np.nan, 1.0]]]), "covs must be finite"),
        (np.eye(2), r"covs must have shape \(T, d, d\)"),
    ],
)
def test_draw_ellipses_refuses_what_is_not_a_covariance(covs, match):
    _, ax = new_axes()
    with pytest.raises(ValueError, match=match):
        draw_ellipses(ax, covs)
    assert not ax.lines  # nothing drawn before the error


def test_ellipse_checks_name_their_argument():
    with pytest.raises(ValueError, match="cov must be positive semi-definite"):
        ellipse_points([0, 0], [[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(ValueError, match="mean must"):
        ellipse_points([0, 0, 0], np.eye(2))
    with pytest.raises(ValueError, match="dims"):
        ellipse_points([0, 0], np.eye(2), dims=(0, 2))
    _, ax = new_axes()
    with pytest.raises(ValueError, match="means must"):
        draw_ellipses(ax, np.array([np.eye(2)] * 3), means=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="positive trace"):
        draw_ellipses(ax, np.zeros((1, 2, 2)), normalise=True)


def trajectory(T=4, n=5):
    pts = np.random.default_rng(1).standard_normal((T, n, 2))
    return Trajectory(
        times=np.arange(T, dtype=float), points=pts, weights=np.full(n, 1 / n), positions=np.zeros(n)
    )


@pytest.mark.parametrize("k", [4, -5, 100])
def test_time_indices_out_of_range_raise_instead_of_wrapping(k):
    tr = trajectory()
    fig, ax = new_axes()
    # the one index check (tpde_lib._checks.as_index): IndexError giving the range of 4 times
    out = rf"={k} is out of range: there are 4 times, so \w+ must lie in \[-4, 3\]$"
    with pytest.raises(IndexError, match="^k" + out):
        cloud_panels(fig, [tr], k=k)
    with pytest.raises(IndexError, match="^upto" + out):
        plot_paths(ax, tr, upto=k)
    with pytest.raises(IndexError, match="^k" + out):
        common_limits([tr], k=k)


def test_negative_indices_count_from_the_end():
    tr = trajectory()
    fig, _ = new_axes()
    (ax,) = cloud_panels(fig, [tr], k=-1, paths=False)
    assert np.allclose(ax.collections[0].get_offsets(), tr.points[-1])


def test_animation_html_needs_nothing_from_another_host():
    from matplotlib.animation import FuncAnimation
    from matplotlib.figure import Figure

    from tpde_lib.viz import animation_html

    fig = Figure(figsize=(1, 1), dpi=20)
    ax = fig.add_subplot()
    (line,) = ax.plot([0, 1], [0, 1])
    anim = FuncAnimation(fig, lambda k: line.set_ydata([0, k]), frames=2)
    plain = anim.to_jshtml()
    assert "font-awesome" in plain and 'class="fa fa-' in plain  # matplotlib's player as it is
    html = animation_html(anim)
    assert "font-awesome" not in html and 'class="fa' not in html
    assert "http://" not in html and "https://" not in html
    assert html.count("<button") == plain.count("<button") and "\u25b6" in html


def test_animation_html_refuses_an_icon_it_does_not_know(monkeypatch):
    from matplotlib.animation import FuncAnimation
    from matplotlib.figure import Figure

    from tpde_lib.viz import _animation

    fig = Figure(figsize=(1, 1), dpi=20)
    (line,) = fig.add_subplot().plot([0, 1], [0, 1])
    anim = FuncAnimation(fig, lambda k: line.set_ydata([0, k]), frames=2)
    monkeypatch.delitem(_animation._ICONS, "pause")
    with pytest.raises(ValueError, match="unknown player icon 'pause'"):
        _animation.animation_html(anim)


def _one_trajectory():
    pts = np.random.default_rng(0).standard_normal((2, 5, 2))
    return Trajectory(np.array([0.0, 1.0]), pts, np.full(5, 0.2))


@pytest.mark.parametrize(
    "limits, match",
    [("bogus", "'shared', 'own'"), ((0, 1), "two \\(x, y\\) corners"), (([0, 0], [1, -1]), "lo < hi")],
    ids=["string", "scalars", "inverted"],
)
def test_cloud_panels_refuses_bad_limits_by_name(limits, match):
    with pytest.raises(ValueError, match=f"limits must.*{match}"):
        cloud_panels(Figure(), {"a": _one_trajectory()}, limits=limits)
    assert len(cloud_panels(Figure(), {"a": _one_trajectory()}, limits=([-3, -3], [3, 3]))) == 1


def test_subplots_checks_its_sizes_and_leaves_no_figure_open_on_error():
    import matplotlib.pyplot as plt

    import tpde_lib as tp

    before = set(plt.get_fignums())
    with pytest.raises((TypeError, AttributeError)):  # (matplotlib's error, whichever it is)
        tp.viz.subplots(2, bogus=1)
    assert set(plt.get_fignums()) == before
    with pytest.raises(TypeError, match="panel_height"):
        tp.viz.subplots(2, panel_height="2")
    with pytest.raises(TypeError, match="width"):
        tp.viz.subplots(2, width=True)
    assert set(plt.get_fignums()) == before


def test_plot_rank_histograms_refuses_ranks_it_would_drop():
    import tpde_lib as tp

    with pytest.raises(ValueError, match=r"ranks\[\('a', 3\)\] must hold integers in 0..3"):
        tp.viz.plot_rank_histograms(Figure(), {("a", 3): [0, 1, 7]}, ["a"], dims=[3])
    with pytest.raises(ValueError, match="integers"):
        tp.viz.plot_rank_histograms(Figure(), {("a", 3): [0.5]}, ["a"], dims=[3])
    with pytest.raises(ValueError, match="0..3"):
        tp.viz.plot_rank_histograms(Figure(), {("a", 3): [-1]}, ["a"], dims=[3])
    axes = tp.viz.plot_rank_histograms(Figure(), {("a", 3): [0, 3, 3]}, ["a"], dims=[3])
    assert sum(p.get_height() for p in axes[0, 0].patches) == 3
