"""`FileOps` for fault injection: no fsync, failing calls, short writes.

`NoSyncFileOps` performs every call except fsync (fast runs whose durability
is judged by a model, or setup). `FaultyFileOps` wraps any `FileOps` and
fails the k-th call of a kind with a chosen errno, once (transient) or from
then on (persistent), and can make every `pwrite` write a random prefix of
what it was given, as the kernel may (`docs/reliability.md`, item 13).
"""

from __future__ import annotations

import errno
import os
import random

import attrs

from turnkeep_jsonl import FileOps, OsFileOps

__all__ = ["CountedTokens", "FaultyFileOps", "NoSyncFileOps"]


class NoSyncFileOps(OsFileOps):
    """The real calls, except that fsync does nothing."""

    def fsync(self, fd: int) -> None:
        """Skip it: durability is not what this run is about."""
        del fd

    def fsync_dir(self, fd: int) -> None:
        """Skip it: durability is not what this run is about."""
        del fd


class CountedTokens(NoSyncFileOps):
    """`NoSyncFileOps` whose random name parts are a counter: runs repeat exactly."""

    def __init__(self) -> None:
        self.issued = 0

    def token(self) -> str:
        """The next counter value, as the 16 hex digits a real token has."""
        self.issued += 1
        return f"{self.issued:016x}"


@attrs.define(eq=False)
class FaultyFileOps:
    """Fails the `at`-th call of kind `call` with `code` (once, or `persistent`).

    Every call is counted by kind in `counts` (a fault-free run thus tells
    how many calls of each kind a workload makes).

    Args:
        inner: the operations performed when no fault fires.
        call: `pwrite`, `fsync`, `fsync_dir`, `replace`, `ftruncate`,
            `open` or `pread`; empty for no fault.
        at: which call of that kind fails (1-based).
        code: the errno of the injected `OSError`.
        persistent: every later call of that kind fails too.
        short: if set, each `pwrite` writes a random non-empty prefix.
    """

    inner: FileOps
    call: str = ""
    at: int = 0
    code: int = errno.EIO
    persistent: bool = False
    short: random.Random | None = None
    counts: dict[str, int] = attrs.field(factory=dict[str, int])
    fired: int = 0

    def _maybe_fail(self, kind: str) -> None:
        count = self.counts.get(kind, 0) + 1
        self.counts[kind] = count
        if kind != self.call:
            return
        if count == self.at or (self.persistent and count > self.at):
            self.fired += 1
            raise OSError(
                self.code, f"injected {os.strerror(self.code)} ({kind} #{count})"
            )

    def open(
        self, path: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None
    ) -> int:
        """See `FileOps.open`."""
        self._maybe_fail("open")
        return self.inner.open(path, flags, mode, dir_fd=dir_fd)

    def close(self, fd: int) -> None:
        """See `FileOps.close`."""
        self.inner.close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        """See `FileOps.pread`."""
        self._maybe_fail("pread")
        return self.inner.pread(fd, size, offset)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        """See `FileOps.pwrite`."""
        self._maybe_fail("pwrite")
        if self.short is not None and len(data) > 1:
            data = data[: self.short.randint(1, len(data))]
        return self.inner.pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        """See `FileOps.fsync`."""
        self._maybe_fail("fsync")
        self.inner.fsync(fd)

    def fsync_dir(self, fd: int) -> None:
        """See `FileOps.fsync_dir`."""
        self._maybe_fail("fsync_dir")
        self.inner.fsync_dir(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        """See `FileOps.ftruncate`."""
        self._maybe_fail("ftruncate")
        self.inner.ftruncate(fd, size)

    def replace(self, src: str, dst: str, *, dir_fd: int) -> None:
        """See `FileOps.replace`."""
        self._maybe_fail("replace")
        self.inner.replace(src, dst, dir_fd=dir_fd)

    def unlink(self, name: str, *, dir_fd: int) -> None:
        """See `FileOps.unlink`."""
        self.inner.unlink(name, dir_fd=dir_fd)

    def mkdir(self, name: str, mode: int, *, dir_fd: int | None) -> None:
        """See `FileOps.mkdir`."""
        self.inner.mkdir(name, mode, dir_fd=dir_fd)

    def fchmod(self, fd: int, mode: int) -> None:
        """See `FileOps.fchmod`."""
        self.inner.fchmod(fd, mode)

    def fstat(self, fd: int) -> os.stat_result:
        """See `FileOps.fstat`."""
        return self.inner.fstat(fd)

    def stat(self, name: str, *, dir_fd: int | None) -> os.stat_result:
        """See `FileOps.stat`."""
        return self.inner.stat(name, dir_fd=dir_fd)

    def flock(self, fd: int, operation: int) -> None:
        """See `FileOps.flock`."""
        self.inner.flock(fd, operation)

    def listdir(self, fd: int) -> list[str]:
        """See `FileOps.listdir`."""
        return self.inner.listdir(fd)

    def seek_data(self, fd: int, offset: int) -> int:
        """See `FileOps.seek_data`."""
        return self.inner.seek_data(fd, offset)

    def token(self) -> str:
        """See `FileOps.token`."""
        return self.inner.token()
