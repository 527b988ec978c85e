"""The nbval plugin for MyST chapters: a failing assert fails and names its cell; a good one passes."""

import textwrap

# jupyter-cache (and its SQLAlchemy) imported once, here, before any of pytester's in-process
# runs: each run forgets the modules first imported during it, and a second import of
# SQLAlchemy beside the remains of the first (its compiled extensions stay loaded) failed with
# "'InternalTraversal' object is not callable" when this file ran as a whole
import jupyter_cache  # noqa: F401
import jupyter_cache.base  # noqa: F401
import jupyter_cache.cache.db  # noqa: F401

from tests.nbmyst import is_myst_notebook, toc_files

HEADER = textwrap.dedent("""\
    ---
    jupytext:
      text_representation: {extension: .md, format_name: myst}
    kernelspec: {display_name: Python 3, language: python, name: python3}
    ---

    # A fixture chapter
    """)


def chapter(*cells):
    body = "".join(f"\n```{{code-cell}} ipython3\n{c}\n```\n" for c in cells)
    return HEADER + body


ARGS = ("-p", "tests.nbmyst", "--nbval-lax", "--nbval-current-env", "-p", "no:cacheprovider")


def test_failing_assert_is_reported_as_failure_naming_its_cell(pytester):
    pytester.makefile(".md", bad=chapter("x = 1", "assert x == 2, 'x is not two'"))
    result = pytester.runpytest(*ARGS, "-rf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*bad.md::Cell 1*"])
    result.stdout.fnmatch_lines(["*x is not two*"])


def test_passing_chapter_passes_and_runs_in_its_own_folder(pytester):
    sub = pytester.mkdir("chapters")
    (sub / "data.txt").write_text("42")
    (sub / "good.md").write_text(
        chapter(
            "value = int(open('data.txt').read())",  # relative path: kernel cwd is the chapter's folder
            "assert value == 42",
        )
    )
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(passed=2)


def test_only_chapters_listed_in_toc_are_collected(pytester):
    pytester.makefile(".yml", _toc="format: jb-book\nroot: listed\n")
    pytester.makefile(".md", listed=chapter("assert True"))
    pytester.makefile(".md", unlisted=chapter("raise RuntimeError('must not run')"))
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(passed=1)


def test_plain_markdown_is_not_a_notebook(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Just text\n")
    nb = tmp_path / "nb.md"
    nb.write_text(chapter("1 + 1"))
    assert not is_myst_notebook(page)
    assert is_myst_notebook(nb)


def test_toc_of_this_book_lists_only_existing_pages():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    listed = toc_files(root)
    assert listed, "the book's _toc.yml lists no page"
    missing = [str(p) for p in listed if not p.exists()]
    assert not missing, f"_toc.yml lists pages that do not exist: {missing}"


# ---- reuse of the book build's execution (jupyter-cache) ------------------------------------


def store_execution(root, name, source, fingerprint=None, outputs=None, widgets=None):
    """Put an 'executed' copy of chapter ``name`` in ``root``'s jupyter-cache, as the book build
    would (outputs given per code cell), tagged with ``fingerprint`` (default: the current one)."""
    import jupytext
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    from tests.nbmyst import execution_cache

    path = root / name
    path.write_text(source)
    nb = jupytext.read(str(path))
    code = [c for c in nb.cells if c.cell_type == "code"]
    for cell, out in zip(code, outputs or [[] for _ in code]):
        cell.outputs = [nbformat.from_dict(o) for o in out]
        cell.execution_count = 1
    if widgets:
        nb.metadata["widgets"] = {
            "application/vnd.jupyter.widget-state+json": {
                "state": widgets,
                "version_major": 2,
                "version_minor": 0,
            }
        }
    tag = execution_cache.fingerprint(root) if fingerprint is None else fingerprint
    get_cache(str(root / "_build" / ".jupyter_cache")).cache_notebook_bundle(
        CacheBundleIn(nb, str(path), data={execution_cache.KEY: tag}), check_validity=False
    )
    return path


SIDE_EFFECT = "open('ran.txt', 'w').write('ran')"


def test_stored_execution_of_current_code_is_reused_not_executed(pytester):
    store_execution(pytester.path, "ch.md", chapter(SIDE_EFFECT, "assert True"))
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(passed=3)  # two cells and the widget check
    result.stdout.fnmatch_lines(["*checked in the book build's execution: ch.md*"])
    assert not (pytester.path / "ran.txt").exists()


def test_stored_execution_of_other_code_is_not_reused(pytester):
    store_execution(
        pytester.path, "ch.md", chapter("assert False, 'executed by nbval'"), fingerprint="another library"
    )
    result = pytester.runpytest(*ARGS, "-rf")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*executed by nbval*", "*executed: ch.md (under nbval*fingerprint differs*"])


def test_changed_source_is_executed(pytester):
    path = store_execution(pytester.path, "ch.md", chapter("x = 1"))
    path.write_text(chapter("x = 1", "assert x == 2, 'new cell ran'"))
    result = pytester.runpytest(*ARGS, "-rf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*new cell ran*"])


def test_nbmyst_execute_ignores_the_stored_execution(pytester):
    store_execution(pytester.path, "ch.md", chapter(SIDE_EFFECT))
    result = pytester.runpytest(*ARGS, "--nbmyst-execute")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "ran.txt").read_text() == "ran"


def test_error_inside_a_stored_widget_fails(pytester):
    error = {"output_type": "error", "ename": "ValueError", "evalue": "bad slider value", "traceback": []}
    widgets = {"m1": {"model_name": "OutputModel", "state": {"outputs": [error]}}}
    store_execution(pytester.path, "ch.md", chapter("x = 1"), widgets=widgets)
    result = pytester.runpytest(*ARGS, "-rf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*widget outputs*", "*ValueError: bad slider value*"])


def test_stored_cell_tagged_raises_exception_must_show_an_error(pytester):
    tagged = "---\ntags: [raises-exception]\n---\n1 / 0"
    source = HEADER + f"\n```{{code-cell}} ipython3\n{tagged}\n```\n"
    error = {
        "output_type": "error",
        "ename": "ZeroDivisionError",
        "evalue": "division by zero",
        "traceback": [],
    }
    store_execution(pytester.path, "ok.md", source, outputs=[[error]])
    store_execution(pytester.path, "bad.md", source.replace("1 / 0", "1 / 1"), outputs=[[]])
    result = pytester.runpytest(*ARGS, "-rf")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*bad.md*raises-exception*"])


def test_fingerprint_follows_the_pinned_environment_only(tmp_path, monkeypatch):
    """A tool installed beside the book (Playwright for the browser check) leaves the stored
    executions valid; a pinned distribution at another version, or missing, invalidates them."""
    from tests.nbmyst import execution_cache as ec

    pins = tmp_path / "requirements.txt"
    pins.write_text("# a comment\nNumPy==2.0.0\nsphinx_proof[x] == 0.4.0\n-e .\n./_ext\n")
    assert ec.pinned_names((pins,)) == ["numpy", "sphinx-proof"]

    installed = {"numpy": "2.0.0", "sphinx-proof": "0.4.0", "playwright": "1.0"}
    monkeypatch.setattr(ec, "pinned_names", lambda files=ec.PIN_FILES: ["numpy", "sphinx-proof"])
    monkeypatch.setattr(ec, "_installed_version", lambda name: installed.get(name, "absent"))
    before = ec.fingerprint(tmp_path)
    installed["playwright"] = "2.0"
    installed["greenlet"] = "3.0"
    assert ec.fingerprint(tmp_path) == before
    installed["numpy"] = "2.0.1"
    assert ec.fingerprint(tmp_path) != before
    del installed["numpy"]
    assert ec.fingerprint(tmp_path) != before
