"""The batched Dormand-Prince integrator against scipy's solve_ivp, member by member."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from tpde_lib.integrate import solve_batch


def _rhs(t, y, idx):
    """A batch of different nonlinear systems: y' = -k_b y + sin(t) y^2 (k_b = 1 + b)."""
    k = 1.0 + np.asarray(idx, dtype=float)
    return -k[:, None] * y + np.sin(t)[:, None] * y**2


def test_every_member_matches_solve_ivp_at_the_output_times():
    rng = np.random.default_rng(3)
    y0 = rng.uniform(0.1, 0.9, size=(5, 3))
    times = np.array([0.0, 0.3, 1.0, 2.5, 4.0])
    sol = solve_batch(_rhs, y0, times, rtol=1e-10, atol=1e-12)
    for b in range(5):
        ref = solve_ivp(
            lambda t, y, b=b: _rhs(np.array([t]), y[None], [b])[0],
            (0.0, 4.0),
            y0[b],
            t_eval=times,
            rtol=1e-12,
            atol=1e-14,
            method="DOP853",
        )
        # both are accurate to ~1e-10 relative: the difference is the looser one's error
        assert np.allclose(sol.y[b], ref.y.T, rtol=1e-8, atol=1e-10)
    assert sol.valid.all() and (sol.status == "finished").all()


def test_the_error_shrinks_at_fifth_order_with_the_tolerance():
    y0 = np.array([[0.5]])
    exact = 0.5 * np.exp(-4.0)
    errs = []
    for rtol in (1e-5, 1e-8):
        sol = solve_batch(lambda t, y, i: -y, y0, np.array([0.0, 4.0]), rtol=rtol, atol=1e-16)
        errs.append(abs(sol.y[0, -1, 0] - exact) / exact)
    assert errs[1] < errs[0] / 50  # 1000x tighter tolerance: at least 50x smaller error


def test_stop_freezes_a_member_and_marks_later_times_invalid():
    y0 = np.array([[1.0], [1.0]])
    times = np.linspace(0.0, 1.0, 11)

    def stop(idx, t, y, dy):
        return (idx == 0) & (y[:, 0] > 1.5)  # member 0 stops when it exceeds 1.5

    sol = solve_batch(lambda t, y, i: y, y0, times, stop=stop)
    assert sol.status.tolist() == ["stopped", "finished"]
    first_bad = np.argmax(~sol.valid[0])
    assert np.exp(times[first_bad - 1]) <= 1.5 + 1e-9 and not sol.valid[0, -1]
    assert np.allclose(sol.y[1, :, 0], np.exp(times), rtol=1e-8)


def test_a_member_that_spends_its_step_budget_ends_alone_and_the_others_finish():
    # member 1 is stiff (k = 1e4: explicit steps limited to ~3e-4); the old cap on batched
    # steps raised RuntimeError for the whole batch here
    def f(t, y, idx):
        return -np.where(idx == 1, 1e4, 1.0)[:, None] * y

    sol = solve_batch(f, np.ones((3, 1)), np.array([0.0, 0.5, 1.0]), max_steps=300)
    assert sol.status.tolist() == ["finished", "max_steps", "finished"]
    assert sol.n_steps[1] == 300 and sol.n_steps[0] < 300
    assert np.allclose(sol.y[[0, 2], -1, 0], np.exp(-1.0), rtol=1e-8)
    assert sol.valid[[0, 2]].all() and not sol.valid[1, 1:].any()
    assert 0 < sol.t_end[1] < 0.5 and sol.t_end[0] == 1.0
    # frozen at the last accepted state, which is finite and on the exact solution
    assert np.isfinite(sol.y).all()
    assert np.allclose(sol.y[1, 1:, 0], np.exp(-1e4 * sol.t_end[1]), rtol=1e-6, atol=1e-12)
    assert sol.stopped.tolist() == [False, True, False]


def test_a_member_whose_step_underflows_ends_with_that_status_and_the_others_finish():
    # member 0's derivative is NaN from t = 0.3 on: every step past it is rejected until the
    # step size underflows (the old solver raised RuntimeError for the whole batch)
    def f(t, y, idx):
        out = -y.copy()
        out[(idx == 0) & (t > 0.3)] = np.nan
        return out

    sol = solve_batch(f, np.ones((2, 1)), np.linspace(0.0, 1.0, 6))
    assert sol.status.tolist() == ["step_underflow", "finished"]
    assert 0.3 - 1e-9 < sol.t_end[0] <= 0.3 and sol.valid[0].tolist() == [True, True] + [False] * 4
    assert np.isfinite(sol.y).all()
    assert np.allclose(sol.y[1, :, 0], np.exp(-np.linspace(0.0, 1.0, 6)), rtol=1e-8)


def _blas_threads():
    from threadpoolctl import threadpool_info

    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def test_blas_runs_one_thread_inside_and_is_restored_after_return_and_exceptions():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    seen = []

    def f(t, y, idx):
        seen.append(_blas_threads())
        return -y

    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads()
        if max(before, default=1) < 2:
            pytest.skip("this BLAS runs one thread only")
        solve_batch(f, np.ones((4, 2)), np.array([0.0, 1.0]))
        assert all(s == [1] * len(before) for s in seen)
        assert _blas_threads() == before

        def boom(t, y, idx):
            raise KeyError("reader's error")

        with pytest.raises(KeyError, match="reader's error"):
            solve_batch(boom, np.ones((4, 2)), np.array([0.0, 1.0]))
        assert _blas_threads() == before


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (lambda y: y[:, 0], ValueError, r"^f must return an array of shape \(2, 3\), got shape \(2,\)$"),
        (lambda y: 1.0, ValueError, r"^f must return an array of shape \(2, 3\), got shape \(\)$"),
        (lambda y: y + 0j, TypeError, r"^f must return .* of shape \(2, 3\), got dtype complex128$"),
    ],
)
def test_f_results_of_the_wrong_shape_or_kind_raise_instead_of_broadcasting(bad, error, match):
    with pytest.raises(error, match=match):
        solve_batch(lambda t, y, idx: bad(y), np.ones((2, 3)), np.array([0.0, 1.0]))


def test_a_stop_mask_of_the_wrong_shape_raises_instead_of_broadcasting():
    # the old solver broadcast a scalar True: every member stopped at its first step
    with pytest.raises(TypeError, match=r"stop must return a boolean mask of shape \(2,\)"):
        solve_batch(lambda t, y, i: -y, np.ones((2, 1)), [0.0, 1.0], stop=lambda idx, t, y, dy: True)


def test_bad_arguments_name_the_argument():
    f = lambda t, y, i: -y  # noqa: E731
    with pytest.raises(TypeError, match="max_steps"):
        solve_batch(f, np.ones((1, 1)), [0.0, 1.0], max_steps=1.5)
    with pytest.raises(ValueError, match="y0"):
        solve_batch(f, np.full((1, 1), np.nan), [0.0, 1.0])
    with pytest.raises(ValueError, match="rtol"):
        solve_batch(f, np.ones((1, 1)), [0.0, 1.0], rtol=np.nan)
    with pytest.raises(TypeError, match="f must be a callable"):
        solve_batch(None, np.ones((1, 1)), [0.0, 1.0])


@pytest.mark.parametrize(
    "f, stop, name",
    [
        (lambda t, y: -y, None, "f"),
        (lambda t, y, idx, extra: -y, None, "f"),
        (lambda t, y, idx: -y, lambda idx, t: None, "stop"),
    ],
    ids=["f-two-args", "f-four-args", "stop-two-args"],
)
def test_callables_of_the_wrong_signature_are_a_clear_type_error(f, stop, name):
    with pytest.raises(TypeError, match=rf"{name} must be a callable {name}\("):
        solve_batch(f, np.ones((2, 2)), [0.0, 1.0], stop=stop)
