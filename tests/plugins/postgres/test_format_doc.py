"""`docs/formats/postgres.md` keeps up with the tables the backend creates.

A store built by the backend in the test's own schema is read back from the
catalogs. The page must give each table a section whose column table lists
exactly its columns, in order, each with its type, `COLLATE "C"`,
nullability, default, checks and foreign key; a row per index (with its
table and definition), per trigger (with its table and function) and per
migration (with its description); and it must name every sequence,
statistics object and function, the current `SCHEMA_VERSION`, the session
format version, the migration lock's key and the default schema's channels.
The page's SQL runs against the store, and its query of a session's durable
events returns exactly the committed events, in order: not those of a flush
still in flight, of a claim, or of a deleted session, and a missing event
shows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from turnkeep.audit import audit_record
from turnkeep.meta import FORMAT_VERSION, SessionSummary
from turnkeep_postgres import SCHEMA_VERSION, PostgresPersistence
from turnkeep_postgres.schema import LOCK_NAMESPACE, cancel_channel, commit_channel

from .test_backend import T0, meta, turn

pytestmark = pytest.mark.postgres

PAGE = Path(__file__).resolve().parents[3] / "docs" / "formats" / "postgres.md"
EXAMPLE_SCHEMA = "turnkeep"
"""The schema the page's examples name."""
Connect = Callable[[], psycopg.Connection[Any]]

_HEADING = re.compile(r"^(#{1,6}) (.*)$", re.M)
_SQL_BLOCK = re.compile(r"```sql\n(.*?)```", re.S)


def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def sections(text: str, level: int) -> dict[str, str]:
    """The bodies of the sections of heading `level`, by heading text."""
    heads = list(_HEADING.finditer(text))
    found: dict[str, str] = {}
    for n, head in enumerate(heads):
        if len(head.group(1)) != level:
            continue
        end = next(
            (h.start() for h in heads[n + 1 :] if len(h.group(1)) <= level), len(text)
        )
        found[head.group(2).strip()] = text[head.end() : end]
    return found


def section(text: str, level: int, word: str) -> str:
    """The one section of heading `level` whose heading holds `word`."""
    (body,) = [b for title, b in sections(text, level).items() if word in title]
    return body


def rows(text: str) -> list[tuple[str, list[str]]]:
    """The rows of Markdown tables whose first cell is one code span, in order."""
    found: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = re.fullmatch(r"`([^`]+)`", cells[0])
        if name is not None:
            found.append((name.group(1), cells))
    return found


def norm(text: str) -> str:
    """SQL text without case, spaces, parentheses, backticks and `::text` casts."""
    return re.sub(r"[\s()`]", "", text.lower().replace("::text", ""))


def names(text: str, name: str) -> bool:
    """Whether `text` names `name` as code (`name`, or `name()` for a function)."""
    return re.search(rf"`{re.escape(name)}(\(\))?`", text) is not None


def query(conn: psycopg.Connection[Any], statement: str, *params: str) -> list[Any]:
    """The rows of `statement` (text, the page's included, sent as bytes)."""
    return conn.execute(statement.encode(), params or None).fetchall()


async def build(store: PostgresPersistence) -> None:
    """A store with flushed sessions, a claim, a cancel request and audit records."""
    await store.create(meta("demo"))
    await store.append("demo", turn(0, "hello"))
    summary = SessionSummary(updated_at=T0 + 5, title="A demo", status="idle")
    await store.append("demo", turn(2, "again"), summary=summary)
    await store.create(meta("other"))
    await store.append("other", turn(0, "other"))
    await store.create(meta("claimed"))  # a claim: never flushed
    await store.request_cancel("demo", "asked to stop")
    await store.record_audit("demo", audit_record("takeover", "demo", "a test"))
    await store.record_audit(None, audit_record("deletion", "gone", "a test"))


# -- the schema's objects ----------------------------------------------------------


@pytest.mark.asyncio
async def test_the_page_documents_every_table_and_column(
    store: PostgresPersistence, raw_conn: Connect, schema: str
) -> None:
    await build(store)
    conn, text = raw_conn(), page()
    tables = {
        title.strip("`"): body
        for title, body in sections(text, 3).items()
        if re.fullmatch(r"`\w+`", title)
    }
    stored = sorted(
        r[0]
        for r in query(
            conn,
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY 1",
            schema,
        )
    )
    assert sorted(tables) == stored
    columns = query(
        conn,
        "SELECT table_name, column_name, data_type, is_nullable, column_default,"
        " identity_generation, collation_name FROM information_schema.columns"
        " WHERE table_schema = %s ORDER BY table_name, ordinal_position",
        schema,
    )
    documented = {table: dict(rows(body)) for table, body in tables.items()}
    for table in stored:
        actual = [c[1] for c in columns if c[0] == table]
        assert [name for name, _ in rows(tables[table])] == actual, table
    for table, column, kind, nullable, default, identity, collation in columns:
        _, type_cell, constraint, *_ = documented[table][column]
        where = f"{table}.{column}: {type_cell} | {constraint}"
        assert type_cell.replace("`", "").startswith(kind), where
        assert (f'COLLATE "{collation}"' in type_cell) == (collation is not None), where
        required = "NOT NULL" in constraint or "PRIMARY KEY" in constraint
        assert required == (nullable == "NO"), where
        if default is not None:
            assert f"DEFAULT {default}" in constraint, where
        else:
            assert "DEFAULT" not in constraint, where
        if identity is not None:
            assert f"GENERATED {identity} AS IDENTITY" in constraint, where
    constraints = query(
        conn,
        "SELECT cl.relname, c.contype, pg_get_constraintdef(c.oid),"
        " ARRAY(SELECT a.attname::text FROM unnest(c.conkey) AS k(n)"
        " JOIN pg_attribute AS a ON a.attrelid = c.conrelid AND a.attnum = k.n),"
        " (SELECT f.relname::text FROM pg_class AS f WHERE f.oid = c.confrelid),"
        " ARRAY(SELECT a.attname::text FROM unnest(c.confkey) AS k(n)"
        " JOIN pg_attribute AS a ON a.attrelid = c.confrelid AND a.attnum = k.n),"
        " c.confdeltype FROM pg_constraint AS c JOIN pg_class AS cl"
        " ON cl.oid = c.conrelid JOIN pg_namespace AS n ON n.oid = cl.relnamespace"
        " WHERE n.nspname = %s",
        schema,
    )
    assert constraints
    for table, kind, definition, keys, target, target_keys, on_delete in constraints:
        if kind == "n":
            continue  # NOT NULL (a constraint row from PostgreSQL 18): checked above
        constraint_cells = [c[2] for _, c in rows(tables[table])]
        cell = documented[table][keys[0]][2] if len(keys) == 1 else ""
        where = f"{table} {definition}"
        if kind == "p" and len(keys) == 1:
            assert "PRIMARY KEY" in cell, where
        elif kind == "f":
            wanted = norm(f"REFERENCES {target} ({', '.join(target_keys)})")
            assert wanted in norm(cell), where
            # The page says every foreign key deletes with its session.
            assert on_delete == "c", where
        elif kind == "c" and len(keys) == 1:
            assert norm(definition) in norm(cell), where
        else:
            assert any(norm(definition) in norm(c) for c in constraint_cells), where


@pytest.mark.asyncio
async def test_the_page_documents_every_index_trigger_function_and_sequence(
    store: PostgresPersistence, raw_conn: Connect, schema: str
) -> None:
    await build(store)
    conn, text = raw_conn(), page()
    indexed = dict(rows(section(text, 2, "Indexes")))
    indexes = query(
        conn,
        "SELECT indexname, tablename, indexdef FROM pg_indexes"
        " WHERE schemaname = %s ORDER BY 1",
        schema,
    )
    assert sorted(indexed) == sorted(i[0] for i in indexes)
    for name, table, definition in indexes:
        _, on, documented, *_ = indexed[name]
        assert on == f"`{table}`", name
        assert norm(definition.split(" USING btree ", 1)[1]) in norm(documented), name
        unique = definition.startswith("CREATE UNIQUE") and not name.endswith("_pkey")
        assert ("UNIQUE" in documented) == unique, name
    triggered = dict(rows(section(text, 2, "Triggers")))
    triggers = query(
        conn,
        "SELECT t.tgname, c.relname, p.proname FROM pg_trigger AS t"
        " JOIN pg_class AS c ON c.oid = t.tgrelid"
        " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        " JOIN pg_proc AS p ON p.oid = t.tgfoid"
        " WHERE n.nspname = %s AND NOT t.tgisinternal ORDER BY 1",
        schema,
    )
    assert sorted(triggered) == sorted(t[0] for t in triggers)
    for name, table, function in triggers:
        _, on, _fires, calls, *_ = triggered[name]
        assert (on, calls) == (f"`{table}`", f"`{function}`"), name
    others = query(
        conn,
        "SELECT p.proname FROM pg_proc AS p JOIN pg_namespace AS n"
        " ON n.oid = p.pronamespace WHERE n.nspname = %s"
        " UNION ALL SELECT s.stxname FROM pg_statistic_ext AS s"
        " JOIN pg_namespace AS n ON n.oid = s.stxnamespace WHERE n.nspname = %s"
        " UNION ALL SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n"
        " ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'S'",
        schema,
        schema,
        schema,
    )
    assert len(others) >= 3  # two functions, a sequence (statistics from PG 14)
    for (name,) in others:
        assert names(text, name), name


@pytest.mark.asyncio
async def test_the_page_states_the_versions_the_lock_and_the_channels(
    store: PostgresPersistence, raw_conn: Connect
) -> None:
    await build(store)
    conn, text = raw_conn(), page()
    title = text.splitlines()[0]
    assert re.fullmatch(rf"# .* schema version {SCHEMA_VERSION}", title), title
    applied = query(
        conn, "SELECT version, description FROM schema_migrations ORDER BY 1"
    )
    assert [v for v, _ in applied] == list(range(1, SCHEMA_VERSION + 1))
    listed = re.findall(
        r"^\| (\d+) \| ([^|]+?) \|", section(text, 2, "Versions"), flags=re.M
    )
    assert [(int(v), d) for v, d in listed] == applied
    for pattern, value in (
        (r"a version above (\d+) is refused", SCHEMA_VERSION),
        (r"above the version you know \((\d+) on this page\)", SCHEMA_VERSION),
        (r"`format_version` is above (\d+)", FORMAT_VERSION),
    ):
        found = re.findall(pattern, text)
        assert found, pattern
        assert {int(n) for n in found} == {value}, pattern
    assert f"pg_advisory_xact_lock({LOCK_NAMESPACE}, hashtext(schema))" in text
    assert f"`0x{LOCK_NAMESPACE:X}`" in text
    assert f"`{commit_channel(EXAMPLE_SCHEMA)}`" in text
    assert f"`{cancel_channel(EXAMPLE_SCHEMA)}`" in text


# -- the page's SQL ---------------------------------------------------------------


def example(text: str, marker: str) -> str:
    """The page's one SQL block that starts with the comment `marker`."""
    (block,) = [b for b in _SQL_BLOCK.findall(text) if b.startswith(f"-- {marker}")]
    return block


def in_schema(statement: str, conn: psycopg.Connection[Any], schema: str) -> str:
    """An example of the page, naming `schema` where it names the default."""
    quoted = sql.Identifier(schema).as_string(conn)
    return re.sub(rf"\b{EXAMPLE_SCHEMA}\.(?=\w)", f"{quoted}.", statement)


def unindexed(conn: psycopg.Connection[Any]) -> None:
    """Keep the planner off the indexes, so rows come in the order they lie."""
    for statement in (
        "SET enable_indexscan = off",
        "SET enable_indexonlyscan = off",
        "SET enable_bitmapscan = off",
    ):
        conn.execute(statement)


def durable(found: list[Any]) -> list[bytes]:
    """The durable events the page's query returned, checked as the page says."""
    if not found:
        return []
    next_seq, format_version = found[0][0], found[0][1]
    assert format_version <= FORMAT_VERSION
    seqs = [r[2] for r in found]
    if seqs != list(range(next_seq)):
        raise ValueError(f"damaged: seqs {seqs} of {next_seq} durable events")
    return [bytes(r[3]) for r in found]


@pytest.mark.asyncio
async def test_every_example_of_the_page_runs(
    store: PostgresPersistence, raw_conn: Connect, schema: str
) -> None:
    await build(store)
    conn, text = raw_conn(), page()
    blocks = _SQL_BLOCK.findall(text)
    assert len(blocks) >= 3
    for block in blocks:
        conn.execute(in_schema(block, conn, schema).encode())
    channel = example(text, "the commit channel of the schema turnkeep")
    assert query(conn, channel) == [(commit_channel(EXAMPLE_SCHEMA),)]
    # The newest session's row moves last in the table.
    conn.execute("UPDATE sessions SET owner_info = owner_info WHERE id = 'demo'")
    unindexed(conn)
    listing = query(conn, in_schema(example(text, "stored sessions"), conn, schema))
    listed = [m.id for m in (await store.list()).items]
    assert [r[0] for r in listing] == listed
    assert sorted(listed) == ["demo", "other"]  # not the claim


@pytest.mark.asyncio
async def test_the_page_query_returns_exactly_the_durable_events_in_order(
    store: PostgresPersistence, raw_conn: Connect, schema: str
) -> None:
    await build(store)
    conn, flusher = raw_conn(), raw_conn()
    statement = in_schema(example(page(), "durable events"), conn, schema)
    assert statement.count("'demo'") == 1

    def read(session_id: str) -> list[Any]:
        return query(conn, statement.replace("'demo'", f"'{session_id}'"))

    # Rows are not stored in seq order: an updated row moves (as flagging an
    # event's `turn_end` moves it). With the indexes out of the planner's
    # reach, only the query's own order counts.
    conn.execute("UPDATE events SET turn_end = turn_end WHERE seq = 0")
    unindexed(conn)
    # A flush whose transaction has not committed (its COMMIT not yet
    # returned): its rows are there, but not for anyone else.
    (late,) = turn(4, "in flight")[:1]
    with flusher.transaction(force_rollback=True):
        flusher.execute(
            "UPDATE sessions SET next_seq = 5, counted_seq = 5 WHERE id = 'demo'"
        )
        flusher.execute(
            "INSERT INTO events (session_id, seq, raw, turn_end)"
            " VALUES ('demo', 4, %s, false)",
            (late.raw,),
        )
        assert query(flusher, "SELECT count(*) FROM events WHERE seq = 4") == [(1,)]
        found = read("demo")
    loaded = await store.load("demo")
    assert durable(found) == loaded.events
    assert [r[2] for r in found] == [0, 1, 2, 3]
    assert loaded.events == [r.raw for r in turn(0, "hello") + turn(2, "again")]
    assert durable(read("other")) == [r.raw for r in turn(0, "other")]
    assert read("claimed") == []  # a claim is no session
    assert read("nobody") == []
    # A missing event shows: damage, never a shorter log.
    conn.execute("DELETE FROM events WHERE session_id = 'demo' AND seq = 1")
    with pytest.raises(ValueError, match="damaged"):
        durable(read("demo"))
    conn.execute("DELETE FROM events WHERE session_id = 'other'")
    assert [r[2:] for r in read("other")] == [(None, None)]
    with pytest.raises(ValueError, match="damaged"):
        durable(read("other"))
    await store.delete("demo")
    assert read("demo") == []
