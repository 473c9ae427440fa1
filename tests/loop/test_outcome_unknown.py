"""A flush whose outcome is unknown is reported as such, end to end (R17).

A backend that cannot tell whether a flush landed raises
`FlushOutcomeUnknownError` with the flush's seq range. The write-behind and
the agent loop hand that on, with the range, and never turn it into "not
stored" (a plain `FlushError`, `TurnNotDurableError`, a report of unsaved
events without the doubt) while the question is open; a later append
settles it, and nothing is stored twice. Two hosts over one
`MemoryStorage` stand for two processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import pytest
from tests.loop.support import stored_events

from turnkeep import AgentLoop, Host, hookimpl
from turnkeep.backendkit import outcome_unknown
from turnkeep.config import Config
from turnkeep.errors import FlushError, FlushOutcomeUnknownError, StorageError
from turnkeep.events import UserMessageData
from turnkeep.meta import SessionSummary
from turnkeep.persistence import EventRecord
from turnkeep.testing import EchoModel, MemoryPersistence, MemoryStorage


class LosesAcks(MemoryPersistence):
    """A memory backend whose next appends land, then lose their reply.

    `lose` appends land and raise `FlushOutcomeUnknownError` (what a
    database says when the connection drops during `COMMIT`); `fail` appends
    after them raise a plain `StorageError` without landing.
    """

    lose: int = 0
    fail: int = 0

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        if self.fail and not self.lose:
            self.fail -= 1
            raise StorageError("the server is restarting; nothing was written")
        await super().append(session_id, events, summary=summary)
        if self.lose:
            self.lose -= 1
            raise outcome_unknown(
                session_id, events, "the connection dropped during COMMIT"
            )


@attrs.define(eq=False)
class LosingPlugin:
    storage: MemoryStorage
    instances: list[LosesAcks] = attrs.field(factory=list[LosesAcks])

    @hookimpl
    def register_persistence(self, register: Callable[..., None]) -> None:
        register("losing", self.make)

    def make(self, _config: object) -> LosesAcks:
        backend = LosesAcks(self.storage)
        self.instances.append(backend)
        return backend


def host_over(storage: MemoryStorage) -> tuple[Host, LosingPlugin]:
    plugin = LosingPlugin(storage)
    host = Host(Config(persistence="losing", plugins="none"), plugins=[plugin])
    return host, plugin


def texts(events: Sequence[object]) -> list[str]:
    return [e.data.text for e in events]  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_a_lost_acknowledgement_is_passed_on_with_its_range_then_settled() -> (
    None
):
    host, plugin = host_over(MemoryStorage())
    async with host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="one"))
        await session.flush()
        session.append(UserMessageData(text="two"))
        session.append(UserMessageData(text="three"))
        (backend,) = plugin.instances
        backend.lose, backend.fail = 1, 1
        with pytest.raises(FlushOutcomeUnknownError) as first:
            await session.flush()
        assert (first.value.first_seq, first.value.last_seq) == (1, 2)
        assert not first.value.fenced
        # A retry that fails for another reason does not make it "not stored".
        with pytest.raises(FlushOutcomeUnknownError) as again:
            await session.flush()
        assert (again.value.first_seq, again.value.last_seq) == (1, 2)
        assert "may or may not be stored" in str(again.value)
        # The next flush settles it: the events had landed, once.
        await session.flush()
        assert host.is_settled(session)
        assert texts(await stored_events(host, "s")) == ["one", "two", "three"]


@pytest.mark.asyncio
async def test_a_lease_lost_mid_commit_stays_unknown_and_reaches_the_close_report() -> (
    None
):
    storage = MemoryStorage()
    old, plugin = host_over(storage)
    new, _ = host_over(storage)
    async with old, new:
        session = old.sessions.create("s")
        session.append(UserMessageData(text="kept"))
        await session.flush()
        session.append(UserMessageData(text="in doubt"))
        plugin.instances[0].lose = 1
        with pytest.raises(FlushOutcomeUnknownError):
            await session.flush()
        # Meanwhile the lease ran out and another process took over.
        await new.sessions.resume("s", steal=True)
        session.append(UserMessageData(text="after"))
        with pytest.raises(FlushOutcomeUnknownError) as fenced:
            await session.flush()
        assert (fenced.value.first_seq, fenced.value.last_seq) == (1, 1)
        assert fenced.value.fenced
        assert "seq 2..2 are not stored" in str(fenced.value)
        report = await old.sessions.close("s")
        assert (report.outcome, report.unsaved, report.in_doubt) == (
            "fenced",
            2,
            (1, 1),
        )
        assert "may be stored all the same" in report.describe()
        # It was stored: the new owner's log holds it, once.
        assert texts(await stored_events(new, "s")) == ["kept", "in doubt"]


@pytest.mark.asyncio
async def test_the_loop_passes_an_unknown_final_flush_on_then_settles_it() -> None:
    host, plugin = host_over(MemoryStorage())
    async with host:
        loop = AgentLoop.create("a", host=host, model=EchoModel(), session_id="s")
        await loop.run_turn("one")
        (backend,) = plugin.instances
        backend.lose, backend.fail = 1, 1
        session = host.sessions.get("s")
        start = len(session.events)
        with pytest.raises(FlushOutcomeUnknownError) as ended:
            await loop.run_turn("two")
        assert (ended.value.first_seq, ended.value.last_seq) == (
            start,
            len(session.events) - 1,
        )
        # The next turn's admission retries; still unknown, so it refuses
        # with the same range rather than "the previous turn is not durable".
        with pytest.raises(FlushOutcomeUnknownError) as refused:
            await loop.run_turn("three")
        assert (refused.value.first_seq, refused.value.last_seq) == (
            ended.value.first_seq,
            ended.value.last_seq,
        )
        assert len(session.events) == ended.value.last_seq + 1  # nothing ran
        result = await loop.run_turn("three")  # settled: it had landed
        assert result.status == "completed"
        stored = await stored_events(host, "s")
        assert [e.seq for e in stored] == list(range(len(session.events)))
        turns = [e for e in stored if e.type == "turn/start"]
        assert len(turns) == 3  # turn two stored once, not twice


@pytest.mark.asyncio
async def test_a_plain_failure_is_still_not_stored() -> None:
    host, plugin = host_over(MemoryStorage())
    async with host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="one"))
        (backend,) = plugin.instances
        backend.fail = 1
        with pytest.raises(FlushError) as failed:
            await session.flush()
        assert not isinstance(failed.value, FlushOutcomeUnknownError)
        await session.flush()
        assert texts(await stored_events(host, "s")) == ["one"]
