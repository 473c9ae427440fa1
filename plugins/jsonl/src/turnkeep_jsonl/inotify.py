"""Linux inotify through `ctypes`: one instance, its watches and its events.

Owns an inotify descriptor (`inotify_init1` with `IN_NONBLOCK | IN_CLOEXEC`,
from the C library `ctypes` finds), the watches added to it and the decoding
of the events read from it. It blocks on nothing: the descriptor is
non-blocking, and a caller that wants to sleep until an event registers it
with its event loop (`add_reader`). `Inotify.open` raises `OSError` where
inotify is unavailable (another platform, no C library symbol, the per-user
instance limit reached), so a caller can fall back to something else; so does
`watch` (`ENOSPC`: the per-user watch limit reached).

Closing an instance that holds watches waits for the kernel to retire them
(an RCU grace period: usually microseconds, at times tens of milliseconds),
so a caller on an event loop hands it to `close_later`, which closes it on a
thread of its own; `wait_closed` waits until all such closes are done.

Consumed by `turnkeep_jsonl.follow`, which wakes a follower when a session's
log changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import queue
import struct
import sys
import threading
from typing import Final, NamedTuple

__all__ = [
    "IN_ATTRIB",
    "IN_CLOSE_WRITE",
    "IN_CREATE",
    "IN_DELETE",
    "IN_DELETE_SELF",
    "IN_IGNORED",
    "IN_MODIFY",
    "IN_MOVED_FROM",
    "IN_MOVED_TO",
    "IN_MOVE_SELF",
    "IN_Q_OVERFLOW",
    "Event",
    "Inotify",
    "close_later",
    "wait_closed",
]

IN_MODIFY: Final = 0x00000002
IN_ATTRIB: Final = 0x00000004
IN_CLOSE_WRITE: Final = 0x00000008
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_DELETE_SELF: Final = 0x00000400
IN_MOVE_SELF: Final = 0x00000800
IN_Q_OVERFLOW: Final = 0x00004000
IN_IGNORED: Final = 0x00008000
_IN_ONLYDIR: Final = 0x01000000
_IN_DONT_FOLLOW: Final = 0x02000000
_INIT_FLAGS: Final = os.O_NONBLOCK | os.O_CLOEXEC
"""`IN_NONBLOCK | IN_CLOEXEC`: the kernel defines them as these two, whose
values differ between architectures (`os` has this one's)."""

_HEADER: Final = struct.Struct("iIII")  # struct inotify_event without its name
_READ_SIZE: Final = 64 * 1024  # many events; at least one with a 255-byte name


class Event(NamedTuple):
    """One inotify event: the watch it came from, what happened, to which name.

    `name` is empty for an event about the watched file or directory itself
    (and for `IN_Q_OVERFLOW`, whose `wd` is -1).
    """

    wd: int
    mask: int
    name: bytes


class Inotify:
    """An inotify instance; close it (or use it as a context manager)."""

    def __init__(self, fd: int, libc: ctypes.CDLL) -> None:
        """Wrap an open inotify descriptor (use `Inotify.open`)."""
        self.fd = fd
        self._libc = libc

    @classmethod
    def open(cls) -> Inotify:
        """A new non-blocking, close-on-exec inotify instance.

        Raises:
            OSError: inotify is unavailable here (not Linux, no such symbol in
                the C library, `EMFILE`: the per-user instance limit, ...).
        """
        libc = _libc()
        fd = libc.inotify_init1(_INIT_FLAGS)
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), "inotify_init1")
        return cls(fd, libc)

    def watch(self, path: str, mask: int, *, directory: bool = False) -> int:
        """Watch `path` (never through a symbolic link) for `mask`; the watch id.

        Watching an inode already watched here returns its id and replaces
        its mask.

        Raises:
            OSError: `ENOENT` (gone), `ENOSPC` (the per-user watch limit), ...
        """
        flags = mask | _IN_DONT_FOLLOW | (_IN_ONLYDIR if directory else 0)
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), flags)
        if wd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return wd

    def read(self) -> list[Event]:
        """The events queued now, without blocking (`[]` when there are none)."""
        events: list[Event] = []
        while True:
            try:
                data = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                return events
            events.extend(_decode(data))

    def close(self) -> None:
        """Close the descriptor (its watches go with it); idempotent."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> Inotify:
        """Use the instance in a `with` block, which closes it."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the instance."""
        self.close()


def _decode(data: bytes) -> list[Event]:
    events: list[Event] = []
    offset = 0
    while offset + _HEADER.size <= len(data):
        wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        name = data[start : start + length].rstrip(b"\0")
        events.append(Event(wd, mask, name))
        offset = start + length
    return events


@functools.cache
def _libc() -> ctypes.CDLL:
    if not sys.platform.startswith("linux"):
        raise OSError(errno.ENOSYS, f"inotify is Linux-only, not on {sys.platform}")
    try:
        # The interpreter's own symbols include its C library's; naming the
        # library is the fallback (`find_library` may run `ldconfig`).
        libc = ctypes.CDLL(None, use_errno=True)
        if not hasattr(libc, "inotify_init1"):
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        init, add = libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError) as exc:
        raise OSError(errno.ENOSYS, f"no inotify in the C library: {exc}") from exc
    init.argtypes, init.restype = [ctypes.c_int], ctypes.c_int
    add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    add.restype = ctypes.c_int
    return libc


class _Closer:
    """Closes instances on a daemon thread, in the order they were handed over."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Inotify] = queue.SimpleQueue()
        self._mu = threading.Lock()
        self._idle = threading.Condition(self._mu)
        self._pending = 0
        self._pid = -1  # the process whose thread runs (a fork has none)

    def close(self, inotify: Inotify) -> None:
        with self._mu:
            self._pending += 1
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(
                    target=self._run, name="turnkeep-jsonl-inotify-close", daemon=True
                ).start()
        self._queue.put(inotify)

    def _run(self) -> None:
        while True:
            inotify = self._queue.get()
            try:
                inotify.close()
            finally:
                with self._mu:
                    self._pending -= 1
                    if not self._pending:
                        self._idle.notify_all()

    def wait(self, timeout: float) -> bool:
        with self._mu:
            return self._idle.wait_for(lambda: not self._pending, timeout)


_closer: Final = _Closer()


def close_later(inotify: Inotify) -> None:
    """Close `inotify` on the closing thread (never blocks the caller)."""
    _closer.close(inotify)


def wait_closed(timeout: float = 10.0) -> bool:
    """Whether every instance handed to `close_later` was closed in `timeout`."""
    return _closer.wait(timeout)
