"""Recording a backend's file-system calls: `RecordingFileOps`, `Trace`, `Op`.

Wrap a backend's `FileOps` in `RecordingFileOps`: every call is performed and
the ones that change durable state are recorded, in order, together with the
`mark`s a test adds (for example one after each acknowledged flush). Paths
are tracked from the descriptors they were opened through, relative to a
base directory. `crashstates` turns a trace into power-loss states.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Final, TypeAlias

import attrs

from turnkeep_jsonl import FileOps

__all__ = ["DirPath", "Op", "RecordingFileOps", "Trace"]

DirPath: TypeAlias = tuple[str, ...]
"""A directory, as path components below the recorder's base directory."""


@attrs.frozen
class Op:
    """One recorded operation.

    `kind` is one of `create`, `mkdir`, `write`, `truncate`, `fsync`,
    `fsync_dir`, `rename`, `unlink`, `fsync_failed`, `mark`.
    """

    kind: str
    dir: DirPath = ()
    name: str = ""
    dst: str = ""
    inode: int = -1
    fd: int = -1
    offset: int = 0
    data: bytes = b""
    label: str = ""


@attrs.define
class Trace:
    """The operations recorded so far."""

    ops: list[Op] = attrs.field(factory=list[Op])

    def mark(self, label: str) -> None:
        """Record a point the test cares about (e.g. `"ack"`)."""
        self.ops.append(Op("mark", label=label))

    def points(self) -> range:
        """Crash points: before each operation, and after the last one."""
        return range(len(self.ops) + 1)

    def marks_before(self, point: int, label: str) -> int:
        """How many marks `label` lie before crash point `point`."""
        return sum(
            1 for op in self.ops[:point] if op.kind == "mark" and op.label == label
        )


_DIR: Final = -1


@attrs.define(eq=False)
class RecordingFileOps:
    """`FileOps` that performs every call on `inner` and records a trace.

    Args:
        inner: the operations actually performed (pass `NoSyncFileOps` to
            make traced runs fast: the model, not the disk, decides what is
            durable).
        base: the directory the trace's paths are relative to; record from
            a base that holds nothing the test's store will use yet.
    """

    inner: FileOps
    base: Path
    trace: Trace = attrs.field(factory=Trace)
    _dirs: dict[int, DirPath] = attrs.field(init=False, factory=dict[int, DirPath])
    _files: dict[int, int] = attrs.field(init=False, factory=dict[int, int])
    _names: dict[tuple[DirPath, str], int] = attrs.field(
        init=False, factory=dict[tuple[DirPath, str], int]
    )
    _next_inode: int = attrs.field(init=False, default=0)
    _mu: threading.RLock = attrs.field(init=False, factory=threading.RLock)

    def _resolve(self, path: str, dir_fd: int | None) -> tuple[DirPath, str] | None:
        if dir_fd is None:
            try:
                parts = Path(path).relative_to(self.base).parts
            except ValueError:
                return None
            if not parts:
                return None
            return tuple(parts[:-1]), parts[-1]
        parent = self._dirs.get(dir_fd)
        return None if parent is None else (parent, path)

    def open(
        self, path: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None
    ) -> int:
        """See `FileOps.open`."""
        with self._mu:
            where = self._resolve(path, dir_fd)
            fd = self.inner.open(path, flags, mode, dir_fd=dir_fd)
            if where is None:
                if dir_fd is None and Path(path) == self.base:
                    self._dirs[fd] = ()
                return fd
            if flags & os.O_DIRECTORY:
                self._dirs[fd] = (*where[0], where[1])
                return fd
            inode = self._names.get(where)
            if inode is None:
                inode = self._next_inode
                self._next_inode += 1
                self._names[where] = inode
                self.trace.ops.append(
                    Op("create", dir=where[0], name=where[1], inode=inode)
                )
            self._files[fd] = inode
            return fd

    def close(self, fd: int) -> None:
        """See `FileOps.close`."""
        with self._mu:
            self._dirs.pop(fd, None)
            self._files.pop(fd, None)
        self.inner.close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        """See `FileOps.pread`."""
        return self.inner.pread(fd, size, offset)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        """See `FileOps.pwrite`."""
        with self._mu:
            n = self.inner.pwrite(fd, data, offset)
            inode = self._files.get(fd)
            if inode is not None and n > 0:
                self.trace.ops.append(
                    Op("write", inode=inode, fd=fd, offset=offset, data=bytes(data[:n]))
                )
            return n

    def fsync(self, fd: int) -> None:
        """See `FileOps.fsync`."""
        with self._mu:
            inode = self._files.get(fd, -1)
            try:
                self.inner.fsync(fd)
            except OSError:
                self.trace.ops.append(Op("fsync_failed", inode=inode, fd=fd))
                raise
            self.trace.ops.append(Op("fsync", inode=inode, fd=fd))

    def fsync_dir(self, fd: int) -> None:
        """See `FileOps.fsync_dir`."""
        with self._mu:
            try:
                self.inner.fsync_dir(fd)
            except OSError:
                self.trace.ops.append(Op("fsync_failed", fd=fd))
                raise
            where = self._dirs.get(fd)
            if where is not None:
                self.trace.ops.append(Op("fsync_dir", dir=where, fd=fd))

    def ftruncate(self, fd: int, size: int) -> None:
        """See `FileOps.ftruncate`."""
        with self._mu:
            self.inner.ftruncate(fd, size)
            inode = self._files.get(fd)
            if inode is not None:
                self.trace.ops.append(Op("truncate", inode=inode, fd=fd, offset=size))

    def replace(self, src: str, dst: str, *, dir_fd: int) -> None:
        """See `FileOps.replace`."""
        with self._mu:
            self.inner.replace(src, dst, dir_fd=dir_fd)
            parent = self._dirs.get(dir_fd)
            inode = self._names.pop((parent, src), -1) if parent is not None else -1
            if parent is not None and inode >= 0:
                self._names[(parent, dst)] = inode
                self.trace.ops.append(
                    Op("rename", dir=parent, name=src, dst=dst, inode=inode)
                )

    def unlink(self, name: str, *, dir_fd: int) -> None:
        """See `FileOps.unlink`."""
        with self._mu:
            self.inner.unlink(name, dir_fd=dir_fd)
            parent = self._dirs.get(dir_fd)
            if parent is not None:
                self._names.pop((parent, name), None)
                self.trace.ops.append(Op("unlink", dir=parent, name=name))

    def mkdir(self, name: str, mode: int, *, dir_fd: int | None) -> None:
        """See `FileOps.mkdir`."""
        with self._mu:
            self.inner.mkdir(name, mode, dir_fd=dir_fd)
            where = self._resolve(name, dir_fd)
            if where is not None:
                self._names[where] = _DIR
                self.trace.ops.append(Op("mkdir", dir=where[0], name=where[1]))

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
