"""`HistoryView`: the history a model call is given, without copying it.

A live session's history grows by a few messages a turn, and the loop hands
it to the model before every call. Copying it into a tuple each time made
preparing a call cost O(session) (at 40,000 turns, two copies of ~160,000
messages were most of a turn). A view costs O(1): it holds the history's
list of settled messages and how many of them it shows, plus the few
messages it shows after them (the open assistant message and its calls'
answers), so the messages a model was given stay as they were, while the
history goes on appending to the same list. `turnkeep.agent.messages.History`
copies its list before it ever rewrites an entry a view may show.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import TypeVar, cast, overload

__all__ = ["HistoryView"]

T = TypeVar("T")


class HistoryView(Sequence[T]):
    """An immutable sequence of messages: `settled[:count] + tail`.

    Compares equal to any sequence of the same messages (a tuple, a list,
    another view); slicing gives a tuple.

    Args:
        settled: a list that is only ever appended to while this view lives.
        count: how many of its first entries the view shows.
        tail: the messages after them.
    """

    __slots__ = ("_count", "_settled", "_tail")

    def __init__(self, settled: list[T], count: int, tail: tuple[T, ...] = ()) -> None:
        self._settled = settled
        self._count = count
        self._tail = tail

    def __len__(self) -> int:
        return self._count + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            count = self._count
            start, stop, step = index.indices(count + len(self._tail))
            if step != 1:
                return tuple(self[i] for i in range(start, stop, step))
            # Forward slices as two C-level slices: one of the list, one of
            # the tail.
            head = self._settled[start : max(start, min(stop, count))]
            return (*head, *self._tail[max(0, start - count) : max(0, stop - count)])
        count = self._count
        size = count + len(self._tail)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("history index out of range")
        return self._settled[index] if index < count else self._tail[index - count]

    def __iter__(self) -> Iterator[T]:
        return itertools.chain(itertools.islice(self._settled, self._count), self._tail)

    def __reversed__(self) -> Iterator[T]:
        yield from reversed(self._tail)
        settled = self._settled
        for index in range(self._count - 1, -1, -1):
            yield settled[index]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        items = cast("Sequence[object]", other)
        return len(self) == len(items) and all(
            a == b for a, b in zip(self, items, strict=True)
        )

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: Sequence[T]) -> tuple[T, ...]:
        """`view + (message,)` as with the tuple the loop used to give."""
        if not isinstance(other, (tuple, HistoryView)):
            return NotImplemented
        return (*self, *other)

    def __radd__(self, other: Sequence[T]) -> tuple[T, ...]:
        if not isinstance(other, tuple):
            return NotImplemented
        return (*other, *self)

    def __reduce__(self) -> tuple[type[HistoryView[T]], tuple[list[T], int]]:
        # Pickled (and deep-copied) as what it shows, not the shared list.
        return (HistoryView, (list(self), len(self)))

    def __repr__(self) -> str:
        return f"HistoryView({list(self)!r})"
