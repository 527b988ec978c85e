"""Tests of tpde_lib.official: the authors' settings and draws, their scheme, the histogram
protocol and its committed cache."""

import dataclasses

import numpy as np
import pytest

from tpde_lib import official as of
from tpde_lib import psd_cone as pc
from tpde_lib.clustering import predicted_limit_rank
from tpde_lib.gaussian import covariance_rhs


def test_bad_inputs_raise_naming_the_argument():
    with pytest.raises(ValueError, match="variant"):
        of.paper_parameters(np.eye(2), np.eye(2), np.eye(2), "cosine")
    with pytest.raises(ValueError, match="name"):
        of.paper_experiment("E7")
    with pytest.raises(ValueError, match="H must"):
        of.paper_attention(np.eye(3), np.eye(3), np.eye(3), "multihead", H=2)
    with pytest.raises(TypeError, match="setting"):
        of.paper_histogram_ranks("softmax")


def test_every_official_variant_builds_an_attention_with_a_closure():
    e = of.paper_experiment("E1")
    S = np.eye(2)[None] * 0.5
    for v in of.VARIANTS:
        att = of.paper_attention(e.Q, e.K, e.V, v, H=2 if v == "multihead" else 1)
        assert np.isfinite(of.paper_rhs(e.Q, e.K, e.V, v, H=2 if v == "multihead" else 1)(S)).all()
        assert att.d == 2


def test_panel_titles_use_the_books_words():
    e5 = of.paper_experiment("E5")
    labels = {v: e5.label(v) for v in e5.runs}
    assert labels == {
        "softmax": "softmax",
        "multihead": "multi-head, H = 2",
        "L2": "ℓ²",
        "sinkhorn": "Sinkhorn",
    }
    assert not any("_" in lab for lab in labels.values())


# ---------------------------------------------------------------- the authors' settings


def test_legacy_draws_satisfy_their_defining_properties():
    e1 = of.paper_experiment("E1")
    A1 = e1.parameters("softmax")["A"]
    assert np.linalg.eigvalsh(A1 + A1.T).max() < 0  # K = -Q: A negative definite
    assert np.linalg.eigvalsh(e1.V).min() > 0 and np.allclose(e1.V, e1.V.T)  # V = B B^T
    assert np.all((e1.Q >= 0) & (e1.Q < 1))  # rand: uniform on [0, 1)
    e2 = of.paper_experiment("E2")
    assert np.isclose(np.linalg.norm(e2.Q), 1) and np.allclose(e2.K, -e2.Q)
    assert np.array_equal(e2.V, np.eye(2))
    for name, want in (("E4", "indefinite"), ("E6", "indefinite"), ("E5", "definite")):
        e = of.paper_experiment(name)
        A = e.K.T @ e.Q
        lam = np.linalg.eigvalsh(A + A.T)
        if want == "indefinite":
            assert lam[0] < 0 < lam[1]
        else:
            assert lam[0] > 0
    e4, e6 = of.paper_experiment("E4"), of.paper_experiment("E6")
    assert np.array_equal(e4.Q, e6.Q) and not np.allclose(e4.V, e6.V)  # same seed 36 loop


def test_paper_experiment_leaves_the_global_generator_untouched():
    np.random.seed(123)  # noqa: NPY002 (checking the legacy global state on purpose)
    before = np.random.get_state()[1].copy()  # noqa: NPY002
    of.paper_experiment("E4")
    of.histogram_setting("softmax", "random", 3, n_per_dim=2)
    of.histogram_inits(3, 2)
    assert np.array_equal(np.random.get_state()[1], before)  # noqa: NPY002


def test_rank_one_direction_is_the_projector_onto_q_perp():
    e2 = of.paper_experiment("E2")
    q = e2.Q[0]
    P = np.eye(2) - np.outer(q, q)  # independent: I - q q^T for unit q
    X = pc.to_3d(P)
    np.testing.assert_allclose(e2.extra["rank_one_direction"], X / np.linalg.norm(X), atol=1e-12)


def test_paper_rhs_matches_the_official_formulas():
    rng = np.random.default_rng(4)
    G = rng.standard_normal((5, 2, 2))
    S = G @ G.transpose(0, 2, 1)
    e = of.paper_experiment("E6")
    Q, K, V, d = e.Q, e.K, e.V, 2
    A = K.T @ Q / np.sqrt(d)
    # softmax: V S A S + (.)^T written out directly
    want = np.array([V @ s @ A @ s + (V @ s @ A @ s).T for s in S])
    np.testing.assert_allclose(e.rhs("softmax")(S), want, atol=1e-12)
    # L2, code form: 2 V S (I + 2 K^T K S)^{-1} A S + (.)^T
    want = []
    for s in S:
        X = 2 * V @ s @ np.linalg.inv(np.eye(d) + 2 * K.T @ K @ s) @ A @ s
        want.append(X + X.T)
    np.testing.assert_allclose(e.rhs("L2")(S), np.array(want), atol=1e-10)
    # multi-head with H = 1 is softmax
    np.testing.assert_allclose(e.rhs("multihead")(S), e.rhs("softmax")(S), atol=1e-12)


def test_multihead_split_follows_the_code():
    e1 = of.paper_experiment("E1")
    p = e1.parameters("multihead")  # H = 2, k = 1
    for h in range(2):
        np.testing.assert_allclose(p["As"][h], np.outer(e1.K[h], e1.Q[h]))
        C = np.zeros((2, 2))
        C[h] = e1.V[h]
        np.testing.assert_allclose(p["Vs"][h], C)
    p3 = of.paper_experiment("E3").parameters("multihead")
    assert np.all(p3["As"][1] == 0)  # head 2 gets empty slices of the one-row Q
    e3 = of.paper_experiment("E3")
    # Sinkhorn: no 1/sqrt(d); softmax: 1/sqrt(d) with the full d = 2 although Q has one row
    np.testing.assert_allclose(of.paper_parameters(e3.Q, e3.K, e3.V, "sinkhorn")["A"], e3.K.T @ e3.Q)
    np.testing.assert_allclose(
        of.paper_parameters(e3.Q, e3.K, e3.V, "softmax")["A"], e3.K.T @ e3.Q / np.sqrt(2)
    )


def test_histogram_settings_have_the_predicted_structure():
    for d in (3, 4, 5):
        s = of.histogram_setting("softmax", "random", d)
        assert s.Q.shape == (100, d // 2, d) and np.array_equal(s.K, -s.Q)
        assert np.all(np.linalg.eigvalsh(s.V)[:, 0] > 0)
        A = s.parameters()["A"]
        # A + A^T = -2 Q^T Q / sqrt(d) has rank d // 2: the limit rank for V = I is ceil(d/2)
        assert np.all(predicted_limit_rank(A) == (d + 1) // 2)
    # the same seed-40 Q draws for both variants and both V rows
    assert np.array_equal(
        of.histogram_setting("L2", "identity", 4).Q, of.histogram_setting("softmax", "random", 4).Q
    )
    assert not np.allclose(
        of.histogram_setting("L2", "random", 4).V, of.histogram_setting("softmax", "random", 4).V
    )


def _sequential_protocol(setting, n_max):
    """The retry rule of the authors' ``create_histograms`` as the module documents it, written
    out with plain control flow and one ``projected_euler`` call per attempt: attempt ``k``
    runs draw ``i`` from initial condition ``k``; ``i`` advances only when the run converged
    (a diverged or out-of-iterations run is retried with the next initial condition and the
    same draw); stop when every draw converged or the ``n_max`` initial conditions are used."""
    e, n = setting.euler, setting.Q.shape[0]
    inits = of.histogram_inits(setting.d, n_max)
    atts = setting.attentions()
    ok, failed, i, k = [], [], 0, 0
    while i < n and k < n_max:
        res = of.projected_euler(
            covariance_rhs(atts[i]),
            inits[k],
            e.h,
            tol_low=e.tol_low,
            tol_high=e.tol_high,
            max_iter=e.max_iter,
        )
        status, steps = str(res.status[0]), int(res.n_steps[0])
        if status == "converged":
            rank = int(np.sum(np.linalg.eigvalsh(res.last[0]) > setting.tol_rank))
            ok.append((k, steps, rank))
            i += 1
        else:
            failed.append((i, k, status, steps))
        k += 1
    return ok, failed, k


@pytest.mark.parametrize("window", [1, 3, None])
def test_protocol_retries_failed_runs_as_the_authors_loop(window):
    # a budget (at most 400 iterations, trace threshold 8) makes runs fail both ways, so the
    # retry rule is reached many times (the authors' settings reach it only in a few panels);
    # the protocol must take exactly the sequential loop's path, whatever the batching
    base = of.histogram_setting("softmax", "random", 3, n_per_dim=12)
    setting = dataclasses.replace(
        base, n_max=40, euler=of.EulerSettings(0.09, 5e-5, tol_high=8.0, max_iter=400)
    )
    ok, failed, attempts = _sequential_protocol(setting, 40)
    assert {f[2] for f in failed} == {"diverged", "max_iter"}  # both kinds of retry
    assert any(a[0] == b[0] for a, b in zip(failed, failed[1:]))  # a draw failing twice
    run = of.paper_histogram_ranks(setting, window=window)
    assert run.draw_init.tolist() == [k for k, _, _ in ok]
    assert run.n_steps.tolist() == [steps for _, steps, _ in ok]
    assert run.euler_rank.tolist() == [rank for _, _, rank in ok]
    assert (
        list(
            zip(
                run.failed_draw.tolist(),
                run.failed_init.tolist(),
                run.failed_status.tolist(),
                run.failed_steps.tolist(),
            )
        )
        == failed
    )
    assert run.attempts == attempts and run.failures == len(failed)
    assert run.work >= sum(steps for _, steps, _ in ok) + sum(f[3] for f in failed)


def test_protocol_stops_when_the_initial_conditions_run_out():
    # with 9 initial conditions and runs that fail often, fewer than the 12 draws converge:
    # the authors' loop ends with the last initial condition, not with the last draw
    base = of.histogram_setting("softmax", "random", 3, n_per_dim=12)
    setting = dataclasses.replace(base, euler=of.EulerSettings(0.09, 5e-5, tol_high=8.0, max_iter=400))
    ok, failed, attempts = _sequential_protocol(setting, 9)
    run = of.paper_histogram_ranks(setting, n_attempts=9)
    assert attempts == 9 and len(ok) < 9 and run.processed == len(ok)
    assert run.draw_init.tolist() == [k for k, _, _ in ok] and run.attempts == 9
    assert run.failed_init.tolist() == [f[1] for f in failed]


def test_chunked_euler_equals_one_uninterrupted_run():
    e = of.paper_experiment("E6")  # some members converge, some blow up
    st = of.EulerSettings(0.02, 1e-3, tol_high=20.0, max_iter=3000)
    inits = e.inits(7, 7)
    ref = of.projected_euler(
        e.rhs("softmax"), inits, st.h, tol_low=st.tol_low, tol_high=st.tol_high, max_iter=st.max_iter
    )
    got = of.run_paper_euler(lambda idx: e.rhs("softmax"), inits, st, chunk=37)
    assert set(ref.status) >= {"converged", "diverged"}
    np.testing.assert_array_equal(got.status, ref.status)
    np.testing.assert_array_equal(got.n_steps, ref.n_steps)
    for a, b in zip(got.paths, ref.paths):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- the committed cache


def test_cached_full_protocol_matches_the_code_on_a_random_subset():
    # recompute a seeded random subset of the cached entries (converged runs of every panel, and
    # a diverged attempt) with the code: status, step counts and ranks must agree exactly, the
    # eigenvalues to round-off (1e-9: reorderings of floating-point sums, far below the 0.1
    # rank threshold)
    cache = of.load_histogram_cache()
    assert set(cache) == set(of.PANELS)  # all twelve panels of the authors' two figures
    rng = np.random.default_rng(12)
    for key in (
        ("softmax", "identity", 3),
        ("softmax", "random", 3),
        ("softmax", "random", 5),
        ("L2", "random", 4),
    ):
        panel = cache[key]
        draws = rng.choice(panel.draw_init.size, size=2, replace=False)
        div = np.flatnonzero(panel.failed_status == "diverged")
        failed = div[:1] if div.size else []
        chk = of.check_cached_histogram(panel, draws, failed)
        assert chk.mismatches == [], (key, chk.mismatches)
        assert chk.max_eig_diff < 1e-9, chk.max_eig_diff
        assert chk.pairing_ok
        assert panel.draw_init.size == 100  # the authors' 100 draws were all processed


def test_cache_check_detects_a_corrupted_entry():
    panel = of.load_histogram_cache()[("softmax", "identity", 3)]
    bad = dataclasses.replace(panel, n_steps=panel.n_steps + np.eye(1, panel.n_steps.size, 0, dtype=int)[0])
    assert of.check_cached_histogram(bad, [0]).mismatches
    shifted = dataclasses.replace(panel, draw_init=panel.draw_init + 1)
    assert not of.check_cached_histogram(shifted).pairing_ok


# ---------------------------------------------------------------- the input policy

E6 = of.paper_experiment("E6")


def _sym_rhs(S):
    return -S @ S


@pytest.mark.parametrize(
    "kwargs, exc, name",
    [
        ({"h": 0}, ValueError, "h"),
        ({"h": -0.1}, ValueError, "h"),
        ({"h": np.nan}, ValueError, "h"),
        ({"h": "0.1"}, TypeError, "h"),
        ({"tol_low": np.nan}, ValueError, "tol_low"),
        ({"tol_high": -1.0}, ValueError, "tol_high"),
        ({"max_iter": 0}, ValueError, "max_iter"),
        ({"max_iter": 10.0}, TypeError, "max_iter"),
        ({"record_every": 0}, ValueError, "record_every"),
        ({"cov0": np.full((2, 2), np.nan)}, ValueError, "cov0"),
        ({"cov0": [[1.0, 2.0], [0.0, 1.0]]}, ValueError, "cov0"),
        ({"cov0": np.eye(2) + 0j}, TypeError, "cov0"),
        ({"cov0": "I"}, TypeError, "cov0"),
        ({"cov0": np.ones((2, 3))}, ValueError, "cov0"),
        ({"rhs": np.eye(2)}, TypeError, "rhs"),
    ],
)
def test_projected_euler_rejects_bad_arguments_by_name(kwargs, exc, name):
    args = {"rhs": _sym_rhs, "cov0": np.eye(2), "h": 0.1, **kwargs}
    with pytest.raises(exc, match=rf"^{name}\b"):  # the message starts with the name
        of.projected_euler(args.pop("rhs"), args.pop("cov0"), **args)


@pytest.mark.parametrize(
    "bad, exc, what",
    [
        (lambda S: (-S @ S).astype(complex), TypeError, "complex"),
        (lambda S: -S @ S + 1e-3j, TypeError, "complex"),
        (lambda S: np.trace(S), ValueError, "shape"),
        (lambda S: (-S @ S)[..., :1], ValueError, "shape"),
        (lambda S: np.full(S.shape, np.nan), ValueError, "non-finite"),
        (lambda S: "S", TypeError, "rhs"),
    ],
)
def test_projected_euler_checks_what_the_rhs_returns(bad, exc, what):
    # the old code cast a complex rhs to its real part and broadcast a scalar; the error must
    # name the reader's callable
    with pytest.raises(exc, match=what) as info:
        of.projected_euler(bad, np.eye(2), 0.1, max_iter=5)
    assert str(info.value).startswith("rhs")


def test_projected_euler_reports_a_rhs_that_turns_nan_with_its_time():
    def rhs(S):
        return np.full(S.shape, np.nan) if S[0, 0, 0] < 0.5 else -S @ S

    with pytest.raises(ValueError, match=r"rhs returned a non-finite .* iteration \d+ \(t = "):
        of.projected_euler(rhs, np.eye(2), 0.1, max_iter=100)


def test_euler_settings_and_the_runner_reject_bad_arguments_by_name():
    for kwargs, exc, name in [
        ({"h": np.nan}, ValueError, "h"),
        ({"h": "0.1"}, TypeError, "h"),
        ({"h": 0.1, "tol_low": 0}, ValueError, "tol_low"),
        ({"h": 0.1, "max_iter": 1.5}, TypeError, "max_iter"),
        ({"h": 0.1, "H": 0}, ValueError, "H"),
    ]:
        with pytest.raises(exc, match=rf"^{name}\b"):
            of.EulerSettings(**kwargs)
    st = of.EulerSettings(0.1, max_iter=20)
    inits = np.eye(2)[None]
    rhs_for = lambda idx: _sym_rhs  # noqa: E731
    for kwargs, exc, name in [
        ({"record_every": 0}, ValueError, "record_every"),
        ({"chunk": 0}, ValueError, "chunk"),
        ({"max_iter": np.nan}, TypeError, "max_iter"),
        ({"max_iter": -3}, ValueError, "max_iter"),
    ]:
        with pytest.raises(exc, match=rf"^{name}\b"):
            of.run_paper_euler(rhs_for, inits, st, **kwargs)
    with pytest.raises(TypeError, match="settings"):
        of.run_paper_euler(rhs_for, inits, {"h": 0.1})
    with pytest.raises(TypeError, match="rhs_for"):
        of.run_paper_euler(_sym_rhs(np.eye(2)), inits, st)
    with pytest.raises(TypeError, match="rhs_for must return a callable"):
        of.run_paper_euler(lambda idx: np.eye(2), inits, st)
    with pytest.raises(TypeError, match="complex"):
        of.run_paper_euler(lambda idx: lambda S: -S @ S + 0j, inits, st)


@pytest.mark.parametrize(
    "call, exc, name",
    [
        (lambda: of.histogram_inits("3", 4), TypeError, "d"),
        (lambda: of.histogram_inits(3, 0), ValueError, "n"),
        (lambda: of.histogram_inits(3, 2.0), TypeError, "n"),
        (lambda: of.histogram_inits(3, 2, seed=-1), ValueError, "seed"),
        (lambda: of.histogram_setting("softmax", "identity", 3.0), TypeError, "d"),
        (lambda: of.histogram_setting("softmax", "identity", 6), ValueError, "d"),
        (lambda: of.histogram_setting("softmax", "identity", 3, n_per_dim=2.5), TypeError, "n_per_dim"),
        (lambda: of.histogram_setting("cosine", "identity", 3), ValueError, "variant"),
        (lambda: of.histogram_setting("softmax", "orthogonal", 3), ValueError, "V_kind"),
        (lambda: of.paper_histogram_ranks("softmax"), TypeError, "setting"),
        (lambda: of.paper_histogram_ranks(SMALL, max_iter=0), ValueError, "max_iter"),
        (lambda: of.paper_histogram_ranks(SMALL, max_iter=np.nan), TypeError, "max_iter"),
        (lambda: of.paper_histogram_ranks(SMALL, n_draws=5), ValueError, "n_draws"),
        (lambda: of.paper_histogram_ranks(SMALL, n_attempts="9"), TypeError, "n_attempts"),
        (lambda: of.paper_histogram_ranks(SMALL, window=0), ValueError, "window"),
        (lambda: of.histogram_euler_budget(SMALL, max_iter=0.5), TypeError, "max_iter"),
        (lambda: of.histogram_euler_budget(SMALL, 10, init_index=[0.5, 1.0]), TypeError, "init_index"),
        (lambda: of.histogram_euler_budget(SMALL, 10, init_index=[0]), ValueError, "init_index"),
        (lambda: of.histogram_accurate(SMALL, horizon=-1.0), ValueError, "horizon"),
        (lambda: of.histogram_accurate(SMALL, rtol=np.nan), ValueError, "rtol"),
        (lambda: of.paired_ranks(np.ones((2, 3)), np.ones((2, 2, 2))), ValueError, "limits"),
        (lambda: of.paired_ranks(np.ones((2, 2)), np.full((2, 2, 2), np.nan)), ValueError, "limits"),
        (lambda: of.paired_ranks(np.ones((1, 2)), np.eye(2)[None], tol_rank=0), ValueError, "tol_rank"),
        (lambda: of.paper_parameters(np.eye(2), np.eye(2), np.eye(2), "softmax", H="2"), TypeError, "H"),
        (lambda: of.paper_rhs(np.eye(2), np.eye(2), np.eye(2), "L2", H=0), ValueError, "H"),
        (
            lambda: of.paper_attention(np.eye(2), np.eye(2), np.full((2, 2), np.nan), "softmax"),
            ValueError,
            "V",
        ),
        (lambda: of.paper_attention("Q", np.eye(2), np.eye(2), "softmax"), TypeError, "Q"),
        (lambda: of.paper_attention(np.eye(2), np.eye(2), np.eye(3), "softmax"), ValueError, "V"),
        (lambda: of.paper_rhs(np.eye(2), np.eye(2), np.eye(2), ["softmax"]), ValueError, "variant"),
        (lambda: of.load_histogram_cache(3), TypeError, "path"),
        (lambda: E6.euler("sinkhorn"), ValueError, "variant"),  # E6 has no Sinkhorn run
        (lambda: E6.euler("softmax", record_every=0), ValueError, "record_every"),
        (lambda: of.check_cached_histogram("panel"), TypeError, "panel"),
        (
            lambda: of.HistogramSetting(
                "softmax",
                "identity",
                2,
                np.ones((1, 1, 3)),
                np.ones((1, 1, 3)),
                np.ones((1, 2, 2)),
                of.EulerSettings(0.1),
                10,
            ),
            ValueError,
            "Q",
        ),
    ],
)
def test_official_helpers_reject_bad_arguments_by_name(call, exc, name):
    with pytest.raises(exc, match=rf"^{name}\b"):  # the message starts with the name
        call()


SMALL = of.histogram_setting("softmax", "identity", 3, n_per_dim=2)


def test_load_histogram_cache_names_a_file_that_is_not_a_cache(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a histogram cache"):
        of.load_histogram_cache(bad)
    bad.write_text('{"softmax/identity/3": {"settings": 3}}')
    with pytest.raises(ValueError, match="softmax/identity/3"):
        of.load_histogram_cache(bad)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        of.load_histogram_cache(bad)


def test_check_cached_histogram_rejects_out_of_range_entries():
    panel = of.load_histogram_cache()[("softmax", "identity", 3)]
    with pytest.raises(IndexError, match="draws"):
        of.check_cached_histogram(panel, draws=[100])
    with pytest.raises(IndexError, match="failed"):
        of.check_cached_histogram(panel, failed=[0])  # this panel has no failed attempt
    with pytest.raises(TypeError, match="draws"):
        of.check_cached_histogram(panel, draws=[0.5])


@pytest.mark.parametrize("variant", ["softmax", "L2"])
def test_protocol_rhs_is_the_closure_bit_for_bit(variant):
    # the protocol evaluates the covariance part of the closure without its mean ODE; the
    # committed cache was computed with the closure, so the two must agree exactly
    from tpde_lib.official._histograms import _covariance_only

    s = of.histogram_setting(variant, "random", 5, n_per_dim=7)
    closures = [a.batched_closure() for a in s.attentions()]
    P = [
        np.stack(v)
        for v in zip(*(tuple(np.asarray(p, dtype=float) for p in cl.params(0.0)) for cl in closures))
    ]
    S = of.histogram_inits(5, 7) * np.linspace(0.01, 30, 7)[:, None, None]
    want = closures[0].rhs(*P, np.zeros((7, 5)), S)[1]
    assert np.array_equal(_covariance_only(closures[0].rhs, P)(S), want)


def test_protocol_computes_no_run_the_loop_does_not_need_when_none_fails():
    # every draw converges at its first try: the runs in flight are exactly the loop's
    run = of.paper_histogram_ranks(of.histogram_setting("L2", "identity", 3, n_per_dim=20))
    assert run.failures == 0
    assert run.work == run.n_steps.sum()


@pytest.mark.parametrize("module", ["tpde_lib.official._projected_euler", "tpde_lib.official._histograms"])
def test_the_examples_of_the_docstrings_run(module):
    # projected_euler, histogram_setting, histogram_inits, paper_histogram_ranks
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def test_projection_is_the_authors_psd_projection_bit_for_bit():
    # the projection calls eigh's gufunc directly and skips the floor when no eigenvalue is
    # negative; against the authors' form (np.linalg.eigh, floor 1e-14 on negative
    # eigenvalues, U diag(lam) U^T) it must give the same bits, with and without negatives
    from tpde_lib.official._projected_euler import _psd_projection_verbatim

    rng = np.random.default_rng(3)
    for d in (2, 3, 5):
        G = rng.standard_normal((50, d, d))
        for S in (G @ G.transpose(0, 2, 1), G + G.transpose(0, 2, 1)):  # PSD, indefinite
            lam, U = np.linalg.eigh(S)
            lam[lam < 0] = 1e-14
            want = np.stack([u @ np.diag(w) @ u.T for w, u in zip(lam, U)])
            got = _psd_projection_verbatim(S)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.abs(S).max())
            lam2, U2 = np.linalg.eigh(S)
            ref = (U2 * np.where(lam2 < 0, 1e-14, lam2)[..., None, :]) @ np.swapaxes(U2, -1, -2)
            assert np.array_equal(got, ref)
    with pytest.raises(np.linalg.LinAlgError, match="eigh"):
        _psd_projection_verbatim(np.full((1, 2, 2), np.nan))


def test_legacy_draws_leave_the_global_generator_alone_and_are_thread_safe():
    """Issue 41: eight threads calling histogram_inits and histogram_setting at once got
    different matrices (six of eight), and the global np.random state was changed. The legacy
    stream now comes from a private RandomState."""
    import threading

    from tpde_lib.official import histogram_inits, histogram_setting

    ref_inits = [histogram_inits(4, 3000, seed=j) for j in range(8)]
    ref_setting = histogram_setting("softmax", "random", 4)
    np.random.seed(12345)  # noqa: NPY002 (the global state this test watches)
    before = np.random.get_state()[1].copy()  # noqa: NPY002
    got, errors = {}, []

    def work(j):
        try:
            for _ in range(3):
                got[j] = (histogram_inits(4, 3000, seed=j), histogram_setting("softmax", "random", 4))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(j,)) for j in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    for j in range(8):
        assert np.array_equal(got[j][0], ref_inits[j])
        assert np.array_equal(got[j][1].Q, ref_setting.Q) and np.array_equal(got[j][1].V, ref_setting.V)
    assert np.array_equal(np.random.get_state()[1], before)  # noqa: NPY002
    # the stream is the authors' np.random.seed stream
    np.random.seed(41)  # noqa: NPY002
    G = np.random.randn(4, 4)  # noqa: NPY002
    assert np.array_equal(histogram_inits(4, 1)[0], G @ G.T)


def test_paper_experiments_leave_the_global_generator_alone():
    from tpde_lib.official import paper_experiment

    np.random.seed(7)  # noqa: NPY002
    before = np.random.get_state()[1].copy()  # noqa: NPY002
    exps = [paper_experiment(f"E{k}") for k in range(1, 7)]
    assert np.array_equal(np.random.get_state()[1], before)  # noqa: NPY002
    np.random.seed(35)  # noqa: NPY002 (E1: Q = rand(2, 2) after seed 35)
    assert np.array_equal(exps[0].Q, np.random.rand(2, 2))  # noqa: NPY002


def test_paper_histogram_ranks_draws_its_initial_conditions_lazily():
    """n_attempts = 10**8 drew 10**8 initial conditions up front (7 GB at d = 3)."""
    import tracemalloc

    from tpde_lib.official import histogram_setting, paper_histogram_ranks

    s = histogram_setting("softmax", "identity", 3)
    tracemalloc.start()
    run = paper_histogram_ranks(s, n_draws=2, n_attempts=10**8)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert run.draw_init.tolist() == [0, 1] and peak < 50 * 2**20


def test_histogram_inits_refuses_more_than_its_cap_before_drawing():
    from tpde_lib.official import histogram_inits

    with pytest.raises(ValueError, match="1 GiB"):
        histogram_inits(3, 10**8)


def test_paired_ranks_with_unsorted_eigenvalues_and_a_non_covariance_limit():
    from tpde_lib.official import paired_ranks

    limits = np.array([np.diag([1.0, 0.0, 0.0])])
    # the Euler eigenvalues in descending order: top_ratio is 2 / 1 whatever the order
    assert paired_ranks([[2.0, 0.0, 0.0]], limits).top_ratio.tolist() == [2.0]
    assert paired_ranks([[0.0, 0.0, 2.0]], limits).top_ratio.tolist() == [2.0]
    with pytest.raises(ValueError, match=r"limits must be positive semi-definite.*limits\[0\]"):
        paired_ranks([[1.0, 1.0, 1.0]], -np.eye(3)[None])
