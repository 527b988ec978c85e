"""The library's layers (CONTRIBUTING.md, "Layers"): the import-linter contract of pyproject.toml
holds, fails on an upward import, and every module imports on its own.

"Imports on its own" is what an import cycle breaks: with a cycle, importing one module of it
first reaches a module that is only half initialised, and it works only when another module (the
package root's ``__init__``) happens to be imported first. So each submodule is imported here as
the first module of the library, with the root ``__init__`` bypassed (a bare package object
stands in for ``tpde_lib``, as in ``tests/test_attention.py``).
"""

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import tpde_lib

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIB = pathlib.Path(tpde_lib.__file__).parent
LINT_IMPORTS = pathlib.Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")


def _lint_imports(cwd, config):
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(config), "--no-cache"],
        cwd=cwd,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_layers_contract_is_kept():
    run = _lint_imports(ROOT, ROOT / "pyproject.toml")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 kept, 0 broken" in run.stdout


@pytest.mark.parametrize(
    ("module", "planted"),
    [
        ("measures.py", "from .gaussian import simulate_gaussian  # planted: two layers up\n"),
        ("attention/_base.py", "from ..particles import simulate  # planted: one layer up\n"),
        ("gaussian/_layer.py", "from ..clustering import numerical_rank  # planted: as it was\n"),
        ("meanfield/_rates.py", "from ..energy import mobility  # planted: a sibling\n"),
    ],
)
def test_an_upward_import_breaks_the_contract(tmp_path, module, planted):
    # a copy of the library and of the contract, one import planted in it: lint-imports fails
    # and names the import (the copy is found first: it is on PYTHONPATH, run from its folder)
    shutil.copytree(LIB, tmp_path / "tpde_lib", ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "tpde_lib" / module
    target.write_text(target.read_text(encoding="utf-8") + planted, encoding="utf-8")
    run = _lint_imports(tmp_path, tmp_path / "pyproject.toml")
    assert run.returncode != 0, run.stdout
    assert "0 kept, 1 broken" in run.stdout
    importer = "tpde_lib." + module.removesuffix(".py").replace("/", ".")
    assert importer in run.stdout, run.stdout


def _submodules():
    names = []
    for path in sorted(LIB.rglob("*.py")):
        parts = path.relative_to(LIB.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) > 1:
            names.append(".".join(parts))
    return names


_FIRST_IMPORTS = """
import importlib, sys, traceback, types
failed = []
for name in {names!r}:
    for key in [k for k in sys.modules if k == "tpde_lib" or k.startswith("tpde_lib.")]:
        del sys.modules[key]
    pkg = types.ModuleType("tpde_lib")  # the root package without its __init__
    pkg.__path__ = [{lib!r}]
    sys.modules["tpde_lib"] = pkg
    try:
        importlib.import_module(name)
    except Exception:
        failed.append(name + ": " + traceback.format_exc(limit=-3))
print("\\n".join(failed) or "ok")
"""


def test_every_submodule_imports_first_with_the_root_init_bypassed():
    # one process; before each module, every tpde_lib module is forgotten (numpy and the
    # others stay loaded: only the library's own import order matters here)
    names = _submodules()
    assert "tpde_lib.integrate" in names and "tpde_lib.attention._kernels" in names
    code = _FIRST_IMPORTS.format(names=names, lib=str(LIB))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok", run.stdout


@pytest.mark.parametrize("module", ["tpde_lib.integrate", "tpde_lib.gaussian", "tpde_lib.clustering"])
def test_a_module_of_the_former_cycle_imports_first_in_a_fresh_process(module):
    # attention -> gaussian -> integrate -> attention was the cycle: each of them first, in a
    # process of its own, the root __init__ bypassed
    code = _FIRST_IMPORTS.format(names=[module], lib=str(LIB))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr


def test_each_public_name_of_a_package_is_written_once():
    """A subpackage's ``__init__`` imports its public names; its ``__all__`` is derived from
    them (``_exports.public_names``), never written out a second time, and every name it
    exports is one its ``__init__`` bound."""
    import importlib
    import types

    packages = sorted(p.parent.name for p in LIB.glob("*/__init__.py"))
    assert {"attention", "gaussian", "viz"} <= set(packages)
    for name in packages:
        source = (LIB / name / "__init__.py").read_text()
        assert not re.search(r'__all__ = \[\s*"', source), f"tpde_lib.{name} writes its __all__ out"
        mod = importlib.import_module(f"tpde_lib.{name}")
        bound = [
            n
            for n, obj in vars(mod).items()
            if not n.startswith("_") and not isinstance(obj, types.ModuleType)
        ]
        assert mod.__all__ == bound and mod.__all__, name
    # the root: the names it imports, then the three subpackages of the public API
    root = (LIB / "__init__.py").read_text()
    assert not re.search(r'__all__ = \[\s*"', root)
    names = [n for n, obj in vars(tpde_lib).items() if not n.startswith("_")]
    imported = [n for n in names if not isinstance(getattr(tpde_lib, n), types.ModuleType)]
    assert tpde_lib.__all__ == [*imported, "official", "meanfield", "sphere"]
