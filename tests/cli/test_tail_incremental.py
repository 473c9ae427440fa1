"""`tail -f` follows with `last_seq` and `load_after`, never a whole `load`."""

from __future__ import annotations

import asyncio

import attrs
import msgspec
import pytest
from tests.support.delegating import Delegating

from turnkeep.cli import view
from turnkeep.codec import EventCodec
from turnkeep.conformance import BackendHarness
from turnkeep.memory import MemoryPersistence
from turnkeep.persistence import LoadedSession


@attrs.define(eq=False)
class NoWholeLoads(MemoryPersistence):
    asked_after: list[int] = attrs.field(factory=list[int])

    async def load(self, session_id: str) -> LoadedSession:
        raise AssertionError("following must not load the whole session")

    async def load_after(self, session_id: str, after: int, limit: int) -> list[bytes]:
        self.asked_after.append(after)
        return await super().load_after(session_id, after, limit)


def test_follow_fetches_only_the_new_events(capsys: pytest.CaptureFixture[str]) -> None:
    backend = NoWholeLoads()
    meta = BackendHarness.meta()

    async def run() -> None:
        await backend.create(meta)
        await backend.append(meta.id, BackendHarness.records(0, 4))
        follow = asyncio.create_task(
            view._follow(backend, meta.id, 4, EventCodec(), True, 0.01)  # pyright: ignore[reportPrivateUsage]
        )
        await asyncio.sleep(0.1)
        await backend.append(meta.id, BackendHarness.records(4, 2))
        await asyncio.sleep(0.1)
        await backend.append(meta.id, BackendHarness.records(6, 1))
        await asyncio.sleep(0.1)
        follow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await follow

    asyncio.run(run())
    lines = capsys.readouterr().out.splitlines()
    assert [msgspec.json.decode(line)["seq"] for line in lines] == [4, 5, 6]
    assert backend.asked_after == [3, 5]  # idle polls fetch nothing


@attrs.define(eq=False)
class CountsWaits(NoWholeLoads):
    waits: list[int] = attrs.field(factory=list[int])

    async def last_seq(self, session_id: str) -> int:
        raise AssertionError("a backend that notifies is not polled")

    async def wait_for_commit(
        self, session_id: str, after_seq: int, within: float
    ) -> int:
        self.waits.append(after_seq)
        return await super().wait_for_commit(session_id, after_seq, within)


async def _follow_three_flushes(backend: object, interval: float) -> None:
    meta = BackendHarness.meta()
    writer = backend if isinstance(backend, MemoryPersistence) else backend.inner  # type: ignore[attr-defined]
    await writer.create(meta)
    await writer.append(meta.id, BackendHarness.records(0, 4))
    follow = asyncio.create_task(
        view._follow(backend, meta.id, 4, EventCodec(), True, interval)  # type: ignore[arg-type]  # pyright: ignore[reportPrivateUsage, reportArgumentType]
    )
    for start, count in ((4, 2), (6, 1)):
        await asyncio.sleep(0.1)
        await writer.append(meta.id, BackendHarness.records(start, count))
    await asyncio.sleep(0.1)
    follow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await follow


def test_follow_waits_for_commits_where_the_backend_can_say(
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = CountsWaits()
    # A long poll interval: only the backend's wake can print in time.
    asyncio.run(_follow_three_flushes(backend, 30.0))
    lines = capsys.readouterr().out.splitlines()
    assert [msgspec.json.decode(line)["seq"] for line in lines] == [4, 5, 6]
    assert backend.waits == [3, 5, 6]  # one wait per commit, from the last printed
    assert backend.asked_after == [3, 5]


def test_follow_polls_a_backend_that_cannot_say(
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = Delegating(MemoryPersistence())  # no wait_for_commit, no last_seq
    asyncio.run(_follow_three_flushes(backend, 0.01))
    lines = capsys.readouterr().out.splitlines()
    assert [msgspec.json.decode(line)["seq"] for line in lines] == [4, 5, 6]
