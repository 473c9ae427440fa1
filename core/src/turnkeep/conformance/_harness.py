"""The fixtures and helpers every contract class shares.

A backend's test module subclasses the contract classes and provides one
fixture, `make_backend`: a zero-argument callable that returns a new backend
instance over *this test's* storage (fresh and empty per test). Calling it
twice gives two instances over the same storage, which is how the kit
simulates a restart (`supports_reopen`) and a second process
(`supports_multiple_processes`).

Capabilities are declared as class attributes, never detected. Tests that
need one are skipped, with the reason, when it is not declared. Contracts that
need to damage or age stored data call the optional methods below, which a
backend's subclass implements when it declares the matching capability.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import pytest_asyncio

from turnkeep.codec import EventCodec, EventRecord
from turnkeep.events import (
    AssistantMessage,
    AssistantMessageData,
    SessionEvent,
    TurnEnd,
    TurnEndData,
    TurnStart,
    TurnStartData,
    UserMessage,
    UserMessageData,
)
from turnkeep.ids import new_session_id
from turnkeep.meta import (
    TURN_END_TYPE,
    ForkPoint,
    SessionHeader,
    SessionMeta,
    SessionSummary,
)
from turnkeep.persistence import SessionPersistence, validate_backend

__all__ = ["BackendHarness", "MakeBackend"]

MakeBackend = Callable[[], Any]
"""Returns a new backend instance over the current test's storage."""

_codec = EventCodec()
_clock = itertools.count(1_700_000_000_000, 1000)


class BackendHarness:
    """Base of every contract class: capabilities, fixtures and helpers.

    Capabilities (override as class attributes):
        supports_reopen: a new instance over the same storage sees everything
            an earlier instance acknowledged (true for any durable backend).
        supports_multiple_processes: two instances over one storage are two
            independent owners (one-writer rule, fencing).
        supports_tail_damage: `tear_tail` is implemented.
        supports_committed_damage: `damage_committed` is implemented.
        supports_format_aging: `write_newer_format` and `storage_digest` are
            implemented.
        supports_byte_scan: `stored_bytes` is implemented (the delete
            contract then proves that a deleted session's text is nowhere
            in the store).
        supports_lost_acknowledgement: `lose_next_commit_reply` is
            implemented.
        supports_held: the backend has the optional `held` method.
        supports_load_after: the backend has the optional `load_after` and
            `last_seq` methods.
        supports_owner_death: `kill_owner` is implemented.
        supports_wait_for_commit: the backend has the optional
            `wait_for_commit` method.
        supports_cancel_requests: the backend has the optional
            `request_cancel` and `cancel_requested` methods.
        supports_audit: the backend has the optional `record_audit` and
            `audit_records` methods (the audit trail).
        supports_list_filter: `list` takes `where=` and filters natively
            (true by default; a backend written before filters existed
            declares false, and the kit checks core's fallback over it).
        supports_summary_append: `append` takes `summary=` and stores it in
            the flush's own atomic unit (true by default; a backend written
            before `summary` existed declares false, and the write-behind
            stores its summaries with `update`).
    """

    supports_reopen: ClassVar[bool] = True
    supports_multiple_processes: ClassVar[bool] = True
    supports_tail_damage: ClassVar[bool] = False
    supports_committed_damage: ClassVar[bool] = False
    supports_format_aging: ClassVar[bool] = False
    supports_byte_scan: ClassVar[bool] = False
    supports_lost_acknowledgement: ClassVar[bool] = False
    supports_held: ClassVar[bool] = False
    supports_load_after: ClassVar[bool] = False
    supports_owner_death: ClassVar[bool] = False
    supports_summary_append: ClassVar[bool] = True
    supports_list_filter: ClassVar[bool] = True
    supports_wait_for_commit: ClassVar[bool] = False
    supports_cancel_requests: ClassVar[bool] = False
    supports_audit: ClassVar[bool] = False

    # -- optional storage manipulation (implement with the capability) -------

    async def tear_tail(self, session_id: str) -> None:
        """Leave a torn, unacknowledged flush after the session's last flush.

        As a crash in the middle of writing a flush would: partial bytes of
        records that were never acknowledged.
        """
        raise NotImplementedError

    async def damage_committed(self, session_id: str) -> None:
        """Corrupt acknowledged data of the session (not its last flush)."""
        raise NotImplementedError

    async def write_newer_format(self, session_id: str) -> None:
        """Make the stored session claim a format version newer than the code."""
        raise NotImplementedError

    async def storage_digest(self) -> bytes:
        """A digest of every byte the backend stored (to prove nothing changed)."""
        raise NotImplementedError

    async def stored_bytes(self) -> Mapping[str, bytes]:
        """Everything a reader of the storage could recover, by where it lies.

        Each value is the raw bytes of one place (a file, its free pages
        included; a table's rows); each key names it for messages. A
        file-based backend can return `files_under(its directory)`. What a
        backend cannot erase even in principle (blocks the file system
        freed, dead database tuples awaiting vacuum) is outside the scan and
        belongs in its documentation.
        """
        raise NotImplementedError

    async def lose_next_commit_reply(
        self, backend: SessionPersistence, session_id: str, *, lands: bool
    ) -> None:
        """Make `backend`'s next `append` to `session_id` lose its acknowledgement.

        As a connection lost during `COMMIT` or a failed sync would: with
        `lands`, the flush is stored and only the reply is lost; without, it
        is not stored, though the backend had sent it for good (the commit
        was asked for). Either way the backend cannot tell which.
        """
        raise NotImplementedError

    async def kill_owner(self, backend: SessionPersistence) -> None:
        """Leave `backend`'s holds as its process dying by SIGKILL would.

        Nothing is released the orderly way (no `release`, no `aclose`):
        what the backend's liveness check sees must be a dead owner (a lock
        that vanished with its descriptors, an identity registered as gone,
        a lease that ran out). The instance is not used again except to
        close it.
        """
        raise NotImplementedError

    @staticmethod
    def files_under(root: Path) -> dict[str, bytes]:
        """Every regular file below `root`, by relative path (a helper)."""
        found: dict[str, bytes] = {}
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                found[path.relative_to(root).as_posix()] = path.read_bytes()
        return found

    # -- fixtures ------------------------------------------------------------

    @pytest.fixture
    def make_backend(self) -> MakeBackend:
        """Provided by the backend's test module: see the module docstring."""
        raise NotImplementedError(
            "subclass the contract and define a `make_backend` fixture returning "
            "a zero-argument callable that builds a backend over this test's storage"
        )

    @pytest_asyncio.fixture
    async def open_backend(
        self, make_backend: MakeBackend
    ) -> AsyncIterator[Callable[[], SessionPersistence]]:
        """Open instances over this test's storage; all are closed afterwards."""
        opened: list[SessionPersistence] = []

        def open_one() -> SessionPersistence:
            backend = validate_backend(make_backend(), name="backend under test")
            opened.append(backend)
            return backend

        yield open_one
        for backend in reversed(opened):
            await backend.aclose()

    @pytest_asyncio.fixture
    async def backend(
        self, open_backend: Callable[[], SessionPersistence]
    ) -> SessionPersistence:
        """The first backend instance of the test."""
        return open_backend()

    # -- helpers -------------------------------------------------------------

    def need(self, capability: str) -> None:
        """Skip the test unless the backend declares `capability`."""
        if not getattr(self, capability):
            pytest.skip(f"backend does not declare {capability}")

    def another_instance(
        self, open_backend: Callable[[], SessionPersistence], capability: str
    ) -> SessionPersistence:
        """Another instance over this test's storage (another process).

        For a contract's tests of `capability`: skips unless the backend
        declares it and `supports_multiple_processes`. Each contract names
        its own fixture over this (`held_peer`, `cancel_peer`, ...): the
        contracts are mixed into one class, where one name would serve all.
        """
        self.need(capability)
        self.need("supports_multiple_processes")
        return open_backend()

    @staticmethod
    def meta(
        session_id: str | None = None,
        *,
        title: str | None = None,
        parent: ForkPoint | None = None,
        cwd: str | None = "/work/project",
    ) -> SessionMeta:
        """A fresh session's metadata."""
        created = next(_clock)
        return SessionMeta(
            header=SessionHeader(
                id=session_id if session_id is not None else new_session_id(),
                created_at=created,
                cwd=cwd,
                parent=parent,
            ),
            summary=SessionSummary(updated_at=created, title=title),
        )

    @staticmethod
    def records(start: int, count: int, *, text: str = "hello") -> list[EventRecord]:
        """`count` encoded events numbered from `start` (a plausible turn)."""
        out: list[EventRecord] = []
        for seq in range(start, start + count):
            event: SessionEvent
            position = seq % 4
            if position == 0:
                event = TurnStart(
                    seq=seq, time=next(_clock), data=TurnStartData(turn=seq)
                )
            elif position == 1:
                event = UserMessage(
                    seq=seq,
                    time=next(_clock),
                    data=UserMessageData(text=f"{text} {seq}"),
                )
            elif position == 2:
                event = AssistantMessage(
                    seq=seq,
                    time=next(_clock),
                    data=AssistantMessageData(text=f"re: {text} {seq} — ✓ ünïcödé"),
                )
            else:
                event = TurnEnd(
                    seq=seq,
                    time=next(_clock),
                    data=TurnEndData(turn=seq, status="completed"),
                )
            out.append(_codec.record(event))
        return out

    async def stored(
        self,
        backend: SessionPersistence,
        *,
        flushes: Sequence[int] = (4,),
        session_id: str | None = None,
        title: str | None = None,
    ) -> tuple[SessionMeta, list[EventRecord]]:
        """Create a session and append one flush per entry of `flushes`."""
        meta = self.meta(session_id, title=title)
        await backend.create(meta)
        written: list[EventRecord] = []
        for size in flushes:
            batch = self.records(len(written), size)
            await backend.append(meta.id, batch)
            written.extend(batch)
        return meta, written

    @staticmethod
    def raws(records: Sequence[EventRecord]) -> list[bytes]:
        """The stored bytes of `records`."""
        return [bytes(r.raw) for r in records]

    @staticmethod
    def numbers(records: Sequence[EventRecord]) -> tuple[int, int, int]:
        """`(event_count, turns, size)` a backend must report for `records`."""
        return (
            len(records),
            sum(r.type == TURN_END_TYPE for r in records),
            sum(len(r.raw) for r in records),
        )

    @staticmethod
    def numbers_of(summary: SessionSummary) -> tuple[int, int, int]:
        """`(event_count, turns, size)` of a summary a backend returned."""
        return (summary.event_count, summary.turns, summary.size)
