"""`docs/formats/sqlite.md` keeps up with the database the backend writes.

The page has a section per table whose rows name exactly that table's
columns, and an index table naming exactly the file's indexes (with the
table each is on), all read from a store the backend built; it states the
current `SCHEMA_VERSION` (in its title, and one row per migration step) and
the application id; and its example query returns exactly a session's
durable events, in order: what `load` returns.
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from turnkeep.meta import SessionSummary
from turnkeep_sqlite import APPLICATION_ID, SCHEMA_VERSION, SqlitePersistence

from .conftest import meta, turn_records

PAGE = Path(__file__).resolve().parents[3] / "docs" / "formats" / "sqlite.md"
_COLUMNS = "SELECT name FROM pragma_table_xinfo(?)"  # generated columns too


def _sections(text: str) -> dict[str, str]:
    """Each `##` or `###` heading (without its hashes) -> its body."""
    parts = re.split(r"^(#{2,3} .*)$", text, flags=re.M)
    return {
        heading.lstrip("#").strip(): body
        for heading, body in zip(parts[1::2], parts[2::2], strict=True)
    }


def _section(sections: dict[str, str], ending: str) -> str:
    """The body of the one section whose heading ends with `ending`."""
    (body,) = [body for heading, body in sections.items() if heading.endswith(ending)]
    return body


def _named_rows(body: str) -> list[str]:
    """The names in the first cell of a Markdown table's rows (`` | `x` | ``)."""
    return re.findall(r"^\| `([^`]+)` \|", body, flags=re.M)


def _reader(path: Path) -> sqlite3.Connection:
    """A read-only connection, as the page tells readers to open the file."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


async def _one_flush(store: SqlitePersistence) -> None:
    await store.create(meta("s"))
    await store.append("s", turn_records(0, 0))


@pytest.mark.asyncio
async def test_the_page_names_every_table_column_and_index(
    store: SqlitePersistence, db_path: Path
) -> None:
    await _one_flush(store)
    with closing(_reader(db_path)) as conn:
        objects = list(conn.execute("SELECT type, name, tbl_name FROM sqlite_master"))
        columns = {
            name: [c for (c,) in conn.execute(_COLUMNS, (name,))]
            for kind, name, _ in objects
            if kind == "table"
        }
        version, app_id = conn.execute(
            "SELECT (SELECT user_version FROM pragma_user_version), "
            "(SELECT application_id FROM pragma_application_id)"
        ).fetchone()
    assert {kind for kind, _, _ in objects} == {"table", "index"}
    assert (version, app_id) == (SCHEMA_VERSION, APPLICATION_ID)

    sections = _sections(PAGE.read_text(encoding="utf-8"))
    documented = {
        match[1]: body
        for heading, body in sections.items()
        if (match := re.fullmatch(r"`(\w+)`", heading))
    }
    assert sorted(documented) == sorted(columns), "one `### `table`` section each"
    for table, names in columns.items():
        rows = _named_rows(documented[table])
        assert sorted(rows) == sorted(names), f"the columns of {table}"

    indexes = _section(sections, "Indexes")
    on = dict(re.findall(r"^\| `([^`]+)` \| `(\w+) ", indexes, flags=re.M))
    assert on == {name: table for kind, name, table in objects if kind == "index"}


def test_the_page_states_the_schema_version_and_application_id() -> None:
    text = PAGE.read_text(encoding="utf-8")
    title = text.splitlines()[0]
    assert title == f"# turnkeep-sqlite storage format, schema version {SCHEMA_VERSION}"
    versions = _section(_sections(text), "versions")
    steps = [int(n) for n in re.findall(r"^\| (\d+) \|", versions, flags=re.M)]
    assert steps == list(range(1, SCHEMA_VERSION + 1)), "one row per migration step"
    assert f"0x{APPLICATION_ID:08X}" in text
    assert str(APPLICATION_ID) in text
    assert f'"{APPLICATION_ID.to_bytes(4, "big").decode("ascii")}"' in text


@pytest.mark.asyncio
async def test_the_example_query_returns_exactly_the_durable_events_in_order(
    store: SqlitePersistence, db_path: Path
) -> None:
    blocks = re.findall(r"```sql\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    (query,) = [b for b in blocks if ":id" in b]
    await store.create(meta("demo"))
    seq = 0
    for turn in range(3):
        records = turn_records(seq, turn, sizes=[3, *range(1, turn + 2)])
        summary = SessionSummary(title="titled") if turn == 1 else None
        await store.append("demo", records, summary=summary)
        seq += len(records)
    await store.create(meta("other"))
    await store.append("other", turn_records(0, 0))
    await store.create(meta("pending"))  # a claim row, never flushed
    with closing(sqlite3.connect(db_path, isolation_level=None)) as conn:
        # A row at next_seq, written by hand (the writer never commits one),
        # is no durable event: `load` leaves it out, and so must the query.
        conn.execute(
            "INSERT INTO events (session_key, seq, type, time, raw) "
            "SELECT key, next_seq, 'user/message', 0, X'7B7D' FROM sessions "
            "WHERE id = 'demo'"
        )

    with closing(_reader(db_path)) as conn:
        found = {
            sid: conn.execute(query, {"id": sid}).fetchall()
            for sid in ("demo", "other", "pending", "absent")
        }
    assert len(found["demo"]) == seq == 12
    for sid in ("demo", "other"):
        loaded = await store.load(sid)
        assert [s for s, _ in found[sid]] == list(range(len(loaded.events)))
        assert [raw for _, raw in found[sid]] == loaded.events
    assert found["pending"] == found["absent"] == []
