"""Format version 2 (run context, `budget_exhausted`): older load, newer refused.

Sessions are created in version 2. A log of version 1 (written before the
run context existed) loads unchanged on every durable backend and keeps its
version when the loop continues it. A reader that knows only version 1 (the
backends' version check, patched back to 1, standing for an older turnkeep)
refuses a version 2 session with `UnsupportedFormatError` and changes
nothing.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import attrs
import pytest
from tests.loop.support import BACKENDS, backend_host_config, backend_ready_async

from turnkeep import AgentLoop, Host
from turnkeep.errors import UnsupportedFormatError
from turnkeep.events import (
    AssistantMessage,
    AssistantMessageData,
    RunContext,
    SessionEvent,
    TurnEnd,
    TurnEndData,
    TurnStart,
    TurnStartData,
    UserMessage,
    UserMessageData,
)
from turnkeep.meta import FORMAT_VERSION, SessionHeader, SessionMeta, SessionSummary
from turnkeep.packs import is_pack
from turnkeep.persistence import EventRecord
from turnkeep.testing import ScriptedModel

ALL = ("memory", *BACKENDS)

# Where each backend's reader compares a stored version with the one it knows.
VERSION_CHECKS = {
    "memory": ("turnkeep.memory",),
    "jsonl": ("turnkeep_jsonl.scan", "turnkeep.store"),
    "sqlite": ("turnkeep_sqlite.reads", "turnkeep_sqlite.writes", "turnkeep.store"),
}


def v1_events() -> list[SessionEvent]:
    """One turn in the vocabulary of version 1."""
    clock = itertools.count(1_700_000_000_000)
    return [
        TurnStart(seq=0, time=next(clock), data=TurnStartData(turn=1)),
        UserMessage(seq=1, time=next(clock), data=UserMessageData(text="hi")),
        AssistantMessage(
            seq=2, time=next(clock), data=AssistantMessageData(text="hello")
        ),
        TurnEnd(seq=3, time=next(clock), data=TurnEndData(turn=1, status="completed")),
    ]


async def write_v1(host: Host, session_id: str) -> list[bytes]:
    """Store a version 1 session through the backend; its events' bytes."""
    backend = host.require_persistence()
    await backend.create(
        SessionMeta(
            header=SessionHeader(id=session_id, format_version=1, created_at=1),
            summary=SessionSummary(updated_at=1, status="idle"),
        )
    )
    raws = [host.codec.encode(e) for e in v1_events()]
    records = [
        EventRecord(e.seq, e.type, e.time, raw)
        for e, raw in zip(v1_events(), raws, strict=True)
    ]
    await backend.append(session_id, records)
    await backend.release(session_id)
    return raws


def test_this_version_writes_format_3() -> None:
    assert FORMAT_VERSION == 3
    assert SessionHeader(id="x").format_version == 3


@pytest.mark.asyncio
@pytest.mark.parametrize("name", ALL)
async def test_a_version_1_log_loads_unchanged_and_keeps_its_version(
    name: str, tmp_path: Path
) -> None:
    if name != "memory":
        await backend_ready_async(name, tmp_path / "probe")
    async with Host(backend_host_config(name, tmp_path)) as host:
        raws = await write_v1(host, "old")
        loaded = await host.require_persistence().load("old")
        assert loaded.meta.header.format_version == 1
        assert list(loaded.events) == raws
        decoded = host.codec.decode_log(loaded.events, session_id="old")
        assert decoded == v1_events()
        model = ScriptedModel(["hello", "again"])
        loop = await AgentLoop.resume("a", "old", host=host, model=model)
        assert (await loop.run_turn("more")).status == "completed"
        await loop.close()
        after = await host.require_persistence().load("old")
        assert after.meta.header.format_version == 1
        assert list(after.events[:4]) == raws
        events = host.codec.decode_log(after.events, session_id="old")
        assert any(isinstance(e, RunContext) for e in events)


@pytest.mark.asyncio
@pytest.mark.parametrize("name", ALL)
async def test_a_reader_of_an_older_version_refuses_a_newer_session_untouched(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if name != "memory":
        await backend_ready_async(name, tmp_path / "probe")
    async with Host(backend_host_config(name, tmp_path)) as host:
        loop = AgentLoop.create("a", host=host, model=ScriptedModel(["hi"]))
        await loop.run_turn("hello")
        await loop.close()
        session_id = loop.session_id
        backend = host.require_persistence()
        stored = await backend.load(session_id)
        assert stored.meta.header.format_version == FORMAT_VERSION
        before = _digest(tmp_path) if name != "memory" else None
        for module in VERSION_CHECKS[name]:
            monkeypatch.setattr(f"{module}.FORMAT_VERSION", FORMAT_VERSION - 1)
        with pytest.raises(
            UnsupportedFormatError, match=f"format version {FORMAT_VERSION}"
        ):
            await backend.load(session_id)
        if before is not None:
            assert _digest(tmp_path) == before
        with pytest.raises(UnsupportedFormatError):
            await AgentLoop.resume(
                "a", session_id, host=host, model=ScriptedModel(["x"])
            )
        if before is not None and name == "jsonl":
            assert _digest(tmp_path) == before


@pytest.mark.asyncio
@pytest.mark.parametrize("name", ALL)
async def test_a_session_created_in_format_2_is_read_by_a_reader_of_format_2(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fleet upgraded one worker at a time: the new code keeps creating
    # format-2 sessions (no packs) until every worker reads format 3.
    if name != "memory":
        await backend_ready_async(name, tmp_path / "probe")
    config = attrs.evolve(backend_host_config(name, tmp_path), session_format=2)
    async with Host(config) as host:
        reply = "a streamed reply " * 20
        loop = AgentLoop.create("a", host=host, model=ScriptedModel([reply]))
        await loop.run_turn("hello")
        await loop.close()
        session_id = loop.session_id
        backend = host.require_persistence()
        stored = await backend.load(session_id)
        assert stored.meta.header.format_version == 2
        assert not any(map(is_pack, stored.events))
        for module in VERSION_CHECKS[name]:
            monkeypatch.setattr(f"{module}.FORMAT_VERSION", 2)
        again = await backend.load(session_id)
        events = host.codec.decode_log(again.events, session_id=session_id)
        assert len(events) == len(stored.events)


def _digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.name.endswith(("-shm", ".lock")) or "probe" in path.parts:
            continue
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
