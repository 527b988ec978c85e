"""The input policy, property-based: every public function rejects an argument of the wrong kind.

For each package of the library but ``viz`` and ``widgets`` (figures, owned elsewhere: clustering,
energy, masked, meanfield, transport, gaussian, measures, stability, psd_cone, attention, official,
particles, integrate), the public functions are read from ``__all__`` (a new name without an entry in
:data:`VALID` fails :func:`test_every_public_function_has_valid_arguments`), and :data:`VALID`
holds one set of valid arguments per function. The public methods of the public classes (found
through the same ``__all__``) have their own table, :data:`METHODS`, checked the same way. Each
test replaces *one* argument by a value of the wrong kind drawn by hypothesis (None, strings, complex numbers,
NaN and infinities, ragged or string-filled lists, dicts, bare objects, callables) and checks
that the call raises ``TypeError`` or ``ValueError`` whose message names the argument
(``_checks``' policy), never numpy's or Python's bare errors.

Values that are *valid* for an argument are not drawn for it: ``None`` where the default is
None or the type hint allows it, ``inf`` for an exponent ``p`` (the supremum) or ``max_step``, a
callable for a callable argument, a string for a file ``path`` (see :func:`_not_wrong`).
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import tempfile

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
    "attention",
    "official",
    "particles",
    "ensembles",
    "integrate",
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


def _decay(t, y, idx):
    return -y


#: a cache file that is never written (no panel asked for)
TMP_CACHE = os.path.join(tempfile.gettempdir(), "tpde-input-policy-never-written.json")


def _neg(S):
    return -S


def _neg_for(idx):
    return _neg


#: a small setting of the authors' histogram protocol (2 draws per dimension: fast)
SETTING = tp.official.histogram_setting("softmax", "identity", 3, n_per_dim=2)
CACHE = tp.official.load_histogram_cache()
PANEL = CACHE[("softmax", "identity", 3)]
QK3 = np.random.default_rng(1).standard_normal((3, 3))
KQ = np.random.default_rng(2).standard_normal((40, 3))
VALS = np.random.default_rng(3).standard_normal((40, 2))


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
    ("masked", "renyi_centers"): dict(points=X6, delta=0.5, strong=False),
    ("masked", "mode_rates"): dict(beta=1.0, n_modes=3, normalised=True),
    ("masked", "correlation_closed_form"): dict(s=[0.2, 1.0], rate=0.5, t=1.0, lam=1.0),
    ("masked", "retrieval_profile"): dict(
        s=[0.2, 1.0], beta=1.0, t=1.0, lam=1.0, M=8.0, n_modes=4, normalised=True
    ),
    ("masked", "retrieval_threshold"): dict(beta=1.0, lam=1.0, M=8.0, n_modes=4, normalised=True),
    ("masked", "correlation_linear"): dict(n=5, beta=1.0, t=1.0, mode=1, lam=1.0, normalised=True),
    ("masked", "circle_field"): dict(theta=[0.1, 1.0, 2.0], beta=1.0, lam=1.0, normalised=True),
    ("masked", "circle_simulate"): dict(
        theta0=[0.1, 1.0, 2.0], beta=1.0, times=[0.0, 0.2], lam=1.0, normalised=True, h=0.1
    ),
    ("masked", "circle_retrieval"): dict(
        n=4,
        beta=1.0,
        t=0.2,
        lam=0.5,
        draws=3,
        modes=(1,),
        normalised=True,
        h=0.1,
        seed=0,
        estimator="tangent",
    ),
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
    ("gaussian", "layer_closed_form"): dict(cov0=S2, A=SYM, w=0.5, times=[0.0, 0.5], v=1.0),
    ("gaussian", "layer_blowup_time"): dict(cov0=S2, A=-SYM, w=0.5, v=1.0),
    ("gaussian", "layer_equilibrium"): dict(A=SYM, w=0.5, v=1.0),
    ("gaussian", "steer_covariance"): dict(
        attention=tp.Softmax(SYM, I2), cov0=S2, target=S2, T=0.5, pieces=1, mean0=[0.0, 0.0], tol=1e-6, seed=0
    ),
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
    ("attention", "kernel_sums"): dict(
        queries=KQ, keys=KQ, values=VALS, kind="softmax", q_pos=np.linspace(0, 1, 40), k_pos=np.zeros(40)
    ),
    ("attention", "set_num_threads"): dict(k=None),
    ("attention", "get_num_threads"): dict(),
    ("attention", "sinkhorn_potentials"): dict(
        points=X6,
        weights=np.full(6, 1 / 6),
        A=SYM,
        eps=1.0,
        tol=1e-9,
        max_iter=100,
        g0=np.zeros(6),
        omega0=1.0,
    ),
    ("official", "projected_euler"): dict(
        rhs=_neg, cov0=np.stack([S2]), h=0.1, tol_low=1e-5, tol_high=1e3, max_iter=20, record_every=1
    ),
    ("official", "run_paper_euler"): dict(
        rhs_for=_neg_for,
        cov0=np.stack([S2]),
        settings=tp.official.EulerSettings(h=0.1, max_iter=20),
        record_every=1,
        chunk=10,
        max_iter=20,
    ),
    ("official", "paper_parameters"): dict(Q=QK3, K=QK3.T, V=np.eye(3), variant="softmax", H=1),
    ("official", "paper_attention"): dict(Q=QK3, K=QK3.T, V=np.eye(3), variant="softmax", H=1),
    ("official", "paper_rhs"): dict(Q=QK3, K=QK3.T, V=np.eye(3), variant="L2", H=1),
    ("official", "paper_experiment"): dict(name="E1"),
    ("official", "histogram_setting"): dict(variant="softmax", V_kind="identity", d=3, n_per_dim=2),
    ("official", "histogram_inits"): dict(d=3, n=4, seed=41),
    ("official", "paper_histogram_ranks"): dict(
        setting=SETTING, max_iter=20, n_attempts=4, n_draws=2, window=2
    ),
    ("official", "histogram_euler_budget"): dict(setting=SETTING, max_iter=20, n_draws=2, init_index=[0, 1]),
    ("official", "histogram_accurate"): dict(
        setting=SETTING, horizon=0.5, n_draws=1, init_index=[0], rtol=1e-6, atol=1e-9
    ),
    ("official", "paired_ranks"): dict(
        euler_eigenvalues=np.ones((2, 3)), limits=np.broadcast_to(np.eye(3), (2, 3, 3)), tol_rank=0.1
    ),
    ("official", "load_histogram_cache"): dict(path=tp.official.HISTOGRAM_CACHE),
    ("official", "check_cached_histogram"): dict(panel=PANEL, draws=[], failed=[], chunk=400),
    ("particles", "simulate"): dict(
        att=SOFT,
        mu0=MU,
        times=[0.0, 0.1],
        method="rk4",
        h=0.05,
        rtol=1e-6,
        atol=1e-9,
        ivp_method="DOP853",
        on_blowup="raise",
        max_steps=100,
    ),
    ("particles", "depth"): dict(times=[0.0, 1.0], h=0.25),
    ("ensembles", "simulate_batch"): dict(
        att=SOFT,
        points=np.stack([X6, X6 + 0.5]),
        times=[0.0, 0.1],
        weights=np.full(6, 1 / 6),
        positions=None,
        method="rk4",
        h=0.05,
        rtol=1e-6,
        atol=1e-9,
        ivp_method="DOP853",
        on_blowup="stop",
        max_steps=100,
    ),
    ("integrate", "solve_batch"): dict(
        f=_decay, y0=np.ones((2, 3)), times=[0.0, 0.5], rtol=1e-6, atol=1e-9, max_steps=1000, stop=None
    ),
    # panels=() writes nothing: the arguments are checked all the same
    ("official", "write_histogram_cache"): dict(path=TMP_CACHE, panels=(), runs=None, log=None),
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
                out.append((m, n, arg, params[arg].default is None, params[arg].annotation))
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


def _not_wrong(arg, value, default_is_none, annotation=""):
    """Values that are valid for this argument (not drawn as wrong): None where the default is
    None or the type hint allows it, a callable where the hint says Callable (or for the
    callable arguments without hints), any string for a file ``path``, inf for ``p`` and
    ``max_step``."""
    annotation = str(annotation)
    if value is None and (default_is_none or "None" in annotation):
        return True
    if callable(value) and ("Callable" in annotation or arg in {"fun", "energy", "affine", "rhs", "rhs_for"}):
        return True
    if arg == "path" and isinstance(value, str):
        return True  # a file name (a missing file is FileNotFoundError, naming it)
    if arg == "runs" and value == {}:
        return True  # no run given
    return arg in {"p", "max_step"} and isinstance(value, float) and value == float("inf")


@pytest.mark.parametrize(
    "module,name,arg,default_is_none,annotation", CASES, ids=[f"{m}.{n}-{a}" for m, n, a, _, _ in CASES]
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
def test_wrong_kind_is_rejected_naming_the_argument(module, name, arg, default_is_none, annotation, wrong):
    assume(not _not_wrong(arg, wrong, default_is_none, annotation))
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


# ---- the public methods of the public classes ------------------------------------------------

MEAN = np.array([0.0, 0.1])
TRAJ = tp.simulate(SOFT, MU, [0.0, 0.1, 0.2], h=0.05)
ENSEMBLE = tp.simulate_batch(SOFT, np.stack([X6, X6 + 0.5]), [0.0, 0.1, 0.2], h=0.05)
GTRAJ = tp.simulate_gaussian(SOFT, G0, [0.0, 0.1])
GBATCH = tp.simulate_gaussian_batch(SOFT, np.stack([S2, I2]), [0.0, 0.1])
FLOW = tp.meanfield.gaussian_affine_flow(_affine, G0, [0.0, 0.1])
RATE = tp.meanfield.fit_rate([1.0, 2.0, 4.0, 8.0], [1.0, 0.5, 0.26, 0.12])
EXPERIMENT = tp.official.paper_experiment("E1")
E1_VARIANT = next(iter(EXPERIMENT.runs))
COUNTER = tp.clustering.Counterexamples(
    survey=tp.clustering.blowup_survey(np.stack([I2]), np.stack([I2]), I2, horizon=2.0),
    margin=0.05,
    V_kind="spd",
    seed=0,
)
HEADS = tp.MultiHead([SOFT, tp.Softmax(-0.1 * I2, I2)])
SINK = tp.Sinkhorn(SYM, I2)
L2_ATT = tp.L2(I2, I2, I2)
SIG = tp.Sigmoid(SYM, I2)
LIN = tp.Linear(SYM, I2)
UNNORM = tp.Unnormalised(SYM, I2)


def _closure_args():
    return dict(mean=MEAN, cov=S2, t=0.0)


#: ``(module, class, method) -> (instance or class, valid kwargs)``
METHODS = {
    ("clustering", "Counterexamples", "example"): (COUNTER, dict(k=0)),
    ("meanfield", "AffineFlow", "apply"): (FLOW, dict(points=X6, k=-1)),
    ("meanfield", "RateFit", "contains"): (RATE, dict(value=-1.0)),
    ("gaussian", "GaussianTrajectory", "gaussian"): (GTRAJ, dict(k=1)),
    ("gaussian", "GaussianBatch", "gaussian"): (GBATCH, dict(b=1, k=0)),
    ("measures", "Empirical", "with_points"): (MU, dict(points=X6 + 1.0)),
    ("measures", "Gaussian", "sample"): (G0, dict(n=5, seed=0, positions=np.linspace(0, 1, 5))),
    ("measures", "Gaussian", "from_empirical"): (tp.Gaussian, dict(mu=MU)),
    ("attention", "Attention", "velocity"): (SOFT, dict(mu=MU, t=0.0)),
    ("attention", "Attention", "check_gaussian"): (SOFT, _closure_args()),
    ("attention", "Attention", "support_radius"): (SOFT, dict(T=0.5, R0=1.0, times=[0.0, 0.5])),
    ("attention", "Softmax", "from_qk"): (tp.Softmax, dict(Q=I2, K=SYM, V=I2, causal=False)),
    ("attention", "Softmax", "gaussian_rhs"): (SOFT, _closure_args()),
    ("attention", "Softmax", "growth_rate"): (SOFT, dict(t=0.0)),
    ("attention", "Softmax", "log_lipschitz"): (SOFT, dict(R=1.0, t=0.0)),
    ("attention", "Softmax", "mobility"): (SOFT, dict(t=0.0)),
    ("attention", "MultiHead", "gaussian_rhs"): (HEADS, _closure_args()),
    ("attention", "MultiHead", "growth_rate"): (HEADS, dict(t=0.0)),
    ("attention", "MultiHead", "support_radius"): (HEADS, dict(T=0.5, R0=1.0, times=[0.0, 0.5])),
    ("attention", "MultiHead", "log_lipschitz"): (HEADS, dict(R=1.0, t=0.0)),
    ("attention", "L2", "gaussian_rhs"): (L2_ATT, _closure_args()),
    ("attention", "L2", "growth_rate"): (L2_ATT, dict(t=0.0)),
    ("attention", "L2", "log_lipschitz"): (L2_ATT, dict(R=1.0, t=0.0)),
    ("attention", "Sinkhorn", "potentials"): (SINK, dict(mu=MU, t=0.0)),
    ("attention", "Sinkhorn", "plan"): (SINK, dict(mu=MU, t=0.0)),
    ("attention", "Sinkhorn", "gaussian_rhs"): (SINK, _closure_args()),
    ("attention", "Sinkhorn", "growth_rate"): (SINK, dict(t=0.0)),
    ("attention", "Sinkhorn", "mobility"): (SINK, dict(t=0.0)),
    ("attention", "Sigmoid", "growth_rate"): (SIG, dict(t=0.0)),
    ("attention", "Sigmoid", "log_lipschitz"): (SIG, dict(R=1.0, t=0.0)),
    ("attention", "Linear", "gaussian_rhs"): (LIN, _closure_args()),
    ("attention", "Linear", "growth_rate"): (LIN, dict(t=0.0)),
    ("attention", "Linear", "support_radius"): (LIN, dict(T=0.1, R0=1.0, times=[0.0, 0.1])),
    ("attention", "Linear", "log_lipschitz"): (LIN, dict(R=1.0, t=0.0)),
    ("attention", "Unnormalised", "mobility"): (UNNORM, dict(t=0.0)),
    ("official", "PaperExperiment", "parameters"): (EXPERIMENT, dict(variant=E1_VARIANT)),
    ("official", "PaperExperiment", "attention"): (EXPERIMENT, dict(variant=E1_VARIANT)),
    ("official", "PaperExperiment", "rhs"): (EXPERIMENT, dict(variant=E1_VARIANT)),
    ("official", "PaperExperiment", "label"): (EXPERIMENT, dict(variant=E1_VARIANT)),
    ("official", "PaperExperiment", "inits"): (EXPERIMENT, dict(n_u=2, n_c=2)),
    ("official", "PaperExperiment", "euler"): (
        EXPERIMENT,
        dict(variant=E1_VARIANT, n_u=2, n_c=2, max_iter=5, record_every=1),
    ),
    ("official", "PaperExperiment", "accurate"): (
        EXPERIMENT,
        dict(variant=E1_VARIANT, times=[0.0, 0.1], n_u=2, n_c=2, rtol=1e-6, atol=1e-9),
    ),
    ("particles", "Trajectory", "measure"): (TRAJ, dict(k=1)),
    ("ensembles", "Ensemble", "member"): (ENSEMBLE, dict(b=1)),
}

#: public methods with arguments that are not entry points, and why
NOT_ENTRY_POINTS = {
    "field": "the hook velocity calls on data it has validated (the protocol)",
    "field_batch": "the hook simulate_batch calls on data it has validated (the protocol)",
    "velocity@HasVelocity": "a typing Protocol, no code",
    "gaussian_rhs@Attention": "raises NotImplementedError naming the variant (no closure)",
    "growth_rate@Attention": "raises NotImplementedError naming the variant",
    "log_lipschitz@Attention": "raises NotImplementedError naming the variant",
    "mobility@Attention": "raises NotImplementedError naming the variant",
    "log_lipschitz@Sinkhorn": "raises NotImplementedError (not derived in the book)",
    "gaussian_rhs@Sigmoid": "raises NotImplementedError (sigmoid does not preserve Gaussians)",
}


def _public_methods():
    out, seen = [], set()
    for pkg in PACKAGES:
        mod = importlib.import_module(f"tpde_lib.{pkg}")
        for cname in mod.__all__:
            cls = getattr(mod, cname)
            if not inspect.isclass(cls) or cls in seen:
                continue
            seen.add(cls)
            for mname, v in vars(cls).items():
                func = v.__func__ if isinstance(v, (classmethod, staticmethod)) else v
                if mname.startswith("_") or not inspect.isfunction(func):
                    continue
                params = [p for p in inspect.signature(func).parameters if p not in ("self", "cls")]
                if params and mname not in NOT_ENTRY_POINTS and f"{mname}@{cname}" not in NOT_ENTRY_POINTS:
                    out.append((pkg, cname, mname))
    return out


PUBLIC_METHODS = _public_methods()


def test_every_public_method_has_valid_arguments():
    missing = [".".join(k) for k in PUBLIC_METHODS if k not in METHODS]
    assert not missing, f"add valid arguments to METHODS for {missing}"
    stale = [".".join(k) for k in METHODS if k not in PUBLIC_METHODS]
    assert not stale, f"METHODS lists methods that are no longer public: {stale}"


@pytest.mark.parametrize("key", list(METHODS), ids=[".".join(k) for k in METHODS])
def test_valid_method_arguments_are_accepted(key):
    obj, kwargs = METHODS[key]
    getattr(obj, key[2])(**kwargs)


def _method_cases():
    out = []
    for key, (obj, kwargs) in METHODS.items():
        params = inspect.signature(getattr(obj, key[2])).parameters
        for arg in kwargs:
            out.append((key, arg, params[arg].default is None, params[arg].annotation))
    return out


METHOD_CASES = _method_cases()


@pytest.mark.parametrize(
    "key,arg,default_is_none,annotation",
    METHOD_CASES,
    ids=[f"{'.'.join(k)}-{a}" for k, a, _, _ in METHOD_CASES],
)
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(wrong=WRONG)
@example(wrong=None)
@example(wrong="abc")
@example(wrong=1j)
@example(wrong=float("nan"))
@example(wrong=[["x"]])
@example(wrong=_Opaque())
def test_wrong_kind_is_rejected_by_methods_naming_the_argument(key, arg, default_is_none, annotation, wrong):
    assume(not _not_wrong(arg, wrong, default_is_none, annotation))
    obj, kwargs = METHODS[key]
    kwargs = dict(kwargs)
    kwargs[arg] = wrong
    with pytest.raises((TypeError, ValueError)) as info:
        getattr(obj, key[2])(**kwargs)
    message = str(info.value)
    assert re.search(rf"(?<![A-Za-z0-9_]){re.escape(arg)}(?![A-Za-z0-9_])", message), (
        f"{'.'.join(key)}({arg}={wrong!r:.40}) raised {type(info.value).__name__} not naming "
        f"{arg!r}: {message!r:.300}"
    )


class _ReaderVariant(tp.Attention):
    """A reader's variant with its own stability constants (no checks of its own)."""

    d = 2

    def field(self, points, weights, positions, t):
        return -points

    def growth_rate(self, t=0.0):
        return 1.0

    def log_lipschitz(self, R, t=0.0):
        return np.log(R), np.log(R)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda a: a.log_lipschitz(-1.0), "R"),
        (lambda a: a.log_lipschitz(R=float("nan")), "R"),
        (lambda a: a.log_lipschitz(1.0, t="0"), "t"),
        (lambda a: a.growth_rate(float("inf")), "t"),
        (lambda a: a.support_radius(-1.0, 1.0, [0.0]), "T"),
        (lambda a: a.support_radius(1.0, 0.0, [0.0]), "R0"),
        (lambda a: a.support_radius(1.0, 1.0, [[0.0], [1.0, 2.0]]), "times"),
    ],
)
def test_a_readers_stability_methods_get_their_arguments_checked(call, name):
    # the protocol guard checks t, R, R0, T and times before the reader's formula runs (it
    # returned log(-1) = nan for R = -1); valid calls are untouched
    att = _ReaderVariant()
    assert att.log_lipschitz(2.0) == (np.log(2.0), np.log(2.0))
    assert att.support_radius(1.0, 1.0, [0.0, 1.0]) == pytest.approx(np.e, rel=1e-15)
    with pytest.raises((TypeError, ValueError), match=rf"\b{name}\b"):
        call(att)


@pytest.mark.parametrize(
    "S,error",
    [(S2 * 1j, TypeError), (np.eye(3), ValueError), (np.stack([S2] * 3), ValueError), ("S", TypeError)],
)
def test_covariance_rhs_checks_its_covariances(S, error):
    # the closure handed to projected_euler: a complex S lost its imaginary part (numpy's cast), a
    # (3, 3) S was reported as a bad A, and 3 covariances for 2 attentions were not caught
    rhs = tp.gaussian.covariance_rhs([SOFT, tp.Softmax(-0.1 * I2, I2)])
    assert rhs(np.stack([S2, I2])).shape == (2, 2, 2)
    with pytest.raises(error, match=r"\bS\b"):
        rhs(S)
