"""Files and folders the `turnkeep` command writes: private, never via a link.

A session holds what users and tools said, so every file the command writes
(an `export -o FILE`, a `backup`, the conformance run's generated modules) is
mode 0600 and every folder it creates 0700, set explicitly, whatever the
umask, as the stores do with their own files. Stores (an `import` or
`migrate` target the command creates) are written by their backends, which
set the same modes and refuse links of their own (R12).

A file is written atomically: a private temporary file beside the target,
flushed to disk and renamed over it, so an interrupted write leaves either
the old file or the whole new one, never a torn one.

A path the user names is never written through a symbolic link (R21): the
command may run as root, and a link planted in a shared folder would turn
the export into an overwrite of whatever file the link points at. The last
part of the path must be absent, a regular file (replaced by the rename,
which never follows a link), or a pipe or terminal named directly (written
in place: `/dev/null`, a FIFO). A folder on the way reached through a link
that another user owns, inside a sticky world-writable folder such as
`/tmp`, is refused too: the kernel's `protected_symlinks` rule, applied here
since containers often switch it off. Every refusal is an
`UnsafePathError` naming the path, raised before any byte is written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path
from typing import Final

from turnkeep.errors import UnsafePathError

__all__ = ["DIR_MODE", "FILE_MODE", "private_dir", "safe_folder", "write_private"]

FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700
_MAX_LINKS: Final = 40  # the kernel's own limit before ELOOP


def private_dir(path: Path) -> Path:
    """Create `path` and its missing parents as private folders (0700).

    Folders that already exist are left as they are (they are not ours).

    Raises:
        OSError: a folder cannot be created.
    """
    missing: list[Path] = []
    at = path
    while not at.exists():
        missing.append(at)
        if at.parent == at:
            break
        at = at.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue  # created meanwhile by someone else: not ours to change
        os.chmod(folder, DIR_MODE)  # mkdir's mode went through the umask
    return path


def safe_folder(folder: Path) -> Path:
    """`folder` with its missing parts created (0700), after checking its links.

    Raises:
        UnsafePathError: a part of it is a symbolic link owned by another
            user inside a sticky world-writable folder.
        OSError: a folder cannot be created.
    """
    folder = Path(os.path.abspath(folder))
    _refuse_planted_links(folder)
    return private_dir(folder)


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` as a private file (0600), atomically.

    A regular file already there is replaced (its old mode with it). A pipe
    or terminal named directly (`/dev/null`) is written in place and its
    mode left alone, since it is not a file the command owns.

    Raises:
        UnsafePathError: `path` is a symbolic link or another kind of file
            (a folder, a socket, a block device), or a folder on the way is
            a planted link; nothing was written.
        OSError: the file cannot be written.
    """
    path = Path(os.path.abspath(path))
    folder = safe_folder(path.parent)
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            info = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISREG(info.st_mode):
            _check_in_place(path, info)
            _write_in_place(dir_fd, path, data)
            return
        _replace(dir_fd, path.name, data)
    finally:
        os.close(dir_fd)


def _check_in_place(path: Path, info: os.stat_result) -> None:
    mode = info.st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return
    if stat.S_ISLNK(mode):
        raise UnsafePathError(
            f"{path} is a symbolic link; turnkeep does not write through one "
            "(nothing was written; remove the link or name the file itself)"
        )
    raise UnsafePathError(
        f"{path} is {_kind(mode)}, not a file turnkeep can write; nothing was "
        "written (name a new file, a regular file, or a pipe)"
    )


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "a special file"


def _write_in_place(dir_fd: int, path: Path, data: bytes) -> None:
    # O_NOFOLLOW: a link swapped in since the check is refused by the kernel.
    try:
        fd = os.open(
            path.name,
            os.O_WRONLY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC,
            dir_fd=dir_fd,
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the name became a link meanwhile
            _check_in_place(path, os.stat(path, follow_symlinks=False))
        raise
    try:
        info = os.fstat(fd)
        # A regular file swapped in since the check would be overwritten in
        # place, not replaced: refuse rather than tear it.
        if not (stat.S_ISFIFO(info.st_mode) or stat.S_ISCHR(info.st_mode)):
            raise UnsafePathError(
                f"{path} changed while turnkeep was opening it; nothing was "
                "written (try again)"
            )
        _write_all(fd, data)
    finally:
        os.close(fd)


def _replace(dir_fd: int, name: str, data: bytes) -> None:
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        FILE_MODE,
        dir_fd=dir_fd,
    )
    try:
        try:
            os.fchmod(fd, FILE_MODE)  # explicit, whatever the umask
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        # rename replaces a name, never what a link there points at
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # renamed already
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)  # the rename is durable once the folder's entry is


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _refuse_planted_links(folder: Path) -> None:
    """Resolve `folder` as the kernel would, refusing protected links.

    A link is followed only if its owner is us or the owner of the folder
    holding it, or if that folder is not both sticky and world-writable:
    the rule Linux applies with `fs.protected_symlinks = 1`.
    """
    todo = list(reversed(folder.parts[1:]))
    at = Path(folder.anchor)
    links = 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            at = at.parent
            continue
        step = at / part
        try:
            info = os.lstat(step)
        except FileNotFoundError:
            return  # the rest is created, as private folders, by us
        if not stat.S_ISLNK(info.st_mode):
            at = step
            continue
        holder = os.stat(at)
        shared = holder.st_mode & stat.S_ISVTX and holder.st_mode & stat.S_IWOTH
        if shared and info.st_uid not in (os.geteuid(), holder.st_uid):
            raise UnsafePathError(
                f"{step} is a symbolic link owned by another user (uid "
                f"{info.st_uid}) in the shared folder {at}; turnkeep does not "
                "follow it (nothing was written; name the real folder)"
            )
        links += 1
        if links > _MAX_LINKS:
            raise UnsafePathError(f"{folder}: too many levels of symbolic links")
        target = Path(os.readlink(step))
        if target.is_absolute():
            at = Path(target.anchor)
        todo.extend(
            reversed(target.parts[1:] if target.is_absolute() else target.parts)
        )
