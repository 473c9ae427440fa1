"""What a listing keeps: `ListFilter` (by status and by last update).

A filter is passed to a backend's `list(where=...)` (see [list-filter] in
`turnkeep.persistence`), which applies it where it keeps its index, so a
page holds `limit` matching sessions and costs what an unfiltered page
costs. Statuses are the stored ones there; `turnkeep.listing` maps the
`interrupted` a listing shows (an `active` session no live owner holds) onto
them. Times are epoch milliseconds, like `SessionSummary.updated_at`, and
both bounds are exclusive. `matches` is the reference every backend's answer
is checked against (by the conformance kit) and what a backend without
native filters is served by.

Also the parsing of what people type: `parse_statuses` and `parse_time`
(ISO 8601 or epoch milliseconds), both refusing bad values with
`InvalidListFilterError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Final, cast, get_args

import attrs

from turnkeep.errors import InvalidListFilterError
from turnkeep.meta import SessionMeta, SessionStatus

__all__ = [
    "STATUSES",
    "ListFilter",
    "as_epoch_ms",
    "list_filter",
    "parse_statuses",
    "parse_time",
]

STATUSES: Final[tuple[SessionStatus, ...]] = get_args(SessionStatus)
"""Every status a session can have, in the order listings name them."""

_MAX_MS: Final = 2**63 - 1


def _check_statuses(
    _self: object, _attribute: object, value: frozenset[SessionStatus] | None
) -> None:
    if value is None:
        return
    unknown = sorted(str(s) for s in value if s not in STATUSES)
    if unknown:
        raise InvalidListFilterError(
            f"unknown status {', '.join(map(repr, unknown))}; "
            f"a status is one of {', '.join(STATUSES)}"
        )


def _check_time(_self: object, attribute: attrs.Attribute[int], value: object) -> None:
    if value is None:
        return
    if not _is_ms(value):
        raise InvalidListFilterError(
            f"{attribute.name} must be epoch milliseconds (an int from 0), "
            f"not {value!r}"
        )


def _is_ms(value: object) -> bool:
    return (
        isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_MS
    )


def _statuses(value: Iterable[SessionStatus] | None) -> frozenset[SessionStatus] | None:
    if value is None:
        return None
    if isinstance(value, str):  # one status, not its letters
        return cast("frozenset[SessionStatus]", frozenset((value,)))
    return frozenset(value)


@attrs.frozen(kw_only=True)
class ListFilter:
    """Which sessions a listing keeps (every condition given must hold).

    Attributes:
        statuses: keep sessions whose status is one of these (`None`: any;
            empty: none).
        updated_after: keep sessions with `updated_at` > this (epoch ms).
        updated_before: keep sessions with `updated_at` < this (epoch ms).

    Raises:
        InvalidListFilterError: an unknown status, or a time that is not
            epoch milliseconds.
    """

    statuses: frozenset[SessionStatus] | None = attrs.field(
        default=None, converter=_statuses, validator=_check_statuses
    )
    updated_after: int | None = attrs.field(default=None, validator=_check_time)
    updated_before: int | None = attrs.field(default=None, validator=_check_time)

    @property
    def is_empty(self) -> bool:
        """Whether the filter keeps every session (no condition given)."""
        return (
            self.statuses is None
            and self.updated_after is None
            and self.updated_before is None
        )

    @property
    def lower(self) -> int:
        """The smallest `updated_at` that can match (for range scans)."""
        return -1 if self.updated_after is None else self.updated_after + 1

    @property
    def upper(self) -> int:
        """The largest `updated_at` that can match (for range scans)."""
        return _MAX_MS if self.updated_before is None else self.updated_before - 1

    def matches(self, meta: SessionMeta) -> bool:
        """Whether `meta` passes (the reference every backend must agree with)."""
        summary = meta.summary
        if self.statuses is not None and summary.status not in self.statuses:
            return False
        return self.lower <= summary.updated_at <= self.upper


def list_filter(
    *,
    status: SessionStatus | Iterable[SessionStatus] | None = None,
    updated_after: datetime | int | None = None,
    updated_before: datetime | int | None = None,
) -> ListFilter | None:
    """The `ListFilter` of these conditions (`None` when none is given).

    Times are datetimes (naive ones are local time) or epoch milliseconds.

    Raises:
        InvalidListFilterError: an unknown status or a bad time.
    """
    if status is None and updated_after is None and updated_before is None:
        return None
    return ListFilter(
        statuses=status,  # pyright: ignore[reportArgumentType] - converted
        updated_after=None if updated_after is None else as_epoch_ms(updated_after),
        updated_before=None if updated_before is None else as_epoch_ms(updated_before),
    )


def parse_statuses(text: str) -> frozenset[SessionStatus]:
    """Statuses from a comma-separated list (`"active,interrupted"`).

    Raises:
        InvalidListFilterError: an unknown or empty status.
    """
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise InvalidListFilterError(
            f"empty status in {text!r}; give statuses separated by commas, "
            f"each one of {', '.join(STATUSES)}"
        )
    statuses = ListFilter(statuses=names).statuses  # pyright: ignore[reportArgumentType]
    assert statuses is not None  # noqa: S101 - given a list, never None
    return statuses


def parse_time(text: str) -> int:
    """Epoch milliseconds from ISO 8601 text (or digits: epoch ms already).

    A time without an offset is local time, as `turnkeep ls` prints times.

    Raises:
        InvalidListFilterError: neither ISO 8601 nor epoch milliseconds.
    """
    stripped = text.strip()
    if stripped.isdigit():
        return as_epoch_ms(int(stripped))
    try:
        parsed = datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidListFilterError(
            f"cannot read {text!r} as a time: give ISO 8601 "
            "(2026-12-01, 2026-12-01T18:30, 2026-12-01T18:30:00+00:00) "
            "or epoch milliseconds"
        ) from None
    return as_epoch_ms(parsed)


def as_epoch_ms(value: datetime | int) -> int:
    """`value` as epoch milliseconds (a naive datetime is local time).

    Raises:
        InvalidListFilterError: a negative or out-of-range time, or not a
            time at all.
    """
    if isinstance(value, datetime):
        try:
            ms = int(value.astimezone().timestamp() * 1000)
        except (OverflowError, OSError, ValueError):
            raise InvalidListFilterError(f"time out of range: {value!r}") from None
    else:
        ms = value
    if not _is_ms(ms):
        raise InvalidListFilterError(f"time out of range: {value!r}")
    return ms
