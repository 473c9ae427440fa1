"""Bad input and failures: typed errors, and nothing stored that was refused.

An id turnkeep cannot store, a malformed store spec and an item JSON would
give back as something else are refused before anything is written. A
flush that fails raises `FlushError` and leaves no unsaved copy behind: the
next read says, from storage, what landed. A log whose item pointers do not
hold up is `SessionCorruptError`, never a shorter history, from memory and
from storage alike, and `turnkeep show` says it cannot read the items.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from turnkeep import Config, Host
from turnkeep.errors import (
    FlushError,
    InvalidSessionIdError,
    LossyPayloadError,
    SessionCorruptError,
    StorageError,
)
from turnkeep.events import SessionEvent
from turnkeep.memory import MemoryPersistence
from turnkeep_openai_agents import TurnkeepSession
from turnkeep_openai_agents.events import (
    ClearData,
    ItemsData,
    OaiClear,
    OaiItems,
    OaiPop,
    PopData,
    Ref,
    Stack,
    last_stack,
    take,
)
from turnkeep_openai_agents.plugin import render_transcript

MESSAGE: Any = {"role": "user", "content": "hi"}


def test_an_unstorable_id_is_refused() -> None:
    for bad in ("", "a\x00b", "x" * 300):
        with pytest.raises(InvalidSessionIdError):
            TurnkeepSession(bad, "memory")


def test_a_malformed_store_spec_is_refused() -> None:
    with pytest.raises(ValueError, match="not a store spec"):
        TurnkeepSession("s", "Not A Spec")
    with pytest.raises(ValueError, match="no location"):
        TurnkeepSession("s", "sqlite:")


@pytest.mark.asyncio
async def test_an_item_json_would_change_is_refused_and_nothing_stored(
    tmp_path: Path,
) -> None:
    session = TurnkeepSession("lossy", f"sqlite:{tmp_path / 's.db'}")
    await session.add_items([MESSAGE])
    bad: Any = [{"role": "user", "content": "x", "tags": {"a", "b"}}]
    with pytest.raises(LossyPayloadError, match=r"items\[0\]\.tags is a set"):
        await session.add_items(bad)
    nan: Any = [{"type": "function_call_output", "output": float("nan")}]
    with pytest.raises(LossyPayloadError):
        await session.add_items(nan)
    assert await session.get_items() == [MESSAGE]


@pytest.mark.asyncio
async def test_a_failed_flush_raises_and_the_next_read_comes_from_storage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = MemoryPersistence.append
    failing = [True]

    async def append(self: MemoryPersistence, *args: Any, **kwargs: Any) -> None:
        if failing[0]:
            raise StorageError("disk on fire")
        await original(self, *args, **kwargs)

    async with Host(Config(persistence="memory", plugins="none")) as host:
        session = TurnkeepSession("flaky", host)
        await session.add_items([MESSAGE])
        monkeypatch.setattr(MemoryPersistence, "append", append)
        with pytest.raises(FlushError, match="disk on fire"):
            await session.add_items([{"role": "assistant", "content": "lost"}])
        failing[0] = False
        assert await session.get_items() == [MESSAGE]  # what storage holds
        await session.add_items([{"role": "assistant", "content": "again"}])
        assert await session.get_items() == [
            MESSAGE,
            {"role": "assistant", "content": "again"},
        ]
        session.close()


def items_event(seq: int, items: list[Any], below: Ref | None, length: int) -> Any:
    return OaiItems(
        seq=seq, time=0, data=ItemsData(items=items, below=below, length=length)
    )


BROKEN: dict[str, list[SessionEvent]] = {
    "points at a pop": [
        items_event(0, [MESSAGE], None, 1),
        OaiPop(seq=1, time=0, data=PopData(top=None, length=0)),
        items_event(2, [MESSAGE], Ref(1, 0), 2),
    ],
    "index beyond the items": [
        items_event(0, [MESSAGE], None, 1),
        items_event(1, [MESSAGE], Ref(0, 5), 2),
    ],
    "points forward": [
        items_event(0, [MESSAGE], Ref(0, 0), 2),
    ],
    "points past the log": [
        OaiPop(seq=0, time=0, data=PopData(top=Ref(7, 0), length=1)),
    ],
    "length beyond the chain": [
        items_event(0, [MESSAGE], None, 3),
    ],
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_chain_is_corrupt_not_shorter(case: str) -> None:
    events = BROKEN[case]
    with pytest.raises(SessionCorruptError):
        take(last_stack(events), None, events, "s")
    shown = render_transcript(events)
    assert shown is not None
    assert "cannot read the items" in shown[-1].label


def test_a_log_without_items_events_is_empty() -> None:
    events: list[SessionEvent] = [
        OaiClear(seq=0, time=0, data=ClearData(removed=0)),
    ]
    assert last_stack(events) == Stack(None, 0)
    assert take(last_stack(events), 5, events, "s") == []
    assert render_transcript([]) is None


@pytest.mark.asyncio
async def test_a_stored_log_shorter_than_its_last_seq_is_corrupt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with Host(Config(persistence="memory", plugins="none")) as host:
        session = TurnkeepSession("short", host)
        await session.add_items([MESSAGE])
        await host.sessions.close("short")  # reads now go to storage
        original = MemoryPersistence.last_seq

        async def last_seq(self: MemoryPersistence, session_id: str) -> int:
            return await original(self, session_id) + 3  # claims more than stored

        monkeypatch.setattr(MemoryPersistence, "last_seq", last_seq)
        with pytest.raises(SessionCorruptError, match="is not stored"):
            await session.get_items(limit=1)
        session.close()
