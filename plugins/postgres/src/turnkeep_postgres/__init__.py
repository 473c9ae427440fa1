"""turnkeep-postgres: sessions in PostgreSQL, shared by many workers.

Select it by configuration alone (`persistence = "postgres"` and a
`[backends.postgres]` table with a `dsn`, or `TURNKEEP_PERSISTENCE=postgres`
and `TURNKEEP_POSTGRES__DSN=postgresql://...`); the host finds it through the
`turnkeep` entry point named `postgres`, which is this module.
"""

from __future__ import annotations

from collections.abc import Callable

from turnkeep.hookspecs import hookimpl
from turnkeep_postgres.backend import PostgresPersistence
from turnkeep_postgres.config import PostgresConfig
from turnkeep_postgres.schema import SCHEMA_VERSION, migrate

__all__ = [
    "SCHEMA_VERSION",
    "PostgresConfig",
    "PostgresPersistence",
    "migrate",
    "register_persistence",
]


def _build(config: PostgresConfig | None) -> PostgresPersistence:
    return PostgresPersistence(config if config is not None else PostgresConfig())


@hookimpl
def register_persistence(register: Callable[..., None]) -> None:
    """Contribute the `postgres` backend (configured by `PostgresConfig`)."""
    register("postgres", _build, PostgresConfig)
