"""`turnkeep repair --salvage` (issue 12, point 15): a damaged log's intact prefix.

Real logs are damaged on disk (a flipped byte in a checksummed JSONL line
with acknowledged flushes after it; a missing or garbled SQLite row; a
garbled PostgreSQL row), then salvaged: the new session holds exactly the
events before the damage (whole flushes on JSONL), its header names the
original and the fork point, the report says what was lost, and the
damaged original is byte for byte as it was.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import pytest
from psycopg import sql
from tests.cli.support import (
    Store,
    cli,
    converse,
    damage,
    log_file,
    one_line_error,
)
from tests.support.pgserver import DSN

from turnkeep.meta import ForkPoint
from turnkeep_jsonl.format import MARK, Commit, decode_control
from turnkeep_jsonl.names import session_name


def original(store: Store, session_id: str) -> object:
    """Everything the store keeps of `session_id` (to prove it is untouched)."""
    if store.name == "jsonl":
        stem = session_name(session_id)
        return sorted(
            (p.name, p.read_bytes())
            for p in store.path.rglob(f"{stem}*")
            if p.is_file() and p.parent.name != "locks"
        )
    conn = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
    try:
        return conn.execute(
            "SELECT s.id, s.next_seq, s.title, e.seq, e.raw FROM sessions s "
            "JOIN events e ON e.session_key = s.key WHERE s.id = ? ORDER BY e.seq",
            (session_id,),
        ).fetchall()
    finally:
        conn.close()


def commits(store: Store, session_id: str) -> list[int]:
    """The next seq after each commit unit of a JSONL log."""
    lines = log_file(store, session_id).read_bytes().split(b"\n")
    found: list[int] = []
    for line in lines:
        if line.startswith(MARK):
            control = decode_control(line)
            if type(control) is Commit:
                found.append(control.seq)
    return found


def flip_event(store: Store, session_id: str, seq: int) -> None:
    """Flip one byte inside event `seq`'s line of a JSONL log."""
    path = log_file(store, session_id)
    data = bytearray(path.read_bytes())
    at = data.index(b'"seq":%d,' % seq)
    data[at + 12] ^= 0x01
    path.write_bytes(bytes(data))


def salvaged(result_stdout: str) -> dict[str, Any]:
    return msgspec.json.decode(result_stdout)


def test_jsonl_salvage_keeps_the_whole_flushes_before_the_damage(
    jsonl_store: Store,
) -> None:
    store = jsonl_store
    asyncio.run(converse(store, "s", session_format=2))
    before = asyncio.run(store.load("s")).events
    ends = commits(store, "s")
    assert len(ends) >= 4
    damaged_seq = ends[1] + 1  # inside the third flush; later flushes follow
    flip_event(store, "s", damaged_seq)
    assert cli("show", "s", store=store).exit_code == 1  # unloadable now
    kept_before = original(store, "s")

    result = cli("repair", "--salvage", "s", "--id", "rescued", "--json", store=store)
    assert result.exit_code == 0, result.stderr
    report = salvaged(result.stdout)
    prefix = ends[1]  # the flush boundary before the damaged line
    assert report["session_id"] == "s"
    assert report["new_session_id"] == "rescued"
    assert report["events"] == prefix
    lost = report["lost"]
    assert lost["first_seq"] == prefix
    assert lost["last_seq"] == len(before) - 1
    assert lost["lost_bytes"] > 0
    assert lost["first_flush"] is not None
    assert lost["last_flush"] > lost["first_flush"]
    assert "damaged" in lost["reason"]
    assert "left as it is" in result.stderr

    rescued = asyncio.run(store.load("rescued"))
    assert rescued.events == before[:prefix]
    assert rescued.meta.header.parent == ForkPoint(session_id="s", seq=prefix)
    assert rescued.meta.summary.title == "hello (salvaged)"
    assert original(store, "s") == kept_before  # the original, untouched
    assert cli("verify", "rescued", store=store).exit_code == 0


def test_jsonl_salvage_prints_the_new_id_and_what_was_lost(jsonl_store: Store) -> None:
    store = jsonl_store
    asyncio.run(converse(store, "s", session_format=2))
    ends = commits(store, "s")
    flip_event(store, "s", ends[0] + 1)
    result = cli("repair", "--salvage", "s", store=store)
    assert result.exit_code == 0, result.stderr
    (new_id,) = result.stdout.split()
    assert new_id != "s"
    assert f"salvaged events 0..{ends[0] - 1} of s into {new_id}" in result.stderr
    assert f"lost events {ends[0]}.." in result.stderr
    assert "bytes" in result.stderr
    assert "flushes" in result.stderr
    assert set(asyncio.run(store.ids())) == {"s", new_id}


@pytest.mark.parametrize("how", ["missing-row", "garbled-row"])
def test_sqlite_salvage_keeps_the_events_before_a_damaged_row(
    sqlite_store: Store, how: str
) -> None:
    store = sqlite_store
    asyncio.run(converse(store, "s", session_format=2))
    before = asyncio.run(store.load("s")).events
    if how == "missing-row":
        damage(store, "s")  # deletes the row of seq 5
    else:
        conn = sqlite3.connect(store.path, isolation_level=None)
        try:
            conn.execute(
                "UPDATE events SET raw = X'7b7b7b' WHERE seq = 5 AND session_key = "
                "(SELECT key FROM sessions WHERE id = 's')"
            )
        finally:
            conn.close()
    assert cli("verify", "s", store=store).exit_code == 1
    kept_before = original(store, "s")

    result = cli("repair", "--salvage", "s", "--id", "rescued", "--json", store=store)
    assert result.exit_code == 0, result.stderr
    report = salvaged(result.stdout)
    assert report["events"] == 5
    assert report["lost"]["first_seq"] == 5
    assert report["lost"]["last_seq"] == len(before) - 1
    # What follows the prefix: the acknowledged bytes, or what is stored now.
    stored = before[5:] if how == "missing-row" else [b"{{{", *before[6:]]
    assert report["lost"]["lost_bytes"] == sum(len(e) for e in stored)
    rescued = asyncio.run(store.load("rescued"))
    assert rescued.events == before[:5]
    assert rescued.meta.header.parent == ForkPoint(session_id="s", seq=5)
    assert original(store, "s") == kept_before
    assert cli("verify", "rescued", store=store).exit_code == 0


def test_postgres_salvage_of_a_garbled_row(pg_store: Store) -> None:
    store = pg_store
    asyncio.run(converse(store, "s", session_format=2))
    before = asyncio.run(store.load("s")).events
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {}.events SET raw = '\\x7b7b7b'::bytea "
                "WHERE session_id = 's' AND seq = 4"
            ).format(sql.Identifier(str(store.schema)))
        )
    result = cli("repair", "--salvage", "s", "--id", "rescued", "--json", store=store)
    assert result.exit_code == 0, result.stderr
    assert salvaged(result.stdout)["events"] == 4
    assert asyncio.run(store.load("rescued")).events == before[:4]
    assert asyncio.run(store.load("s")).events[4] == b"{{{"  # kept as it was


def test_nothing_to_salvage_in_an_undamaged_session(store: Store) -> None:
    asyncio.run(converse(store, "s", prompts=("hi",), session_format=2))
    result = cli("repair", "--salvage", "s", store=store)
    assert result.exit_code == 1
    line = one_line_error(result)
    assert "nothing to salvage" in line
    assert "turnkeep fork" in line
    assert asyncio.run(store.ids()) == ["s"]


def test_damage_from_the_first_event_leaves_nothing_to_salvage(store: Store) -> None:
    asyncio.run(converse(store, "s", session_format=2))
    if store.name == "jsonl":
        damage(store, "s")  # flips a byte of the first event
    else:
        conn = sqlite3.connect(store.path, isolation_level=None)
        try:
            conn.execute("DELETE FROM events WHERE seq = 0")
        finally:
            conn.close()
    kept_before = original(store, "s")
    result = cli("repair", "--salvage", "s", store=store)
    assert result.exit_code == 1
    line = one_line_error(result)
    assert "damaged from its first event" in line
    assert "lost events 0.." in line
    assert asyncio.run(store.ids()) == ["s"]
    assert original(store, "s") == kept_before


def test_salvage_refuses_a_taken_id_and_an_unknown_session(
    store: Store, tmp_path: Path
) -> None:
    asyncio.run(converse(store, "s", session_format=2))
    asyncio.run(converse(store, "other", prompts=("hi",), session_format=2))
    if store.name == "jsonl":
        flip_event(store, "s", commits(store, "s")[0] + 1)
    else:
        damage(store, "s")
    taken = cli("repair", "--salvage", "s", "--id", "other", store=store)
    assert taken.exit_code == 1
    assert "'other' already exists" in one_line_error(taken)
    unknown = cli("repair", "--salvage", "ghost", store=store)
    assert unknown.exit_code == 1
    assert "'ghost'" in one_line_error(unknown)
    assert sorted(asyncio.run(store.ids())) == ["other", "s"]


def test_id_without_salvage_is_a_usage_error(store: Store) -> None:
    result = cli("repair", "s", "--id", "x", store=store)
    assert result.exit_code == 2
    assert "--salvage" in result.stderr


def test_jsonl_salvage_of_a_log_that_lost_its_end(jsonl_store: Store) -> None:
    store = jsonl_store
    asyncio.run(converse(store, "s", session_format=2))
    before = asyncio.run(store.load("s")).events
    ends = commits(store, "s")
    path = log_file(store, "s")
    data = path.read_bytes()
    # Cut the log right after the second commit line: the sidecar's
    # watermark proves later flushes were acknowledged.
    kept: list[bytes] = []
    for line in data.split(b"\n"):
        kept.append(line)
        control = decode_control(line) if line.startswith(MARK) else None
        if type(control) is Commit and control.seq == ends[1]:
            break
    path.write_bytes(b"\n".join(kept) + b"\n")
    assert cli("show", "s", store=store).exit_code == 1
    result = cli("repair", "--salvage", "s", "--id", "rescued", "--json", store=store)
    assert result.exit_code == 0, result.stderr
    lost = salvaged(result.stdout)["lost"]
    assert lost["first_seq"] == ends[1]
    assert lost["lost_bytes"] == 0  # nothing of it is left in the file
    assert lost["last_flush"] >= lost["first_flush"]
    assert "summary says flush" in lost["reason"]
    assert asyncio.run(store.load("rescued")).events == before[: ends[1]]
