"""Building an installed backend over fresh storage, for `turnkeep conformance`.

Used by the test module `turnkeep conformance` generates (it runs in its own
pytest process). The backend comes from its entry point, exactly as a host
would build it, with the configured options except its storage: a `path`
option is pointed into the test's temporary directory, and a `schema`
option (PostgreSQL) gets a fresh name per test, dropped afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from turnkeep.backends import BackendEntry
from turnkeep.config import Config, structure_config
from turnkeep.errors import ConfigurationError
from turnkeep.host import Host

__all__ = ["backend_entry", "isolated_backend"]

_schemas: Final = itertools.count(1)


@functools.cache
def backend_entry(name: str) -> BackendEntry:
    """The registration of installed backend `name` (from its entry point).

    Raises:
        PluginNotFoundError: no entry point `name` is installed.
        UnknownBackendError: it registers no backend `name`.
    """

    async def collect() -> BackendEntry:
        host = Host(Config(persistence="none", plugins=(name,)))
        try:
            await host.start()
            entry = host.backends.get(name)
        finally:
            await host.aclose()
        if entry is None:
            from turnkeep.errors import UnknownBackendError

            raise UnknownBackendError(
                f"the plugin {name!r} registers no backend named {name!r}"
            )
        return entry

    return asyncio.run(collect())


def _fields(config_type: type[Any] | None) -> set[str]:
    if config_type is None or not attrs.has(config_type):
        return set()
    return {f.name for f in attrs.fields(config_type)}


@contextlib.contextmanager
def isolated_backend(
    name: str, options: Mapping[str, Any], tmp_path: Path
) -> Generator[Callable[[], object]]:
    """Yield a zero-argument factory of backend `name` over fresh storage.

    Every instance it builds shares this test's storage (a restart, or a
    second process, to the conformance kit).
    """
    entry = backend_entry(name)
    values = dict(options)
    fields = _fields(entry.config_type)
    if "path" in fields:
        values["path"] = str(tmp_path / "store" / "data")
    schema: str | None = None
    if "schema" in fields:
        schema = f"tk_conformance_{os.getpid()}_{next(_schemas)}"
        values["schema"] = schema
    if entry.config_type is None:
        config: object = None
    else:
        config = structure_config(
            values, entry.config_type, source=f"[backends.{name}] (conformance)"
        )
    try:
        yield lambda: entry.factory(config)
    finally:
        if schema is not None:
            _drop_schema(values, schema)


def _drop_schema(values: Mapping[str, Any], schema: str) -> None:
    dsn = values.get("dsn")
    if not isinstance(dsn, str):
        return
    try:
        import psycopg  # the PostgreSQL backend's own driver
        from psycopg import sql
    except ImportError as exc:
        raise ConfigurationError(
            f"cannot drop the test schema {schema}: {exc}"
        ) from exc
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )
