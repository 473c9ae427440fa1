"""What the PostgreSQL backend does beyond the conformance kit.

Group commit (flushes arriving together share one transaction, each is
acknowledged only after it commits, a refusal fails only its own session),
the lease (renewed while the owner lives, taken without `steal` once it runs
out, the old owner fenced), `list` served by its index, `delete` removing
every row, and the entry point.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql
from tests.support.waiting import eventually

from turnkeep.codec import EventCodec, EventRecord
from turnkeep.config import Config
from turnkeep.errors import (
    SequenceError,
    SessionFencedError,
    SessionLockedError,
    StorageError,
)
from turnkeep.events import TurnEnd, TurnEndData, UserMessage, UserMessageData
from turnkeep.host import Host
from turnkeep.listfilter import ListFilter
from turnkeep.meta import SessionHeader, SessionMeta, SessionSummary
from turnkeep_postgres import PostgresPersistence, reads
from turnkeep_postgres.schema import commit_channel

pytestmark = pytest.mark.postgres

CODEC = EventCodec()
T0 = 1_700_000_000_000
OpenStore = Callable[..., PostgresPersistence]


def meta(session_id: str) -> SessionMeta:
    return SessionMeta(
        header=SessionHeader(id=session_id, created_at=T0),
        summary=SessionSummary(updated_at=T0),
    )


def turn(seq0: int, text: str, *, time: int | None = None) -> list[EventRecord]:
    at = T0 + seq0 if time is None else time
    return [
        CODEC.record(UserMessage(seq=seq0, time=at, data=UserMessageData(text=text))),
        CODEC.record(
            TurnEnd(seq=seq0 + 1, time=at, data=TurnEndData(turn=1, status="completed"))
        ),
    ]


# -- group commit ----------------------------------------------------------------


@pytest.mark.asyncio
async def test_flushes_arriving_together_share_one_transaction(
    open_store: OpenStore, raw_conn: Callable[[], psycopg.Connection[Any]]
) -> None:
    store = open_store()
    ids = [f"s-{n}" for n in range(8)]
    for sid in ids:
        await store.create(meta(sid))
        await store.append(sid, turn(0, "first"))
    blocker = raw_conn()
    observer = raw_conn()
    # Hold the row of the session that sorts last, so the group's
    # transaction has written the others and waits on this one.
    blocker.execute("BEGIN")
    blocker.execute("SELECT 1 FROM sessions WHERE id = 's-7' FOR UPDATE")
    groups = store.writer_stats.groups
    tasks = [asyncio.create_task(store.append(sid, turn(2, "second"))) for sid in ids]

    def writer_waits() -> bool:
        row = observer.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND wait_event_type = 'Lock'",
            (store.application_name,),
        ).fetchone()
        return row is not None and row[0] == 1

    await eventually(
        writer_waits, what="the group to wait on the held row", within=10.0
    )
    assert not any(t.done() for t in tasks), "acknowledged before the commit"
    visible = observer.execute("SELECT count(*) FROM events WHERE seq >= 2").fetchone()
    assert visible == (0,), "part of the group was visible before its commit"
    blocker.execute("COMMIT")
    await asyncio.gather(*tasks)
    assert store.writer_stats.groups == groups + 1
    assert store.writer_stats.largest_group == len(ids)
    assert store.writer_stats.batched == len(ids)  # one statement for all
    for sid in ids:
        assert len((await store.load(sid)).events) == 4


@pytest.mark.asyncio
async def test_taking_and_giving_up_a_session_do_not_wait_for_the_wal_flush(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Open per request (claim, one turn, release): only the turn's commit
    # waits for the WAL flush; the writer role rides on it.
    store = open_store()
    await store.create(meta("s"))
    await store.append("s", turn(0, "first"))
    await store.release("s")
    sent: list[str] = []
    execute = psycopg.AsyncConnection.execute

    async def recording(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(query, bytes):
            query = query.decode()
        sent.append(query if isinstance(query, str) else query.as_string(self))
        return await execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", recording)
    light = store.writer_stats.light
    marks: dict[str, int] = {}
    await store.claim("s")
    marks["claim"] = len(sent)
    await store.append("s", turn(2, "second"))
    marks["append"] = len(sent)
    await store.release("s")
    marks["release"] = len(sent)
    off = "SET LOCAL synchronous_commit TO off"
    assert sent[: marks["claim"]].count(off) == 1
    assert sent[marks["claim"] : marks["append"]].count(off) == 0
    assert sent[marks["append"] : marks["release"]].count(off) == 1
    assert store.writer_stats.light == light + 2
    assert len((await store.load("s")).events) == 4


@pytest.mark.asyncio
async def test_a_refusal_in_a_group_fails_only_its_session(
    open_store: OpenStore,
) -> None:
    store, thief = open_store(), open_store()
    ids = [f"g-{n}" for n in range(6)]
    for sid in ids:
        await store.create(meta(sid))
        await store.append(sid, turn(0, "first"))
    await thief.claim("g-1", steal=True)  # g-1: fenced
    await store.release("g-3")
    await thief.claim("g-3")  # g-3: owned by another live worker
    groups = store.writer_stats.groups
    batches = {sid: turn(2, "second") for sid in ids}
    batches["g-4"] = turn(5, "gap")  # g-4: wrong seq
    results = await asyncio.gather(
        *(store.append(sid, batch) for sid, batch in batches.items()),
        return_exceptions=True,
    )
    outcome = dict(zip(ids, results, strict=True))
    assert isinstance(outcome["g-1"], SessionFencedError)
    assert isinstance(outcome["g-3"], SessionLockedError)
    assert isinstance(outcome["g-4"], SequenceError)
    assert outcome["g-4"].expected == 2
    assert store.writer_stats.groups == groups + 1, "the group was split"
    assert store.writer_stats.batched == 3
    for sid in ("g-0", "g-2", "g-5"):
        assert outcome[sid] is None
        assert len((await store.load(sid)).events) == 4
    for sid in ("g-1", "g-3", "g-4"):
        assert len((await store.load(sid)).events) == 2, f"{sid} wrote something"


@pytest.mark.asyncio
async def test_a_statement_error_in_a_group_fails_only_its_operation(
    open_store: OpenStore, raw_conn: Callable[[], psycopg.Connection[Any]]
) -> None:
    store = open_store()
    for sid in ("e-0", "e-1", "e-2"):
        await store.create(meta(sid))
        await store.append(sid, turn(0, "first"))
    # A stray row where e-1's next flush goes: its insert violates the
    # primary key, which aborts the whole transaction on the server.
    raw_conn().execute(
        "INSERT INTO events (session_id, seq, raw) VALUES ('e-1', 3, 'x')"
    )
    results = await asyncio.gather(
        *(store.append(sid, turn(2, "second")) for sid in ("e-0", "e-1", "e-2")),
        return_exceptions=True,
    )
    assert results[0] is None
    assert results[2] is None
    assert type(results[1]).__name__ == "StorageError"
    assert "23505" in str(results[1])  # unique_violation, named
    assert len((await store.load("e-0")).events) == 4
    assert len((await store.load("e-2")).events) == 4


# -- leases ----------------------------------------------------------------------


def lease_until(conn: psycopg.Connection[Any], sid: str) -> float:
    row = conn.execute(
        "SELECT extract(epoch FROM lease_until) FROM sessions WHERE id = %s", (sid,)
    ).fetchone()
    assert row is not None
    assert row[0] is not None
    return float(row[0])


@pytest.mark.asyncio
async def test_a_live_owner_renews_its_lease(
    open_store: OpenStore, raw_conn: Callable[[], psycopg.Connection[Any]]
) -> None:
    owner, other = open_store(lease_ms=600), open_store(lease_ms=600)
    await owner.create(meta("r"))
    await owner.append("r", turn(0, "first"))
    conn = raw_conn()
    first_deadline = lease_until(conn, "r")
    # Two renewals later the deadline lies beyond the first one's.
    await eventually(
        lambda: lease_until(conn, "r") > first_deadline + 0.3,
        what="the lease to be renewed",
        within=10.0,
    )
    with pytest.raises(SessionLockedError):
        await other.claim("r")


@pytest.mark.asyncio
async def test_a_dead_owners_lease_runs_out_and_it_is_fenced(
    open_store: OpenStore, raw_conn: Callable[[], psycopg.Connection[Any]]
) -> None:
    # A lease long enough that a loaded machine cannot let it run out
    # between the append and the first claim below.
    owner, other = open_store(lease_ms=2000), open_store(lease_ms=2000)
    await owner.create(meta("d"))
    await owner.append("d", turn(0, "first"))
    assert owner._opened is not None
    owner._opened.renewer.cancel()  # the owner stops renewing, as a dead one would
    with pytest.raises(SessionLockedError):
        await other.claim("d")
    conn = raw_conn()
    deadline = lease_until(conn, "d")

    def expired() -> bool:
        row = conn.execute("SELECT extract(epoch FROM now())").fetchone()
        return row is not None and float(row[0]) > deadline

    await eventually(expired, what="the lease deadline to pass", within=10.0)
    await other.claim("d")  # no steal needed once the lease ran out
    await other.append("d", turn(2, "new owner"))
    with pytest.raises(SessionFencedError):
        await owner.append("d", turn(2, "stale owner"))
    events = (await other.load("d")).events
    assert events[2:] == [r.raw for r in turn(2, "new owner")]


@pytest.mark.asyncio
async def test_an_abandoned_create_is_taken_over_once_its_lease_ran_out(
    open_store: OpenStore, raw_conn: Callable[[], psycopg.Connection[Any]]
) -> None:
    first, second = open_store(lease_ms=2000), open_store(lease_ms=2000)
    await first.create(meta("c"))
    assert first._opened is not None
    first._opened.renewer.cancel()
    with pytest.raises(SessionLockedError):
        await second.create(meta("c"))
    conn = raw_conn()
    deadline = lease_until(conn, "c")

    def expired() -> bool:
        row = conn.execute("SELECT extract(epoch FROM now())").fetchone()
        return row is not None and float(row[0]) > deadline

    await eventually(expired, what="the lease deadline to pass", within=10.0)
    await second.create(meta("c"))
    await second.append("c", turn(0, "second"))
    with pytest.raises(SessionFencedError):
        await first.append("c", turn(0, "first"))


# -- list, delete, entry point ---------------------------------------------------


@pytest.mark.asyncio
async def test_list_is_served_by_its_index(
    store: PostgresPersistence, raw_conn: Callable[[], psycopg.Connection[Any]]
) -> None:
    await store.create(meta("seed"))
    await store.append("seed", turn(0, "seed"))
    conn = raw_conn()
    conn.execute(
        "INSERT INTO sessions (id, format_version, header, summary, updated_at,"
        " next_seq) SELECT 'bulk-' || g, 1, json_build_object('id', 'bulk-' || g),"
        " '{}', g % 700, 1 FROM generate_series(1, 5000) AS g"
    )
    conn.execute("ANALYZE sessions")
    page = await store.list(limit=50)
    assert page.next_cursor is not None
    for query, params in (
        (opened_queries(store).list_first, {"limit": 51}),
        (
            opened_queries(store).list_after,
            {"updated_at": 350, "id": "bulk-9", "limit": 51},
        ),
    ):
        row = conn.execute(b"EXPLAIN (FORMAT JSON) " + query, params).fetchone()
        assert row is not None
        plan = row[0][0]["Plan"]
        nodes = list(walk(plan))
        assert any(n.get("Index Name") == "sessions_by_update" for n in nodes), plan
        assert not any(n["Node Type"] in ("Sort", "Seq Scan") for n in nodes), plan


@pytest.mark.asyncio
async def test_filtered_lists_are_served_by_an_index(
    store: PostgresPersistence, raw_conn: Callable[[], psycopg.Connection[Any]]
) -> None:
    await store.create(meta("seed"))
    await store.append("seed", turn(0, "seed"))
    conn = raw_conn()
    conn.execute(
        "INSERT INTO sessions (id, format_version, header, summary, updated_at,"
        " next_seq) SELECT 'bulk-' || g, 1, json_build_object('id', 'bulk-' || g),"
        " json_build_object('status', (ARRAY['idle', 'closed', 'failed'])[g % 3 + 1]"
        " ), g % 700, 1 FROM generate_series(1, 5000) AS g"
    )
    conn.execute("ANALYZE sessions")
    page = await store.list(limit=50, where=ListFilter(statuses={"failed"}))
    assert page.next_cursor is not None
    assert {m.summary.status for m in page.items} == {"failed"}
    queries = opened_queries(store)
    window = {"lower": 100, "upper": 600, "limit": 51}
    after = {"updated_at": 350, "id": "bulk-9"}
    for query, params, index in (
        (queries.list_window_first, window, "sessions_by_update"),
        (queries.list_window_after, window | after, "sessions_by_update"),
        (
            queries.list_status_first,
            window | {"status": "failed"},
            "sessions_by_status",
        ),
        (
            queries.list_status_after,
            window | after | {"status": "failed"},
            "sessions_by_status",
        ),
    ):
        row = conn.execute(b"EXPLAIN (FORMAT JSON) " + query, params).fetchone()
        assert row is not None
        plan = row[0][0]["Plan"]
        nodes = list(walk(plan))
        assert any(n.get("Index Name") == index for n in nodes), plan
        assert not any(n["Node Type"] in ("Sort", "Seq Scan") for n in nodes), [
            (n["Node Type"], n.get("Index Name"), index) for n in nodes
        ]


@pytest.mark.asyncio
async def test_commits_are_notified_from_their_transaction_and_wake_followers(
    open_store: Callable[..., PostgresPersistence],
    raw_conn: Callable[[], psycopg.Connection[Any]],
    schema: str,
) -> None:
    writer, follower = open_store(), open_store()
    await writer.create(meta("followed"))
    first = turn(0, "first")
    await writer.append("followed", first)
    listener = raw_conn()
    listener.execute(
        sql.SQL("LISTEN {}").format(sql.Identifier(commit_channel(schema)))
    )
    conn = raw_conn()
    # A write rolled back drops the NOTIFY its trigger queued.
    with conn.transaction(force_rollback=True):
        conn.execute(
            "UPDATE sessions SET next_seq = next_seq + 5 WHERE id = 'followed'"
        )
    assert [n.payload for n in listener.notifies(timeout=0.5)] == []
    waiting = asyncio.ensure_future(follower.wait_for_commit("followed", 1, 10.0))
    await asyncio.sleep(0.3)
    await writer.append("followed", turn(2, "second"))
    assert await asyncio.wait_for(waiting, 5.0) == 3
    assert heard(listener) == ["3 followed"]  # the commit's last seq and the id
    await writer.delete("followed")
    assert heard(listener) == ["-1 followed"]


def heard(listener: psycopg.Connection[Any]) -> list[str]:
    """The payloads of the next notification and of any within 0.5 s after it.

    The first is waited for up to 30 s: CI's busy machine can take more
    than a moment to deliver it.
    """
    payloads = [n.payload for n in listener.notifies(timeout=30, stop_after=1)]
    return payloads + [n.payload for n in listener.notifies(timeout=0.5)]


def opened_queries(store: PostgresPersistence) -> Any:
    assert store._opened is not None
    return store._opened.queries


def walk(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(walk(child))
    return nodes


@pytest.mark.asyncio
async def test_delete_removes_every_row_of_the_session_and_only_those(
    store: PostgresPersistence, raw_conn: Callable[[], psycopg.Connection[Any]]
) -> None:
    for sid in ("gone", "kept"):
        await store.create(meta(sid))
        await store.append(sid, turn(0, sid))
        await store.append(sid, turn(2, sid))
    await store.delete("gone")
    conn = raw_conn()
    counts = conn.execute(
        "SELECT (SELECT count(*) FROM sessions WHERE id = 'gone'),"
        " (SELECT count(*) FROM events WHERE session_id = 'gone'),"
        " (SELECT count(*) FROM events WHERE session_id = 'kept')"
    ).fetchone()
    assert counts == (0, 0, 4)


@pytest.mark.asyncio
async def test_the_entry_point_selects_the_backend_by_configuration(
    schema: str,
) -> None:
    from .conftest import DSN

    config = Config(
        persistence="postgres",
        plugins=("postgres",),
        backends={"postgres": {"dsn": DSN, "schema": schema, "lease_ms": "5000"}},
    )
    async with Host(config) as host:
        backend = host.require_persistence()
        assert isinstance(backend, PostgresPersistence)
        assert backend.config.lease_ms == 5000
        session = host.sessions.create()
        session.append(UserMessageData(text="hello"))
        await session.flush()
        assert len((await backend.load(session.id)).events) == 1


@pytest.mark.asyncio
async def test_a_long_host_name_is_cut_but_the_pid_is_kept(
    open_store: OpenStore,
    raw_conn: Callable[[], psycopg.Connection[Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Operators find a dead worker's connections by the pid at the end of
    # the name (docs/deploy-postgres.md); a pod-length host name must not
    # push it past the server's 63 bytes.
    monkeypatch.setattr(socket, "gethostname", lambda: "h" * 80)
    store = open_store(application_name="wörker")
    name = store.application_name
    assert name.endswith(f":{os.getpid()}")
    assert name.startswith("w?rker:hhh")  # as the server would keep it
    assert len(name.encode()) <= 63
    await store.create(meta("s"))
    seen = raw_conn().execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
    )
    assert seen.fetchone() == (1,), "the server holds the name as the backend says"


@pytest.mark.asyncio
async def test_a_lone_append_of_a_held_session_commits_with_its_statement(
    open_store: OpenStore,
) -> None:
    store, thief = open_store(), open_store()
    await store.create(meta("s"))  # holds the session from here on
    await store.append("s", turn(0, "first"))
    solo = store.writer_stats.solo
    await store.append("s", turn(2, "second"))
    assert store.writer_stats.solo == solo + 1
    # Refused by its compare-and-set, the lone statement wrote nothing.
    await thief.claim("s", steal=True)
    with pytest.raises(SessionFencedError):
        await store.append("s", turn(4, "third"))
    with pytest.raises(SequenceError):
        await thief.append("s", turn(2, "again"))
    assert len((await thief.load("s")).events) == 4
    await thief.append("s", turn(4, "fourth"))
    assert len((await store.load("s")).events) == 6


@pytest.mark.asyncio
async def test_an_append_that_must_take_the_role_first_is_a_transaction(
    open_store: OpenStore, raw_conn: Callable[[], psycopg.Connection[Any]]
) -> None:
    # Not held, an append writes twice (the claim, then the events): alone,
    # it must not run as lone statements, or a refused append would leave
    # the claim committed while this instance forgets it.
    first = open_store()
    await first.create(meta("s"))
    await first.append("s", turn(0, "first"))
    await first.release("s")
    generation = raw_conn().execute("SELECT generation FROM sessions").fetchone()
    later = open_store()
    with pytest.raises(SequenceError):
        await later.append("s", turn(5, "wrong seq"))
    assert later.writer_stats.solo == 0
    after = raw_conn().execute("SELECT generation, owner FROM sessions").fetchone()
    assert after is not None
    assert generation is not None
    assert after == (generation[0], None), "the refused append's claim stayed"
    await later.append("s", turn(2, "second"))
    assert len((await later.load("s")).events) == 4


@pytest.mark.asyncio
async def test_a_lone_append_with_a_summary_is_one_transaction(
    open_store: OpenStore,
) -> None:
    # Its events and its summary are two statements: alone in its group it
    # must still commit both or neither. A summary the server refuses (an
    # `updated_at` beyond bigint) fails the second; the first must go too.
    store = open_store()
    await store.create(meta("s"))  # holds the session from here on
    await store.append("s", turn(0, "first"))
    solo = store.writer_stats.solo
    bad = SessionSummary(title="t", updated_at=2**63)
    with pytest.raises(StorageError):
        await store.append("s", turn(2, "second"), summary=bad)
    loaded = await store.load("s")
    assert len(loaded.events) == 2
    assert loaded.meta.summary.title is None
    await store.append("s", turn(2, "second"), summary=SessionSummary(title="t"))
    assert store.writer_stats.solo == solo, "it ran as lone statements"
    loaded = await store.load("s")
    assert len(loaded.events) == 4
    assert loaded.meta.summary.title == "t"


# -- reads -------------------------------------------------------------------------


def _between_statements(
    monkeypatch: pytest.MonkeyPatch, step: str, meanwhile: Callable[[], Awaitable[None]]
) -> None:
    """Run `meanwhile` once, right after the first call of `reads.<step>`."""
    real = getattr(reads, step)
    done = False

    async def then(*args: Any) -> Any:
        nonlocal done
        found = await real(*args)
        if not done:
            done = True
            await meanwhile()
        return found

    monkeypatch.setattr(reads, step, then)


@pytest.mark.asyncio
async def test_a_load_reads_the_row_and_its_events_in_one_snapshot(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read apart, the old row (4 events) would meet the new session's 2
    # events: damage reported where there is none.
    store, other = open_store(), open_store()
    await store.create(meta("s"))
    await store.append("s", turn(0, "old"))
    await store.append("s", turn(2, "old"))
    await store.release("s")

    async def replace() -> None:
        await other.delete("s", force=True)
        await other.create(meta("s"))
        await other.append("s", turn(0, "new"))

    _between_statements(monkeypatch, "_metas", replace)
    loaded = await store.load("s")
    assert len(loaded.events) == 4
    assert all(b"old" in raw for raw in loaded.events[::2])
    monkeypatch.undo()
    again = await store.load("s")
    assert len(again.events) == 2
    assert b"new" in again.events[0]


@pytest.mark.asyncio
async def test_a_list_of_several_statuses_reads_one_snapshot(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One index range per status: read apart, a session whose status moves
    # from the first range's to the second's between them is listed twice.
    store, other = open_store(), open_store()
    await store.create(meta("s"))
    await store.append("s", turn(0, "old"))

    async def move() -> None:
        await other.update("s", SessionSummary(status="idle", updated_at=T0 + 9))

    _between_statements(monkeypatch, "_range", move)
    page = await store.list(where=ListFilter(statuses={"active", "idle"}))
    assert [m.id for m in page.items] == ["s"]
    assert page.items[0].summary.status == "active"
    monkeypatch.undo()
    page = await store.list(where=ListFilter(statuses={"active", "idle"}))
    assert [(m.id, m.summary.status) for m in page.items] == [("s", "idle")]


@pytest.mark.asyncio
async def test_a_read_after_a_seq_takes_bounds_past_any_seq(
    open_store: OpenStore,
) -> None:
    store = open_store()
    await store.create(meta("s"))
    await store.append("s", turn(0, "a"))
    await store.append("s", turn(2, "b"))
    assert len(await store.load_after("s", 0, 2**63 - 1)) == 3
    assert len(await store.load_after("s", 1, 2**80)) == 2
    assert await store.load_after("s", 2**63, 5) == []
    assert await store.load_after("s", 2**80, 2**80) == []
