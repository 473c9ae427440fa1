"""Paging `list`: the order, the opaque cursor, and sorted runs of sessions.

Owns how listed sessions are ordered (newest `updated_at` first, ties by id)
and paged. The backend keeps the sessions the catalog lists as one sorted run
(cached while the catalog file is unchanged) and the few sessions that may
have moved on since (held or open) as another; a page merges the runs from
the cursor on, so paging through thousands of sessions stays cheap.
"""

from __future__ import annotations

import base64
import binascii
import heapq
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from itertools import islice
from operator import itemgetter
from typing import Final, TypeAlias

import attrs
import msgspec

from turnkeep.errors import InvalidCursorError
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
    """Sessions sorted by `Key` (parallel lists, so bisecting is cheap)."""

    keys: list[Key]
    metas: list[SessionMeta]

    def after(self, key: Key | None) -> Iterator[tuple[Key, SessionMeta]]:
        """The sessions strictly after `key`, in order."""
        start = 0 if key is None else bisect_right(self.keys, key)
        keys, metas = self.keys, self.metas
        return ((keys[i], metas[i]) for i in range(start, len(keys)))


def run_of(metas: list[SessionMeta]) -> Run:
    """Sort sessions into a run."""
    keys = [(-m.summary.updated_at, m.header.id) for m in metas]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return Run(keys=[keys[i] for i in order], metas=[metas[i] for i in order])


def page(runs: Iterable[Run], *, limit: int, after: Key | None) -> SessionPage:
    """The `limit` sessions after the cursor position `after`, over all runs."""
    busy = [r for r in runs if r.keys]
    if len(busy) == 1:  # the common case: slice the one run, no merging
        run = busy[0]
        start = 0 if after is None else bisect_right(run.keys, after)
        metas = run.metas[start : start + limit]
        more = start + limit < len(run.keys)
        last = run.keys[start + limit - 1] if more else None
    else:
        merged = heapq.merge(*(r.after(after) for r in busy), key=_first)
        items = list(islice(merged, limit + 1))
        metas = [m for _, m in items[:limit]]
        more = len(items) > limit
        last = items[limit - 1][0] if more else None
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
