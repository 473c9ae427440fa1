"""Property: any log persisted and loaded comes back byte-identical."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tests.conftest import make_config

from turnkeep import Host, SessionEvent, define_event_type, derive_messages, hookimpl
from turnkeep.agent import encode_messages
from turnkeep.errors import SessionNotFoundError
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessage,
    AssistantMessageData,
    ToolCall,
    ToolCallData,
    ToolResult,
    ToolResultData,
    TurnCheckpoint,
    TurnCheckpointData,
    TurnEnd,
    TurnEndData,
    TurnStart,
    TurnStartData,
    UserMessage,
    UserMessageData,
)
from turnkeep.packs import expand_all
from turnkeep.testing import MemoryPersistence, MemoryStorage

NOTE = define_event_type("plug/note", ignorable=True)

text = st.text(max_size=200)
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | ints
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4)
    ),
    max_leaves=12,
)
call_ids = st.sampled_from(["c1", "c2", "c3", "c4"])

payloads: st.SearchStrategy[tuple[type[SessionEvent], Any]] = st.one_of(
    st.builds(lambda n: (TurnStart, TurnStartData(turn=n)), ints),
    st.builds(
        lambda t, u: (UserMessage, UserMessageData(text=t, untrusted=u)),
        text,
        st.booleans(),
    ),
    st.builds(lambda t: (AssistantChunk, AssistantChunkData(text=t)), text),
    st.builds(lambda t: (AssistantMessage, AssistantMessageData(text=t)), text),
    st.builds(
        lambda c, n, a, r: (
            ToolCall,
            ToolCallData(call_id=c, name=n, arguments=a, replay=r),
        ),
        call_ids,
        text,
        st.dictionaries(text, json_values, max_size=4),
        st.sampled_from(["safe", "unsafe"]),
    ),
    st.builds(
        lambda c, o, s: (ToolResult, ToolResultData(call_id=c, output=o, status=s)),
        call_ids,
        text,
        st.sampled_from(["ok", "error", "interrupted"]),
    ),
    st.builds(
        lambda n, r: (TurnCheckpoint, TurnCheckpointData(turn=n, reason=r)), ints, text
    ),
    st.builds(
        lambda n, s, e: (TurnEnd, TurnEndData(turn=n, status=s, error=e)),
        ints,
        st.sampled_from(["completed", "failed", "cancelled", "interrupted"]),
        st.none() | text,
    ),
    st.builds(lambda d: (NOTE, d), json_values),
)

steps = st.lists(st.tuples(payloads, st.booleans()), max_size=40)


BACKENDS = ("memory", "jsonl", "sqlite")
EXAMPLES = {"memory": 150, "jsonl": 30, "sqlite": 30}
"""Disk examples cost a file (and its fsyncs) each: fewer of them."""


class Storage:
    def __init__(self, storage: MemoryStorage, with_note: bool) -> None:
        self.storage = storage
        self.with_note = with_note

    @hookimpl
    def register_persistence(self, register: Any) -> None:
        register("shared", lambda _config: MemoryPersistence(self.storage))

    @hookimpl
    def register_event_types(self, register: Any) -> None:
        if self.with_note:
            register(NOTE)


class Place:
    """One backend's store for one example: memory, a JSONL dir, a db file."""

    def __init__(self, backend: str, root: Path) -> None:
        self.backend = backend
        self.root = root
        self.storage = MemoryStorage()

    def host(self, knows_note: bool) -> Host:
        plugin = Storage(self.storage, knows_note)
        if self.backend == "memory":
            return Host(make_config(persistence="shared"), plugins=[plugin])
        name = "store" if self.backend == "jsonl" else "s.sqlite3"
        config = make_config(
            persistence=self.backend,
            plugins=(self.backend,),
            backends={self.backend: {"path": str(self.root / name)}},
        )
        return Host(config, plugins=[plugin])


async def roundtrip(
    place: Place, actions: list[tuple[tuple[type[SessionEvent], Any], bool]]
) -> None:
    async with place.host(knows_note=True) as a:
        session = a.sessions.create("s")
        for (kind, data), flush in actions:
            if a.codec.kinds.get(type(data)) is kind:
                session.append(data)  # the payload names its type
            else:
                session.append(kind, data)
            if flush:
                await session.flush()
        await session.flush()
        live = list(session.events)
        live_bytes = [a.codec.encode(e) for e in live]
    if not live:
        await stores_nothing(place)
        return
    # A reader without the plugin that defines the ignorable type still loads
    # the log, byte for byte, with the same history.
    for knows_note in (True, False):
        async with place.host(knows_note) as b:
            loaded = await b.require_persistence().load("s")
            # (A streamed reply may be stored as one pack: its events, expanded.)
            assert expand_all(loaded.events) == live_bytes
            resumed = await b.sessions.resume("s")
            assert [b.codec.encode(e) for e in resumed.events] == live_bytes
            assert encode_messages(derive_messages(resumed.events)) == encode_messages(
                derive_messages(live)
            )


async def stores_nothing(place: Place) -> None:
    assert place.storage.sessions == {}
    if place.backend == "jsonl":
        files = [f for _, _, names in os.walk(place.root) for f in names]
        assert files == []
    async with place.host(knows_note=True) as host:
        persistence = host.require_persistence()
        assert not await persistence.has("s")
        assert (await persistence.list()).items == []
        with pytest.raises(SessionNotFoundError):
            await host.sessions.resume("s")


def run_example(
    backend: str, actions: list[tuple[tuple[type[SessionEvent], Any], bool]]
) -> None:
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(roundtrip(Place(backend, Path(root)), actions))


@pytest.mark.parametrize("backend", BACKENDS)
def test_any_log_round_trips_byte_identical(backend: str) -> None:
    @settings(
        max_examples=EXAMPLES[backend],
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(steps)
    def check(actions: list[tuple[tuple[type[SessionEvent], Any], bool]]) -> None:
        run_example(backend, actions)

    check()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_an_empty_log_stores_nothing(backend: str, tmp_path: Path) -> None:
    place = Place(backend, tmp_path)
    async with place.host(knows_note=True) as host:
        session = host.sessions.create("s")
        await session.flush()
        assert session.settled
    await stores_nothing(place)
