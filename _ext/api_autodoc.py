"""Settings and cross-reference rules for the API reference built by Sphinx's autosummary.

The pages themselves come from ``sphinx.ext.autosummary`` (recursive, ``api/index.md``) with the
templates in ``api/_templates``: one page per public module (no path component starting with
``_``), whatever modules exist at build time. This extension only computes, once per build,
*where* each public object is documented, and tells the tools:

* the *home* of an object is the public module that defines it, or, for an object defined in a
  private module (``tpde_lib.meanfield._samplers``), the deepest public package that exports it;
  the object is documented in full there only (``autosummary_context["api"]``, read by the
  module template); every other module exporting it (the root ``tpde_lib``, a package
  ``__init__``) lists it in a table linking to the home;
* a reference to a re-exported spelling (``{py:func}`tpde_lib.simulate```, or a method through
  it, ``tpde_lib.Sinkhorn.gaussian_rhs``) resolves to the home (``missing-reference``);
* sphinx-codeautolink, which links chapter code by the object's ``__module__.__qualname__``,
  gets a map from that name to the home (``codeautolink_inventory_map``), so a name defined in
  a private module is linked too.

The remaining ``missing-reference`` rules keep a nitpicky (``-n -W``) build clean without
an intersphinx inventory (none is reachable offline): the words of a docstring's free-text
*type* field ("ndarray, shape (n, d)") that name nothing in ``tpde_lib``, built-in exceptions,
and dotted names of other installed libraries render as text. Any other unresolved reference
(a ``tpde_lib`` name that does not exist) still fails the build. Numbered RST footnotes of a
docstring (POT's reference style) become plain "[1]" text, and MyST roles written in a
docstring (``{eq}`label```) the equivalent reST roles (``:eq:`label```).
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import pkgutil
import re

from sphinx.ext.autosummary import autosummary_toc
from sphinx.transforms import SphinxTransform
from sphinx.util import logging

logger = logging.getLogger(__name__)

PACKAGE = "tpde_lib"

_DEFAULTS = {
    "napoleon_use_param": False,
    "napoleon_use_rtype": False,
    "napoleon_numpy_docstring": True,
    "napoleon_google_docstring": False,
    "autodoc_typehints": "none",
    "autodoc_member_order": "bysource",
    "autosummary_generate": True,
    "autosummary_generate_overwrite": True,
    "autosummary_ignore_module_all": False,
    "codeautolink_autodoc_inject": True,
}


def _is_public_module(name):
    return not any(part.startswith("_") for part in name.split("."))


def public_modules(package=PACKAGE):
    """The package and its public submodules, imported, sorted by name."""
    root = importlib.import_module(package)
    mods = {package: root}
    for info in pkgutil.walk_packages(
        root.__path__, prefix=package + ".", onerror=lambda name: logger.warning(f"api: cannot walk {name}")
    ):
        if _is_public_module(info.name):
            try:
                mods[info.name] = importlib.import_module(info.name)
            except Exception as exc:  # a broken module: say so (fails -W), document the rest
                logger.warning(f"api: cannot import {info.name}: {exc!r}")
    return dict(sorted(mods.items()))


def public_names(mod):
    """Public names of a module: ``__all__``, else the functions and classes defined in it."""
    if hasattr(mod, "__all__"):
        missing = [n for n in mod.__all__ if not hasattr(mod, n)]
        if missing:
            logger.warning(f"api: {mod.__name__}.__all__ lists missing names {missing}")
        return [n for n in mod.__all__ if hasattr(mod, n) and not inspect.ismodule(getattr(mod, n))]
    return [
        n
        for n, obj in vars(mod).items()
        if not n.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and getattr(obj, "__module__", None) == mod.__name__
    ]


def _kind(obj):
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    return "function" if callable(obj) else "data"


def _directive(obj):
    """The autodoc directive and options that document ``obj`` in full."""
    kind = _kind(obj)
    if kind == "class":
        options = [":members:", ":inherited-members: tuple, object, dict, list, Exception"]
        fields = getattr(obj, "_fields", None)
        if fields:  # a NamedTuple: its "Attributes" section documents the fields
            options.append(f":exclude-members: {', '.join(fields)}")
        return "autoclass", options
    if kind == "data":
        return "autodata", [":no-value:"]
    return f"auto{kind}", []


def _home(obj, places):
    """The defining public module if it exports the name, else the closest exporting module."""
    defining, own = getattr(obj, "__module__", None), getattr(obj, "__name__", None)
    if (defining, own) in places:
        return defining, own
    if defining:
        inside = [p for p in places if defining.startswith(p[0] + ".")]
        if inside:
            return max(inside, key=lambda p: len(p[0]))
    return min(places, key=lambda p: (p[0] == PACKAGE, p[0].count("."), p))


def catalogue(package=PACKAGE):
    """Per module, what its page shows; the alias -> home and defined-at -> home maps.

    Returns ``(pages, aliases, autolink_map)``: ``pages[module]`` has ``"own"`` (``(name,
    directive, options)`` of the names documented in full there), ``"elsewhere"`` (full homes
    of the names it re-exports) and ``"modules"`` (its public submodules); ``aliases`` maps
    every re-exported spelling to its home and ``autolink_map`` maps ``__module__.__qualname__``
    (and the members of classes) to it.
    """
    modules = public_modules(package)
    places = {}
    for modname, mod in modules.items():
        for name in public_names(mod):
            obj = getattr(mod, name)
            key = id(obj) if _kind(obj) != "data" else (modname, name)  # data: never merged
            places.setdefault(key, (obj, []))[1].append((modname, name))
    pages = {
        m: {
            "own": [],
            "elsewhere": [],
            "modules": [s for s in modules if s.rsplit(".", 1)[0] == m and s != m],
        }
        for m in modules
    }
    aliases, autolink_map = {}, {}
    for obj, where in places.values():
        home = _home(obj, where)
        target = ".".join(home)
        pages[home[0]]["own"].append((home[1], *_directive(obj)))
        for place in where:
            if place != home:
                pages[place[0]]["elsewhere"].append(target)
                aliases[".".join(place)] = target
        defined = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
        if _kind(obj) != "data" and defined != target:
            autolink_map[defined] = target
            if inspect.isclass(obj):
                for member in dir(obj):
                    if not member.startswith("_"):
                        autolink_map[f"{defined}.{member}"] = f"{target}.{member}"
    # the module's own names in the order of its __all__ (as the module lists them)
    for modname, page in pages.items():
        order = {n: i for i, n in enumerate(public_names(modules[modname]))}
        page["own"].sort(key=lambda item: order[item[0]])
    return pages, aliases, autolink_map


def _config_inited(app, config):
    for name, value in _DEFAULTS.items():
        if name not in config._raw_config:
            setattr(config, name, value)
    pages, aliases, autolink_map = catalogue()
    context = dict(config.autosummary_context or {})
    context["api"] = pages
    config.autosummary_context = context
    config.codeautolink_inventory_map = {**autolink_map, **(config.codeautolink_inventory_map or {})}
    app.env_api_aliases = aliases  # read by the missing-reference handler (same process)


_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
#: standard-library types that autodoc writes as the type of module data (e.g. a ``Path``)
_STDLIB_TYPES = {"PosixPath", "WindowsPath", "Path"}


def _external(target):
    """True when ``target`` names something in an importable package other than ours."""
    if not _DOTTED.match(target):
        return False
    top = target.split(".")[0]
    if top == PACKAGE:
        return False
    try:
        importlib.import_module(top)
    except Exception:  # not importable (or not a module name at all)
        return False
    return True


def _home_of(target, aliases, module=None, cls=None):
    """The documented spelling of a re-exported ``target`` (or of a member reached through it);
    a relative ``target`` is tried in the current class and module first, as Python's domain
    does (a module docstring's :func:`name` for a name the module re-exports)."""
    scopes = (
        [f"{module}.{cls}.", f"{module}.", ""] if module and cls else [f"{module}.", ""] if module else [""]
    )
    for scope in scopes:
        parts = (scope + target).split(".")
        for cut in range(len(parts), 1, -1):
            home = aliases.get(".".join(parts[:cut]))
            if home:
                return ".".join([home, *parts[cut:]])
    return None


def _missing_reference(app, env, node, contnode):
    """Re-exported spellings resolve to the home; free-text types and other libraries as text.

    Only for the Python domain: (a) ``tpde_lib.<alias>[.member]`` -> the home entry; (b) words
    of a docstring's *type* field (napoleon and the Python domain make every word of "ndarray,
    shape (n, d)" a pending reference; those are ``refspecific``) that do not name a
    ``tpde_lib`` path; (c) built-in exception names in "Raises"; (d) dotted names in another
    importable package (``scipy.integrate.solve_ivp``). Anything else still warns.
    """
    if node.get("refdomain") != "py":
        return None
    target, reftype = node.get("reftarget", ""), node.get("reftype")
    home = _home_of(
        target.lstrip("~."), getattr(app, "env_api_aliases", {}), node.get("py:module"), node.get("py:class")
    )
    if home:
        domain = env.get_domain("py")
        return domain.resolve_xref(env, node.get("refdoc"), app.builder, reftype, home, node, contnode)
    if _external(target) or target in _STDLIB_TYPES:
        return contnode
    if reftype == "exc":
        obj = getattr(builtins, target, None)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            return contnode
        return None
    if (
        reftype in ("class", "obj", "data")
        and node.get("refspecific")
        and not target.lstrip(".~").startswith(PACKAGE)
    ):
        return contnode
    return None


_FOOT_REF = re.compile(r"\[(\d+|#\w*|\*)\]_")
_FOOT_DEF = re.compile(r"^(\s*)\.\. \[(\d+|#\w*|\*)\]\s?(.*)$")


def _plain_footnotes(app, what, name, obj, options, lines):
    """Numbered RST footnotes of a docstring (``[1]_`` and ``.. [1] text``) as plain "[1]" text,
    the reference list as a line block: one page holds many docstrings, and footnote labels
    repeated across them would collide."""
    out, inside = [], None
    for line in lines:
        m = _FOOT_DEF.match(line)
        if m:
            inside = len(m.group(1))
            out.append(f"{m.group(1)}| [{m.group(2)}] {m.group(3)}")
            continue
        if inside is not None and line.strip() and len(line) - len(line.lstrip()) > inside:
            out.append(" " * inside + "  " + line.strip())  # continuation of the entry
            continue
        inside = None
        out.append(_FOOT_REF.sub(lambda m: f"[{m.group(1)}]", line))
    lines[:] = out


def _constant_comments(package=PACKAGE):
    """``(name, id(value)) -> #: comment`` of the module constants, in every module (private ones too:
    autodoc reads the comment only in the module it documents, the home, which may re-export)."""
    from sphinx.pycode import ModuleAnalyzer

    root = importlib.import_module(package)
    found = {}
    names = [package] + [i.name for i in pkgutil.walk_packages(root.__path__, prefix=package + ".")]
    for modname in names:
        try:
            mod = importlib.import_module(modname)
            docs = ModuleAnalyzer.for_module(modname).find_attr_docs()
        except Exception:  # no source: nothing to read
            continue
        for (scope, name), comment in docs.items():
            if scope == "" and hasattr(mod, name) and any(line.strip() for line in comment):
                found.setdefault((name, id(getattr(mod, name))), list(comment))
    return found


_MYST_ROLE = re.compile(r"(?<![`\w])\{([a-z]+(?::[a-z]+)?)\}`(?!`)")


def _myst_roles(app, what, name, obj, options, lines):
    """MyST roles in a docstring (``{eq}`eq-closure```, ``{math}`x```, as the chapters write
    them) as the reST roles autodoc's reST parser understands (``:eq:`eq-closure```)."""
    lines[:] = [_MYST_ROLE.sub(r":\1:`", line) for line in lines]


def _data_docstring(app, what, name, obj, options, lines):
    """A module constant shows its ``#:`` comment (wherever it is defined), never the docstring
    of its type (tuple, dict)."""
    if what != "data":
        return
    own = inspect.getdoc(type(obj)) or ""
    if not "\n".join(lines).strip() or "\n".join(lines).strip() == own.strip():
        comments = getattr(app, "_api_constant_comments", None)
        if comments is None:
            comments = app._api_constant_comments = _constant_comments()
        lines[:] = comments.get((name.rsplit(".", 1)[-1], id(obj)), ["A module constant.", ""])


def _end_with_blank_line(app, what, name, obj, options, lines):
    """End with a blank line: sphinx-codeautolink appends a directive, which must not run into
    what autodoc writes after a constant's docstring."""
    if lines and lines[-1].strip():
        lines.append("")


class _DropAutosummaryToctrees(SphinxTransform):
    """Remove the toctrees that autosummary's ``:toctree:`` option adds: ``_toc.yml`` (external
    toc) places the generated pages, and a toctree inside a page is an error there. The option
    stays, since it is what makes autosummary write the pages (recursively)."""

    default_priority = 99  # before sphinx-external-toc's InsertToctrees (100) checks for them

    def apply(self, **kwargs):
        for node in list(self.document.findall(autosummary_toc)):
            node.parent.remove(node)


def setup(app):
    app.setup_extension("sphinx.ext.autodoc")
    app.setup_extension("sphinx.ext.autosummary")
    app.setup_extension("sphinx.ext.napoleon")
    app.connect("config-inited", _config_inited)
    app.connect("missing-reference", _missing_reference)
    app.connect("autodoc-process-docstring", _plain_footnotes, priority=600)
    app.connect("autodoc-process-docstring", _myst_roles, priority=450)
    app.connect("autodoc-process-docstring", _data_docstring, priority=400)  # before napoleon
    app.connect("autodoc-process-docstring", _end_with_blank_line, priority=900)
    app.add_transform(_DropAutosummaryToctrees)
    return {"version": "0.2", "parallel_read_safe": True, "parallel_write_safe": True}
