"""The SSE stream over a real socket (uvicorn in this process), and the tails.

A writer appends through a host of its own while clients follow: each
committed seq arrives once, in order; `Last-Event-ID` resumes exactly; a
client that stops reading is dropped without holding up anyone else.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import msgspec
import pytest
import uvicorn
from tests.cli.support import Store, converse
from tests.support.waiting import eventually

from turnkeep import follow as core_follow
from turnkeep.config import ServeConfig
from turnkeep.events import UserMessageData
from turnkeep.packs import expand_all
from turnkeep.serve import create_app, follow
from turnkeep.serve.follow import Tails

pytestmark = pytest.mark.asyncio


class Readers:
    """Counts the tails' waits for a commit.

    A tail's reader reads where the log ends, then waits: a commit from then
    on reaches its subscribers, one before it would not.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.waits = 0
        real = follow.wait_for_commit

        async def counted(*args: Any, **kwargs: Any) -> int:
            self.waits += 1
            return await real(*args, **kwargs)

        monkeypatch.setattr(follow, "wait_for_commit", counted)

    async def waiting(self) -> None:
        """Until a reader waits for the next commit."""
        await eventually(
            lambda: self.waits > 0, what="a tail's reader to wait for a commit"
        )


@pytest.fixture
def readers(monkeypatch: pytest.MonkeyPatch) -> Readers:
    return Readers(monkeypatch)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def running(store: Store, **options: Any) -> AsyncGenerator[str]:
    """The service over `store` on a loopback port; yields its base URL."""
    async with store.host() as host:
        app = create_app(host, ServeConfig(), poll_interval=0.02, **options)
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        task = asyncio.create_task(server.serve())
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no event for it
            await asyncio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            await task


async def sse(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, str]]:
    """SSE messages (`id`, `event`, `data`; comments as `comment`)."""
    message: dict[str, str] = {}
    async for line in lines:
        if not line:
            if message:
                yield message
            message = {}
        elif line.startswith(":"):
            yield {"comment": line[1:].strip()}
        else:
            field, _, value = line.partition(":")
            message[field] = value.removeprefix(" ")


async def take(
    url: str, count: int, headers: dict[str, str] | None = None
) -> list[int]:
    seqs: list[int] = []
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("GET", url, headers=headers) as reply,
    ):
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        async for message in sse(reply.aiter_lines()):
            if "id" in message:
                event = msgspec.json.decode(message["data"])
                assert event["seq"] == int(message["id"])
                seqs.append(event["seq"])
                if len(seqs) == count:
                    return seqs
    return seqs


async def test_followers_see_every_commit_once_in_order(store: Store) -> None:
    await converse(store, "s-one", prompts=("first",))
    before = len(expand_all((await store.load("s-one")).events))
    async with running(store) as base:
        url = f"{base}/sessions/s-one/stream?after=-1"
        followers = [asyncio.create_task(take(url, before + 5)) for _ in range(3)]
        await asyncio.sleep(0.3)
        # Another host appends turns (as another process would).
        async with store.host() as host:
            from turnkeep import AgentLoop
            from turnkeep.testing import ScriptedModel

            loop = await AgentLoop.resume(
                "w",
                "s-one",
                host=host,
                model=ScriptedModel(["a", "b", "c"]),
                context="override",  # another model, no tools: a new context
            )
            for prompt in ("two", "three"):
                await loop.run_turn(prompt)
            await loop.close()
        total = len(expand_all((await store.load("s-one")).events))
        assert total >= before + 5
        for seqs in await asyncio.wait_for(asyncio.gather(*followers), 30):
            assert seqs == list(range(before + 5))
        # Resuming after seq 3 gives exactly what follows it.
        resumed = await take(
            f"{base}/sessions/s-one/stream",
            total - 4,
            headers={"Last-Event-ID": "3"},
        )
        assert resumed == list(range(4, total))


async def test_a_quiet_stream_gets_heartbeats_and_starts_at_the_end(
    sqlite_store: Store,
) -> None:
    await converse(sqlite_store, "s-one", prompts=("first",))
    async with (
        running(sqlite_store, heartbeat=0.1) as base,
        httpx.AsyncClient(timeout=10) as client,
        client.stream("GET", f"{base}/sessions/s-one/stream") as reply,
    ):
        seen: list[dict[str, str]] = []
        async for message in sse(reply.aiter_lines()):
            seen.append(message)
            if len(seen) == 2:
                break
        assert all("comment" in m for m in seen), seen  # no backlog, only pings


async def test_a_bad_last_event_id_is_400(sqlite_store: Store) -> None:
    await converse(sqlite_store, "s-one", prompts=("first",))
    async with running(sqlite_store) as base, httpx.AsyncClient() as client:
        reply = await client.get(
            f"{base}/sessions/s-one/stream", headers={"Last-Event-ID": "x"}
        )
        assert reply.status_code == 400
        assert reply.json()["code"] == "bad-parameter"


async def test_a_slow_subscriber_is_dropped_and_the_others_keep_up(
    sqlite_store: Store, readers: Readers
) -> None:
    await converse(sqlite_store, "s-one", prompts=("first",))
    async with sqlite_store.host() as host:
        tails = Tails(host.require_persistence(), interval=0.01, queue_size=2)
        slow = tails.subscribe("s-one")
        fast = tails.subscribe("s-one")
        got: list[int] = []
        before = len(expand_all((await sqlite_store.load("s-one")).events))

        async def drain() -> None:
            while True:
                items = await fast.take(1)
                assert items is not None
                got.extend(seq for seq, _ in items)

        reader = asyncio.create_task(drain())
        await readers.waiting()
        async with sqlite_store.host() as writer:
            from turnkeep import AgentLoop
            from turnkeep.testing import ScriptedModel

            loop = await AgentLoop.resume(
                "w",
                "s-one",
                host=writer,
                model=ScriptedModel(["a", "b"]),
                context="override",  # another model, no tools: a new context
            )
            await loop.run_turn("two")
            await loop.run_turn("three")
            await loop.close()
        total = len(expand_all((await sqlite_store.load("s-one")).events))
        assert total - before > 2  # more than the queue holds
        await eventually(lambda: len(got) >= total - before, what="the fast subscriber")
        reader.cancel()
        assert got == list(range(before, total))
        assert slow.dropped
        assert await slow.take(10) is None  # its stream ends: the client reconnects
        await tails.aclose()
        assert tails.followed == 0


async def test_a_commit_in_this_process_wakes_its_followers_at_once(
    sqlite_store: Store, readers: Readers, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Polling every 30 s, and the backend's own wait for commits set aside
    # (SQLite's would deliver too): only the session_committed hook can
    # deliver in time.
    monkeypatch.setattr(core_follow, "has_commit_waiter", lambda backend: False)
    async with sqlite_store.host() as host:
        app = create_app(host, ServeConfig(), poll_interval=30.0)
        async with app.router.lifespan_context(app):
            tails = app.state.api.tails
            session = host.sessions.create("s-here")
            session.append(UserMessageData(text="first"))
            await session.flush()
            sub = tails.subscribe("s-here")
            await readers.waiting()
            session.append(UserMessageData(text="second"))
            await session.flush()
            # Well under the 30 s poll, with room for a busy machine.
            taken = await asyncio.wait_for(sub.take(10), 10)
            assert taken is not None
            ((seq, raw),) = taken
            assert seq == 1
            assert msgspec.json.decode(raw)["data"]["text"] == "second"
            tails.unsubscribe(sub)


async def test_a_stream_that_falls_behind_ends_with_dropped(
    sqlite_store: Store, readers: Readers
) -> None:
    await converse(sqlite_store, "s-one", prompts=("first",))
    async with sqlite_store.host() as host:
        app = create_app(host, ServeConfig(), poll_interval=0.01, queue_size=2)
        async with app.router.lifespan_context(app):
            api = app.state.api
            last = expand_all((await sqlite_store.load("s-one")).events)
            assert api.guard.budgets.open_stream("addr:test")
            stream = api._committed("s-one", len(last) - 1, "addr:test")
            first = asyncio.create_task(anext(stream))
            await readers.waiting()  # subscribed, and its reader at the end
            (sub,) = api.tails._tails["s-one"].subscribers
            async with sqlite_store.host() as writer:
                from turnkeep import AgentLoop
                from turnkeep.testing import ScriptedModel

                loop = await AgentLoop.resume(
                    "w",
                    "s-one",
                    host=writer,
                    model=ScriptedModel(["a", "b"]),
                    context="override",  # another model, no tools: a new context
                )
                await loop.run_turn("two")
                await loop.run_turn("three")
                await loop.close()
            chunks = [await asyncio.wait_for(first, 10)]
            # This client reads nothing more until it fell behind.
            await eventually(lambda: sub.dropped, what="the client to be dropped")
            async for chunk in stream:
                chunks.append(chunk)
            assert isinstance(chunks[0], bytes)
            assert chunks[0].startswith(b"id: %d\n" % len(last))
            dropped = chunks[-1]
            assert not isinstance(dropped, bytes)
            assert dropped.event == "dropped"
            assert "slow-client" in str(dropped.data)
            assert api.guard.budgets.open_streams == 0
            assert api.tails.followed == 0
