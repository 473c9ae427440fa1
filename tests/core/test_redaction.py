from __future__ import annotations

from typing import Any

import pytest
from tests.conftest import make_config
from tests.support.writes import summary_unsaved, write_state

from turnkeep import Host, SessionEvent, hookimpl
from turnkeep.errors import EventRejectedError, RedactionError
from turnkeep.events import (
    ToolCall,
    ToolCallData,
    TurnEndData,
    UserMessage,
    UserMessageData,
)
from turnkeep.redaction import SecretRedactor, redact
from turnkeep.session import Session

SECRETS = {
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "openai": "sk-proj-Abc123Def456Ghi789Jkl012Mno345",
    "github": "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk",
    "bearer": "Authorization: Bearer abcdef0123456789ABCDEF.xyz",
    "url": "postgresql://admin:hunter2secret@db.example.com/prod",
    "pem": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7abc\n"
    "-----END RSA PRIVATE KEY-----",
    "entropy": "Zx9Qm2Lk8Pw4Rt7Yu1Io3As6Df5Gh0Jk2LqWe",
}
LEAKS = {
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "openai": "sk-proj-Abc123Def456Ghi789Jkl012Mno345",
    "github": "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB",
    "jwt": "dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk",
    "bearer": "abcdef0123456789ABCDEF",
    "url": "hunter2secret",
    "pem": "MIIEowIBAAKCAQEA7abc",
    "entropy": "Zx9Qm2Lk8Pw4Rt7Yu1Io3As6Df5Gh0Jk2LqWe",
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_kind_of_secret_is_replaced_by_a_marker(kind: str) -> None:
    scan = SecretRedactor(high_entropy=True).text if kind == "entropy" else redact
    cleaned = scan(f"before {SECRETS[kind]} after")
    assert LEAKS[kind] not in cleaned
    assert "[REDACTED:" in cleaned
    assert cleaned.startswith("before ")


def test_ordinary_text_is_left_alone() -> None:
    text = "Run pytest -k test_greet in src/pkg/module_12.py; the answer is 42."
    assert redact(text) == text
    assert SecretRedactor().redact_text(text) is None


@pytest.mark.asyncio
async def test_secrets_never_reach_the_log_or_the_store() -> None:
    async with Host(make_config(redact_secrets=True)) as host:
        session = host.sessions.create("s")
        session.set_summary(title=f"deploy with {SECRETS['openai']}")
        session.append(UserMessageData(text=f"my key is {SECRETS['aws']}"))
        session.append(
            ToolCallData(
                call_id="c",
                name="connect",
                arguments={"dsn": SECRETS["url"], SECRETS["github"]: [SECRETS["jwt"]]},
            ),
        )
        session.append(
            TurnEndData(turn=1, status="failed", error=f"boom: {SECRETS['pem']}"),
        )
        await session.flush()
        stored = host.require_persistence()
        loaded = await stored.load("s")
        blob = (
            b"\n".join(loaded.events).decode()
            + repr(loaded.meta)
            + repr(session.events)
        )
        for kind, leak in LEAKS.items():
            if kind in ("bearer", "entropy"):
                continue
            assert leak not in blob, kind
        assert blob.count("[REDACTED:") >= 6
        assert isinstance(session.events[1], ToolCall)


class Raising:
    @hookimpl
    def redact_event(self, event: SessionEvent) -> SessionEvent | None:
        raise RuntimeError("redactor is broken")


class Swapping:
    @hookimpl
    def redact_event(
        self, session: Session, event: SessionEvent
    ) -> SessionEvent | None:
        return UserMessage(
            seq=event.seq, time=event.time, data=UserMessageData(text="x")
        )


@pytest.mark.parametrize(
    "plugin", [Raising(), Swapping()], ids=["raises", "swaps-class"]
)
@pytest.mark.asyncio
async def test_a_failing_redactor_rejects_the_event(host: Host, plugin: Any) -> None:
    async with host.plugin(plugin):
        session = host.sessions.create()
        with pytest.raises(RedactionError) as info:
            session.append(TurnEndData(turn=1, status="completed"))
        assert isinstance(info.value, EventRejectedError)
        assert info.value.event_type == "turn/end"
        assert list(session.events) == []
        assert write_state(host, session).pending == []
        await session.flush()
        assert not await host.require_persistence().has(session.id)


class RaisingText:
    @hookimpl
    def redact_text(self, text: str) -> str | None:
        raise ValueError("no")


@pytest.mark.asyncio
async def test_a_failing_text_redactor_refuses_the_summary_change(host: Host) -> None:
    async with host.plugin(RaisingText()):
        session = host.sessions.create()
        with pytest.raises(RedactionError):
            session.set_summary(title="secret title")
        assert session.summary.title is None
        assert not summary_unsaved(host, session)
