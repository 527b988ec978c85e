"""The nbval plugin for MyST chapters: a failing assert fails and names its cell; a good one passes."""

import textwrap

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
    (sub / "good.md").write_text(chapter(
        "value = int(open('data.txt').read())",  # relative path: kernel cwd is the chapter's folder
        "assert value == 42"))
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
