"""Every system call of the JSONL backend, behind one small replaceable object.

Owns `FileOps`, the protocol each file-system call of the backend goes
through, and `OsFileOps`, its implementation over `os`. Tests substitute
implementations that record a trace (to materialise power-loss states), inject
faults and short writes, or pause at a given call; nothing in the backend
calls `os` for file I/O directly.

Every path handed to these methods is a single name relative to a directory
descriptor, except the store directory itself; `stat` never follows a
symbolic link. Callers add `O_NOFOLLOW`.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
from typing import Protocol

__all__ = ["FileOps", "OsFileOps", "write_all"]


class FileOps(Protocol):
    """The file-system calls the backend makes (all may raise `OSError`)."""

    def open(
        self, path: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None
    ) -> int:
        """`os.open`: a file descriptor for `path` (relative to `dir_fd`)."""
        ...

    def close(self, fd: int) -> None:
        """`os.close`."""
        ...

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        """`os.pread`: up to `size` bytes at `offset` (fewer at end of file)."""
        ...

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        """`os.pwrite`: how many bytes were written (may be fewer than given)."""
        ...

    def fsync(self, fd: int) -> None:
        """`os.fsync` of a regular file."""
        ...

    def fsync_dir(self, fd: int) -> None:
        """`os.fsync` of a directory (makes its entries durable)."""
        ...

    def ftruncate(self, fd: int, size: int) -> None:
        """`os.ftruncate`."""
        ...

    def replace(self, src: str, dst: str, *, dir_fd: int) -> None:
        """`os.replace`: atomically rename `src` onto `dst`, both in `dir_fd`."""
        ...

    def unlink(self, name: str, *, dir_fd: int) -> None:
        """`os.unlink` of `name` in `dir_fd` (a symlink itself, never its target)."""
        ...

    def mkdir(self, name: str, mode: int, *, dir_fd: int | None) -> None:
        """`os.mkdir`."""
        ...

    def fchmod(self, fd: int, mode: int) -> None:
        """`os.fchmod`."""
        ...

    def fstat(self, fd: int) -> os.stat_result:
        """`os.fstat`."""
        ...

    def stat(self, name: str, *, dir_fd: int | None) -> os.stat_result:
        """`os.stat` without following a final symbolic link."""
        ...

    def flock(self, fd: int, operation: int) -> None:
        """`fcntl.flock` (whole-file lock owned by the open file description)."""
        ...

    def listdir(self, fd: int) -> list[str]:
        """The names in the directory open as `fd`."""
        ...

    def seek_data(self, fd: int, offset: int) -> int:
        """The first offset at or after `offset` holding data (`SEEK_DATA`).

        The file's size when only a hole follows; `offset` itself where the
        file system cannot tell. Lets a reader skip the holes of a sparse
        file instead of reading gigabytes of zeros.
        """
        ...

    def token(self) -> str:
        """A fresh random name component (for temporary and quarantine files)."""
        ...


class OsFileOps:
    """`FileOps` over the real operating system."""

    def open(
        self, path: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None
    ) -> int:
        """See `FileOps.open`."""
        return os.open(path, flags, mode, dir_fd=dir_fd)

    def close(self, fd: int) -> None:
        """See `FileOps.close`."""
        os.close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        """See `FileOps.pread`."""
        return os.pread(fd, size, offset)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        """See `FileOps.pwrite`."""
        return os.pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        """See `FileOps.fsync`."""
        os.fsync(fd)

    def fsync_dir(self, fd: int) -> None:
        """See `FileOps.fsync_dir`."""
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        """See `FileOps.ftruncate`."""
        os.ftruncate(fd, size)

    def replace(self, src: str, dst: str, *, dir_fd: int) -> None:
        """See `FileOps.replace`."""
        os.replace(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    def unlink(self, name: str, *, dir_fd: int) -> None:
        """See `FileOps.unlink`."""
        os.unlink(name, dir_fd=dir_fd)

    def mkdir(self, name: str, mode: int, *, dir_fd: int | None) -> None:
        """See `FileOps.mkdir`."""
        os.mkdir(name, mode, dir_fd=dir_fd)

    def fchmod(self, fd: int, mode: int) -> None:
        """See `FileOps.fchmod`."""
        os.fchmod(fd, mode)

    def fstat(self, fd: int) -> os.stat_result:
        """See `FileOps.fstat`."""
        return os.fstat(fd)

    def stat(self, name: str, *, dir_fd: int | None) -> os.stat_result:
        """See `FileOps.stat`."""
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)

    def flock(self, fd: int, operation: int) -> None:
        """See `FileOps.flock`."""
        fcntl.flock(fd, operation)

    def listdir(self, fd: int) -> list[str]:
        """See `FileOps.listdir`."""
        return os.listdir(fd)

    def seek_data(self, fd: int, offset: int) -> int:
        """See `FileOps.seek_data`."""
        try:
            return os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing but a hole up to the end
                return os.fstat(fd).st_size
            if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                return offset  # no hole information here: read on
            raise

    def token(self) -> str:
        """See `FileOps.token`."""
        return secrets.token_hex(8)


def write_all(ops: FileOps, fd: int, data: bytes, offset: int) -> None:
    """Write every byte of `data` at `offset`, looping over short writes.

    Raises:
        OSError: the write failed, or wrote nothing at all (which would
            otherwise loop forever).
    """
    view = memoryview(data)
    done = 0
    total = len(data)
    while done < total:
        n = ops.pwrite(fd, view[done:], offset + done)
        if n <= 0:
            raise OSError(errno.EIO, "write returned no progress")
        done += n
