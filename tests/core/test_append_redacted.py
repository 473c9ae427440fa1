"""`Session.append_redacted`: a payload a redactor redacted in a wider context."""

from __future__ import annotations

import pytest
from tests.conftest import make_config

from turnkeep import Host, SessionEvent, hookimpl
from turnkeep.errors import EventTypeError, SessionClosedError
from turnkeep.events import AssistantChunkData, UserMessageData
from turnkeep.redaction import builtin_redactor
from turnkeep.session import Session

GITHUB = "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB"


class Seeing:
    def __init__(self) -> None:
        self.seen: list[str] = []

    @hookimpl
    def redact_event(self, session: Session, event: SessionEvent) -> None:
        self.seen.append(event.type)


@pytest.mark.asyncio
async def test_only_the_named_redactors_hook_is_left_out() -> None:
    seeing = Seeing()
    async with Host(make_config(), plugins=[seeing]) as host:
        redactor = builtin_redactor(host.pm)
        assert redactor is not None
        session = host.sessions.create()
        kept = session.append_redacted(AssistantChunkData(text=GITHUB), redactor)
        scanned = session.append(AssistantChunkData(text=f" {GITHUB}"))
    # The builtin one did not scan it (here: a token left as it was given);
    # the plugin's ran on both.
    assert kept.data.text == GITHUB
    assert GITHUB not in scanned.data.text
    assert seeing.seen == ["assistant/chunk", "assistant/chunk"]
    assert kept.seq == 0
    assert scanned.seq == 1


@pytest.mark.asyncio
async def test_a_payload_of_no_type_and_a_closed_session_are_refused() -> None:
    async with Host(make_config()) as host:
        session = host.sessions.create("s")
        with pytest.raises(EventTypeError, match="names no event type"):
            session.append_redacted(object(), None)
        assert list(session.events) == []
        await host.sessions.close("s")
        with pytest.raises(SessionClosedError, match="closed"):
            session.append_redacted(UserMessageData(text="hi"), None)


@pytest.mark.asyncio
async def test_without_redaction_it_is_an_append() -> None:
    async with Host(make_config(redact_secrets=False)) as host:
        assert builtin_redactor(host.pm) is None
        session = host.sessions.create()
        event = session.append_redacted(UserMessageData(text=GITHUB), object())
        assert event.data.text == GITHUB
        assert session.events == [event]
