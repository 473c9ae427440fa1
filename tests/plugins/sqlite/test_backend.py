"""The SQLite backend's own behaviour beyond the conformance kit.

Group commit (flushes that arrive together share one commit; a refusal in
one fails only that flush), the event loop never waits for SQLite, reads and
writes do not block each other, the list query is served by its index,
crashed or dropped owners free their sessions, and the backend is selected by
configuration alone (entry point, `[backends.sqlite]`, environment).
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings, strategies as st
from tests.support.worker_client import SpawnWorker

from turnkeep.config import Config, load_config
from turnkeep.errors import (
    FlushOutcomeUnknownError,
    InvalidCursorError,
    SequenceError,
    SessionCorruptError,
    SessionFencedError,
    SessionLockedError,
    StorageError,
)
from turnkeep.events import TurnEndData, UserMessageData
from turnkeep.host import Host
from turnkeep.listfilter import ListFilter
from turnkeep.meta import ForkPoint, SessionHeader, SessionMeta, SessionSummary
from turnkeep_sqlite import (
    SqliteConfig,
    SqlitePersistence,
    reads,
    schema as schema_module,
)

from .conftest import meta, turn_records


async def _stored(store: SqlitePersistence, sid: str, turns: int = 1) -> int:
    await store.create(meta(sid))
    seq = 0
    for n in range(turns):
        records = turn_records(seq, n)
        await store.append(sid, records)
        seq += len(records)
    return seq


@pytest.mark.asyncio
async def test_flushes_that_arrive_together_share_one_commit(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    ids = [f"s{n}" for n in range(32)]
    for sid in ids:
        await _stored(store, sid)
    holder = raw_db()
    holder.execute("BEGIN IMMEDIATE")  # the writer must wait: flushes pile up
    before = store.writer_stats.groups
    tasks = [asyncio.create_task(store.append(sid, turn_records(3, 1))) for sid in ids]
    for _ in range(50):
        await asyncio.sleep(0)  # the loop runs freely while SQLite is locked
    assert not any(t.done() for t in tasks)  # nothing acknowledged before a commit
    holder.execute("ROLLBACK")
    await asyncio.gather(*tasks)
    assert store.writer_stats.groups - before <= 2  # one commit, maybe a first one
    assert store.writer_stats.largest_group >= 31
    for sid in ids:
        assert len((await store.load(sid)).events) == 6


@pytest.mark.asyncio
async def test_a_refused_flush_in_a_group_fails_alone(
    open_store: Callable[..., SqlitePersistence],
    raw_db: Callable[[], sqlite3.Connection],
) -> None:
    store = open_store()
    thief = open_store()
    for sid in ("good1", "good2", "badseq", "fenced", "toobig"):
        await _stored(store, sid)
    await thief.claim("fenced", steal=True)
    holder = raw_db()
    holder.execute("BEGIN IMMEDIATE")
    tasks = {
        "good1": store.append("good1", turn_records(3, 1)),
        "badseq": store.append("badseq", turn_records(4, 1)),
        "fenced": store.append("fenced", turn_records(3, 1)),
        "good2": store.append("good2", turn_records(3, 1)),
        "empty": store.append("good2", []),
    }
    running = {k: asyncio.create_task(v) for k, v in tasks.items()}
    for _ in range(20):
        await asyncio.sleep(0)
    holder.execute("ROLLBACK")
    results = dict(
        zip(
            running,
            await asyncio.gather(*running.values(), return_exceptions=True),
            strict=True,
        )
    )
    assert isinstance(results["badseq"], SequenceError)
    assert isinstance(results["fenced"], SessionFencedError)
    assert results["good1"] is None
    assert results["good2"] is None
    assert len((await store.load("good1")).events) == 6
    assert len((await store.load("good2")).events) == 6
    assert len((await store.load("badseq")).events) == 3
    assert len((await store.load("fenced")).events) == 3


@pytest.mark.asyncio
@pytest.mark.parametrize("count", [2, 199, 200, 450])
async def test_a_flush_of_any_size_stores_every_event_once_in_order(
    store: SqlitePersistence, count: int
) -> None:
    # A flush's events go in many rows per statement (199 at most): flushes
    # at, just past and well past that size come back whole and in order.
    await store.create(meta("big"))
    first = turn_records(0, 0)
    await store.append("big", first)
    records = turn_records(len(first), 1, sizes=[3] * (count - 1))
    assert len(records) == count
    await store.append("big", records)
    loaded = await store.load("big")
    assert loaded.events == [r.raw for r in first + records]
    assert loaded.meta.summary.event_count == len(first) + count
    assert loaded.meta.summary.turns == 2
    more = turn_records(len(first) + count, 2)
    await store.append("big", more)  # the log goes on after it
    assert (await store.load("big")).events[-len(more) :] == [r.raw for r in more]


@pytest.mark.asyncio
async def test_a_flush_cancelled_before_it_ran_writes_nothing(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    await _stored(store, "a")
    await _stored(store, "b")
    holder = raw_db()
    holder.execute("BEGIN IMMEDIATE")
    first = asyncio.create_task(store.append("a", turn_records(3, 1)))
    for _ in range(20):
        await asyncio.sleep(0)
    second = asyncio.create_task(store.append("b", turn_records(3, 1)))
    for _ in range(20):
        await asyncio.sleep(0)
    second.cancel()
    holder.execute("ROLLBACK")
    await first
    with pytest.raises(asyncio.CancelledError):
        await second
    # Either it was cancelled before the writer took it (nothing written),
    # or the writer had it already and it landed whole: never half.
    assert len((await store.load("b")).events) in (3, 6)


@pytest.mark.asyncio
async def test_reads_do_not_wait_for_the_write_lock(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    await _stored(store, "s", turns=3)
    holder = raw_db()
    holder.execute("BEGIN IMMEDIATE")
    try:
        assert len((await store.load("s")).events) == 9
        assert [m.id for m in (await store.list()).items] == ["s"]
        assert await store.has("s")
    finally:
        holder.execute("ROLLBACK")


@pytest.mark.asyncio
async def test_writes_do_not_wait_for_readers(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    await _stored(store, "s")
    reader = raw_db()
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM events").fetchone()[0] == 3
    await store.append("s", turn_records(3, 1))  # while a read snapshot is open
    assert reader.execute("SELECT count(*) FROM events").fetchone()[0] == 3
    reader.execute("COMMIT")
    assert len((await store.load("s")).events) == 6


@pytest.mark.asyncio
async def test_the_list_query_is_served_by_its_index(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    for n in range(20):
        await _stored(store, f"s{n}")
    conn = raw_db()
    conn.execute("ANALYZE")
    for sql, args in (
        (reads._LIST_FIRST, (10,)),
        (reads._LIST_AFTER, (5, "s3", 10)),
    ):
        plan = " | ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
        assert "sessions_recent" in plan, plan
        assert "TEMP B-TREE" not in plan, plan
        assert "events" not in plan, plan


@pytest.mark.asyncio
async def test_deleting_a_session_finds_its_audit_records_by_an_index(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    # The foreign key's cascade looks the session's records up by key: a
    # scan there would hold the writer's lock over the whole audit table.
    await _stored(store, "s")
    conn = raw_db()
    plan = " | ".join(
        r[3]
        for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT 1 FROM audit WHERE session_key = ?", (1,)
        )
    )
    assert "audit_by_session" in plan, plan


@pytest.mark.asyncio
async def test_filtered_lists_are_served_by_an_index(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    for n in range(20):
        await _stored(store, f"s{n}")
    conn = raw_db()
    conn.execute("ANALYZE")
    window = ListFilter(updated_after=1, updated_before=10**13)
    for status, index in ((None, "sessions_recent"), ("idle", "sessions_by_status")):
        for after in (None, (5, "s3")):
            sql, args = reads.filter_query(status, window, after, 10)
            plan = " | ".join(
                r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args)
            )
            assert index in plan, plan
            assert "TEMP B-TREE" not in plan, plan
            assert "events" not in plan, plan


@pytest.mark.asyncio
async def test_paging_with_equal_timestamps_and_hostile_cursors(
    open_store: Callable[..., SqlitePersistence],
) -> None:
    store = open_store()  # every session's records carry the same times
    ids = sorted(f"id-{n:02d}" for n in range(9))
    for sid in ids:
        await _stored(store, sid)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await store.list(limit=4, cursor=cursor)
        seen.extend(m.id for m in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == ids
    for bad in ("", "x" * 5000, "W10=", "WzEsMiwzXQ==", "\u2603"):
        with pytest.raises(InvalidCursorError):
            await store.list(cursor=bad)
    with pytest.raises(ValueError, match="positive"):
        await store.list(limit=0)


@pytest.mark.asyncio
async def test_a_created_but_never_flushed_session_leaves_no_row(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    await store.create(meta("pending"))
    await store.update("pending", SessionSummary(title="early"))
    await store.release("pending")
    await store.create(meta("pending2"))
    await store.aclose()
    assert raw_db().execute("SELECT count(*) FROM sessions").fetchone()[0] == 0


@pytest.mark.asyncio
async def test_a_crashed_creator_does_not_block_the_id(
    db_path: Path, store: SqlitePersistence, spawn_worker: SpawnWorker
) -> None:
    worker = spawn_worker()
    worker.call(op="open", path=str(db_path))
    assert "error" not in worker.call(op="create", id="x")
    with pytest.raises(SessionLockedError):
        await store.create(meta("x"))  # the creator is alive
    os.kill(worker.pid, signal.SIGKILL)
    worker.proc.wait()
    await store.create(meta("x"))  # the creator is dead: its claim row is taken
    await store.append("x", turn_records(0, 0))
    assert len((await store.load("x")).events) == 3


@pytest.mark.asyncio
async def test_an_instance_dropped_without_closing_frees_its_sessions(
    open_store: Callable[..., SqlitePersistence], db_path: Path
) -> None:
    other = open_store()
    dropped = SqlitePersistence(SqliteConfig(path=db_path))
    await _stored(dropped, "s")
    with pytest.raises(SessionLockedError):
        await other.claim("s")
    del dropped
    gc.collect()
    await other.claim("s")  # same process, but that owner is gone


def test_every_metadata_field_has_a_column() -> None:
    # A field added to the metadata structs must get a column (and a
    # migration); this fails until it does, instead of dropping it silently.
    assert set(SessionHeader.__struct_fields__) == {
        "id", "format_version", "created_at", "cwd", "parent",
    }  # fmt: skip
    assert set(ForkPoint.__struct_fields__) == {"session_id", "seq"}
    assert set(SessionSummary.__struct_fields__) == {
        "updated_at", "title", "first_prompt", "status", "event_count", "turns",
        "size",
    }  # fmt: skip


@pytest.mark.asyncio
async def test_selected_by_configuration_alone(tmp_path: Path) -> None:
    path = tmp_path / "by-config" / "s.sqlite3"
    config = Config(
        persistence="sqlite",
        plugins=("sqlite",),  # found through the `turnkeep` entry point
        backends={"sqlite": {"path": str(path)}},
    )
    async with Host(config) as host:
        assert isinstance(host.require_persistence(), SqlitePersistence)
        session = host.sessions.create()
        session.append(UserMessageData(text="hello"))
        session.append(TurnEndData(turn=1, status="completed"))
        await session.flush()
        expected = list(session.events)
        sid = session.id
    env = {"TURNKEEP_PERSISTENCE": "sqlite", "TURNKEEP_SQLITE__PATH": str(path)}
    again = load_config(tmp_path, env=env, overrides={"plugins": ("sqlite",)})
    async with Host(again) as host:
        resumed = await host.sessions.resume(sid)
        assert list(resumed.events) == expected
    assert path.exists()


@pytest.mark.asyncio
async def test_the_parent_of_a_fork_round_trips(store: SqlitePersistence) -> None:
    fork = meta("child")
    fork = type(fork)(
        header=SessionHeader(id="child", parent=ForkPoint(session_id="p", seq=7)),
        summary=fork.summary,
    )
    await store.create(fork)
    await store.append("child", turn_records(0, 0))
    loaded = await store.load("child")
    assert loaded.meta.header.parent == ForkPoint(session_id="p", seq=7)


@pytest.mark.asyncio
async def test_a_driver_error_half_way_reruns_the_rest_of_the_group(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    for sid in ("bad", "good1", "good2"):
        await _stored(store, sid)
    conn = raw_db()
    # A stray row where the next flush's second event goes (a hand edit):
    # that flush fails inside its insert, after writing its first row.
    conn.execute(
        "INSERT INTO events (session_key, seq, type, time, raw) VALUES "
        "((SELECT key FROM sessions WHERE id = 'bad'), 4, 'x', 0, x'00')"
    )
    conn.execute("BEGIN IMMEDIATE")
    tasks = [
        asyncio.create_task(store.append(sid, turn_records(3, 1)))
        for sid in ("good1", "bad", "good2")
    ]
    for _ in range(20):
        await asyncio.sleep(0)
    conn.execute("ROLLBACK")
    good1, bad, good2 = await asyncio.gather(*tasks, return_exceptions=True)
    assert good1 is None
    assert good2 is None
    assert isinstance(bad, StorageError)
    assert "UNIQUE" in str(bad) or "constraint" in str(bad).lower()
    for sid in ("good1", "good2"):
        assert len((await store.load(sid)).events) == 6
    assert conn.execute(
        "SELECT next_seq FROM sessions WHERE id = 'bad'"
    ).fetchone() == (3,)  # nothing of the failed flush stayed
    await store.append("good1", turn_records(6, 2))  # not poisoned: a bad row is no I/O


class LosesCommitReply:
    """The writer's connection, whose next COMMIT fails (having landed or not).

    As when the acknowledgement of a commit is lost: the transaction may be
    durable, but the driver reports an I/O error (R17).
    """

    def __init__(self, conn: sqlite3.Connection, *, lands: bool) -> None:
        self._conn = conn
        self.lands = lands
        self.armed = True

    @classmethod
    def install(cls, store: SqlitePersistence, *, lands: bool) -> None:
        """Put one on `store`'s writer (which has written: its connection is open)."""
        writer = store._writer  # pyright: ignore[reportPrivateUsage]
        conn = writer._conn  # pyright: ignore[reportPrivateUsage]
        assert conn is not None
        writer._conn = cls(conn, lands=lands)  # type: ignore[assignment]  # pyright: ignore[reportPrivateUsage]

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if self.armed and sql == "COMMIT":
            self.armed = False
            if self.lands:
                self._conn.execute(sql)
            error = sqlite3.OperationalError("disk I/O error")
            error.sqlite_errorcode = 10  # SQLITE_IOERR
            raise error
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._conn, name)


@pytest.mark.asyncio
@pytest.mark.parametrize("lands", [True, False], ids=["landed", "not-landed"])
async def test_a_failed_commit_reports_each_flush_as_of_unknown_outcome(
    open_store: Callable[..., SqlitePersistence], lands: bool
) -> None:
    store = open_store()
    for sid in ("a", "b"):
        await _stored(store, sid)
    LosesCommitReply.install(store, lands=lands)
    flushes = {sid: turn_records(3, 1) for sid in ("a", "b")}
    results = await asyncio.gather(
        *(store.append(sid, records) for sid, records in flushes.items()),
        return_exceptions=True,
    )
    for sid, result in zip(flushes, results, strict=True):
        assert isinstance(result, FlushOutcomeUnknownError), repr(result)
        assert result.session_id == sid
        assert (result.first_seq, result.last_seq) == (3, 5)
        assert not result.fenced
        assert isinstance(result.__cause__, StorageError)
    # Whichever it was, a new instance tells, and a retry settles it.
    await store.aclose()
    again = open_store()
    for sid, records in flushes.items():
        stored = len((await again.load(sid)).events)
        assert stored == (6 if lands else 3)
        if lands:
            with pytest.raises(SequenceError) as info:
                await again.append(sid, records)
            assert info.value.expected == 6
        else:
            await again.append(sid, records)
        assert len((await again.load(sid)).events) == 6


def files_holding(paths: list[Path], data: bytes) -> list[str]:
    return [p.name for p in paths if p.exists() and data in p.read_bytes()]


@pytest.mark.asyncio
async def test_delete_zeroes_what_it_frees_even_where_sqlite_would_not(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Debian's SQLite zeroes freed space by default (SQLITE_SECURE_DELETE);
    # others do not: start every connection from that default to show the
    # backend turns it on itself (R19).
    opened = schema_module._connect

    def insecure(path: Path) -> sqlite3.Connection:
        conn = opened(path)
        conn.execute("PRAGMA secure_delete = OFF")
        return conn

    monkeypatch.setattr(schema_module, "_connect", insecure)
    marker = b"zq-secret-of-the-deleted-session"
    backend = SqlitePersistence(SqliteConfig(path=db_path))
    try:
        for sid in ("gone", "kept"):
            await backend.create(meta(sid, title=f"{sid} {marker.decode()}"))
            await backend.append(sid, turn_records(0, 1, sizes=[300, 300]))
        record = turn_records(3, 2)[0]
        raw = record.raw.replace(b"u2:", b"u2:" + marker)
        await backend.append("gone", [msgspec.structs.replace(record, raw=raw)])
        await backend.update("kept", SessionSummary(title="kept", updated_at=1))
        await backend.delete("gone")
        assert files_holding([db_path, Path(f"{db_path}-wal")], marker) == []
        assert (await backend.load("kept")).meta.summary.title == "kept"
    finally:
        await backend.aclose()


@pytest.mark.asyncio
async def test_a_listing_is_read_from_its_index_alone(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    # Read from the table, each row would cost a seek and a second page.
    for n in range(5):
        await _stored(store, f"s{n}")
    conn = raw_db()
    (root,) = conn.execute(
        "SELECT rootpage FROM sqlite_master WHERE name = 'sessions'"
    ).fetchone()
    window = ListFilter(updated_after=1, updated_before=10**13)
    queries = [(reads._LIST_FIRST, (10,)), (reads._LIST_AFTER, (5, "s3", 10))]
    queries += [
        reads.filter_query(status, window, after, 10)
        for status in (None, "idle")
        for after in (None, (5, "s3"))
    ]
    for sql, args in queries:
        program = conn.execute(f"EXPLAIN {sql}", args).fetchall()
        # (addr, opcode, p1, p2, ...): OpenRead p1 = cursor, p2 = root page.
        (table,) = [r[2] for r in program if r[1] == "OpenRead" and r[3] == root]
        reads_of_table = [r for r in program if r[1] == "Column" and r[2] == table]
        assert reads_of_table == [], (sql, reads_of_table)
        assert [r for r in program if "json" in str(r[4])] == [], sql


_TEXTS = st.one_of(
    st.none(),
    st.text(max_size=40),
    st.sampled_from(['"', "\\", "\n\x00\x1f", "\u2028 é 🐍"]),
)


@pytest.mark.asyncio
@settings(max_examples=40, deadline=None)
@given(
    title=_TEXTS,
    first_prompt=_TEXTS,
    cwd=_TEXTS,
    status=st.sampled_from(["active", "idle", "interrupted", "failed", "closed"]),
    forked=st.booleans(),
    created_at=st.integers(min_value=0, max_value=2**62),
)
async def test_a_listing_equals_the_loaded_metadata(
    tmp_path_factory: pytest.TempPathFactory,
    title: str | None,
    first_prompt: str | None,
    cwd: str | None,
    status: Any,
    forked: bool,
    created_at: int,
) -> None:
    path = tmp_path_factory.mktemp("listing") / "s.sqlite3"
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        parent = ForkPoint(session_id="p", seq=2) if forked else None
        header = SessionHeader(id="s", created_at=created_at, cwd=cwd, parent=parent)
        await backend.create(SessionMeta(header=header))
        summary = SessionSummary(
            title=title, first_prompt=first_prompt, status=status, updated_at=5
        )
        await backend.append("s", turn_records(0, 0), summary=summary)
        loaded = (await backend.load("s")).meta
        for where in (None, ListFilter(statuses=frozenset({status}))):
            (listed,) = (await backend.list(where=where)).items
            assert listed == loaded
        assert loaded.header == header
        assert (loaded.summary.title, loaded.summary.first_prompt) == (
            title,
            first_prompt,
        )
    finally:
        await backend.aclose()


@pytest.mark.asyncio
async def test_a_row_edited_to_values_no_session_has_lists_as_corrupt(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    await _stored(store, "good")
    await _stored(store, "edited")
    conn = raw_db()
    # The schema checks no type on created_at: a float gets through.
    conn.execute("UPDATE sessions SET created_at = 1.5 WHERE id = 'edited'")
    for where in (None, ListFilter(statuses=frozenset({"active"}))):
        with pytest.raises(
            SessionCorruptError, match=r"'edited'.*damaged or edited"
        ) as info:
            await store.list(where=where)
        assert info.value.session_id == "edited"
    conn.execute("UPDATE sessions SET created_at = 1 WHERE id = 'edited'")
    assert {m.id for m in (await store.list()).items} == {"good", "edited"}


@pytest.mark.asyncio
async def test_a_listing_longer_than_one_value_may_be_is_listed(
    db_path: Path,
) -> None:
    # Each text field is under a reader's value limit, but the listing
    # holds them all, escaped (a control character takes 6 bytes).
    backend = SqlitePersistence(SqliteConfig(path=db_path, max_event_bytes=1000))
    try:
        await backend.create(meta("s"))
        text = "\x01" * 1000
        summary = SessionSummary(title=text, first_prompt=text, updated_at=5)
        await backend.append("s", turn_records(0, 0), summary=summary)
        (listed,) = (await backend.list()).items
        assert listed == (await backend.load("s")).meta
        assert (listed.summary.title, listed.summary.first_prompt) == (text, text)
        where = ListFilter(statuses=frozenset({"active"}))
        assert (await backend.list(where=where)).items == [listed]
    finally:
        await backend.aclose()


@pytest.mark.asyncio
async def test_a_row_whose_listing_is_not_json_lists_as_corrupt(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    await _stored(store, "edited")
    conn = raw_db()
    # An infinite REAL: SQLite writes it into the JSON as no JSON number.
    conn.execute("UPDATE sessions SET created_at = 9e999 WHERE id = 'edited'")
    with pytest.raises(SessionCorruptError, match="'edited'") as info:
        await store.list()
    assert info.value.session_id == "edited"


@pytest.mark.asyncio
async def test_a_damaged_row_past_the_page_does_not_fail_the_page(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    for n in range(3):
        await _stored(store, f"s{n}")
    conn = raw_db()
    order = [m.id for m in (await store.list()).items]
    conn.execute("UPDATE sessions SET created_at = 1.5 WHERE id = ?", (order[-1],))
    for where in (None, ListFilter(statuses=frozenset({"active", "idle"}))):
        page = await store.list(limit=2, where=where)
        assert [m.id for m in page.items] == order[:2]
        with pytest.raises(SessionCorruptError):
            await store.list(limit=2, cursor=page.next_cursor, where=where)
