"""Issue 12 point 10: redaction is on by default, scans the vocabulary's text
fields (streamed pieces in context), leaves plugin payloads alone unless their
type opts in, and takes extra patterns and the high-entropy rule from config."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from turnkeep import Config, Host, SessionEvent, hookimpl
from turnkeep.config import load_config
from turnkeep.errors import ConfigurationError
from turnkeep.events import (
    AssistantChunkData,
    AssistantMessageData,
    ToolCallData,
    ToolResultData,
    TurnEndData,
    UserMessageData,
    define_event_type,
)
from turnkeep.hookspecs import RegisterEventType
from turnkeep.redaction import SecretRedactor
from turnkeep.secretscan import DEFAULT_RULES, SecretScanner

AWS = "AKIAIOSFODNN7EXAMPLE"
RANDOM = "Zx9Qm2Lk8Pw4Rt7Yu1Io3As6Df5Gh0Jk2LqWe"
PEM_BODY = "MIIEowIBAAKCAQEA7abcdefGHIJKLMNOP0123456789"

Blob = define_event_type("test/blob", dict[str, Any])
Note = define_event_type("test/note", dict[str, Any], redact=True)


class Checkpoint(SessionEvent, tag="test/checkpoint", frozen=True, kw_only=True):
    """A plugin type that opts in with the class attribute."""

    data: dict[str, Any]
    redact = True


class Types:
    @hookimpl
    def register_event_types(self, register: RegisterEventType) -> None:
        for cls in (Blob, Note, Checkpoint):
            register(cls)


def config(**overrides: Any) -> Config:
    # Deliberately without `redact_secrets`: these tests are about the default.
    return Config(persistence="memory", plugins="none", **overrides)


async def stored_text(host: Host, session_id: str) -> str:
    loaded = await host.require_persistence().load(session_id)
    return b"\n".join(loaded.events).decode()


def test_redaction_is_on_by_default_and_high_entropy_is_not() -> None:
    loaded = load_config(env={})
    assert loaded.redact_secrets is True
    assert loaded.redact_high_entropy is False


@pytest.mark.asyncio
async def test_every_vocabulary_text_field_is_redacted_by_default() -> None:
    async with Host(config()) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text=f"key {AWS}"))
        session.append(AssistantMessageData(text=f"echo {AWS}"))
        session.append(
            ToolCallData(call_id="c", name="t", arguments={"a": [f"x {AWS}"]})
        )
        session.append(ToolResultData(call_id="c", output=f"out {AWS}"))
        session.append(TurnEndData(turn=1, status="failed", error=f"boom {AWS}"))
        await session.flush()
        stored = await stored_text(host, "s")
    assert AWS not in stored
    assert stored.count("[REDACTED:aws-access-key]") == 5


@pytest.mark.asyncio
async def test_redact_secrets_false_stores_text_exactly() -> None:
    async with Host(config(redact_secrets=False)) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text=f"key {AWS}"))
        await session.flush()
        assert AWS in await stored_text(host, "s")


@pytest.mark.asyncio
async def test_high_entropy_rule_is_opt_in() -> None:
    for enabled in (False, True):
        async with Host(config(redact_high_entropy=enabled)) as host:
            session = host.sessions.create("s")
            session.append(UserMessageData(text=f"token {RANDOM} here"))
            await session.flush()
            stored = await stored_text(host, "s")
        assert (RANDOM in stored) is not enabled
        assert ("[REDACTED:high-entropy]" in stored) is enabled


@pytest.mark.asyncio
async def test_patterns_from_configuration_are_redacted() -> None:
    patterns = {"ticket": r"\bTCK-[0-9]{6}\b"}
    async with Host(config(redact_patterns=patterns)) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="see TCK-123456 and TCK-12"))
        await session.flush()
        stored = await stored_text(host, "s")
    assert "see [REDACTED:ticket] and TCK-12" in stored


def test_an_invalid_configured_pattern_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"redact_patterns\.bad"):
        load_config(env={}, overrides={"redact_patterns": {"bad": "(unclosed"}})


@pytest.mark.asyncio
async def test_plugin_payloads_round_trip_unless_their_type_opts_in() -> None:
    payload = {"blob": f"opaque {AWS}", AWS: 1}
    async with Host(config(), plugins=[Types()]) as host:
        session = host.sessions.create("s")
        kept = session.append(Blob, payload)
        note = session.append(Note, payload)
        checkpoint = session.append(Checkpoint, payload)
        await session.flush()
        loaded = await host.require_persistence().load("s")
        events = host.codec.decode_log(loaded.events, session_id="s")
    assert kept.data == payload
    assert events[0].data == payload
    for redacted in (note, checkpoint, events[1], events[2]):
        assert AWS not in msgspec.json.encode(redacted.data).decode()
        assert "[REDACTED:aws-access-key]" in redacted.data


@pytest.mark.parametrize(
    ("pieces", "secret"),
    [
        (["Authorization: Bearer ", "abcdef0123456789ABCDEF", " ok"], "abcdef012345"),
        (
            [
                "here:\n-----BEGIN PRIVATE KEY-----\n",
                PEM_BODY[:20],
                PEM_BODY[20:] + "\n",
                "-----END PRIVATE KEY-----\nbye",
            ],
            PEM_BODY[5:20],
        ),
        (["db at postgres://admin:", "hunter2secret@db/prod"], "hunter2secret"),
        (["password = ", "'swordfish42'"], "swordfish42"),
    ],
    ids=["bearer", "private-key", "url-password", "assignment"],
)
@pytest.mark.asyncio
async def test_a_secret_split_across_streamed_pieces_is_redacted(
    pieces: list[str], secret: str
) -> None:
    async with Host(config()) as host:
        session = host.sessions.create("s")
        for piece in pieces:
            session.append(AssistantChunkData(text=piece))
        session.append(AssistantMessageData(text="".join(pieces)))
        await session.flush()
        stored = await stored_text(host, "s")
    assert secret not in stored
    assert "[REDACTED:" in stored


JWT = (
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"
)
SK = "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678"


@pytest.mark.parametrize(
    ("secret", "recognisable"),
    [(JWT, JWT.rindex(".") + 9), (SK, len("sk-proj-") + 16)],
    ids=["jwt", "sk"],
)
@pytest.mark.asyncio
async def test_a_long_secret_streamed_in_tiny_pieces_is_redacted_once_recognisable(
    secret: str, recognisable: int
) -> None:
    text = f"use {secret} now, thanks"
    pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
    async with Host(config()) as host:
        session = host.sessions.create("s")
        stored = [session.append(AssistantChunkData(text=p)).data.text for p in pieces]
    # Streamed pieces cannot be held back: a secret shows until its shape is
    # recognisable (a JWT's third part, 16 characters of a key); no piece
    # after that holds any of it raw.
    first, end = len("use ") + recognisable, len("use ") + len(secret)
    offset = 0
    checked = 0
    for raw, kept in zip(pieces, stored, strict=True):
        if offset >= first and offset + len(raw) <= end:
            assert kept != raw, (offset, raw)
            checked += 1
        offset += len(raw)
    assert checked >= 3


@pytest.mark.asyncio
async def test_stream_context_ends_with_the_reply() -> None:
    # "Bearer " ended one reply; the next reply's first piece is not a token.
    async with Host(config()) as host:
        session = host.sessions.create("s")
        session.append(AssistantChunkData(text="say Bearer "))
        session.append(AssistantMessageData(text="say Bearer "))
        session.append(AssistantChunkData(text="configuration_is_fine"))
        assert session.events[-1].data.text == "configuration_is_fine"


def test_the_combined_pass_finds_what_each_rule_finds_alone() -> None:
    combined = SecretScanner(DEFAULT_RULES)
    text = (
        f"a {AWS} b Bearer abcdef0123456789 c https://u:pw12345@h/ "
        "d sk-proj-Abc123Def456Ghi789Jkl012 e password: hunter22 f"
    )
    expected = text
    for rule in DEFAULT_RULES:
        expected = SecretScanner((rule,)).scan(expected)
    assert combined.scan(text) == expected
    assert expected.count("[REDACTED:") == 5


def test_text_without_any_trigger_is_returned_as_is() -> None:
    text = "plän 目標 " * 200
    assert SecretRedactor().text(text) is text
