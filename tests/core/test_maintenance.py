from __future__ import annotations

from typing import Any

import msgspec
import pytest

from turnkeep import SessionEvent
from turnkeep.conformance import BackendHarness
from turnkeep.errors import SessionCorruptError, UnsupportedFormatError
from turnkeep.events import (
    ToolCall,
    ToolCallData,
    ToolResult,
    ToolResultData,
    TurnEnd,
    TurnEndData,
    UserMessage,
    UserMessageData,
)
from turnkeep.maintenance import TailReport, supports_maintenance, verify_session
from turnkeep.persistence import EventCodec, LoadedSession
from turnkeep.testing import MemoryPersistence

codec = EventCodec()


def build(*pairs: tuple[type[SessionEvent], Any]) -> list[bytes]:
    return [codec.encode(k(seq=i, time=i, data=d)) for i, (k, d) in enumerate(pairs)]


async def store(backend: MemoryPersistence, raws: list[bytes], sid: str = "s") -> None:
    await backend.create(BackendHarness.meta(sid))
    from turnkeep.persistence import EventRecord

    records = [EventRecord(i, "x", i, raw) for i, raw in enumerate(raws)]
    await backend.append(sid, records)


def call(cid: str) -> tuple[type[SessionEvent], Any]:
    return (ToolCall, ToolCallData(call_id=cid, name="t", arguments={}))


def result(cid: str) -> tuple[type[SessionEvent], Any]:
    return (ToolResult, ToolResultData(call_id=cid, output="ok"))


END = (TurnEnd, TurnEndData(turn=1, status="completed"))


@pytest.mark.asyncio
async def test_a_healthy_session_verifies_clean() -> None:
    backend = MemoryPersistence()
    await store(
        backend,
        build((UserMessage, UserMessageData(text="hi")), call("a"), result("a"), END),
    )
    report = await verify_session(backend, "s")
    assert report.ok
    assert report.events == 4
    assert report.tail is None


@pytest.mark.asyncio
async def test_pairing_problems_are_reported_with_their_position() -> None:
    backend = MemoryPersistence()
    raws = build(
        call("a"), result("a"), result("a"), result("ghost"), call("lost"), END
    )
    await store(backend, raws)
    report = await verify_session(backend, "s")
    kinds = [(p.kind, p.offset) for p in report.problems]
    assert kinds == [
        ("duplicate-result", 2),
        ("orphan-result", 3),
        ("unanswered-call", 4),
    ]
    assert not any(p.fatal for p in report.problems)


@pytest.mark.asyncio
async def test_a_call_in_a_turn_cut_by_a_crash_is_not_a_problem() -> None:
    backend = MemoryPersistence()
    await store(backend, build(END, call("open")))
    assert (await verify_session(backend, "s")).ok


class Failing(MemoryPersistence):
    error: Exception = SessionCorruptError("bad", session_id="s", offset=77)

    async def load(self, session_id: str) -> LoadedSession:
        raise self.error


@pytest.mark.parametrize(
    ("error", "kind", "offset"),
    [
        (SessionCorruptError("bad", session_id="s", offset=77), "corrupt", 77),
        (UnsupportedFormatError("newer"), "unsupported-format", None),
    ],
)
@pytest.mark.asyncio
async def test_unloadable_sessions_are_fatal_problems(
    error: Exception, kind: str, offset: int | None
) -> None:
    backend = Failing()
    backend.error = error
    (problem,) = (await verify_session(backend, "s")).problems
    assert (problem.kind, problem.offset, problem.fatal) == (kind, offset, True)


@pytest.mark.asyncio
async def test_missing_and_mismatched_and_undecodable_sessions() -> None:
    backend = MemoryPersistence()
    (missing,) = (await verify_session(backend, "nope")).problems
    assert missing.kind == "missing"

    class Liar(MemoryPersistence):
        async def load(self, session_id: str) -> LoadedSession:
            loaded = await super().load(session_id)
            header = msgspec.structs.replace(loaded.meta.header, id="other")
            meta = msgspec.structs.replace(loaded.meta, header=header)
            return msgspec.structs.replace(loaded, meta=meta, events=[b"junk"])

    liar = Liar()
    await store(liar, build(END))
    kinds = [p.kind for p in (await verify_session(liar, "s")).problems]
    assert kinds == ["header-mismatch", "undecodable"]


class WithTail(MemoryPersistence):
    async def inspect_tail(self, session_id: str) -> TailReport | None:
        return TailReport(session_id=session_id, offset=10, length=5, reason="torn")

    async def repair(self, session_id: str) -> TailReport | None:
        return None


@pytest.mark.asyncio
async def test_a_tail_is_reported_but_is_not_a_problem() -> None:
    backend = WithTail()
    assert supports_maintenance(backend)
    assert not supports_maintenance(MemoryPersistence())
    await store(backend, build(END))
    report = await verify_session(backend, "s")
    assert report.ok
    assert report.tail is not None
    assert report.tail.length == 5
