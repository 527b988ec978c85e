"""The input policy, property-based: every public function rejects an argument of the wrong kind.

For each package this repository's helpers own (clustering, energy, masked, meanfield, transport,
gaussian, measures, stability, psd_cone), the public functions are read from ``__all__`` (a new
name without an entry in :data:`VALID` fails :func:`test_every_public_function_has_valid_arguments`),
and :data:`VALID` holds one set of valid arguments per function. Each test replaces *one*
argument by a value of the wrong kind drawn by hypothesis (None, strings, complex numbers,
NaN and infinities, ragged or string-filled lists, dicts, bare objects, callables) and checks
that the call raises ``TypeError`` or ``ValueError`` whose message names the argument
(``_checks``' policy), never numpy's or Python's bare errors.

Values that are *valid* for an argument are not drawn for it: ``None`` where the default is
None, ``inf`` for an exponent ``p`` (the supremum) or ``max_step``, a callable for a callable
argument (see :data:`NOT_WRONG`).
"""

from __future__ import annotations

import importlib
import inspect
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import tpde_lib as tp

PACKAGES = [
    "clustering",
    "energy",
    "masked",
    "meanfield",
    "transport",
    "gaussian",
    "measures",
    "stability",
    "psd_cone",
]

I2 = np.eye(2)
S2 = np.array([[1.0, 0.3], [0.3, 0.5]])
X6 = np.random.default_rng(0).standard_normal((6, 2))
MU = tp.Empirical(X6)
NU = tp.Empirical(X6 + 0.1)
MU_POS = tp.Empirical(X6, positions=np.linspace(0.0, 1.0, 6))
NU_POS = tp.Empirical(X6 + 0.1, positions=np.linspace(0.0, 1.0, 6))
G0 = tp.Gaussian([0.0, 0.1], S2)
G1 = tp.Gaussian([0.2, 0.0], I2)
SOFT = tp.Softmax(-0.2 * I2, I2)
SOFT_CAUSAL = tp.Softmax(-0.2 * I2, I2, causal=True)
SYM = np.array([[-0.5, 0.1], [0.1, -0.3]])


def _energy(mean, cov):
    return float(np.trace(cov))


def _affine(mean, cov, t):
    return -I2, np.zeros(2)


#: one set of valid arguments per public function, ``(module, name) -> kwargs``
VALID = {
    ("clustering", "numerical_rank"): dict(cov=S2, tol=0.1, relative=False),
    ("clustering", "predicted_limit_rank"): dict(A=SYM, tol=1e-10),
    ("clustering", "lyapunov"): dict(cov=S2, V=I2),
    ("clustering", "lyapunov_matrix"): dict(V=S2),
    ("clustering", "classify_outcome"): dict(
        cov=np.broadcast_to(S2, (2, 3, 2, 2)),
        blowup_time=[np.inf, 1.0],
        valid=np.ones((2, 3), bool),
        growth_factor=10.0,
        rank_tol=1e-2,
        status=np.array(["ok", "blowup"]),
    ),
    ("clustering", "phase_diagram"): dict(
        a1=[-1.0],
        a2=[-1.0],
        V=I2,
        cov0=I2,
        theta=0.0,
        skew=0.0,
        horizon=1.0,
        n_times=3,
        growth_factor=10.0,
        rank_tol=1e-2,
    ),
    ("clustering", "random_value_matrices"): dict(rng=np.random.default_rng(0), n=2, d=2, kind="spd"),
    ("clustering", "pairs_with_sign_condition"): dict(rng=np.random.default_rng(0), V=np.stack([I2, S2])),
    ("clustering", "blowup_survey"): dict(
        A=np.stack([-I2]),
        V=np.stack([I2]),
        cov0=I2,
        horizon=1.0,
        rtol=1e-6,
        atol=1e-9,
        max_growth=1e8,
        switch_growth=1e3,
        stiff_method="LSODA",
    ),
    ("clustering", "ensemble_survey"): dict(V_kind="spd", start="identity", n=2, d=2, seed=0, horizon=1.0),
    ("clustering", "sign_condition_counterexamples"): dict(
        V_kind="spd", d=2, margin=0.05, seed=0, n_candidates=2, horizon=1.0
    ),
    ("clustering", "blowup_time_lower_bound"): dict(A=SYM, V=I2, cov0=S2),
    ("clustering", "congruence"): dict(A=SYM, V=I2, P=S2),
    ("energy", "sinkhorn_energy"): dict(mu=MU, A=SYM, eps=1.0, tol=1e-9, max_iter=1000),
    ("energy", "partition_function"): dict(mu=MU, A=SYM, log=False),
    ("energy", "interaction_energy"): dict(mu=MU, A=SYM, log=False),
    ("energy", "mobility"): dict(att=SOFT, t=0.0),
    ("energy", "dissipation"): dict(mu=MU, velocity=X6, mobility_matrix=S2, factor=np.ones(6)),
    ("energy", "sinkhorn_energy_gaussian"): dict(cov=S2, A=SYM, eps=1.0, mean=[0.0, 1.0]),
    ("energy", "sinkhorn_energy_gradient_gaussian"): dict(cov=S2, A=SYM, eps=1.0),
    ("energy", "bures_wasserstein_gradient_flow_rhs"): dict(cov=S2, A=SYM, eps=1.0),
    ("energy", "interaction_energy_gaussian"): dict(cov=0.3 * S2, A=SYM, mean=[0.0, 1.0]),
    ("energy", "gaussian_metric"): dict(
        g=tp.Gaussian([0.0, 0.1], 0.3 * S2), u1=([1.0, 0.0], I2), u2=([0.0, 1.0], SYM), P=S2, A=SYM
    ),
    ("energy", "velocity_jacobian"): dict(att=SOFT, mu=MU, step=1e-4, t=0.0),
    ("energy", "symmetry_defect"): dict(J=np.eye(12), weights=np.full(6, 1 / 6), mobility_matrix=S2),
    ("energy", "configuration_gradient"): dict(fun=lambda m: float(np.sum(m.points**2)), mu=MU, step=1e-5),
    ("energy", "frobenius_gradient"): dict(fun=lambda c: float(np.trace(c)), cov=S2, step=1e-5),
    ("energy", "energy_along_geodesic"): dict(energy=_energy, g0=G0, g1=G1, s=[0.0, 0.5, 1.0], P=S2),
    ("energy", "second_differences"): dict(values=[0.0, 1.0, 4.0], s=[0.0, 0.5, 1.0]),
    ("energy", "search_geodesic_convexity"): dict(
        energies={"tr": _energy}, pairs=[(G0, G1)], P=S2, n_points=5, threshold=1e-6
    ),
    ("masked", "sink_positions"): dict(n=6, sink_mass=0.2, n_sink=2),
    ("masked", "with_sink"): dict(points=X6, sink_mass=0.2, n_sink=2),
    ("masked", "sink_mass"): dict(mu=tp.masked.with_sink(X6, 0.2, 2)),
    ("masked", "position_marginal"): dict(mu=MU_POS),
    ("masked", "shift_prefix"): dict(mu=MU_POS, shift=[0.1, 0.0], s_max=0.3),
    ("masked", "sink_attention_share"): dict(A=SYM, mu=tp.masked.with_sink(X6, 0.2, 2)),
    ("masked", "prefix_average_matrix"): dict(weights=[0.3, 0.2, 0.5], positions=[0.0, 0.5, 1.0]),
    ("masked", "lp_operator_norm"): dict(E=I2, masses=[0.4, 0.6], p=2),
    ("masked", "hardy_constant"): dict(masses=[0.4, 0.6], p=2),
    ("masked", "masked_lipschitz_constant"): dict(A=SYM, V=I2, R=1.0, sink_mass=0.2, p=1),
    ("masked", "masked_stability_constant"): dict(
        A=SYM, V=I2, R0=1.0, times=[0.0, 0.5], masses=[0.4, 0.6], p=1, log=False
    ),
    ("masked", "linear_sink_response"): dict(t=1.0, sink_mass=0.1, n_terms=120),
    ("masked", "sensitivity"): dict(
        att=SOFT_CAUSAL, mu=MU_POS, nu=NU_POS, T=0.1, p=2, n_times=2, method="rk4", h=0.05, sup=False
    ),
    ("masked", "sink_mass_sweep"): dict(
        att=SOFT_CAUSAL,
        points=X6,
        sink_masses=[0.2],
        shift=[0.1, 0.0],
        T=0.1,
        n_sink=2,
        p=(1, 2),
        n_times=2,
        method="rk4",
        h=0.05,
        sup=False,
    ),
    ("masked", "prefix_sweep"): dict(
        att=SOFT_CAUSAL,
        mu=MU_POS,
        s_max_values=[0.3],
        shift=[0.1, 0.0],
        T=0.1,
        p=(1, 2),
        method="rk4",
        h=0.05,
        sup=False,
    ),
    ("masked", "fit_exponent"): dict(x=[1.0, 2.0, 4.0], y=[1.0, 0.5, 0.26]),
    ("meanfield", "uniform_disk"): dict(n=5, radius=1.0, seed=0),
    ("meanfield", "sunflower"): dict(n=5, radius=1.0),
    ("meanfield", "gaussian_affine_flow"): dict(
        affine=_affine, g0=G0, times=[0.0, 0.5], rtol=1e-8, atol=1e-10
    ),
    ("meanfield", "coupling_distance"): dict(x=X6, y=X6 + 0.1, weights=np.full(6, 1 / 6)),
    ("meanfield", "moment_errors"): dict(x=X6, y=X6 + 0.1, weights=np.full(6, 1 / 6)),
    ("meanfield", "fit_rate"): dict(x=[1.0, 2.0, 4.0, 8.0], y=[1.0, 0.5, 0.26, 0.12], level=0.95),
    ("meanfield", "step_order"): dict(
        att=SOFT,
        mu0=MU,
        steps=[0.1, 0.05],
        T=0.2,
        method="euler",
        reference_h=0.01,
        norm="rms",
        reference_rtol=1e-10,
    ),
    ("transport", "wasserstein"): dict(mu=MU, nu=NU, p=2, method="exact", n_projections=10, seed=0),
    ("transport", "bures_wasserstein"): dict(g1=G0, g2=G1),
    ("transport", "conditional_wasserstein"): dict(mu=MU_POS, nu=NU_POS, p=2),
    ("transport", "coupled_wasserstein"): dict(mu=MU_POS, nu=NU_POS, p=2.0),
    ("transport", "position_quantile_pieces"): dict(w_mu=np.array([0.5, 0.5]), w_nu=np.array([0.25, 0.75])),
    ("transport", "fibre_distances"): dict(mu=MU_POS, nu=NU_POS, p=2),
    ("transport", "sup_fibre_distance"): dict(mu=MU_POS, nu=NU_POS, p=2),
    ("transport", "bures_wasserstein_map"): dict(cov0=S2, cov1=I2),
    ("transport", "bures_wasserstein_geodesic"): dict(g0=G0, g1=G1, s=[0.0, 0.5]),
    ("transport", "twisted_wasserstein"): dict(mu=MU, nu=NU, P=S2),
    ("transport", "twisted_bures_wasserstein"): dict(g1=G0, g2=G1, P=S2),
    ("transport", "twisted_bures_wasserstein_geodesic"): dict(g0=G0, g1=G1, P=S2, s=[0.0, 0.5]),
    ("gaussian", "softmax_rhs"): dict(A=SYM, V=I2, mean=np.array([0.0, 1.0]), cov=S2),
    ("gaussian", "multihead_rhs"): dict(As=[SYM, I2], Vs=[I2, I2], mean=np.array([0.0, 1.0]), cov=S2),
    ("gaussian", "l2_rhs"): dict(Q=I2, K=I2, V=I2, tau=1.0, mean=np.array([0.0, 1.0]), cov=S2),
    ("gaussian", "sinkhorn_rhs"): dict(A=SYM, V=I2, eps=1.0, mean=np.array([0.0, 1.0]), cov=S2),
    ("gaussian", "linear_rhs"): dict(A=SYM, V=I2, mean=np.array([0.0, 1.0]), cov=S2),
    ("gaussian", "sinkhorn_gain"): dict(A=SYM, cov=S2),
    ("gaussian", "covariance_rhs"): dict(att=SOFT),
    ("gaussian", "simulate_gaussian"): dict(
        att=SOFT,
        g0=G0,
        times=[0.0, 0.5],
        rtol=1e-6,
        atol=1e-9,
        method="DOP853",
        max_step=0.1,
        max_growth=1e8,
        max_steps=1000,
    ),
    ("gaussian", "simulate_gaussian_batch"): dict(
        att=[SOFT],
        cov0=np.stack([S2]),
        times=[0.0, 0.5],
        mean0=np.zeros((1, 2)),
        rtol=1e-6,
        atol=1e-9,
        max_growth=1e8,
        max_steps=1000,
    ),
    ("gaussian", "affine_defect"): dict(att=SOFT, g=G0, t=0.0, nodes_per_dim=5),
    ("gaussian", "gauss_hermite"): dict(g=G0, nodes_per_dim=5),
    ("gaussian", "softmax_identity_V_closed_form"): dict(cov0=S2, A=SYM, times=[0.0, 0.5], v=1.0),
    ("gaussian", "softmax_blowup_time"): dict(cov0=S2, A=-SYM, v=1.0),
    ("gaussian", "softmax_limit_cov"): dict(cov0=S2, A=SYM, rank_tol=1e-10),
    ("gaussian", "scalar_closed_form"): dict(sigma0=1.0, a=-0.5, v=1.0, times=[0.0, 0.5]),
    ("measures", "as_empirical"): dict(name="mu", value=MU),
    ("stability", "support_radius"): dict(att=SOFT, T=0.5, R0=1.0, n_grid=11),
    ("stability", "lipschitz_constants"): dict(att=SOFT, R=1.0, t=0.0),
    ("stability", "stability_bound"): dict(att=SOFT, T=0.5, R0=1.0, n_grid=11),
    ("stability", "stability_constant"): dict(att=SOFT, T=0.5, R0=1.0, n_grid=11),
    ("psd_cone", "to_3d"): dict(S=S2),
    ("psd_cone", "from_3d"): dict(X=[0.5, 0.1, 0.2]),
    ("psd_cone", "to_disk"): dict(S=S2),
    ("psd_cone", "init_grid"): dict(n_u=3, n_c=3, limits=(-0.5, 0.5, -0.5, 0.5)),
    ("psd_cone", "rank_one_direction"): dict(q=[0.3, 0.4]),
}

#: arguments never perturbed: ``as_empirical``'s ``name`` is the label it writes into errors
FIXED = {("measures", "as_empirical", "name")}
#: the name an error must carry when it is not the argument's own
NAMED_AS = {("measures", "as_empirical", "value"): "mu"}


def _public_functions(pkg):
    mod = importlib.import_module(f"tpde_lib.{pkg}")
    return [(pkg, n) for n in mod.__all__ if inspect.isfunction(getattr(mod, n))]


PUBLIC = [key for pkg in PACKAGES for key in _public_functions(pkg)]


def test_every_public_function_has_valid_arguments():
    # a new public name must join the table (and so the suite) with its valid arguments
    missing = [f"{m}.{n}" for m, n in PUBLIC if (m, n) not in VALID]
    assert not missing, f"add valid arguments to VALID for {missing}"
    stale = [f"{m}.{n}" for m, n in VALID if (m, n) not in PUBLIC]
    assert not stale, f"VALID lists names that are no longer public: {stale}"


@pytest.mark.parametrize("key", PUBLIC, ids=[f"{m}.{n}" for m, n in PUBLIC])
def test_valid_arguments_are_accepted(key):
    # the table is right: the unperturbed call succeeds (so each rejection below is due to the
    # one argument replaced)
    func = getattr(importlib.import_module(f"tpde_lib.{key[0]}"), key[1])
    func(**VALID[key])


def _cases():
    out = []
    for m, n in PUBLIC:
        func = getattr(importlib.import_module(f"tpde_lib.{m}"), n)
        params = inspect.signature(func).parameters
        for arg in VALID.get((m, n), {}):
            if (m, n, arg) not in FIXED:
                out.append((m, n, arg, params[arg].default is None))
    return out


CASES = _cases()


class _Opaque:
    """An object of no numeric kind."""


#: wrong kinds, drawn by hypothesis (the explicit examples below are always tried)
WRONG = st.one_of(
    st.none(),
    st.text(max_size=4),
    st.complex_numbers(allow_nan=False, allow_infinity=False, min_magnitude=1e-3).filter(
        lambda z: z.imag != 0
    ),
    st.sampled_from([float("nan"), float("inf"), -float("inf")]),
    st.lists(st.text(max_size=2), min_size=1, max_size=3),
    st.just([[1.0, 2.0], [3.0]]),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.builds(_Opaque),
    st.just(lambda *a: 0.0),
)


def _not_wrong(arg, value, default_is_none):
    """Values that are valid for this argument (not drawn as wrong)."""
    if value is None and default_is_none:
        return True
    if callable(value) and arg in {"fun", "energy", "affine"}:
        return True
    return arg in {"p", "max_step"} and isinstance(value, float) and value == float("inf")


@pytest.mark.parametrize(
    "module,name,arg,default_is_none", CASES, ids=[f"{m}.{n}-{a}" for m, n, a, _ in CASES]
)
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(wrong=WRONG)
@example(wrong=None)
@example(wrong="abc")
@example(wrong=1j)
@example(wrong=float("nan"))
@example(wrong=float("inf"))
@example(wrong=[["x"]])
@example(wrong=_Opaque())
def test_wrong_kind_is_rejected_naming_the_argument(module, name, arg, default_is_none, wrong):
    assume(not _not_wrong(arg, wrong, default_is_none))
    func = getattr(importlib.import_module(f"tpde_lib.{module}"), name)
    kwargs = dict(VALID[(module, name)])
    kwargs[arg] = wrong
    label = NAMED_AS.get((module, name, arg), arg)
    with pytest.raises((TypeError, ValueError)) as info:
        func(**kwargs)
    message = str(info.value)
    assert re.search(rf"(?<![A-Za-z0-9_]){re.escape(label)}(?![A-Za-z0-9_])", message), (
        f"{module}.{name}({arg}={wrong!r:.40}) raised {type(info.value).__name__} not naming "
        f"{label!r}: {message!r:.300}"
    )


# ---- what a reader's callables return --------------------------------------------------------

#: (module, function, argument, how to wrap a returning function into that argument)
CALLABLE_ARGS = [
    ("energy", "configuration_gradient", "fun", lambda r: lambda m: r, "fun"),
    ("energy", "frobenius_gradient", "fun", lambda r: lambda c: r, "fun"),
    ("energy", "energy_along_geodesic", "energy", lambda r: lambda m, c: r, "energy"),
    ("energy", "search_geodesic_convexity", "energies", lambda r: {"e": lambda m, c: r}, "energies['e']"),
    ("meanfield", "gaussian_affine_flow", "affine", lambda r: lambda m, c, t: (r, np.zeros(2)), "affine"),
    ("meanfield", "gaussian_affine_flow", "affine", lambda r: lambda m, c, t: (-I2, r), "affine"),
]

#: wrong results: none of them is a real finite scalar, a real finite (2, 2) or a (2,) array
BAD_RESULTS = st.one_of(
    st.none(),
    st.text(max_size=3),
    st.just(1j),
    st.just(np.eye(2) * 1j),
    st.sampled_from([float("nan"), float("inf")]),
    st.just(np.full((2, 2), np.nan)),
    st.just(np.ones(3)),
    st.just(np.ones((3, 3))),
    st.just([1.0, "a"]),
    st.builds(_Opaque),
)


@pytest.mark.parametrize(
    "module,name,arg,wrap,label",
    CALLABLE_ARGS,
    ids=[f"{c[0]}.{c[1]}-{c[2]}-{i}" for i, c in enumerate(CALLABLE_ARGS)],
)
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(result=BAD_RESULTS)
def test_reader_callable_results_are_checked_naming_the_callable(module, name, arg, wrap, label, result):
    # a wrong shape, a complex, a NaN/inf or a non-number returned by the reader's callable is
    # reported naming it, not broadcast, truncated or propagated (scalars returned where an array
    # is expected, or arrays where a scalar is, included)
    func = getattr(importlib.import_module(f"tpde_lib.{module}"), name)
    kwargs = dict(VALID[(module, name)])
    kwargs[arg] = wrap(result)
    with pytest.raises((TypeError, ValueError)) as info:
        func(**kwargs)
    assert label in str(info.value), str(info.value)
