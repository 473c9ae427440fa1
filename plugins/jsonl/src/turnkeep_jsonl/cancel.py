"""Cancel requests for JSONL: a small side file next to the session's log.

A request from another process (`turnkeep cancel`, `turnkeep serve`) is
the session's latest `CancelRequest` as JSON in `<stem>.cancel`, replaced
atomically (temp file, fsync, rename) in the log's directory. It never
touches the log and takes no lock, so it is recorded while another
process holds the session; two requesters racing may both write the same
number, which still reaches the owner. The owner's probe is one small
read of that file, never of the log. `delete` removes the file with the
session's other files.
"""

from __future__ import annotations

import os
from typing import Final

import msgspec

from turnkeep.cancelrequest import (
    CancelRequest,
    check_reason,
    decode_request,
    encode_request,
    next_request,
)
from turnkeep.errors import StorageError

from .names import CANCEL_SUFFIX
from .store import READ_FLAGS, Store

__all__ = ["cancel_requested", "request_cancel"]

_LIMIT: Final = 4096
"""More than any request takes (its reason is at most 500 characters)."""


def request_cancel(store: Store, gfd: int, stem: str, reason: str) -> CancelRequest:
    """Record the request after the latest in the log's directory `gfd`.

    Raises:
        OSError: the file could not be read or written.
        StorageError: the file holds something else.
    """
    check_reason(reason)
    request = next_request(latest(store, gfd, stem), reason)
    store.write_atomic(gfd, stem + CANCEL_SUFFIX, encode_request(request))
    return request


def cancel_requested(
    store: Store, gfd: int, stem: str, after: int
) -> CancelRequest | None:
    """The latest request if numbered above `after`.

    Raises:
        OSError: the file could not be read.
        StorageError: the file holds something else.
    """
    request = latest(store, gfd, stem)
    return request if request is not None and request.number > after else None


def latest(store: Store, gfd: int, stem: str) -> CancelRequest | None:
    """The session's latest request, `None` when it has none."""
    ops = store.ops
    try:
        fd = ops.open(stem + CANCEL_SUFFIX, READ_FLAGS, dir_fd=gfd)
    except FileNotFoundError:
        return None
    try:
        data = ops.pread(fd, _LIMIT + 1, 0)
    finally:
        ops.close(fd)
    try:
        if len(data) > _LIMIT:
            raise msgspec.DecodeError("too long")
        return decode_request(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        where = os.fspath(store.path)
        raise StorageError(
            f"the cancel request file {stem + CANCEL_SUFFIX} in {where} is not "
            f"one ({exc}); remove it to clear the request"
        ) from exc
