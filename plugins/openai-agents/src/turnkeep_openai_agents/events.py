"""The `oai/*` event types and the item stack they encode.

A session's items are a stack: `add_items` pushes, `pop_item` pops,
`clear_session` empties it. Each change is one event on the append-only
log, and every event says where the stack's top is after it:

- `oai/items` pushes `items`; `below` points at the item under the first
  of them (the top before the push);
- `oai/pop` removes the top; `top` points at the new top;
- `oai/clear` empties the stack.

A pointer is `[seq, index]`: item `index` of the `oai/items` event `seq`.
Every event also carries `length`, the number of items after it. So the
newest N items are found by starting at the last event's top and following
`below` pointers back: each step reads one `oai/items` event and takes
items from it, never a popped or cleared one, so reading N items costs
O(N) events whatever came before (no snapshot is needed). Pops and clears
live here only: backends store the events as they store any other.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, Final, TypeAlias, cast

import msgspec

from turnkeep.errors import SessionCorruptError
from turnkeep.events import SessionEvent, define_event_type

__all__ = [
    "EVENT_TYPES",
    "ClearData",
    "ItemsData",
    "OaiClear",
    "OaiItems",
    "OaiPop",
    "PopData",
    "Ref",
    "Stack",
    "below",
    "is_oai",
    "stack_after",
    "take",
    "walk",
]

Item: TypeAlias = dict[str, Any]


class Ref(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """Item `index` of the `oai/items` event `seq` (stored as `[seq, index]`)."""

    seq: int
    index: int


class ItemsData(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Payload of `oai/items`: items pushed by one `add_items` call.

    Attributes:
        items: the SDK's items, exactly as given (JSON objects).
        below: the item under the first of them (`None`: the stack was empty).
        length: the number of items after this event.
    """

    items: list[Any]
    below: Ref | None
    length: int


class PopData(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Payload of `oai/pop`: the newest item was removed.

    Attributes:
        top: the new top (`None`: the stack is now empty).
        length: the number of items after this event.
    """

    top: Ref | None
    length: int


class ClearData(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Payload of `oai/clear`: every item was removed.

    Attributes:
        removed: how many items the clear removed.
    """

    removed: int


# Ignorable: a turnkeep without this package keeps them opaque (verify,
# export and the loop's history read the log) instead of refusing it.
OaiItems: Final = define_event_type("oai/items", ItemsData, ignorable=True)
OaiPop: Final = define_event_type("oai/pop", PopData, ignorable=True)
OaiClear: Final = define_event_type("oai/clear", ClearData, ignorable=True)

EVENT_TYPES: Final[tuple[type[SessionEvent], ...]] = (OaiItems, OaiPop, OaiClear)
_TAGS: Final = frozenset(cls.type for cls in EVENT_TYPES)


class Stack(msgspec.Struct, frozen=True, gc=False):
    """Where the stack stands after an event: its top and its length."""

    top: Ref | None
    length: int


EMPTY: Final = Stack(None, 0)


def is_oai(event: SessionEvent) -> bool:
    """Whether `event` is one of this package's types."""
    return event.type in _TAGS


def stack_after(event: SessionEvent) -> Stack:
    """The stack after `event` (one of this package's types)."""
    data = event.data
    if isinstance(data, ItemsData):
        return Stack(Ref(event.seq, len(data.items) - 1), data.length)
    if isinstance(data, PopData):
        return Stack(data.top, data.length)
    return EMPTY


def items_of(event: SessionEvent, session_id: str) -> ItemsData:
    """The payload of the `oai/items` event a pointer names.

    Raises:
        SessionCorruptError: the event is of another type.
    """
    data = event.data
    if not isinstance(data, ItemsData):
        raise SessionCorruptError(
            f"session {session_id!r}: item pointer names seq {event.seq}, a "
            f"{event.type!r} event, not oai/items",
            session_id=session_id,
            offset=event.seq,
        )
    return data


def below(top: Ref, data: ItemsData) -> Ref | None:
    """The item under `top` (whose event's payload is `data`)."""
    return Ref(top.seq, top.index - 1) if top.index > 0 else data.below


Walk: TypeAlias = Generator[tuple[int, int], SessionEvent, list[Item]]
"""A walk down the stack: yields `(seq, wanted)` and is sent event `seq`;
`wanted` (how many items are still missing) lets a read from storage fetch
the events before `seq` in the same call. Returns the items, oldest first."""


def walk(stack: Stack, limit: int | None, session_id: str) -> Walk:
    """The newest `limit` items of `stack` (all when `None`), oldest first.

    Raises:
        SessionCorruptError: a pointer names no `oai/items` event, or the
            chain ends before `length` items.
    """
    need = stack.length if limit is None else min(limit, stack.length)
    chunks: list[Sequence[Any]] = []
    got = 0
    cur = stack.top
    after = None
    while cur is not None and got < need:
        if cur.seq < 0 or (after is not None and cur.seq >= after):
            raise _bad_pointer(cur, session_id)
        data = items_of((yield cur.seq, need - got), session_id)
        if not 0 <= cur.index < len(data.items):
            raise _bad_pointer(cur, session_id)
        after = cur.seq
        count = min(cur.index + 1, need - got)
        chunks.append(data.items[cur.index + 1 - count : cur.index + 1])
        got += count
        cur = data.below
    if got < need:
        raise SessionCorruptError(
            f"session {session_id!r}: its last event says {stack.length} items, "
            f"but the chain of items holds {got}",
            session_id=session_id,
        )
    return [item for chunk in reversed(chunks) for item in chunk]


def _bad_pointer(ref: Ref, session_id: str) -> SessionCorruptError:
    return SessionCorruptError(
        f"session {session_id!r}: item pointer [{ref.seq}, {ref.index}] names no "
        "earlier stored item",
        session_id=session_id,
        offset=ref.seq,
    )


def take(
    stack: Stack,
    limit: int | None,
    events: Sequence[SessionEvent],
    session_id: str,
) -> list[Item]:
    """`walk` over a log held in memory (a live session's, or a loaded one)."""
    steps = walk(stack, limit, session_id)
    try:
        seq, _ = next(steps)
        while True:
            if seq >= len(events):
                raise _bad_pointer(Ref(seq, 0), session_id)
            seq, _ = steps.send(events[seq])
    except StopIteration as done:
        return cast("list[Item]", done.value)


def last_stack(events: Sequence[SessionEvent]) -> Stack:
    """The stack after the last of this package's events in `events`."""
    for event in reversed(events):
        if is_oai(event):
            return stack_after(event)
    return EMPTY
