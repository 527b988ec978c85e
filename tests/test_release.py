"""The release is described the same everywhere: one version, one repository URL, the licences."""

import re
import sys
import tomllib
from pathlib import Path

import yaml

import tpde_lib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
import release_info  # noqa: E402

VERSION = tpde_lib.__version__


def test_one_version_everywhere():
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and project["dynamic"] == ["version"]  # read from tpde_lib
    book = tomllib.loads((ROOT / "_ext" / "pyproject.toml").read_text())["project"]
    assert book["version"] == VERSION
    assert yaml.safe_load((ROOT / "CITATION.cff").read_text())["version"] == VERSION
    first_release = re.search(r"^## \[?(\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert first_release and first_release.group(1) == VERSION
    assert f"version {VERSION}" in (ROOT / "README.md").read_text()


def test_one_repository_url():
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"].rstrip("/")
    book = release_info.pages_url(repo)
    readme = (ROOT / "README.md").read_text()
    assert repo in readme and book in readme
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["repository-code"] == repo and cff["url"] == book
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert urls["Source"] == repo and urls["Book"] == book
    intro = (ROOT / "intro.md").read_text()
    assert "{{ repository }}" in intro and "{{ book_url }}" in intro  # filled in at build time
    filled = release_info.fill_text(intro, release_info.facts(repo))
    assert not re.search(r"\{\{ \w+ \}\}", filled) and f"@v{VERSION}" in filled


def test_pages_url_rejects_what_is_not_a_github_repository():
    assert release_info.pages_url("https://github.com/Org/repo") == "https://org.github.io/repo/"
    for bad in ("", "https://gitlab.com/a/b", "https://github.com/a", "https://github.com/a/b/c"):
        try:
            release_info.pages_url(bad)
        except ValueError as exc:
            assert "repository.url" in str(exc)
        else:
            raise AssertionError(bad)


def test_licences_say_which_covers_what():
    text = (ROOT / "LICENSE").read_text()
    assert "BSD 3-Clause License" in text and "CC BY 4.0" in text
    assert "Creative Commons Attribution 4.0" in (ROOT / "LICENSE-BOOK.md").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "BSD-3-Clause" and project["license-files"] == ["LICENSE"]
    assert yaml.safe_load((ROOT / "CITATION.cff").read_text())["references"][0]["url"] == (
        "https://arxiv.org/abs/2501.18322"
    )
