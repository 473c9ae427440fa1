"""The database's place on disk: private modes, no symlinks, local file systems.

SQLite opens files by path, so this module checks and prepares that path
before SQLite sees it (R12): the directory is created 0700 (or, when it
exists, must belong to this user and not be group/world-writable), the
database file is created 0600 with `O_NOFOLLOW`, its `-wal`/`-shm` siblings
are forced to 0600 once SQLite made them, and a symlink at any of these
names is refused. Network file systems are refused unless configured
otherwise, because SQLite's locks and WAL index do not work reliably there.
It also reads the schema version straight from the file header, so a newer
database can be refused without opening it for writing.

One trap shapes this module: POSIX record locks, which SQLite uses, belong to
the process and are all dropped when the process closes *any* descriptor of
the file (SQLite's `howtocorrupt.html`, section 2.2). So the files SQLite may
have open are only ever inspected through `O_PATH` descriptors, whose close
drops no lock, and read with a plain descriptor only while no connection of
this process uses the file (`in_use`, under `registry_lock`).
"""

from __future__ import annotations

import collections
import errno
import os
import stat
import threading
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import attrs

from turnkeep.errors import ConfigurationError, StorageError

__all__ = [
    "NETWORK_FILESYSTEMS",
    "SIDECAR_SUFFIXES",
    "FileIdentity",
    "HeaderFields",
    "check_identity",
    "filesystem_type",
    "in_use",
    "inspect_database_file",
    "prepare_database_file",
    "read_header",
    "registry_lock",
    "tighten_sidecars",
    "track",
    "untrack",
]

SIDECAR_SUFFIXES: Final = ("-wal", "-shm", "-journal")
"""Files SQLite keeps next to the database (WAL, WAL index, rollback journal)."""

NETWORK_FILESYSTEMS: Final = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "9p",
        "afs",
        "ceph",
        "glusterfs",
        "lustre",
        "gpfs",
        "fuse.sshfs",
        "fuse.s3fs",
        "fuse.glusterfs",
        "fuse.cephfs",
    }
)

_MOUNTINFO: Final = Path("/proc/self/mountinfo")
_DIR_MODE: Final = 0o700
_FILE_MODE: Final = 0o600
_HEADER_MAGIC: Final = b"SQLite format 3\x00"


@attrs.frozen
class FileIdentity:
    """Which file a path named when the database was opened."""

    device: int
    inode: int


registry_lock: Final = threading.RLock()
"""Held while opening a database, so no connection appears mid-check."""

_users: collections.Counter[FileIdentity] = collections.Counter()


def track(identity: FileIdentity) -> None:
    """Count one more open connection of this process on the file."""
    with registry_lock:
        _users[identity] += 1


def untrack(identity: FileIdentity) -> None:
    """Count one connection of this process on the file as closed."""
    with registry_lock:
        _users[identity] -= 1
        if _users[identity] <= 0:
            del _users[identity]


def in_use(identity: FileIdentity) -> bool:
    """Whether a connection of this process has the file open (hold the lock)."""
    with registry_lock:
        return _users[identity] > 0


@attrs.frozen
class HeaderFields:
    """The fields of the SQLite file header this backend cares about.

    Attributes:
        user_version: `PRAGMA user_version` (the schema version).
        application_id: `PRAGMA application_id`.
        has_tables: whether the schema table on page 1 lists anything.
    """

    user_version: int
    application_id: int
    has_tables: bool


def prepare_database_file(
    path: Path, *, allow_network: bool, mountinfo: Path = _MOUNTINFO
) -> FileIdentity:
    """Make `path` safe to hand to SQLite and return the file's identity.

    Creates missing directories 0700 and a missing database file 0600.
    `mountinfo` is the mount table consulted for the file system type.

    Raises:
        StorageError: a symlink or non-regular file sits at a name SQLite
            will open, the directory is not private to this user, or the
            file system refused.
        ConfigurationError: the directory is on a network file system and
            `allow_network` is false.
    """
    directory = path.parent
    _ensure_private_dir(directory)
    _refuse_network(path, allow_network, mountinfo)
    with _open_dir(directory) as dir_fd:
        for suffix in SIDECAR_SUFFIXES:
            _refuse_odd_file(dir_fd, path.name + suffix, path)
        try:
            # A new file: no connection can hold a lock on it yet.
            fd = os.open(
                path.name,
                os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                _FILE_MODE,
                dir_fd=dir_fd,
            )
        except FileExistsError:
            pass
        except OSError as exc:
            raise _refusal(exc, path) from exc
        else:
            try:
                os.fchmod(fd, _FILE_MODE)  # set explicitly, whatever the umask was
            finally:
                os.close(fd)
        info = _make_private(dir_fd, path.name, path)
        assert info is not None  # noqa: S101 - it was just created or found
    return FileIdentity(info.st_dev, info.st_ino)


def inspect_database_file(
    path: Path, *, allow_network: bool, mountinfo: Path = _MOUNTINFO
) -> FileIdentity | None:
    """The read path's `prepare_database_file`: the same refusals, no changes.

    Creates nothing and changes no mode, so it works on a store the user
    cannot write. Returns `None` when the directory or the file does not
    exist (an empty store: a read has nothing to find).

    Raises:
        StorageError: as `prepare_database_file`.
        ConfigurationError: as `prepare_database_file`.
    """
    directory = path.parent
    if not os.path.lexists(directory):
        return None
    _check_private_dir(directory)
    _refuse_network(path, allow_network, mountinfo)
    with _open_dir(directory) as dir_fd:
        for suffix in SIDECAR_SUFFIXES:
            _refuse_odd_file(dir_fd, path.name + suffix, path)
        info = _make_private(dir_fd, path.name, path, tighten=False)
    return None if info is None else FileIdentity(info.st_dev, info.st_ino)


def tighten_sidecars(path: Path) -> None:
    """Force the `-wal`/`-shm` files SQLite created to 0600 (never following links).

    Raises:
        StorageError: one of them is a symlink or not a regular file.
    """
    with _open_dir(path.parent) as dir_fd:
        for suffix in SIDECAR_SUFFIXES:
            _make_private(
                dir_fd, path.name + suffix, path.with_name(path.name + suffix)
            )


def _refuse_network(path: Path, allow_network: bool, mountinfo: Path) -> None:
    fstype = filesystem_type(path.parent, mountinfo)
    if fstype in NETWORK_FILESYSTEMS and not allow_network:
        raise ConfigurationError(
            f"the SQLite database {path} is on a {fstype} file system, where "
            "SQLite's locking and WAL are unreliable; use a local disk (or the "
            "PostgreSQL backend to share sessions between machines), or set "
            "allow_network_filesystem = true at your own risk"
        )


def _private(info: os.stat_result) -> int:
    # Take group and other bits away; never grant the owner more than it had
    # (a file made read-only on purpose stays read-only, and fails to open).
    return stat.S_IMODE(info.st_mode) & _FILE_MODE


def _make_private(
    dir_fd: int, name: str, path: Path, *, tighten: bool = True
) -> os.stat_result | None:
    """Check `name` is a regular file of ours, at most 0600; `None` if absent.

    Without `tighten`, only checks (the mode is left as it is).

    Uses an `O_PATH` descriptor where there is one: closing it drops no POSIX
    lock this process's SQLite connections hold on the file.
    """
    o_path: int | None = getattr(os, "O_PATH", None)
    try:
        if o_path is None:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            _check_regular(info, path)
            if tighten and stat.S_IMODE(info.st_mode) != _private(info):
                os.chmod(name, _private(info), dir_fd=dir_fd)
            return info
        fd = os.open(name, o_path | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            info = os.fstat(fd)  # a symlink shows as one: O_NOFOLLOW with O_PATH
            _check_regular(info, path)
            if tighten and stat.S_IMODE(info.st_mode) != _private(info):
                # Through the descriptor: the file itself, never a link.
                os.chmod(f"/proc/self/fd/{fd}", _private(info))
        finally:
            os.close(fd)
    except FileNotFoundError:
        return None
    except StorageError:
        raise  # already says what is wrong (StorageError is an OSError)
    except OSError as exc:
        raise _refusal(exc, path) from exc
    return info


def check_identity(path: Path, identity: FileIdentity) -> None:
    """Check `path` still names the file that was opened.

    A database whose file was removed or replaced keeps accepting writes into
    the orphaned inode; those writes would be lost, so they must not be
    acknowledged.

    Raises:
        StorageError: the file is gone or was replaced.
    """
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError as exc:
        raise StorageError(
            f"the SQLite database {path} disappeared while open ({exc.strerror}); "
            "the last flush was not acknowledged. Restore the file or reopen."
        ) from exc
    if (info.st_dev, info.st_ino) != (identity.device, identity.inode):
        raise StorageError(
            f"the SQLite database {path} was replaced by another file while open; "
            "the last flush was not acknowledged. Reopen the backend."
        )


def read_header(path: Path) -> HeaderFields | None:
    """Read the schema version and application id from the file header.

    Returns `None` for an empty (new) file. Opens and closes the file: call
    it only while no connection of this process uses it (see `in_use`).

    Raises:
        StorageError: the file is not an SQLite database, or cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise _refusal(exc, path) from exc
    try:
        header = os.pread(fd, 108, 0)
    except OSError as exc:
        raise StorageError(f"cannot read the SQLite database {path}: {exc}") from exc
    finally:
        os.close(fd)
    if not header:
        return None
    if len(header) < 108 or not header.startswith(_HEADER_MAGIC):
        raise StorageError(
            f"{path} is not an SQLite database; point the sqlite backend's "
            "`path` at a new file or at a turnkeep database"
        )
    # Page 1 holds the schema table's root: a leaf page (type 13) with no
    # cells means no table, index or view exists.
    page_type, cells = header[100], int.from_bytes(header[103:105], "big")
    return HeaderFields(
        user_version=int.from_bytes(header[60:64], "big"),
        application_id=int.from_bytes(header[68:72], "big", signed=True),
        has_tables=page_type != 13 or cells > 0,
    )


def filesystem_type(directory: Path, mountinfo: Path = _MOUNTINFO) -> str | None:
    """Return the type of the file system holding `directory` (Linux), or `None`."""
    try:
        text = mountinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None  # not Linux, or /proc is not mounted: cannot tell
    target = os.path.realpath(directory)
    best, best_type = "", None
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right:
            continue
        mount_point = _unescape(fields[4])
        inside = target == mount_point or target.startswith(
            mount_point.rstrip("/") + "/"
        )
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, right.split()[0]
    return best_type


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    out: list[str] = []
    i = 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _ensure_private_dir(directory: Path) -> None:
    missing: list[Path] = []
    probe = directory
    while not os.path.lexists(probe):
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for created in reversed(missing):
        try:
            os.mkdir(created, _DIR_MODE)
            os.chmod(created, _DIR_MODE)  # mkdir's mode is filtered by the umask
        except FileExistsError:
            pass  # another process made it meanwhile; checked below
        except OSError as exc:
            raise _refusal(exc, created) from exc
    _check_private_dir(directory)


def _check_private_dir(directory: Path) -> None:
    try:
        info = os.lstat(directory)
    except OSError as exc:
        raise _refusal(exc, directory) from exc
    if stat.S_ISLNK(info.st_mode):
        raise StorageError(
            f"the directory of the SQLite database, {directory}, is a symlink; "
            "refusing it (point `path` at the real directory)"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise StorageError(f"{directory} is not a directory")
    if info.st_uid != os.geteuid():
        raise StorageError(
            f"the directory {directory} belongs to uid {info.st_uid}, not to this "
            f"user ({os.geteuid()}); refusing to keep sessions there"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StorageError(
            f"the directory {directory} is writable by other users (mode "
            f"{stat.S_IMODE(info.st_mode):04o}); use a private directory (0700)"
        )


@contextmanager
def _open_dir(directory: Path) -> Generator[int]:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise _refusal(exc, directory) from exc
    try:
        yield fd
    finally:
        os.close(fd)


def _refuse_odd_file(dir_fd: int, name: str, path: Path) -> None:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _refusal(exc, path.with_name(name)) from exc
    _check_regular(info, path.with_name(name))


def _check_regular(info: os.stat_result, path: Path) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise StorageError(f"{path} is a symlink; refusing to follow it")
    if stat.S_ISDIR(info.st_mode):
        raise StorageError(
            f"{path} is a directory; the SQLite store is a database file "
            f"(e.g. {path / 'sessions.sqlite3'})"
        )
    if not stat.S_ISREG(info.st_mode):
        raise StorageError(f"{path} is not a regular file")
    if info.st_uid != os.geteuid():
        raise StorageError(
            f"{path} belongs to uid {info.st_uid}, not to this user ({os.geteuid()})"
        )


def _refusal(exc: OSError, path: Path) -> StorageError:
    if exc.errno == errno.ELOOP:
        return StorageError(f"{path} is a symlink; refusing to follow it")
    return StorageError(f"cannot use {path} for the SQLite database: {exc.strerror}")
