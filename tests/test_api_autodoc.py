"""The API reference's bookkeeping (_ext/api_autodoc.py): one home per public object."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("sphinx")

_spec = importlib.util.spec_from_file_location(
    "api_autodoc", Path(__file__).resolve().parents[1] / "_ext" / "api_autodoc.py"
)
api_autodoc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(api_autodoc)


@pytest.fixture(scope="module")
def catalogue():
    return api_autodoc.catalogue()


def test_every_public_object_is_documented_once_and_every_export_reaches_it(catalogue):
    pages, aliases, _ = catalogue
    own = [f"{mod}.{name}" for mod, page in pages.items() for name, _, _ in page["own"]]
    assert len(own) == len(set(own))
    for mod, page in pages.items():
        for target in page["elsewhere"]:
            assert target in own, f"{mod} lists {target}, documented nowhere"
    assert set(aliases.values()) <= set(own)
    # the root re-exports only: every root name has its home in a submodule
    assert not pages["tpde_lib"]["own"]
    import inspect

    import tpde_lib as tp

    for name in tp.__all__:
        if not inspect.ismodule(getattr(tp, name)):  # a module is a page, not an entry
            assert f"tpde_lib.{name}" in aliases


def test_home_is_the_defining_public_module_or_the_package_exporting_a_private_one():
    class Obj:
        pass

    Obj.__module__, Obj.__name__ = "tpde_lib.energy._metric", "Obj"
    places = [("tpde_lib", "Obj"), ("tpde_lib.energy", "Obj")]
    assert api_autodoc._home(Obj, places) == ("tpde_lib.energy", "Obj")
    Obj.__module__ = "tpde_lib.transport"
    assert api_autodoc._home(Obj, places + [("tpde_lib.transport", "Obj")]) == ("tpde_lib.transport", "Obj")


def test_references_to_a_reexport_resolve_to_the_home():
    aliases = {
        "tpde_lib.simulate": "tpde_lib.particles.simulate",
        "tpde_lib.Sinkhorn": "tpde_lib.attention.Sinkhorn",
    }
    home = api_autodoc._home_of
    assert home("tpde_lib.simulate", aliases) == "tpde_lib.particles.simulate"
    assert home("tpde_lib.Sinkhorn.gaussian_rhs", aliases) == "tpde_lib.attention.Sinkhorn.gaussian_rhs"
    assert home("simulate", aliases, module="tpde_lib") == "tpde_lib.particles.simulate"
    assert home("tpde_lib.missing", aliases) is None
    assert home("simulate", aliases) is None  # no module context: not guessed


def test_myst_roles_in_docstrings_become_rest_roles():
    lines = ["see {eq}`eq-closure` and {math}`x^2`", "``{x}`` and ``f'{a}'`` stay"]
    api_autodoc._myst_roles(None, "function", "f", None, {}, lines)
    assert lines == ["see :eq:`eq-closure` and :math:`x^2`", "``{x}`` and ``f'{a}'`` stay"]
