"""LangGraph threads as turnkeep sessions: holding, appending, reading, erasing.

`ThreadStore` runs on the host's loop (see `turnkeep_langgraph.runner`). A
thread is the session `lg-<thread_id>` (`lg-#<sha256>` for an id that is
too long or starts with `#`). Writing a thread takes the session's writer
role and keeps it (at most `max_held` threads, least recently used let go
first); each `put` or `put_writes` is one flush, so it is durable and
atomic when it returns. Reading a thread this process does not hold loads
it without taking the role, so another process may be writing it.

Whole-thread deletes use turnkeep's delete, which erases. Dropping some
checkpoints (`prune`, `delete_for_runs`) writes a new generation: the kept
checkpoints with their values and writes go into the session `lg~<key>`
in one flush, the old session is deleted, the kept log is stored again
under `lg-<key>` in one flush, and `lg~<key>` is deleted. A crash leaves
either the old thread (the rewrite did not happen) or the kept copy under
`lg~<key>`, which the next use of the thread restores.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence

import attrs

from turnkeep.capabilities import delete_session
from turnkeep.errors import (
    FlushError,
    SessionExistsError,
    SessionHeldError,
    SessionLockedError,
    SessionNotFoundError,
)
from turnkeep.events import SessionEvent
from turnkeep.host import Host
from turnkeep.ids import MAX_SESSION_ID_BYTES
from turnkeep.session import Session

from .copies import generation, shifted, with_refs, with_writes
from .events import (
    BlobData,
    CheckpointData,
    Item,
    ThreadData,
    Version,
    WritesData,
)
from .state import ThreadLog, effective_writes

__all__ = ["PREFIX", "RawTuple", "ThreadStore", "Value", "session_id"]

PREFIX = "lg-"
"""Session ids of LangGraph threads start with this."""
_TEMP = "lg~"

Value = Item | list[Item]
"""A serialized channel value: one item, or a list's items."""


def _key(thread_id: str) -> str:
    raw = thread_id.encode("utf-8", "surrogatepass")
    fits = len(raw) + len(PREFIX) <= MAX_SESSION_ID_BYTES
    plain = fits and not thread_id.startswith("#") and "\x00" not in thread_id
    if plain:
        try:
            thread_id.encode("utf-8")
        except UnicodeEncodeError:
            plain = False
    return thread_id if plain else "#" + hashlib.sha256(raw).hexdigest()


def session_id(thread_id: str) -> str:
    """The session that stores `thread_id`."""
    return PREFIX + _key(thread_id)


def _temp_id(thread_id: str) -> str:
    return _TEMP + _key(thread_id)


@attrs.frozen
class RawTuple:
    """One checkpoint as stored, not yet deserialized.

    Attributes:
        thread_id: its thread.
        checkpoint: the checkpoint's payload.
        values: channel -> its serialized value.
        pending: the writes pending on it, in LangGraph's order:
            (task id, channel, type tag, bytes).
    """

    thread_id: str
    checkpoint: CheckpointData
    values: dict[str, Value]
    pending: list[tuple[str, str, str, bytes]]


def _raw(log: ThreadLog, data: CheckpointData) -> RawTuple:
    values = {channel: log.value_at(seq) for channel, seq in data.refs.items()}
    pending = [
        (writes.task_id, w.channel, w.type, w.value)
        for writes, w in log.pending(data.ns, data.id)
    ]
    return RawTuple(log.thread_id, data, values, pending)


@attrs.define(eq=False)
class ThreadStore:
    """The LangGraph threads of one host (used on the host's loop only)."""

    host: Host
    max_held: int = 64
    _held: OrderedDict[str, tuple[Session, ThreadLog]] = attrs.field(
        init=False, factory=OrderedDict[str, tuple[Session, ThreadLog]]
    )
    # A thread's lock lives while someone holds or awaits it: a process
    # that touches many threads keeps no lock per thread it ever saw.
    _locks: weakref.WeakValueDictionary[str, asyncio.Lock] = attrs.field(
        init=False, factory=weakref.WeakValueDictionary[str, asyncio.Lock]
    )

    def _lock(self, thread_id: str) -> asyncio.Lock:
        sid = session_id(thread_id)
        lock = self._locks.get(sid)
        if lock is None:
            lock = self._locks[sid] = asyncio.Lock()
        return lock

    # -- reading -------------------------------------------------------------

    async def get(
        self, thread_id: str, ns: str, checkpoint_id: str | None
    ) -> RawTuple | None:
        """The checkpoint `checkpoint_id` (newest if `None`) of a thread's `ns`."""
        async with self._lock(thread_id):
            log = await self._read(thread_id)
            if log is None:
                return None
            data = log.checkpoint(ns, checkpoint_id)
            return None if data is None else _raw(log, data)

    async def checkpoints(self, thread_id: str, ns: str | None) -> list[RawTuple]:
        """Every checkpoint of a thread (of `ns`, or all namespaces), newest first."""
        async with self._lock(thread_id):
            log = await self._read(thread_id)
            if log is None:
                return []
            return [_raw(log, data) for data in log.newest_first(ns)]

    async def thread_ids(self) -> list[str]:
        """The ids of every LangGraph thread in the store."""
        backend = self.host.require_persistence()
        bases: set[str] = set()
        temps: set[str] = set()
        cursor: str | None = None
        while True:
            page = await backend.list(limit=500, cursor=cursor)
            for meta in page.items:
                sid = meta.header.id
                if sid.startswith(PREFIX):
                    bases.add(sid)
                elif sid.startswith(_TEMP):
                    temps.add(sid)
            cursor = page.next_cursor
            if cursor is None:
                break
        bases.update(self._held)
        found: list[str] = []
        for sid in sorted(bases | {PREFIX + t[len(_TEMP) :] for t in temps}):
            try:
                log = await self._load(sid) or await self._load(
                    _TEMP + sid[len(PREFIX) :]
                )
            except SessionExistsError:
                continue  # a session under our prefix that is not a thread
            if log is not None:
                found.append(log.thread_id)
        return found

    async def _read(self, thread_id: str) -> ThreadLog | None:
        sid = session_id(thread_id)
        held = self._held.get(sid)
        if held is not None:
            self._held.move_to_end(sid)
            return held[1]
        return await self._load(sid) or await self._load(_temp_id(thread_id))

    async def _load(self, sid: str) -> ThreadLog | None:
        held = self._held.get(sid)
        if held is not None:
            return held[1]
        backend = self.host.require_persistence()
        try:
            loaded = await backend.load(sid)
        except SessionNotFoundError:
            return None
        events = self.host.codec.decode_log(loaded.events, session_id=sid)
        return ThreadLog.of(sid, events) if events else None

    # -- writing -------------------------------------------------------------

    async def put(
        self,
        thread_id: str,
        checkpoint: CheckpointData,
        versions: Mapping[str, Version],
        new: Collection[str],
        serialize: Callable[[str], Value | None],
    ) -> None:
        """Store a checkpoint: the values of new versions, then the checkpoint.

        A channel whose version is not new and whose value at that version
        is stored is referenced, not written again. A list that extends the
        list its parent checkpoint held is stored as its new items.
        `serialize(channel)` gives a channel's value (`None`: it has none).
        One flush.
        """
        ns = checkpoint.ns
        async with self._lock(thread_id):
            session, log = await self._hold(thread_id)
            parent = (
                log.checkpoint(ns, checkpoint.parent_id)
                if checkpoint.parent_id is not None
                else None
            )
            refs: dict[str, int] = {}
            for channel, version in versions.items():
                known = log.blobs.get((ns, channel, version))
                if known is not None and channel not in new:
                    refs[channel] = known
                    continue
                value = serialize(channel)
                if value is None:
                    continue
                if isinstance(value, Item):
                    blob = BlobData(
                        ns=ns,
                        channel=channel,
                        version=version,
                        type=value.type,
                        value=value.value,
                    )
                else:
                    base = parent.refs.get(channel) if parent is not None else None
                    blob = _list_blob(log, base, ns, channel, version, value)
                refs[channel] = seq = session.append(blob).seq
                if not isinstance(value, Item):
                    log.remember(seq, value)
            session.append(with_refs(checkpoint, refs))
            await self._commit(thread_id, session, log)

    async def put_writes(self, thread_id: str, writes: WritesData) -> None:
        """Store a task's writes (those not already stored); one flush."""
        async with self._lock(thread_id):
            session, log = await self._hold(thread_id)
            kept = effective_writes(
                log, writes.ns, writes.checkpoint_id, writes.task_id, writes.writes
            )
            if not kept:
                return
            session.append(with_writes(writes, kept))
            await self._commit(thread_id, session, log)

    async def _commit(self, thread_id: str, session: Session, log: ThreadLog) -> None:
        log.catch_up()
        try:
            await session.flush()
        except FlushError:
            # What this flush held is indexed but not stored: forget both,
            # and load the thread afresh on its next use.
            await self._let_go(session_id(thread_id), store=False)
            raise

    async def _hold(self, thread_id: str) -> tuple[Session, ThreadLog]:
        sid = session_id(thread_id)
        held = self._held.get(sid)
        if held is not None:
            self._held.move_to_end(sid)
            return held
        await self._restore(thread_id)
        try:
            session = await self.host.sessions.open(sid)
        except SessionHeldError:
            raise
        except SessionLockedError as exc:
            # The backend's message offers `claim(steal=True)`, which the
            # saver does not: say what its user can do.
            raise SessionLockedError(
                f"thread {thread_id!r} is being written by another live process; "
                "run a thread's graph from one process at a time, or close the "
                "other saver (a process that died lets go of it: at once on "
                "JSONL and SQLite, when its 30 s lease runs out on PostgreSQL)"
            ) from exc
        try:
            if not session.events:
                session.append(ThreadData(thread_id=thread_id))
            log = ThreadLog.of(sid, session.events)
        except BaseException:
            await self.host.sessions.abandon(sid, reason="not a LangGraph thread")
            raise
        self._held[sid] = (session, log)
        await self._evict()
        return session, log

    async def _evict(self) -> None:
        while len(self._held) > self.max_held:
            victim = next((s for s in self._held if not self._busy(s)), None)
            if victim is None:
                return
            await self._let_go(victim)

    def _busy(self, sid: str) -> bool:
        lock = self._locks.get(sid)
        return lock is not None and lock.locked()

    async def _let_go(self, sid: str, *, store: bool = True) -> None:
        entry = self._held.pop(sid, None)
        if entry is None:
            return
        if store:
            try:
                await self.host.sessions.close(sid)
                return
            except FlushError:
                pass
        await self.host.sessions.abandon(sid, reason="let go by the LangGraph saver")

    async def aclose(self) -> None:
        """Let every held thread go (flushed and released)."""
        for sid in list(self._held):
            await self._let_go(sid)

    # -- erasing, rewriting, copying ------------------------------------------

    async def delete(self, thread_id: str) -> None:
        """Erase a thread: its session and any half-made generation."""
        async with self._lock(thread_id):
            await self._erase(session_id(thread_id))
            await self._erase(_temp_id(thread_id))

    async def _erase(self, sid: str) -> None:
        await self._let_go(sid)
        with contextlib.suppress(SessionNotFoundError):
            await delete_session(self.host.require_persistence(), sid)

    async def rewrite(
        self, thread_id: str, keep: Callable[[CheckpointData], bool]
    ) -> None:
        """Keep only the checkpoints `keep` accepts (with their values and writes).

        Nothing kept erases the thread; everything kept changes nothing.
        Otherwise a new generation replaces the log (see the module).
        """
        async with self._lock(thread_id):
            if await self._read(thread_id) is None:
                return
            # Take the writer role first: a thread another process writes
            # is refused before anything is copied.
            _, log = await self._hold(thread_id)
            every = log.newest_first(None)
            kept = {(c.ns, c.id) for c in every if keep(c)}
            if len(kept) == len(every):
                return
            if not kept:
                await self._erase(session_id(thread_id))
                await self._erase(_temp_id(thread_id))
                return
            fresh = generation(log, kept)
            temp = _temp_id(thread_id)
            await self._erase(temp)
            await self._store(temp, fresh)
            await self._erase(session_id(thread_id))
            await self._store(session_id(thread_id), fresh)
            await self._erase(temp)

    async def _restore(self, thread_id: str) -> None:
        """Finish a rewrite a crash interrupted (the base deleted, the copy kept)."""
        backend = self.host.require_persistence()
        sid, temp = session_id(thread_id), _temp_id(thread_id)
        if await backend.has(sid) or not await backend.has(temp):
            return
        log = await self._load(temp)
        if log is not None:
            await self._store(sid, list(log.events))
        await self._erase(temp)

    async def _store(self, sid: str, events: Sequence[SessionEvent]) -> None:
        session = self.host.sessions.create(sid, seed=events)
        try:
            await session.flush()
        finally:
            await self.host.sessions.close(sid)

    async def copy(self, source: str, target: str) -> None:
        """Append every checkpoint and write of `source` to `target` (one flush)."""
        async with self._lock(source):
            log = await self._read(source)
            if log is None:
                return
            events = list(log.thread_events())
        async with self._lock(target):
            session, target_log = await self._hold(target)
            offset = session.next_seq - 1
            for event in events:
                session.append(shifted(event.data, offset))
            await self._commit(target, session, target_log)


def _list_blob(
    log: ThreadLog,
    base: int | None,
    ns: str,
    channel: str,
    version: Version,
    items: list[Item],
) -> BlobData:
    """A list's blob: its new items after `base`'s list if it starts with it."""
    if base is not None and log.blob_at(base).items is not None:
        old = log.items_at(base)
        if len(items) >= len(old) and items[: len(old)] == old:
            return BlobData(
                ns=ns,
                channel=channel,
                version=version,
                items=items[len(old) :],
                base=base,
            )
    return BlobData(ns=ns, channel=channel, version=version, items=items)
