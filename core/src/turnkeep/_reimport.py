"""Fresh imports for hot reload: purge a plugin's module and import it again."""

from __future__ import annotations

import importlib
import sys
import types

from turnkeep.errors import PluginReloadError

__all__ = ["fresh_import"]


def fresh_import(old: object) -> object:
    """Import `old`'s module anew and return the matching new plugin object.

    The plugin's module is purged from `sys.modules` together with its
    submodules (for a package plugin, the whole package), then imported
    again. On any failure the old modules are put back.
    """
    module_name = (
        old.__name__ if isinstance(old, types.ModuleType) else type(old).__module__
    )

    def owned(name: str) -> bool:
        return name == module_name or name.startswith(module_name + ".")

    saved = {name: module for name, module in sys.modules.items() if owned(name)}
    for name in saved:
        del sys.modules[name]
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(module_name)
        if isinstance(old, types.ModuleType):
            return module
        factory: object = module
        for part in type(old).__qualname__.split("."):
            factory = getattr(factory, part)
        if not callable(factory):
            raise TypeError(f"{type(old).__qualname__} is not callable")
        return factory()
    except Exception as exc:
        for name in [n for n in sys.modules if owned(n)]:
            del sys.modules[name]
        sys.modules.update(saved)
        raise PluginReloadError(
            f"reloading {module_name!r} failed: {exc!r}; the old plugin stays active"
        ) from exc
