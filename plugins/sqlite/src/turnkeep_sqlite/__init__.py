"""turnkeep-sqlite: many durable sessions in one SQLite database file.

Select it by configuration alone (`persistence = "sqlite"` and a
`[backends.sqlite]` table, or `TURNKEEP_PERSISTENCE=sqlite` and
`TURNKEEP_SQLITE__PATH=...`); the host finds it through the `turnkeep`
entry point named `sqlite`, which is this module.
"""

from __future__ import annotations

from collections.abc import Callable

from turnkeep.hookspecs import hookimpl
from turnkeep_sqlite.backend import SqlitePersistence
from turnkeep_sqlite.config import SqliteConfig
from turnkeep_sqlite.schema import APPLICATION_ID, SCHEMA_VERSION

__all__ = [
    "APPLICATION_ID",
    "SCHEMA_VERSION",
    "SqliteConfig",
    "SqlitePersistence",
    "register_persistence",
]


def _build(config: SqliteConfig | None) -> SqlitePersistence:
    return SqlitePersistence(config if config is not None else SqliteConfig())


@hookimpl
def register_persistence(register: Callable[..., None]) -> None:
    """Contribute the `sqlite` backend (configured by `SqliteConfig`)."""
    register("sqlite", _build, SqliteConfig)
