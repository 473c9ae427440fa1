"""Paging `list`: the order, the opaque cursor, and sorted runs of sessions.

Owns how listed sessions are ordered (newest `updated_at` first, ties by id)
and paged. The backend keeps the sessions the catalog lists as one sorted run
(cached while the catalog file is unchanged) and the few sessions that may
have moved on since (held or open) as another; a page merges the runs from
the cursor on, so paging through thousands of sessions stays cheap. A
filter narrows each run by bisecting (the time window) and by the run's
cached runs of the statuses asked for, so a filtered page costs a page too.
"""

from __future__ import annotations

import base64
import binascii
import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from itertools import islice
from operator import itemgetter
from typing import Final, TypeAlias

import attrs
import msgspec

from turnkeep.errors import InvalidCursorError
from turnkeep.listfilter import ListFilter
from turnkeep.meta import SessionMeta
from turnkeep.persistence import SessionPage

__all__ = ["Key", "Run", "decode_cursor", "page", "run_of"]

Key: TypeAlias = tuple[int, str]
"""`(-updated_at, id)`: ascending keys list newest first."""

_cursor_encoder: Final = msgspec.json.Encoder()
_cursor_decoder: Final = msgspec.json.Decoder(tuple[int, str])
_first: Final = itemgetter(0)


@attrs.frozen
class Run:
    """Sessions sorted by `Key` (parallel lists, so bisecting is cheap).

    Its sessions of given statuses are sorted runs too, made the first time
    a listing asks for them and kept with the run (which is replaced when
    the catalog changes), so a filtered page costs a page, not a pass over
    the store.
    """

    keys: list[Key]
    metas: list[SessionMeta]
    _only: dict[frozenset[str], Run] = attrs.field(
        factory=dict[frozenset[str], "Run"], eq=False, repr=False
    )

    def only(self, statuses: frozenset[str]) -> Run:
        """The run of this run's sessions whose status is in `statuses`."""
        found = self._only.get(statuses)
        if found is None:
            kept = [i for i, m in enumerate(self.metas) if m.summary.status in statuses]
            found = Run(
                keys=[self.keys[i] for i in kept], metas=[self.metas[i] for i in kept]
            )
            self._only[statuses] = found
        return found

    def span(self, after: Key | None, where: ListFilter | None) -> tuple[int, int]:
        """The index range after `after` whose `updated_at` `where` keeps."""
        start = 0 if after is None else bisect_right(self.keys, after)
        stop = len(self.keys)
        if where is not None:
            start = max(start, bisect_left(self.keys, (-where.upper,)))
            stop = bisect_left(self.keys, (-where.lower + 1,))
        return start, stop

    def between(self, start: int, stop: int) -> Iterator[tuple[Key, SessionMeta]]:
        """The sessions at `start` up to `stop`, in order."""
        keys, metas = self.keys, self.metas
        return ((keys[i], metas[i]) for i in range(start, stop))


def run_of(metas: list[SessionMeta]) -> Run:
    """Sort sessions into a run."""
    keys = [(-m.summary.updated_at, m.header.id) for m in metas]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return Run(keys=[keys[i] for i in order], metas=[metas[i] for i in order])


def page(
    runs: Iterable[Run],
    *,
    limit: int,
    after: Key | None,
    where: ListFilter | None = None,
) -> SessionPage:
    """The `limit` sessions `where` keeps after the position `after`, over all runs."""
    if where is not None and where.statuses is not None:
        statuses: frozenset[str] = frozenset(where.statuses)
        runs = [r.only(statuses) for r in runs]
    spans = [(r, *r.span(after, where)) for r in runs]
    busy = [(r, start, stop) for r, start, stop in spans if start < stop]
    if len(busy) == 1:  # the common case: slice the one run, no merging
        run, start, stop = busy[0]
        end = min(start + limit, stop)
        metas = run.metas[start:end]
        last = run.keys[end - 1] if end < stop else None
    else:
        merged = heapq.merge(*(r.between(a, b) for r, a, b in busy), key=_first)
        items = list(islice(merged, limit + 1))
        metas = [m for _, m in items[:limit]]
        last = items[limit - 1][0] if len(items) > limit else None
    if last is None:
        return SessionPage(items=metas)
    return SessionPage(items=metas, next_cursor=_encode_cursor(last))


def _encode_cursor(key: Key) -> str:
    payload = _cursor_encoder.encode((-key[0], key[1]))
    return base64.urlsafe_b64encode(payload).decode("ascii")


def decode_cursor(cursor: str) -> Key:
    """The position a cursor stands for.

    Raises:
        InvalidCursorError: `cursor` was not made by `list`.
    """
    try:
        updated_at, session_id = _cursor_decoder.decode(
            base64.urlsafe_b64decode(cursor.encode("ascii"))
        )
    except (ValueError, binascii.Error, msgspec.DecodeError) as exc:
        raise InvalidCursorError(f"invalid list cursor {cursor!r}") from exc
    return (-updated_at, session_id)
