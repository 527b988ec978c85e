"""The release facts a page may show, each from its one source.

- ``{{ version }}``: ``tpde_lib.__version__`` (also Sphinx's ``version`` and ``release``);
- ``{{ repository }}``: ``repository.url`` of ``_config.yml`` (the only place it is written);
- ``{{ book_url }}``: where the publishing workflow deploys the book, the GitHub Pages address of
  that repository (``https://<org>.github.io/<repo>/``).

The placeholders are replaced in a page's source before it is parsed, so they also work inside
code blocks (the landing page's citation and install line), where MyST substitutions do not.
"""

from __future__ import annotations

PLACEHOLDERS = ("version", "repository", "book_url")


def pages_url(repo_url: str) -> str:
    """GitHub Pages' address of the repository ``https://github.com/<org>/<repo>``."""
    parts = repo_url.rstrip("/").split("/")
    if len(parts) != 5 or parts[:3] != ["https:", "", "github.com"]:
        raise ValueError(f"repository.url: expected https://github.com/<org>/<repo>, got {repo_url!r}")
    return f"https://{parts[3].lower()}.github.io/{parts[4]}/"


def facts(repo_url: str) -> dict[str, str]:
    """The values of the placeholders for a book whose repository is ``repo_url``."""
    import tpde_lib

    return {
        "version": tpde_lib.__version__,
        "repository": repo_url.rstrip("/"),
        "book_url": pages_url(repo_url),
    }


def fill_text(text: str, values: dict[str, str]) -> str:
    for key in PLACEHOLDERS:
        text = text.replace("{{ " + key + " }}", values[key])
    return text


def _config_inited(app, config):
    values = facts((config.html_theme_options or {}).get("repository_url", ""))
    config.version = config.release = values["version"]
    app.tpde_release = values


def _source_read(app, docname, source):
    source[0] = fill_text(source[0], app.tpde_release)


def setup(app):
    app.connect("config-inited", _config_inited)
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
