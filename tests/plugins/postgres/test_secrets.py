"""Plan item 29 for PostgreSQL: canary secrets never reach a stored row or a log.

The shared canary workload (`tests/reliability/secrets_workload.py`: 50
secrets of eight kinds in user messages, tool arguments, tool outputs,
exception messages and the summary) runs through the agent loop with
`redact_secrets = true` on the `postgres` backend. Then every row of every
table in the schema is read back (the text form of each row, and the event
bytes themselves, since `bytea` prints as hex), together with every log
record captured meanwhile: no secret may appear raw, and the redaction
markers must be there.
"""

from __future__ import annotations

import logging
import random

import psycopg
import pytest
from psycopg import sql
from tests.reliability.secrets_workload import canaries, run_canary_turns

from turnkeep import Config, Host

from .conftest import DSN

pytestmark = pytest.mark.postgres


def every_row(schema: str) -> bytes:
    """Every row of every table in `schema`, and the event bytes verbatim."""
    parts: list[bytes] = []
    ident = sql.Identifier(schema)
    with psycopg.connect(DSN, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = %s ORDER BY 1",
            (schema,),
        ).fetchall()
        for (table,) in tables:
            query = sql.SQL("SELECT t::text FROM {}.{} t").format(
                ident, sql.Identifier(table)
            )
            parts.extend(row[0].encode() for row in conn.execute(query))
        raws = conn.execute(sql.SQL("SELECT raw FROM {}.events").format(ident))
        parts.extend(bytes(row[0]) for row in raws)
    return b"\n".join(parts)


@pytest.mark.asyncio
async def test_no_canary_is_stored_raw(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    seed = random.randrange(2**32)
    print(f"canary seed: {seed}")
    secrets = canaries(seed)
    config = Config(
        persistence="postgres",
        plugins=("postgres",),
        redact_secrets=True,
        redact_high_entropy=True,  # the canaries include random tokens
        backends={"postgres": {"dsn": DSN, "schema": schema}},
    )
    caplog.set_level(logging.DEBUG)
    async with Host(config) as host:
        session_id = await run_canary_turns(host, secrets)
        loaded = await host.require_persistence().load(session_id)
    stored = every_row(schema)
    assert loaded.events, "the backend stored no event"
    logs = "\n".join(r.getMessage() for r in caplog.records)
    for _, secret in secrets:
        assert secret.encode() not in stored, f"raw secret stored (seed {seed})"
        assert secret not in logs, f"raw secret logged (seed {seed})"
    assert stored.count(b"[REDACTED:") >= 50
    assert loaded.meta.summary.title is not None
    assert "[REDACTED:" in loaded.meta.summary.title
