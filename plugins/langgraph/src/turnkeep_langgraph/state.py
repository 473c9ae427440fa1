"""The index of one thread's log: where each checkpoint, value and write is.

A `ThreadLog` reads a session's events once, in order, and remembers by
position: the checkpoints of each namespace, the blob of each
(namespace, channel, version), and the effective writes pending on each
checkpoint. It does no I/O and knows no serializer; `turnkeep_langgraph.threads`
appends and reads through it.

Writes follow LangGraph's rule for a task's writes: a regular write
(index >= 0) that is already stored is kept (a retried task does not
duplicate it); a call made only of special writes (errors, interrupts,
resumes, scheduled) replaces what it names.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs
from langgraph.checkpoint.base import WRITES_IDX_MAP

from turnkeep.errors import SessionExistsError
from turnkeep.events import SessionEvent

from .events import (
    BlobData,
    BlobEvent,
    CheckpointData,
    CheckpointEvent,
    Item,
    ThreadEvent,
    Version,
    WriteData,
    WritesData,
    WritesEvent,
)

__all__ = ["ThreadLog", "WriteKey", "WriteRef", "effective_writes"]

WriteKey = tuple[str, int]
"""A write's identity on one checkpoint: (task id, index)."""

WriteRef = tuple[int, int]
"""Where a write is: (seq of its `langgraph/writes` event, position in it)."""


@attrs.define(eq=False)
class ThreadLog:
    """What one thread's session holds, indexed by position in its log.

    Attributes:
        thread_id: the LangGraph thread id (from the first event).
        events: the session's events (the live session's own list while it
            is held).
        checkpoints: per namespace, checkpoint id -> seq of its event.
        blobs: (namespace, channel, version) -> seq of the latest blob event.
        writes: (namespace, checkpoint id) -> write key -> where it is.
    """

    thread_id: str
    events: Sequence[SessionEvent]
    checkpoints: dict[str, dict[str, int]] = attrs.field(
        factory=dict[str, dict[str, int]]
    )
    blobs: dict[tuple[str, str, Version], int] = attrs.field(
        factory=dict[tuple[str, str, Version], int]
    )
    writes: dict[tuple[str, str], dict[WriteKey, WriteRef]] = attrs.field(
        factory=dict[tuple[str, str], dict[WriteKey, WriteRef]]
    )
    _indexed: int = attrs.field(default=1, alias="indexed")
    _lists: dict[tuple[str, str], tuple[int, list[Item]]] = attrs.field(
        init=False, factory=dict[tuple[str, str], tuple[int, list[Item]]]
    )

    @classmethod
    def of(cls, session_id: str, events: Sequence[SessionEvent]) -> ThreadLog:
        """Index `events`, a thread's whole log.

        Raises:
            SessionExistsError: the session is not a LangGraph thread (its
                first event is not `langgraph/thread`).
        """
        first = events[0] if events else None
        if not isinstance(first, ThreadEvent):
            kind = first.type if first is not None else "no events"
            raise SessionExistsError(
                f"session {session_id!r} is not a LangGraph thread (it starts "
                f"with {kind!r}); pick another thread_id or another store"
            )
        log = cls(first.data.thread_id, events)
        log.catch_up()
        return log

    def catch_up(self) -> None:
        """Index the events appended since the last call."""
        events = self.events
        for seq in range(self._indexed, len(events)):
            event = events[seq]
            if isinstance(event, BlobEvent):
                data = event.data
                self.blobs[(data.ns, data.channel, data.version)] = seq
            elif isinstance(event, CheckpointEvent):
                data = event.data
                self.checkpoints.setdefault(data.ns, {})[data.id] = seq
            elif isinstance(event, WritesEvent):
                self._index_writes(seq, event.data)
        self._indexed = len(events)

    def _index_writes(self, seq: int, data: WritesData) -> None:
        table = self.writes.setdefault((data.ns, data.checkpoint_id), {})
        for position, write in enumerate(data.writes):
            table[(data.task_id, write.idx)] = (seq, position)

    def checkpoint(self, ns: str, checkpoint_id: str | None) -> CheckpointData | None:
        """The checkpoint `checkpoint_id` of `ns`, or the newest one if `None`."""
        table = self.checkpoints.get(ns)
        if not table:
            return None
        if checkpoint_id is None:
            checkpoint_id = max(table)
        seq = table.get(checkpoint_id)
        return None if seq is None else self.checkpoint_at(seq)

    def checkpoint_at(self, seq: int) -> CheckpointData:
        """The payload of the checkpoint event at `seq`."""
        event = self.events[seq]
        assert isinstance(event, CheckpointEvent)  # noqa: S101 - the index says so
        return event.data

    def newest_first(self, ns: str | None) -> list[CheckpointData]:
        """The checkpoints of `ns` (every namespace if `None`), newest first."""
        tables = (
            [self.checkpoints.get(ns, {})]
            if ns is not None
            else self.checkpoints.values()
        )
        found = [self.checkpoint_at(seq) for table in tables for seq in table.values()]
        found.sort(key=lambda c: c.id, reverse=True)
        return found

    def blob_at(self, seq: int) -> BlobData:
        """The payload of the blob event at `seq`."""
        event = self.events[seq]
        assert isinstance(event, BlobEvent)  # noqa: S101 - refs point at blobs
        return event.data

    def value_at(self, seq: int) -> Item | list[Item]:
        """The value of the blob at `seq`: one item, or a list's items."""
        blob = self.blob_at(seq)
        if blob.items is None:
            return Item(blob.type, blob.value)
        return self.items_at(seq)

    def items_at(self, seq: int) -> list[Item]:
        """The whole list the list blob at `seq` holds (its bases' items first).

        The last list read per channel is remembered, so a run that
        extends a list step after step compares against it without
        walking the chain again.
        """
        blob = self.blob_at(seq)
        remembered = self._lists.get((blob.ns, blob.channel))
        if remembered is not None and remembered[0] == seq:
            return remembered[1]
        chain: list[BlobData] = [blob]
        while chain[-1].base is not None:
            chain.append(self.blob_at(chain[-1].base))
        items = [item for link in reversed(chain) for item in link.items or ()]
        self._lists[(blob.ns, blob.channel)] = (seq, items)
        return items

    def remember(self, seq: int, items: list[Item]) -> None:
        """Record that the list blob at `seq` holds `items` (just written)."""
        blob = self.blob_at(seq)
        self._lists[(blob.ns, blob.channel)] = (seq, items)

    def pending(
        self, ns: str, checkpoint_id: str
    ) -> list[tuple[WritesData, WriteData]]:
        """The writes pending on a checkpoint, in LangGraph's order.

        The order is `(task_path, task_id, idx)`, the order live execution
        applies a step's writes in (`writes_sort_key`).
        """
        table = self.writes.get((ns, checkpoint_id))
        if not table:
            return []
        found: list[tuple[WritesData, WriteData]] = []
        for seq, position in table.values():
            event = self.events[seq]
            assert isinstance(event, WritesEvent)  # noqa: S101 - the index says so
            found.append((event.data, event.data.writes[position]))
        found.sort(key=lambda p: (p[0].task_path, p[0].task_id, p[1].idx))
        return found

    def thread_events(self) -> Iterator[SessionEvent]:
        """Every event after the first (`langgraph/thread`)."""
        return iter(self.events[1:])


def effective_writes(
    log: ThreadLog,
    ns: str,
    checkpoint_id: str,
    task_id: str,
    writes: Sequence[WriteData],
) -> list[WriteData]:
    """The writes of one `put_writes` call that change what is stored.

    Args:
        log: the thread's index.
        ns: the namespace.
        checkpoint_id: the checkpoint the writes are pending on.
        task_id: the task.
        writes: the call's writes, special channels already at their
            negative indexes.

    Returns:
        The writes to store; empty when the call repeats stored writes.
    """
    table = log.writes.get((ns, checkpoint_id), {})
    replace = all(w.channel in WRITES_IDX_MAP for w in writes)
    return [w for w in writes if replace or (task_id, w.idx) not in table]
