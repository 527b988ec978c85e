"""The set-up cell that _ext/download_setup.py puts first in each downloadable notebook."""

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_ext"))
import download_setup as ds  # noqa: E402

URL = "https://github.com/tpde-book/transformer-pde"
SHA = "0123456789abcdef0123456789abcdef01234567"


class FakeShell:
    """Records the magics a cell runs; `install` decides whether the %pip install succeeds."""

    def __init__(self, on_pip=None):
        self.magics = []
        self.on_pip = on_pip

    def run_line_magic(self, name, line):
        self.magics.append((name, line))
        if self.on_pip:
            self.on_pip()


def run_setup(source, versions, importable=True, on_pip=None, monkeypatch=None):
    """Run the cell as IPython would, with the given installed versions of the two packages."""
    import importlib.metadata as md

    def version(name):
        if name not in versions:
            raise md.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(md, "version", version)
    if not importable:
        monkeypatch.setitem(sys.modules, "tpde_lib", None)  # `import tpde_lib` raises ImportError
    shell = FakeShell(on_pip)
    code = TransformerManager().transform_cell(source)
    exec(compile(code, "<setup>", "exec"), {"get_ipython": lambda: shell})
    return shell.magics


def test_the_cell_pins_a_commit_or_tag_never_a_branch():
    source = ds.setup_source(URL, SHA, "1.0.0")
    assert f"git+{URL}@{SHA}" in source and "@main" not in source
    assert f"tpde_book @ git+{URL}@{SHA}#subdirectory=_ext" in source
    for branch in ("main", "master", "HEAD", ""):
        with pytest.raises(ValueError, match="ref"):
            ds.setup_source(URL, branch, "1.0.0")
    with pytest.raises(ValueError, match="repo_url"):
        ds.setup_source(None, SHA, "1.0.0")


def test_installs_only_when_the_version_differs(monkeypatch):
    import tpde_lib

    source = ds.setup_source(URL, SHA, tpde_lib.__version__)
    same = {"tpde_lib": tpde_lib.__version__, "tpde_book": tpde_lib.__version__}
    assert run_setup(source, same, monkeypatch=monkeypatch) == []
    older = {"tpde_lib": "0.9.0", "tpde_book": tpde_lib.__version__}
    magics = run_setup(source, older, monkeypatch=monkeypatch)
    assert magics == [
        (
            "pip",
            f'install --quiet "tpde_lib[widgets] @ git+{URL}@{SHA}" '
            f'"tpde_book @ git+{URL}@{SHA}#subdirectory=_ext"',
        )
    ]
    assert len(run_setup(source, {}, monkeypatch=monkeypatch)) == 1  # nothing installed


def test_a_failed_install_stops_with_a_clear_message(monkeypatch):
    source = ds.setup_source(URL, SHA, "1.0.0")
    with pytest.raises(RuntimeError, match="could not be installed.*pip install"):
        run_setup(source, {}, importable=False, monkeypatch=monkeypatch)


def test_build_ref_is_the_tag_on_a_release_and_the_commit_otherwise(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    assert ds.build_ref(tmp_path, "1.0.0") == "v1.0.0"  # not a checkout: the release tag
    git("init", "-q")
    (tmp_path / "f").write_text("x")
    git("add", "f")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert ds.build_ref(tmp_path, "1.0.0") == head
    git("tag", "v1.0.0")
    assert ds.build_ref(tmp_path, "1.0.0") == "v1.0.0"
    assert ds.build_ref(tmp_path, "1.0.1") == head


def test_colab_opens_the_notebooks_branch():
    assert ds.colab_url(URL, "chapters/01_transformer_pde") == (
        "https://colab.research.google.com/github/tpde-book/transformer-pde/blob/notebooks/"
        "chapters/01_transformer_pde.ipynb"
    )
    assert ds.colab_url("https://gitlab.com/a/b", "x") is None


def test_cell_added_first_and_once():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Chapter")])
    assert ds.add_setup_cell(nb, ds.setup_source(URL, SHA, "1.0.0"))
    assert not ds.add_setup_cell(nb, ds.setup_source(URL, SHA, "1.0.0"))
    assert [c.cell_type for c in nb.cells] == ["code", "markdown"]
    nbformat.validate(nb)
    old = nbformat.v4.new_notebook(cells=[])
    old.nbformat_minor = 4  # before cell ids
    ds.add_setup_cell(old, "pass")
    assert "id" not in old.cells[0]
