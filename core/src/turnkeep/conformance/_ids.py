"""Contracts for untrusted session ids: exact round trip, no collisions."""

from __future__ import annotations

import unicodedata
from collections.abc import Awaitable, Callable
from typing import Any, Final

import pytest

from turnkeep.errors import InvalidSessionIdError
from turnkeep.ids import MAX_SESSION_ID_BYTES
from turnkeep.meta import SessionSummary
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["HOSTILE_IDS", "IdsContract"]

_cafe = "caf\u00e9"
HOSTILE_IDS: Final[tuple[str, ...]] = (
    "plain",
    "Plain",
    "PLAIN",
    "../escape",
    "../../etc/passwd",
    "/absolute/path",
    "a/b",
    "a\\b",
    ".",
    "..",
    "...",
    ".hidden",
    "CON",
    "con",
    "NUL.txt",
    "com1",
    "trailing.",
    "trailing ",
    " leading",
    "new\nline",
    "tab\tid",
    unicodedata.normalize("NFC", _cafe),
    unicodedata.normalize("NFD", _cafe),
    "emoji 😀 id",
    "rtl \u202e mark",
    "x" * MAX_SESSION_ID_BYTES,
    "é" * (MAX_SESSION_ID_BYTES // 2),
    "*?<>|:\"'",
    "%2e%2e%2f",
    # Pairs a file-name mapping could fold into one name: each must stay its
    # own session.
    "a_b",
    "a-b",
    "a%2Fb",
    "a%2fb",
    "a.b",
    "a b",
    "A/b",
)

_INVALID: Final[tuple[object, ...]] = (
    "",
    "nul\x00inside",
    "x" * (MAX_SESSION_ID_BYTES + 1),
    "\ud800lone surrogate",
)


class IdsContract(BackendHarness):
    """[ids]."""

    @pytest.mark.asyncio
    async def test_hostile_ids_round_trip_without_collisions(
        self, backend: SessionPersistence
    ) -> None:
        stored: dict[str, list[bytes]] = {}
        for session_id in HOSTILE_IDS:
            meta, written = await self.stored(
                backend, flushes=(2,), session_id=session_id, title=session_id
            )
            stored[meta.id] = self.raws(written)
        for session_id, raws in stored.items():
            loaded = await backend.load(session_id)
            assert loaded.meta.id == session_id
            assert loaded.events == raws, f"events of {session_id!r} got mixed up"
        listed: list[str] = []
        cursor: str | None = None
        while True:
            page = await backend.list(limit=7, cursor=cursor)
            listed.extend(m.id for m in page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        assert sorted(listed) == sorted(HOSTILE_IDS)

    @pytest.mark.parametrize(
        "bad", _INVALID, ids=["empty", "nul", "too-long", "surrogate"]
    )
    @pytest.mark.asyncio
    async def test_invalid_ids_are_refused_by_every_method(
        self, backend: SessionPersistence, bad: str
    ) -> None:
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: backend.create(self.meta(bad)),
            lambda: backend.append(bad, self.records(0, 1)),
            lambda: backend.load(bad),
            lambda: backend.has(bad),
            lambda: backend.delete(bad),
            lambda: backend.update(bad, SessionSummary()),
            lambda: backend.claim(bad),
        ]
        for call in calls:
            with pytest.raises(InvalidSessionIdError):
                await call()
        assert (await backend.list()).items == []
