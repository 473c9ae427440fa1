"""`wait_for_commit` for JSONL: woken by inotify, or the log's `stat` polled.

A commit appends to the session's log (its records, then the commit line)
and syncs it, so a commit changes the log's size; a repair or a takeover
that rewrites the log replaces the file (another inode, renamed over the
old name). A follower sleeps until something may have changed and only
then reads the log's last control line (`last_seq`, a read at the end of
the file), so waiting costs the same whatever the log's size. What wakes
it:

- On Linux, inotify (`turnkeep_jsonl.inotify`): a watch on the log (its
  writes; its unlinking, renaming, replacement) and one on its directory
  (a file created, renamed or deleted under the log's name, after which
  the log's watch is re-armed on whatever file now holds the name). A
  wake is only a hint: the follower then reads `last_seq` as a poll would.
  A safety net stats the log every `SAFETY_SECONDS` all the same, for
  what inotify does not report (a network file system written by another
  machine).
- Elsewhere, and wherever inotify cannot be had (the per-user instance or
  watch limit reached), or when the backend is configured with
  `follow = "poll"`: the log is stat'ed every `POLL_SECONDS` (one system
  call, no read, no lock: the writer never notices), and its last control
  line is read when the answer changed.

Like `load` and `load_after`, it reports only what is durable: inotify
wakes a follower as soon as a flush is written, often before the writer's
sync returns, and `last_seq` syncs the log itself before reading it (see
`turnkeep_jsonl.unheld`), so a seq it returns is never one a power cut can
take back and a later writer reuse. Each wait's inotify instance is closed
off the event loop (`close_later`).
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final, TypeAlias

from .inotify import (
    IN_ATTRIB,
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    Event,
    Inotify,
    close_later,
)

__all__ = ["FOLLOW_MODES", "POLL_SECONDS", "SAFETY_SECONDS", "wait_for_commit"]

POLL_SECONDS: Final = 0.005
"""How often a follower without inotify stats the log it waits on."""
SAFETY_SECONDS: Final = 1.0
"""How often a follower woken by inotify stats the log all the same."""
FOLLOW_MODES: Final = ("notify", "poll")
"""`notify`: inotify where available, else polling; `poll`: polling only."""

_FILE_MASK: Final = (
    IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF
)
_DIR_MASK: Final = (
    IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
)
_REPLACED: Final = IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED
"""Events after which the log's name may hold another file (or none)."""

_Signature: TypeAlias = tuple[int, int, int, int] | None


async def wait_for_commit(
    last_seq: Callable[[], Awaitable[int]],
    locate: Callable[[], Awaitable[Path]],
    after_seq: int,
    within: float,
    *,
    notify: bool = True,
) -> int:
    """The last durable seq once past `after_seq`, or after `within` seconds.

    `last_seq` reads the log's last control line and `locate` finds the
    log's path; both raise `SessionNotFoundError` once the session is gone.
    With `notify`, inotify wakes the follower where it can; else it polls.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    last = await last_seq()
    if last > after_seq or within <= 0:
        return last
    path = await locate()
    wake = _Notify.start(loop, path) if notify else None
    wake = wake if wake is not None else _Poll()
    try:
        # Watched first, then the file's state, then the last seq: a
        # commit between any two is seen by one or the other.
        seen = _signature(path)
        while True:
            last = await last_seq()
            if last > after_seq:
                return last
            if seen is None:  # gone or moved, yet `last_seq` found it: follow it
                path = await locate()
                wake.arm(path)
                seen = _signature(path)
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return await last_seq()
                hinted = await wake.wait(min(wake.interval, remaining))
                now = _signature(path)
                if hinted or now != seen:
                    seen = now
                    break
    finally:
        wake.close()


def _signature(path: Path) -> _Signature:
    try:
        st = os.stat(path)
    except OSError:  # gone (deleted, or renamed over): `last_seq` says which
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class _Poll:
    """Wakes every `POLL_SECONDS`; nothing to arm or close."""

    def __init__(self) -> None:
        self.interval: float = POLL_SECONDS

    def arm(self, path: Path) -> None:
        del path  # the loop stats whatever path it is given

    async def wait(self, seconds: float) -> bool:
        await asyncio.sleep(seconds)
        return False

    def close(self) -> None:
        """Nothing held."""


class _Notify:
    """Wakes when inotify reports a change to the log or to its name.

    Owns one inotify instance for the duration of one wait; `close` removes
    it from the loop and closes it. Where a watch cannot be added (`ENOSPC`,
    ...), it falls back to polling at `POLL_SECONDS` for the rest of the wait.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, inotify: Inotify, path: Path
    ) -> None:
        self.interval: float = SAFETY_SECONDS
        self.degraded = False
        """A watch could not be added: polling at `POLL_SECONDS` instead."""
        self.reading = False
        """Registered with the loop (`add_reader`)."""
        self._loop = loop
        self._inotify = inotify
        self._hint = asyncio.Event()
        self._path = path
        self._dir_wd = -1
        self._file_wd = -1
        self._rearm = False

    @classmethod
    def start(cls, loop: asyncio.AbstractEventLoop, path: Path) -> _Notify | None:
        """Watch `path`, or `None` where inotify cannot (the caller polls)."""
        try:
            inotify = Inotify.open()
        except OSError:
            return None
        notify = cls(loop, inotify, path)
        notify.arm(path)
        if notify.degraded:  # a watch is missing: plain polling, no instance
            close_later(inotify)
            return None
        try:
            loop.add_reader(inotify.fd, notify._readable)
        except NotImplementedError:  # a loop that cannot watch descriptors
            close_later(inotify)
            return None
        notify.reading = True
        return notify

    def arm(self, path: Path) -> None:
        """Watch `path` and its directory (re-armed where either moved)."""
        self._path = path
        try:
            self._dir_wd = self._inotify.watch(
                str(path.parent), _DIR_MASK, directory=True
            )
        except OSError:
            self._degrade()
        self._watch_file()

    def _watch_file(self) -> None:
        try:
            self._file_wd = self._inotify.watch(str(self._path), _FILE_MASK)
        except OSError as exc:
            if exc.errno != errno.ENOENT:  # gone: `last_seq` will say so
                self._degrade()

    def _degrade(self) -> None:
        # Unwatched (`ENOSPC`: the watch limit, ...): poll for the rest.
        self.degraded = True
        self.interval = POLL_SECONDS

    async def wait(self, seconds: float) -> bool:
        """Whether an event woke it (else `seconds` passed)."""
        if not self._hint.is_set():
            try:
                async with asyncio.timeout(seconds):
                    await self._hint.wait()
            except TimeoutError:
                pass  # the safety net's turn: the caller stats the log
        hinted = self._hint.is_set()
        self._hint.clear()
        if self._rearm:
            # Before the caller's `last_seq`: whatever the new file gets
            # after this is reported, and what it got before is read.
            self._rearm = False
            self._watch_file()
        return hinted

    def _readable(self) -> None:
        try:
            events = self._inotify.read()
        except OSError:
            # Cannot happen to a live instance; if it does, stop listening
            # (a readable fd never drained would spin the loop) and poll.
            self._loop.remove_reader(self._inotify.fd)
            self.reading = False
            self._degrade()
            self._hint.set()
            return
        for event in events:
            if self._relevant(event):
                self._hint.set()

    def _relevant(self, event: Event) -> bool:
        if event.mask & IN_Q_OVERFLOW:  # events were lost: assume the worst
            self._rearm = True
            return True
        if event.wd == self._dir_wd:
            if event.name:
                if event.name != os.fsencode(self._path.name):
                    return False  # another file of the directory
                self._rearm = True
            return True  # the log's name, or the directory itself
        if event.wd == self._file_wd and event.mask & _REPLACED:
            self._rearm = True
        return True  # the log, an earlier log's watch, or a queue overflow

    def close(self) -> None:
        """Stop listening and close the instance (idempotent)."""
        if self.reading:
            self._loop.remove_reader(self._inotify.fd)
            self.reading = False
        # Off the loop: closing waits for the kernel to retire the watches.
        close_later(self._inotify)
