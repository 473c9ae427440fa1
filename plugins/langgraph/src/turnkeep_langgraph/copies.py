"""Copies of a thread's log: renumbered (a new generation), or shifted (a copy).

`generation` builds the log a thread is rewritten to when `prune` or
`delete_for_runs` drop checkpoints: the thread event, then the kept
checkpoints, the blobs they point at (a list made whole again, since the
blobs it extended may be dropped) and their effective writes, numbered
from 0. `shifted` moves a payload to a later position of another log
(`copy_thread`). Pure functions over `turnkeep_langgraph.state.ThreadLog`.
"""

from __future__ import annotations

import msgspec

from turnkeep.events import SessionEvent

from .events import (
    BlobData,
    BlobEvent,
    CheckpointData,
    CheckpointEvent,
    ThreadEvent,
    WriteData,
    WritesData,
    WritesEvent,
)
from .state import ThreadLog

__all__ = ["generation", "shifted", "with_refs", "with_writes"]


def with_refs(data: CheckpointData, refs: dict[str, int]) -> CheckpointData:
    """`data` pointing at the blobs `refs` names."""
    return CheckpointData(
        ns=data.ns,
        id=data.id,
        parent_id=data.parent_id,
        type=data.type,
        checkpoint=data.checkpoint,
        metadata_type=data.metadata_type,
        metadata=data.metadata,
        refs=refs,
    )


def with_writes(data: WritesData, writes: list[WriteData]) -> WritesData:
    """`data` holding only `writes`."""
    return WritesData(
        ns=data.ns,
        checkpoint_id=data.checkpoint_id,
        task_id=data.task_id,
        task_path=data.task_path,
        writes=writes,
    )


def shifted(data: object, offset: int) -> object:
    """A payload copied `offset` positions later in another log."""
    if isinstance(data, CheckpointData):
        refs = {c: seq + offset for c, seq in data.refs.items()}
        return with_refs(data, refs)
    if isinstance(data, BlobData) and data.base is not None:
        return msgspec.structs.replace(data, base=data.base + offset)
    return data


def _key_of(data: CheckpointData) -> tuple[str, str]:
    return (data.ns, data.id)


def generation(log: ThreadLog, kept: set[tuple[str, str]]) -> list[SessionEvent]:
    """The log of a thread with only the checkpoints in `kept`, renumbered."""
    first = log.events[0]
    assert isinstance(first, ThreadEvent)  # noqa: S101 - ThreadLog.of checked it
    out: list[SessionEvent] = [first]
    moved: dict[int, int] = {}
    needed = {
        seq
        for data in log.newest_first(None)
        if (data.ns, data.id) in kept
        for seq in data.refs.values()
    }
    for event in log.thread_events():
        if isinstance(event, BlobEvent) and event.seq in needed:
            moved[event.seq] = len(out)
            data = event.data
            if data.base is not None:  # the whole list, its bases dropped
                data = msgspec.structs.replace(
                    data, items=log.items_at(event.seq), base=None
                )
            out.append(BlobEvent(seq=len(out), time=event.time, data=data))
        elif isinstance(event, CheckpointEvent) and _key_of(event.data) in kept:
            if log.checkpoints[event.data.ns].get(event.data.id) != event.seq:
                continue  # stored again later: the later one counts
            refs = {c: moved[seq] for c, seq in event.data.refs.items()}
            out.append(
                CheckpointEvent(
                    seq=len(out), time=event.time, data=with_refs(event.data, refs)
                )
            )
        elif (
            isinstance(event, WritesEvent)
            and (event.data.ns, event.data.checkpoint_id) in kept
        ):
            data = event.data
            table = log.writes.get((data.ns, data.checkpoint_id), {})
            live = [
                w
                for position, w in enumerate(data.writes)
                if table.get((data.task_id, w.idx)) == (event.seq, position)
            ]
            if live:
                out.append(
                    WritesEvent(
                        seq=len(out), time=event.time, data=with_writes(data, live)
                    )
                )
    return out
