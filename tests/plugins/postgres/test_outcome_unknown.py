"""R17 for PostgreSQL: a flush whose commit reply was lost is reported as undecided.

The writer's connection is terminated (`pg_terminate_backend`, from another
connection) at the commit of a flush, deterministically: right before the
`COMMIT` is sent (the flush did not land) or right after it landed and
before its reply is read (it did). Each of the four ways a flush commits
is covered: a lone append of a held session (its one statement is its
commit), a group of appends (one transaction), a lone append that takes
the writer role first, and a lone append with a summary (each a
transaction of its own). Every affected append must raise
`FlushOutcomeUnknownError` with its seq range, never a plain
`StorageError`; a retry settles it (it lands, or `SequenceError` says it
had), and so does a takeover: the old owner is told the outcome is still
unknown (`fenced`), the new one loads the flush exactly once or not at all.
A connection lost before the commit was asked for is still a `StorageError`
(`test_environment.py::test_a_group_killed_after_writing_part_of_it_stores_none_of_it`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any

import psycopg
import pytest

from turnkeep.errors import (
    FlushOutcomeUnknownError,
    SequenceError,
    SessionFencedError,
)
from turnkeep.meta import SessionSummary
from turnkeep_postgres import PostgresPersistence

from .test_backend import meta, turn

pytestmark = pytest.mark.postgres

OpenStore = Callable[..., PostgresPersistence]
Connect = Callable[[], psycopg.Connection[Any]]


class LosesCommitReply:
    """Terminates the writer's connection at its next commit, once.

    With `lands`, the commit goes through first and the connection is
    terminated before its reply is read (the next use of the connection
    raises the driver's real error); without, it is terminated right before
    the `COMMIT` (or the lone statement that is its own commit) is sent.
    """

    def __init__(self, store: PostgresPersistence, observer: Connect, *, lands: bool):
        opened = store._opened  # pyright: ignore[reportPrivateUsage]
        assert opened is not None, "open the store (write once) first"
        self.writer = opened.writer
        self.statement: bytes = opened.queries.append
        self.observer = observer
        self.lands = lands
        self.armed = True
        self.fired: str | None = None
        self.real_pool = self.writer.pool
        self.writer.pool = self  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncGenerator[Any]:
        async with self.real_pool.connection() as conn:
            yield _Wrapped(conn, self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real_pool, name)

    def terminate(self, conn: psycopg.AsyncConnection[Any]) -> None:
        # Waits (up to 5 s) until the server process has exited.
        with self.observer() as killer:
            row = killer.execute(
                "SELECT pg_terminate_backend(%s, 5000)", (conn.info.backend_pid,)
            ).fetchone()
        assert row == (True,), "the writer's connection was not terminated"

    async def lose(self, conn: psycopg.AsyncConnection[Any], what: str) -> None:
        """Before the commit is sent: terminate unless it is to land."""
        self.armed = False
        self.fired = what
        if not self.lands:
            self.terminate(conn)

    async def lose_reply(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """After the commit landed: terminate, then read (which raises)."""
        if self.lands:
            self.terminate(conn)
            await conn.execute("SELECT 1")
            raise AssertionError("a terminated connection answered")


class _Wrapped:
    def __init__(self, conn: psycopg.AsyncConnection[Any], loser: LosesCommitReply):
        self._conn = conn
        self._loser = loser
        self._depth = 0

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncGenerator[Any]:
        outer = self._depth == 0 and self._loser.armed
        self._depth += 1
        try:
            async with self._conn.transaction() as tx:
                yield tx
                if outer:
                    await self._loser.lose(self._conn, "commit")
            if outer:
                await self._loser.lose_reply(self._conn)
        finally:
            self._depth -= 1

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        loser = self._loser
        if loser.armed and self._depth == 0 and query == loser.statement:
            await loser.lose(self._conn, "statement")
            cur = await self._conn.execute(query, params, **kwargs)
            await loser.lose_reply(self._conn)
            return cur
        return await self._conn.execute(query, params, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


async def _stored(store: PostgresPersistence, sid: str) -> None:
    await store.create(meta(sid))
    await store.append(sid, turn(0, f"first {sid}"))


def _count(observer: psycopg.Connection[Any], sid: str) -> int:
    row = observer.execute(
        "SELECT count(*) FROM events WHERE session_id = %s", (sid,)
    ).fetchone()
    assert row is not None
    return int(row[0])


# How the flush commits: its own statement, a group's transaction, the
# transaction of an append that takes the writer role first, or that of a
# lone append whose summary is a second statement.
WAYS = {
    "alone": "statement",
    "group": "commit",
    "claiming": "commit",
    "summary": "commit",
}


async def _lose_one_commit(
    open_store: OpenStore, raw_conn: Connect, way: str, lands: bool
) -> tuple[PostgresPersistence, dict[str, list[Any]]]:
    store = open_store()
    sids = ["a", "b"] if way == "group" else ["a"]
    for sid in sids:
        await _stored(store, sid)
    if way == "claiming":
        await store.release("a")
    loser = LosesCommitReply(store, raw_conn, lands=lands)
    observer = raw_conn()
    flushes = {sid: turn(2, f"second {sid}") for sid in sids}
    summary = SessionSummary(title="t") if way == "summary" else None
    results = await asyncio.gather(
        *(
            store.append(sid, records, summary=summary)
            for sid, records in flushes.items()
        ),
        return_exceptions=True,
    )
    assert loser.fired == WAYS[way]
    for sid, result in zip(flushes, results, strict=True):
        assert isinstance(result, FlushOutcomeUnknownError), repr(result)
        assert result.session_id == sid
        assert (result.first_seq, result.last_seq) == (2, 3)
        assert not result.fenced
        assert isinstance(result.__cause__, psycopg.Error)
        assert "may or may not" in str(result)
        assert _count(observer, sid) == (4 if lands else 2)
        if summary is not None:
            title = (await store.load(sid)).meta.summary.title
            assert title == ("t" if lands else None), "the summary went alone"
    return store, flushes


@pytest.mark.parametrize("lands", [True, False], ids=["landed", "not-landed"])
@pytest.mark.parametrize("way", list(WAYS))
@pytest.mark.asyncio
async def test_a_lost_commit_reply_is_an_unknown_outcome_that_a_retry_settles(
    open_store: OpenStore, raw_conn: Connect, way: str, lands: bool
) -> None:
    store, flushes = await _lose_one_commit(open_store, raw_conn, way, lands)
    for sid, records in flushes.items():
        if lands:
            with pytest.raises(SequenceError) as info:
                await store.append(sid, records)
            assert info.value.expected == 4
        else:
            await store.append(sid, records)
        expected = [*turn(0, f"first {sid}"), *records]
        assert (await store.load(sid)).events == [bytes(r.raw) for r in expected]
        await store.append(sid, turn(4, "third"))  # and the session goes on
        assert len((await store.load(sid)).events) == 6


@pytest.mark.parametrize("lands", [True, False], ids=["landed", "not-landed"])
@pytest.mark.asyncio
async def test_a_takeover_while_the_outcome_is_unknown_never_says_not_written(
    open_store: OpenStore, raw_conn: Connect, lands: bool
) -> None:
    store, flushes = await _lose_one_commit(open_store, raw_conn, "alone", lands)
    records = flushes["a"]
    thief = open_store()
    await thief.claim("a", steal=True)
    # The old owner lost the session with the flush still undecided.
    with pytest.raises(FlushOutcomeUnknownError) as info:
        await store.append("a", records)
    assert info.value.fenced
    assert (info.value.first_seq, info.value.last_seq) == (2, 3)
    assert isinstance(info.value.__cause__, SessionFencedError)
    with pytest.raises(FlushOutcomeUnknownError):  # still undecided, still fenced
        await store.append("a", turn(4, "later"))
    # The new owner sees the flush exactly once or not at all, and settles it.
    assert len((await thief.load("a")).events) == (4 if lands else 2)
    if lands:
        with pytest.raises(SequenceError):
            await thief.append("a", records)
    else:
        await thief.append("a", records)
    expected = [bytes(r.raw) for r in [*turn(0, "first a"), *records]]
    assert (await thief.load("a")).events == expected
