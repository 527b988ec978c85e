"""``import tpde_lib`` stays light: the heavy modules load when a function first needs them."""

import subprocess
import sys

HEAVY = (
    "scipy.stats",
    "scipy.integrate",
    "matplotlib",
    "matplotlib.pyplot",
    "ot",
    "ipywidgets",
    "IPython",
    "jax",
    "torch",
)


def test_import_loads_no_heavy_module():
    code = f"import sys, tpde_lib; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_subpackages_load_on_first_access_and_the_heavy_ones_then():
    code = (
        "import sys, tpde_lib as tp; tp.viz.draw_ellipses; tp.energy.interaction_energy; "
        "import numpy as np; tp.wasserstein(tp.Empirical(np.zeros((2, 2))), "
        "tp.Empirical(np.ones((3, 2)))); "
        "print('matplotlib' in sys.modules, 'ot' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]
