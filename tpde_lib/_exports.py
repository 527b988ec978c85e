"""What a subpackage of the library exports, derived from what its ``__init__`` imports.

A subpackage's ``__init__`` imports its public names from its private modules, once; its
``__all__`` is then derived (:func:`public_names`), so that no name is written a second time.
Every layer may import this module (it imports nothing from the library).
"""

from __future__ import annotations

import types


def public_names(namespace: dict) -> list[str]:
    """The names a package's ``__init__`` bound that do not start with ``_`` and are not modules
    (its public submodules are reached as attributes, not exported), in the order bound.

    Parameters
    ----------
    namespace : dict
        The package's ``globals()``, read at the end of its ``__init__``.

    Returns
    -------
    list of str
        The package's ``__all__``.

    Examples
    --------
    >>> from math import pi
    >>> public_names({"__name__": "pkg", "pi": pi, "types": types, "_x": 1})
    ['pi']
    """
    return [
        name
        for name, obj in namespace.items()
        if not name.startswith("_")
        and not isinstance(obj, types.ModuleType)
        and name != "annotations"  # ``from __future__ import annotations``
    ]
