"""Old spellings of renamed or moved names, kept one release with a warning.

A module that renamed a public name lists the old spelling here through
`renamed(...)`, which gives it a module-level `__getattr__`: the old name
still resolves, with a `DeprecationWarning` that names the new spelling.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping

__all__ = ["REMOVED_IN", "renamed"]

REMOVED_IN = "0.3"
"""The release that drops the old spellings."""


def renamed(module: str, old_names: Mapping[str, str]) -> Callable[[str], object]:
    """A module `__getattr__` resolving each old name to its new home.

    Args:
        module: the module that used to hold the names (for messages).
        old_names: old name -> `"package.module:new_name"`.
    """

    def __getattr__(name: str) -> object:
        target = old_names.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, _, new_name = target.partition(":")
        new = f"{where}.{new_name}" if new_name != name else f"{where}.{name}"
        warnings.warn(
            f"{module}.{name} is deprecated and goes in turnkeep {REMOVED_IN}; "
            f"use {new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(where), new_name)

    return __getattr__
