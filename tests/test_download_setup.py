"""The set-up cell that _ext/download_setup.py puts first in each downloadable notebook."""

import sys
from pathlib import Path

import nbformat
from IPython.core.inputtransformer2 import TransformerManager

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_ext"))
import download_setup as ds  # noqa: E402

URL = "https://github.com/tpde-book/transformer-pde"


class FakeShell:
    def __init__(self):
        self.magics = []

    def run_line_magic(self, name, line):
        self.magics.append((name, line))


def run_setup(source, importable):
    """Run the cell as IPython would (magics transformed), with tpde_lib importable or not."""
    code = TransformerManager().transform_cell(source)
    shell = FakeShell()
    saved = sys.modules.get("tpde_lib")
    if not importable:
        sys.modules["tpde_lib"] = None   # makes `import tpde_lib` raise ImportError
    try:
        exec(compile(code, "<setup>", "exec"), {"get_ipython": lambda: shell})
    finally:
        if saved is not None:
            sys.modules["tpde_lib"] = saved
        else:
            sys.modules.pop("tpde_lib", None)
    return shell.magics


def test_setup_installs_from_the_repository_only_when_missing():
    source = ds.setup_source(URL, "main")
    assert run_setup(source, importable=True) == []
    assert run_setup(source, importable=False) == [
        ("pip", f'install --quiet "tpde_lib @ git+{URL}@main"')]
    assert "live panels" in source and "tpde_lib.widgets.explore" in source


def test_setup_without_a_repository_explains_instead():
    source = ds.setup_source(None)
    try:
        run_setup(source, importable=False)
    except ImportError as exc:
        assert "install the book's repository" in str(exc)
    else:
        raise AssertionError("expected an ImportError explaining how to install tpde_lib")


def test_cell_added_first_and_once():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Chapter")])
    assert ds.add_setup_cell(nb, ds.setup_source(URL))
    assert not ds.add_setup_cell(nb, ds.setup_source(URL))
    assert [c.cell_type for c in nb.cells] == ["code", "markdown"]
    nbformat.validate(nb)
    old = nbformat.v4.new_notebook(cells=[])
    old.nbformat_minor = 4  # before cell ids
    ds.add_setup_cell(old, "pass")
    assert "id" not in old.cells[0]
