"""The core conformance kit, run against the PostgreSQL backend.

Storage manipulation for the damage contracts:

- `tear_tail`: what a worker crash in the middle of a flush leaves behind. A
  second connection runs the flush's statements (events inserted, `next_seq`
  moved) inside a transaction and is then killed by the server
  (`pg_terminate_backend`) before it commits, as happens when a worker dies.
- `damage_committed`: an acknowledged event row disappears (a damaged page,
  a hand edit).
- `write_newer_format` / `storage_digest`: the session row claims a newer
  format; the digest covers every row of every table in the schema.
- `lose_next_commit_reply`: the writer's connection is terminated right
  before its next commit is sent, or right after it landed
  (`test_outcome_unknown.LosesCommitReply`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from turnkeep.conformance import MakeBackend, PersistenceContract
from turnkeep.meta import FORMAT_VERSION
from turnkeep.persistence import SessionPersistence
from turnkeep_postgres import PostgresConfig, PostgresPersistence

from .conftest import DSN, schema_shape
from .test_outcome_unknown import LosesCommitReply

pytestmark = pytest.mark.postgres


def schema_digest(schema: str) -> bytes:
    """sha256 over the shape of `schema` (tables, columns, indexes) and every
    row of every table, in a stable order."""
    digest = hashlib.sha256()
    with psycopg.connect(DSN, autocommit=True) as conn:
        digest.update(repr(schema_shape(conn, schema)).encode())
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = %s ORDER BY table_name",
            (schema,),
        ).fetchall()
        for (table,) in tables:
            rows = conn.execute(
                sql.SQL("SELECT t::text FROM {}.{} t ORDER BY t::text").format(
                    sql.Identifier(schema), sql.Identifier(table)
                )
            ).fetchall()
            digest.update(f"{table}:{len(rows)}\n".encode())
            for (row,) in rows:
                digest.update(row.encode() + b"\n")
    return digest.digest()


def schema_rows(schema: str) -> dict[str, bytes]:
    """Every row of every table in `schema` as text, and each `bytea` column's
    bytes as they are (text output would show them in hex)."""
    found: dict[str, bytes] = {}
    with psycopg.connect(DSN, autocommit=True) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = %s ORDER BY table_name, ordinal_position",
            (schema,),
        ).fetchall()
        for table in sorted({t for t, _, _ in columns}):
            rows = conn.execute(
                sql.SQL("SELECT t::text FROM {}.{} t").format(
                    sql.Identifier(schema), sql.Identifier(table)
                )
            ).fetchall()
            found[table] = "\n".join(row for (row,) in rows).encode()
        for table, column, kind in columns:
            if kind == "bytea":
                values = conn.execute(
                    sql.SQL("SELECT {} FROM {}.{}").format(
                        sql.Identifier(column),
                        sql.Identifier(schema),
                        sql.Identifier(table),
                    )
                ).fetchall()
                found[f"{table}.{column}"] = b"\n".join(
                    bytes(v) for (v,) in values if v is not None
                )
    return found


class TestPostgresBackend(PersistenceContract):
    supports_reopen = True
    supports_multiple_processes = True
    supports_tail_damage = True
    supports_committed_damage = True
    supports_format_aging = True
    supports_byte_scan = True
    supports_lost_acknowledgement = True
    supports_held = True
    supports_load_after = True
    supports_wait_for_commit = True
    supports_cancel_requests = True
    supports_audit = True
    supports_owner_death = True

    @pytest.fixture
    def make_backend(self, pg_config: Callable[..., PostgresConfig]) -> MakeBackend:
        # A long lease: no renewal runs inside a test to move `lease_until`
        # while the format-version contract compares digests.
        config = pg_config(lease_ms=600_000)
        self.schema = config.schema
        return lambda: PostgresPersistence(config)

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(DSN, autocommit=True)
        conn.execute(
            sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema))
        )
        return conn

    async def kill_owner(self, backend: SessionPersistence) -> None:
        # A dead worker renews nothing: its leases run out (no renewal runs
        # within a test at this lease length, so ending them now is that).
        assert isinstance(backend, PostgresPersistence)
        with self._connect() as conn:
            conn.execute(
                "UPDATE sessions SET lease_until = now() - interval '1 second' "
                "WHERE owner = %s",
                (backend.owner_token,),
            )

    async def tear_tail(self, session_id: str) -> None:
        with self._connect() as victim, self._connect() as killer:
            pid = victim.info.backend_pid
            victim.execute("BEGIN")
            (next_seq,) = victim.execute(
                "SELECT next_seq FROM sessions WHERE id = %s FOR UPDATE", (session_id,)
            ).fetchone() or (0,)
            victim.execute(
                "INSERT INTO events (session_id, seq, raw) "
                "SELECT %s, %s + n, convert_to('{\"torn\":' || n || '}', 'UTF8') "
                "FROM generate_series(0, 2) AS n",
                (session_id, next_seq),
            )
            victim.execute(
                "UPDATE sessions SET next_seq = next_seq + 3 WHERE id = %s",
                (session_id,),
            )
            (killed,) = killer.execute(
                "SELECT pg_terminate_backend(%s, 5000)", (pid,)
            ).fetchone() or (False,)
            assert killed, "the torn writer's connection was not terminated"
            with pytest.raises(psycopg.OperationalError):
                victim.execute("COMMIT")

    async def damage_committed(self, session_id: str) -> None:
        with self._connect() as conn:
            conn.execute(
                "DELETE FROM events WHERE session_id = %s AND seq = 5", (session_id,)
            )

    async def write_newer_format(self, session_id: str) -> None:
        with self._connect() as conn:
            conn.execute(
                "UPDATE sessions SET format_version = %s WHERE id = %s",
                (FORMAT_VERSION + 1, session_id),
            )

    async def storage_digest(self) -> bytes:
        return schema_digest(self.schema)

    async def stored_bytes(self) -> dict[str, bytes]:
        # Rows only: dead tuples wait in the table files for VACUUM, which
        # no client can read (docs/reliability.md, R19).
        return schema_rows(self.schema)

    async def lose_next_commit_reply(
        self, backend: SessionPersistence, session_id: str, *, lands: bool
    ) -> None:
        del session_id  # the contract's next write is that session's append
        assert isinstance(backend, PostgresPersistence)
        LosesCommitReply(backend, self._connect, lands=lands)
