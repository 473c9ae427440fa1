"""The event types a LangGraph thread is stored as, and the plugin that registers them.

One LangGraph thread is one turnkeep session. Its log holds:

- `langgraph/thread` (first event): the thread's id as LangGraph knows it;
- `langgraph/blob`: one channel value at one version, serialized by the
  saver's serde. A value is written when its version is new
  (`new_versions`), so a channel that did not change is never written
  again. A list (a message history) is stored item by item, and a list
  that grew from the one its parent checkpoint held is stored as the new
  items only, pointing at the blob it extends: the log grows with what
  changed;
- `langgraph/checkpoint`: a checkpoint without its channel values (those
  are references to the blobs' positions in the log), its metadata and its
  parent;
- `langgraph/writes`: the writes one task made against a checkpoint
  (pending writes).

Values are the serde's typed bytes, stored exactly (the secret redactor
does not scan these types: a checkpoint must come back as it went in).

This module is light on purpose: it is what the entry point `langgraph` in
the group `turnkeep` loads, so `turnkeep show`, `verify` and `export` read
these sessions without importing LangGraph.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from turnkeep.events import SessionEvent
from turnkeep.hookspecs import hookimpl

__all__ = [
    "BlobData",
    "BlobEvent",
    "CheckpointData",
    "CheckpointEvent",
    "Item",
    "ThreadData",
    "ThreadEvent",
    "WriteData",
    "WritesData",
    "WritesEvent",
    "register_event_types",
]

Version = str | int | float
"""A channel version, as LangGraph makes them (`get_next_version`)."""


class ThreadData(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Payload of `langgraph/thread`.

    Attributes:
        thread_id: the LangGraph `thread_id` this session stores.
    """

    thread_id: str


class Item(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """One serialized value: the serde's type tag and bytes."""

    type: str
    value: bytes


class BlobData(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """Payload of `langgraph/blob`: one channel's value at one version.

    A value is either one serialized value (`type`, `value`) or a list
    stored item by item (`items`); a list that extends an earlier one
    stores only its new items and names that blob in `base`.

    Attributes:
        ns: the checkpoint namespace (`""` for the root graph).
        channel: the channel's name.
        version: the channel's version this value belongs to.
        type: the serde's type tag (`""` for a list).
        value: the serde's bytes (empty for a list).
        items: a list's items (after those of `base`, if any).
        base: the seq of the list blob this one extends.
    """

    ns: str
    channel: str
    version: Version
    type: str = ""
    value: bytes = b""
    items: list[Item] | None = None
    base: int | None = None


class CheckpointData(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Payload of `langgraph/checkpoint`.

    Attributes:
        ns: the checkpoint namespace.
        id: the checkpoint's id (LangGraph's, monotonic within a thread).
        parent_id: the checkpoint it continues from, if any.
        type: the serde's type tag of `checkpoint`.
        checkpoint: the checkpoint without `channel_values`, serialized.
        metadata_type: the serde's type tag of `metadata`.
        metadata: the checkpoint's metadata, serialized.
        refs: for each channel with a value, the seq of its `langgraph/blob`
            event in this session's log.
    """

    ns: str
    id: str
    parent_id: str | None
    type: str
    checkpoint: bytes
    metadata_type: str
    metadata: bytes
    refs: dict[str, int]


class WriteData(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One write of a task.

    Attributes:
        idx: its index among the task's writes (negative for LangGraph's
            special channels: errors, interrupts, resumes, scheduled).
        channel: the channel written.
        type: the serde's type tag.
        value: the serde's bytes.
    """

    idx: int
    channel: str
    type: str
    value: bytes


class WritesData(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Payload of `langgraph/writes`: what one task wrote against a checkpoint.

    Attributes:
        ns: the checkpoint namespace.
        checkpoint_id: the checkpoint the writes are pending on.
        task_id: the task's id.
        task_path: the task's path (orders the writes of one step).
        writes: the writes, in the task's order.
    """

    ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    writes: list[WriteData]


class ThreadEvent(
    SessionEvent, tag="langgraph/thread", frozen=True, kw_only=True, gc=False
):
    """The LangGraph thread this session stores (its first event)."""

    data: ThreadData


class BlobEvent(
    SessionEvent, tag="langgraph/blob", frozen=True, kw_only=True, gc=False
):
    """A channel value at a new version."""

    data: BlobData


class CheckpointEvent(
    SessionEvent, tag="langgraph/checkpoint", frozen=True, kw_only=True, gc=False
):
    """A checkpoint: its fields, metadata, parent and channel references."""

    data: CheckpointData


class WritesEvent(
    SessionEvent, tag="langgraph/writes", frozen=True, kw_only=True, gc=False
):
    """The writes of one task against a checkpoint."""

    data: WritesData


EVENT_TYPES: tuple[type[SessionEvent], ...] = (
    ThreadEvent,
    BlobEvent,
    CheckpointEvent,
    WritesEvent,
)


@hookimpl
def register_event_types(register: Callable[[type[SessionEvent]], None]) -> None:
    """Contribute the `langgraph/*` event types."""
    for cls in EVENT_TYPES:
        register(cls)
