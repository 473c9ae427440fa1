"""A secret streamed across deltas reaches no sink (issue 34, item 5).

The loop holds each delta back until the text after it decides every secret
that could include it (`turnkeep.heldstream`), at most K characters. Every
default rule's example secrets, streamed one character per delta (a
boundary at every offset) and five per delta, are checked in every sink:
the log and the stored bytes, a `session_event` observer, the loop's
`on_event`, a live and a committed `TurnStream`, the model's history, the
turn's result; `turnkeep serve` streams what is stored. A turn cut off or
failing mid-stream releases what it held, redacted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from tests.conftest import make_config
from tests.core.test_heldstream import EXAMPLES, IDS, SCANNER, prose

from turnkeep import AgentLoop, Host, SessionEvent, hookimpl
from turnkeep.agent import ModelOutput, ModelRequest, TextDelta
from turnkeep.agent.history import history_of
from turnkeep.errors import ModelError
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessage,
    ModelInfo,
)
from turnkeep.redaction import builtin_redactor
from turnkeep.session import Session


class Deltas:
    """Streams the given deltas on every call; fails after `fail_after`."""

    def __init__(self, deltas: Sequence[str], fail_after: int | None = None) -> None:
        self.deltas = list(deltas)
        self.fail_after = fail_after
        self.requests: list[ModelRequest] = []
        self.appended_before_failure: list[str] = []
        self.session: Session | None = None

    def describe(self) -> ModelInfo:
        """A test double."""
        return ModelInfo(name="deltas", provider="test")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        self.requests.append(request)
        for index, text in enumerate(self.deltas):
            if index == self.fail_after:
                assert self.session is not None
                self.appended_before_failure = chunk_texts(self.session.events)
                raise ModelError("the connection dropped")
            yield TextDelta(text)


class Observer:
    """Every event text a `session_event` implementation is shown."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    @hookimpl
    def session_event(self, session: Session, event: SessionEvent) -> None:
        if isinstance(event, AssistantChunk | AssistantMessage):
            self.texts.append(event.data.text)


def chunk_texts(events: Sequence[SessionEvent]) -> list[str]:
    return [e.data.text for e in events if isinstance(e, AssistantChunk)]


def message_texts(events: Sequence[SessionEvent]) -> list[str]:
    return [e.data.text for e in events if isinstance(e, AssistantMessage)]


async def stored_bytes(host: Host, session_id: str) -> bytes:
    loaded = await host.require_persistence().load(session_id)
    return b"\n".join(bytes(e) for e in loaded.events)


@pytest.mark.parametrize("size", [1, 5])
@pytest.mark.parametrize(("secret", "leak"), EXAMPLES, ids=IDS)
@pytest.mark.asyncio
async def test_no_sink_shows_a_byte_of_a_streamed_secret(
    secret: str, leak: str, size: int
) -> None:
    text = prose(secret)
    expected = SCANNER.scan(text)
    deltas = [text[i : i + size] for i in range(0, len(text), size)]
    observer = Observer()
    delivered: list[SessionEvent] = []
    async with Host(make_config(), plugins=[observer]) as host:
        model = Deltas(deltas)
        loop = AgentLoop.create("a", host=host, model=model, on_event=delivered.append)
        live = [e async for e in loop.stream_turn("first")]
        committed = [e async for e in loop.stream_turn("again", committed=True)]
        result = await loop.run_turn("once more")
        session = host.sessions.get(loop.session_id)
        for turn in (live, committed):
            # One chunk per delta, joined: the whole text's redaction.
            assert len(chunk_texts(turn)) == len(deltas)
            assert "".join(chunk_texts(turn)) == expected
            assert message_texts(turn) == [expected]
        assert "".join(chunk_texts(delivered)) == expected * 3
        assert "".join(observer.texts) == (expected * 2) * 3
        assert "".join(chunk_texts(session.events)) == expected * 3
        assert result.text == expected
        history = [m.content for m in history_of(session)]
        seen = [m.content for request in model.requests for m in request.messages]
        stored = await stored_bytes(host, loop.session_id)
        await loop.close()
    assert expected in history
    for sink in (*history, *seen, *observer.texts, stored.decode()):
        assert leak not in sink


@pytest.mark.asyncio
async def test_a_stream_cut_off_releases_what_it_held_redacted() -> None:
    secret, leak = EXAMPLES[6]  # a GitHub token
    text = prose(secret)
    deltas = [text[i : i + 3] for i in range(0, len(text), 3)]
    # The failure comes right after the token: nothing of it was released.
    fail_after = (text.index(secret) + len(secret)) // 3 + 2
    streamed = "".join(deltas[:fail_after])
    async with Host(make_config()) as host:
        model = Deltas(deltas, fail_after=fail_after)
        loop = AgentLoop.create("a", host=host, model=model)
        model.session = host.sessions.get(loop.session_id)
        result = await loop.run_turn("go")
        events = list(model.session.events)
        await loop.close()
    assert result.status == "failed"
    before = "".join(model.appended_before_failure)
    assert secret[:4] not in before  # held back, not appended
    assert "".join(chunk_texts(events)) == SCANNER.scan(streamed)
    assert message_texts(events) == [SCANNER.scan(streamed)]
    assert leak not in "".join(chunk_texts(events))
    assert "[REDACTED:api-token]" in "".join(chunk_texts(events))


@pytest.mark.asyncio
async def test_chunks_wait_at_most_k_characters() -> None:
    words = "a streamed reply that goes on for a while, token: abcdefghij, then on "
    text = words * 6
    deltas = [text[i : i + 4] for i in range(0, len(text), 4)]
    waiting: list[int] = []  # characters streamed but not appended, per delta

    class Counting(Deltas):
        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
            for index, delta in enumerate(self.deltas):
                assert self.session is not None
                appended = len(chunk_texts(self.session.events))  # one per delta
                waiting.append(sum(len(d) for d in self.deltas[appended:index]))
                yield TextDelta(delta)

    async with Host(make_config()) as host:
        model = Counting(deltas)
        loop = AgentLoop.create("a", host=host, model=model)
        model.session = host.sessions.get(loop.session_id)
        redactor = builtin_redactor(host.pm)
        assert redactor is not None
        await loop.run_turn("go")
        assert len(chunk_texts(model.session.events)) == len(deltas)
        await loop.close()
    # A delta waits for at most K characters after it (plus itself).
    assert max(waiting) <= redactor.hold + 4
    assert max(waiting) > 0  # held back at all


@pytest.mark.asyncio
async def test_without_redaction_each_delta_is_appended_as_it_comes() -> None:
    deltas = ["ghp_", "1234567890abcdefghij", "klmn"]
    counts: list[int] = []

    class Counting(Deltas):
        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
            for delta in self.deltas:
                yield TextDelta(delta)
                assert self.session is not None
                counts.append(len(chunk_texts(self.session.events)))

    async with Host(make_config(redact_secrets=False)) as host:
        model = Counting(deltas)
        loop = AgentLoop.create("a", host=host, model=model)
        model.session = host.sessions.get(loop.session_id)
        await loop.run_turn("go")
        assert chunk_texts(model.session.events) == deltas
        await loop.close()
    assert counts == [1, 2, 3]


class Shouting:
    """A plugin's own `redact_event`: it still sees every released piece."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @hookimpl
    def redact_event(self, session: Session, event: SessionEvent) -> Any:
        if isinstance(event, AssistantChunk):
            self.seen.append(event.data.text)
            return AssistantChunk(
                seq=event.seq,
                time=event.time,
                data=AssistantChunkData(text=event.data.text.upper()),
            )
        return None


@pytest.mark.asyncio
async def test_other_redactors_run_on_released_pieces() -> None:
    text = prose(EXAMPLES[2][0])
    deltas = [text[i : i + 5] for i in range(0, len(text), 5)]
    shouting = Shouting()
    async with Host(make_config(), plugins=[shouting]) as host:
        loop = AgentLoop.create("a", host=host, model=Deltas(deltas))
        await loop.run_turn("go")
        events = host.sessions.get(loop.session_id).events
        await loop.close()
    assert "".join(shouting.seen) == SCANNER.scan(text)
    assert "".join(chunk_texts(events)) == SCANNER.scan(text).upper()
