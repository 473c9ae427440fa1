"""Warning when a configuration file overrides a set `TURNKEEP_*` variable.

ADR 5's order stands: `turnkeep.toml` and `[tool.turnkeep]` win over the
environment. A variable set on purpose and then silently ignored is a trap
(`TURNKEEP_JSONL__PATH=... echo-agent` wrote to the file's store), so
`load_config` asks this module to warn, once per variable and file in a
process, through the `turnkeep.config` logger (printed on stderr when the
program configured no logging).

Consumed by `turnkeep.config` only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Mapping
from typing import Any, Final, cast

__all__ = ["warn_shadowed"]

_log: Final = logging.getLogger("turnkeep.config")
_warned: Final[set[tuple[str, str]]] = set()
_lock: Final = threading.Lock()


def _path_of(name: str, prefix: str, tables: Collection[str]) -> tuple[str, ...]:
    """Where variable `name` goes in a layer (as `config._from_env` puts it)."""
    key = name[len(prefix) :].lower()
    if "__" not in key:
        return (key,)
    table, _, option = key.partition("__")
    return (table, option) if table in tables else ("backends", table, option)


def _lookup(layer: Mapping[str, Any], path: tuple[str, ...]) -> tuple[bool, object]:
    value: object = layer
    for part in path:
        if not isinstance(value, dict):
            return False, None
        table = cast("dict[str, object]", value)  # TOML tables: string keys
        if part not in table:
            return False, None
        value = table[part]
    return True, value


def warn_shadowed(
    env: Mapping[str, str],
    env_layer: Mapping[str, Any],
    files: list[tuple[str, dict[str, Any]]],
    *,
    prefix: str,
    tables: Collection[str],
) -> None:
    """Warn about each variable of `env_layer` that a file sets otherwise.

    Args:
        env: the environment the layer was read from.
        env_layer: what `load_config` read from it.
        files: the layers, by source, lowest precedence first (the
            environment's own compares equal to itself and is passed over).
        prefix: the variables' prefix (`TURNKEEP_`).
        tables: the configuration's own tables (`serve`, ...).
    """
    for name in sorted(env):
        if not name.startswith(prefix):
            continue
        path = _path_of(name, prefix, tables)
        found, value = _lookup(env_layer, path)
        if not found:
            continue  # not a setting (another part's variable)
        winner: tuple[str, object] | None = None
        for source, layer in files:
            present, in_file = _lookup(layer, path)
            if present and str(in_file) != value:
                winner = (source, in_file)
        if winner is None:
            continue
        source, in_file = winner
        with _lock:
            if (name, source) in _warned:
                continue
            _warned.add((name, source))
        _log.warning(
            "turnkeep: %s=%s is overridden by %s, which sets %s = %r (files take "
            "precedence over the environment); remove one of them",
            name,
            value,
            source,
            ".".join(path[1:] if path[0] == "backends" else path),
            in_file,
        )
