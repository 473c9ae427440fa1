"""The schema objects turnkeep creates, and the ones it did not.

A trigger planted in the database runs inside every write transaction,
with the writer's rights: it can copy each event to a table of its own
(which `delete` never empties) or change what is stored. So the writer
refuses a database holding a trigger turnkeep did not create, unless the
configuration says it is wanted (`allow_foreign_triggers`), and
`turnkeep verify` reports every table, index, view or trigger that is not
turnkeep's. SQLite's own objects (`sqlite_*`: the indexes behind primary
keys, `sqlite_sequence`, `sqlite_stat1`) are not reported.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Final

from turnkeep.errors import StorageError

__all__ = ["KNOWN", "describe", "foreign_objects", "refuse_foreign_triggers"]

KNOWN: Final = frozenset(
    {
        ("table", "sessions"),
        ("table", "events"),
        ("table", "schema_migrations"),
        ("table", "cancel_requests"),
        ("table", "audit"),
        ("index", "sessions_recent"),
        ("index", "sessions_by_status"),
        ("index", "audit_by_scope"),
        ("index", "audit_by_session"),
    }
)
"""What the current schema holds (`tests/plugins/sqlite` checks a new file)."""


def foreign_objects(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """Each `(type, name, table)` in the schema that turnkeep did not create."""
    rows: list[tuple[str, str, str]] = conn.execute(
        "SELECT type, name, tbl_name FROM sqlite_master "
        "WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY type, name"
    ).fetchall()
    return [row for row in rows if (row[0], row[1]) not in KNOWN]


def describe(found: list[tuple[str, str, str]]) -> list[str]:
    """One line per object, for a person."""
    return [
        f"{kind} {name!r}" + (f" on {table!r}" if table != name else "")
        for kind, name, table in found
    ]


def refuse_foreign_triggers(
    conn: sqlite3.Connection, path: Path, *, allow: bool
) -> None:
    """Refuse a database with triggers turnkeep did not create, unless `allow`.

    Raises:
        StorageError: such a trigger exists and `allow` is false.
    """
    triggers = [row for row in foreign_objects(conn) if row[0] == "trigger"]
    if triggers and not allow:
        raise StorageError(
            f"SQLite database {path} holds {', '.join(describe(triggers))}, "
            "which turnkeep did not create and which would run on every write; "
            "nothing was written. Drop it (`turnkeep verify --all` lists every "
            "object turnkeep did not create), or set allow_foreign_triggers = "
            "true if it is yours"
        )
