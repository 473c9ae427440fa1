"""`tail -f` follows with `last_seq` and `load_after`, never a whole `load`."""

from __future__ import annotations

import asyncio

import attrs
import msgspec
import pytest

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
