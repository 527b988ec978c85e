"""The batched Dormand-Prince integrator against scipy's solve_ivp, member by member."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from tpde_lib.integrate import solve_batch


def _rhs(t, y, idx):
    """A batch of different nonlinear systems: y' = -k_b y + sin(t) y^2 (k_b = 1 + b)."""
    k = 1.0 + np.asarray(idx, dtype=float)
    return -k[:, None] * y + np.sin(t)[:, None] * y ** 2


def test_every_member_matches_solve_ivp_at_the_output_times():
    rng = np.random.default_rng(3)
    y0 = rng.uniform(0.1, 0.9, size=(5, 3))
    times = np.array([0.0, 0.3, 1.0, 2.5, 4.0])
    sol = solve_batch(_rhs, y0, times, rtol=1e-10, atol=1e-12)
    for b in range(5):
        ref = solve_ivp(lambda t, y, b=b: _rhs(np.array([t]), y[None], [b])[0], (0.0, 4.0),
                        y0[b], t_eval=times, rtol=1e-12, atol=1e-14, method="DOP853")
        # both are accurate to ~1e-10 relative: the difference is the looser one's error
        assert np.allclose(sol.y[b], ref.y.T, rtol=1e-8, atol=1e-10)
    assert sol.valid.all() and not sol.stopped.any()


def test_the_error_shrinks_at_fifth_order_with_the_tolerance():
    y0 = np.array([[0.5]])
    exact = 0.5 * np.exp(-4.0)
    errs = []
    for rtol in (1e-5, 1e-8):
        sol = solve_batch(lambda t, y, i: -y, y0, np.array([0.0, 4.0]), rtol=rtol, atol=1e-16)
        errs.append(abs(sol.y[0, -1, 0] - exact) / exact)
    assert errs[1] < errs[0] / 50   # 1000x tighter tolerance: at least 50x smaller error


def test_stop_freezes_a_member_and_marks_later_times_invalid():
    y0 = np.array([[1.0], [1.0]])
    times = np.linspace(0.0, 1.0, 11)

    def stop(idx, t, y, dy):
        return (idx == 0) & (y[:, 0] > 1.5)       # member 0 stops when it exceeds 1.5

    sol = solve_batch(lambda t, y, i: y, y0, times, stop=stop)
    assert sol.stopped.tolist() == [True, False]
    first_bad = np.argmax(~sol.valid[0])
    assert np.exp(times[first_bad - 1]) <= 1.5 + 1e-9 and not sol.valid[0, -1]
    assert np.allclose(sol.y[1, :, 0], np.exp(times), rtol=1e-8)


def test_the_step_cap_raises_with_advice():
    with pytest.raises(RuntimeError, match="max_steps"):
        solve_batch(lambda t, y, i: np.cos(50 * t)[:, None] * np.ones_like(y), np.zeros((1, 1)),
                    np.array([0.0, 100.0]), max_steps=10)
