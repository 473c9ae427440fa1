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


@pytest.fixture(autouse=True)
def long_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each wait of the follower lasts a minute unless a commit ends it.

    So one that misses a commit prints it only after `printed` gave up.
    """
    monkeypatch.setattr(view, "_WAIT", 60.0)


async def printed(
    capsys: pytest.CaptureFixture[str],
    seqs: list[int],
    last: int,
    follow: asyncio.Task[None],
) -> None:
    """Add the seqs the follower prints to `seqs` until `last` is among them.

    Up to 30 s: the follower is prompt, but CI's busy machine can take a
    second or more to run it.
    """
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        lines = capsys.readouterr().out.splitlines()
        seqs.extend(msgspec.json.decode(line)["seq"] for line in lines)
        if last in seqs:
            return
        if follow.done():
            follow.result()  # raises what ended it
        assert asyncio.get_running_loop().time() < deadline, f"printed only {seqs}"
        await asyncio.sleep(0.01)


def test_follow_fetches_only_the_new_events(capsys: pytest.CaptureFixture[str]) -> None:
    backend = NoWholeLoads()
    meta = BackendHarness.meta()
    seqs: list[int] = []

    async def run() -> None:
        await backend.create(meta)
        await backend.append(meta.id, BackendHarness.records(0, 4))
        follow = asyncio.create_task(
            view._follow(backend, meta.id, 4, EventCodec(), True, 0.01)  # pyright: ignore[reportPrivateUsage]
        )
        await asyncio.sleep(0.1)
        await backend.append(meta.id, BackendHarness.records(4, 2))
        await printed(capsys, seqs, 5, follow)
        await backend.append(meta.id, BackendHarness.records(6, 1))
        await printed(capsys, seqs, 6, follow)
        follow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await follow

    asyncio.run(run())
    lines = capsys.readouterr().out.splitlines()
    seqs.extend(msgspec.json.decode(line)["seq"] for line in lines)
    assert seqs == [4, 5, 6]
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


async def _follow_three_flushes(
    backend: object, interval: float, capsys: pytest.CaptureFixture[str]
) -> list[int]:
    """The seqs printed while three flushes are followed, each once printed."""
    meta = BackendHarness.meta()
    writer = backend if isinstance(backend, MemoryPersistence) else backend.inner  # type: ignore[attr-defined]
    await writer.create(meta)
    await writer.append(meta.id, BackendHarness.records(0, 4))
    follow = asyncio.create_task(
        view._follow(backend, meta.id, 4, EventCodec(), True, interval)  # type: ignore[arg-type]  # pyright: ignore[reportPrivateUsage, reportArgumentType]
    )
    seqs: list[int] = []
    for start, count in ((4, 2), (6, 1)):
        await asyncio.sleep(0.1)
        await writer.append(meta.id, BackendHarness.records(start, count))
        await printed(capsys, seqs, start + count - 1, follow)
    follow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await follow
    lines = capsys.readouterr().out.splitlines()
    return seqs + [msgspec.json.decode(line)["seq"] for line in lines]


def test_follow_waits_for_commits_where_the_backend_can_say(
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = CountsWaits()
    # A long poll interval: only the backend's wake can print in time.
    assert asyncio.run(_follow_three_flushes(backend, 30.0, capsys)) == [4, 5, 6]
    assert backend.waits == [3, 5, 6]  # one wait per commit, from the last printed
    assert backend.asked_after == [3, 5]


def test_follow_polls_a_backend_that_cannot_say(
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = Delegating(MemoryPersistence())  # no wait_for_commit, no last_seq
    assert asyncio.run(_follow_three_flushes(backend, 0.01, capsys)) == [4, 5, 6]
