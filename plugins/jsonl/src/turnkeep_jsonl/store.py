"""The store directory: opened safely, its subdirectories, atomic file writes.

Owns every directory descriptor of one store and the rules of R12: the store
directory is opened once with `O_NOFOLLOW` and everything else is reached
from it by single-component names; directories are created 0700 and files
0600 with the mode set explicitly (never left to the umask); a store or
subdirectory that another user owns or that others may write is refused.
Also owns the temp-file, fsync, rename, directory-fsync sequence (R3) that
every whole-file write of the backend uses.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from pathlib import Path
from typing import Final

import attrs

from turnkeep.errors import StorageError

from .fileops import FileOps, write_all
from .names import GROUP_PREFIX, LOG_SUFFIX, TEMP_SUFFIX, temp_name

__all__ = [
    "DIR_FLAGS",
    "NEW_FILE_FLAGS",
    "READ_FLAGS",
    "Store",
    "storage_error",
]

DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FILE_FLAGS: Final = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def storage_error(what: str, exc: OSError) -> StorageError:
    """A `StorageError` for a failed file-system call, naming what was done."""
    if exc.errno == errno.ELOOP:
        detail = "it is a symbolic link, which the store never follows"
    else:
        detail = exc.strerror or str(exc)
    error = StorageError(f"{what}: {detail}")
    error.errno = exc.errno
    return error


@attrs.define(eq=False)
class Store:
    """The directories of one store, opened on first use.

    Args:
        path: the store directory.
        ops: the file-system calls.
    """

    path: Path
    ops: FileOps
    _root: int | None = attrs.field(init=False, default=None)
    _subdirs: dict[str, int] = attrs.field(init=False, factory=dict[str, int])
    _groups: dict[str, int] = attrs.field(init=False, factory=dict[str, int])
    _groups_seen: int = attrs.field(init=False, default=-1)
    _where: dict[str, str] = attrs.field(init=False, factory=dict[str, str])
    _refused: dict[str, str] = attrs.field(init=False, factory=dict[str, str])
    _mu: threading.RLock = attrs.field(init=False, factory=threading.RLock)

    # -- directories ---------------------------------------------------------

    def root(self, *, create: bool) -> int | None:
        """The store directory's descriptor; `None` if absent and not `create`.

        Raises:
            StorageError: it cannot be opened or made, is a symbolic link, is
                owned by another user, or is writable by others.
        """
        with self._mu:
            if self._root is not None:
                return self._root
            path = str(self.path)
            try:
                fd = self.ops.open(path, DIR_FLAGS)
            except FileNotFoundError:
                if not create:
                    return None
                fd = self._make_root()
            except NotADirectoryError as exc:
                if self._is_link(path):  # a link fails this way too
                    raise self._open_error(
                        f"cannot open the store directory {path}", path, None, exc
                    ) from exc
                error = StorageError(
                    f"{path} is a file; the JSONL store is a directory"
                )
                error.errno = exc.errno
                raise error from exc
            except OSError as exc:
                raise self._open_error(
                    f"cannot open the store directory {path}", path, None, exc
                ) from exc
            self._check(fd, path)
            self._root = fd
            return fd

    def _make_root(self) -> int:
        ops = self.ops
        parent = self.path.parent
        missing: list[Path] = []
        probe = parent
        while not self._exists(probe) and probe != probe.parent:
            missing.append(probe)
            probe = probe.parent
        try:
            for directory in reversed(missing):
                # made concurrently: fine, it is only a parent
                with contextlib.suppress(FileExistsError):
                    ops.mkdir(str(directory), 0o700, dir_fd=None)
            pfd = ops.open(str(parent), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                fd = self._make_dir(pfd, self.path.name)
            finally:
                ops.close(pfd)
        except OSError as exc:
            raise storage_error(
                f"cannot create the store directory {self.path}", exc
            ) from exc
        return fd

    def _exists(self, path: Path) -> bool:
        try:
            self.ops.stat(str(path), dir_fd=None)
        except FileNotFoundError:
            return False
        except OSError:
            return True  # let the open below report the real problem
        return True

    def _make_dir(self, parent: int, name: str) -> int:
        """Create (or open, if it appeared meanwhile) a private directory."""
        ops = self.ops
        created = True
        try:
            ops.mkdir(name, 0o700, dir_fd=parent)
        except FileExistsError:
            created = False
        fd = ops.open(name, DIR_FLAGS, dir_fd=parent)
        if created:
            try:
                ops.fchmod(fd, 0o700)  # mkdir's mode went through the umask
                ops.fsync_dir(parent)
            except OSError:
                ops.close(fd)
                raise
        return fd

    def _is_link(self, name: str, dir_fd: int | None = None) -> bool:
        try:
            return stat.S_ISLNK(self.ops.stat(name, dir_fd=dir_fd).st_mode)
        except OSError:
            return False

    def _open_error(
        self, what: str, name: str, dir_fd: int | None, exc: OSError
    ) -> StorageError:
        """Why a directory would not open: a link says so, not "Not a directory".

        `O_DIRECTORY | O_NOFOLLOW` on a symbolic link fails with `ENOTDIR`,
        whatever the link points at.
        """
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            try:
                mode = self.ops.stat(name, dir_fd=dir_fd).st_mode
            except OSError:
                mode = None
            if mode is not None and stat.S_ISLNK(mode):
                error = StorageError(
                    f"{what}: it is a symbolic link, which the store never "
                    "follows; point the store at the real directory"
                )
                error.errno = exc.errno
                return error
        return storage_error(what, exc)

    def _check(self, fd: int, label: str) -> None:
        try:
            st = self.ops.fstat(fd)
        except OSError as exc:
            self.ops.close(fd)
            raise storage_error(f"cannot inspect {label}", exc) from exc
        problem = None
        if not stat.S_ISDIR(st.st_mode):
            problem = "it is not a directory"
        elif st.st_uid != os.geteuid():
            problem = f"it is owned by uid {st.st_uid}, not by this user"
        elif st.st_mode & 0o022:
            problem = f"its mode {st.st_mode & 0o777:o} lets others write to it"
        if problem is not None:
            self.ops.close(fd)
            raise StorageError(
                f"refusing to use {label} as (part of) a session store: {problem}; "
                "fix it (chmod 700, chown) or configure another directory"
            )

    def subdir(self, name: str, *, create: bool) -> int | None:
        """A direct subdirectory of the store; `None` if absent and not `create`.

        Raises:
            StorageError: as for `root`, for the subdirectory.
        """
        with self._mu:
            fd = self._subdirs.get(name)
            if fd is not None:
                return fd
            root = self.root(create=create)
            if root is None:
                return None
            label = f"{self.path / name}"
            try:
                fd = self.ops.open(name, DIR_FLAGS, dir_fd=root)
            except FileNotFoundError:
                if not create:
                    return None
                try:
                    fd = self._make_dir(root, name)
                except OSError as exc:
                    raise storage_error(f"cannot create {label}", exc) from exc
            except OSError as exc:
                raise self._open_error(f"cannot open {label}", name, root, exc) from exc
            self._check(fd, label)
            self._subdirs[name] = fd
            if name.startswith(GROUP_PREFIX):
                self._groups[name] = fd
            return fd

    def groups(self) -> dict[str, int]:
        """Every usable group directory, by name (unusable ones are skipped)."""
        with self._mu:
            root = self.root(create=False)
            if root is None:
                return {}
            try:
                seen = self.ops.fstat(root).st_mtime_ns
                if seen != self._groups_seen:
                    for name in self.ops.listdir(root):
                        if name.startswith(GROUP_PREFIX) and name not in self._groups:
                            try:
                                self.subdir(name, create=False)
                            except StorageError as exc:
                                # A planted link or foreign dir: ignored, and
                                # named if a session is looked for in it.
                                self._refused[name] = str(exc)
                                continue
                            self._refused.pop(name, None)
                    self._groups_seen = seen
            except OSError as exc:
                raise storage_error(f"cannot list the store {self.path}", exc) from exc
            return dict(self._groups)

    def find(self, stem: str) -> tuple[str, int] | None:
        """The group holding session `stem`'s log, or `None`."""
        with self._mu:
            known = self._where.get(stem)
            if known is not None and self._has_log(self._groups.get(known), stem):
                return known, self._groups[known]
            for name, fd in self.groups().items():
                if self._has_log(fd, stem):
                    self._where[stem] = name
                    return name, fd
            self._where.pop(stem, None)
            self._refuse_if_held_back(stem)
            return None

    def _refuse_if_held_back(self, stem: str) -> None:
        """Raise if `stem`'s log sits in a group directory the store refused.

        Else "no stored session" would hide the real problem: its group
        directory is a symbolic link, another user's, or writable by others.
        Only looked at, never read: a `stat` of the name.
        """
        root = self._root
        for name, reason in self._refused.items():
            try:
                st = self.ops.stat(f"{name}/{stem}{LOG_SUFFIX}", dir_fd=root)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                raise StorageError(
                    f"the session's file is in {self.path / name}, which the "
                    f"store does not use ({reason})"
                )

    def _has_log(self, fd: int | None, stem: str) -> bool:
        if fd is None:
            return False
        try:
            st = self.ops.stat(stem + LOG_SUFFIX, dir_fd=fd)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise storage_error(
                f"cannot look up a session file in {self.path}", exc
            ) from exc
        return stat.S_ISREG(st.st_mode)

    def remember(self, stem: str, group: str) -> None:
        """Note where a session's log lives (after creating it)."""
        with self._mu:
            self._where[stem] = group

    def close(self) -> None:
        """Close every directory descriptor."""
        with self._mu:
            fds = {*self._subdirs.values()}
            if self._root is not None:
                fds.add(self._root)
            for fd in fds:
                self.ops.close(fd)
            self._root = None
            self._subdirs.clear()
            self._groups.clear()
            self._groups_seen = -1
            self._where.clear()

    # -- files ---------------------------------------------------------------

    def write_atomic(self, dir_fd: int, name: str, data: bytes) -> None:
        """Replace file `name` in `dir_fd` by `data`, atomically and durably.

        Temp file (`O_EXCL|O_NOFOLLOW`, 0600), write, fsync, rename, fsync of
        the directory (R3). On failure the old file is untouched.

        Raises:
            OSError: a step failed (the temp file is removed when possible).
        """
        ops = self.ops
        try:
            st = ops.stat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISREG(st.st_mode):
                # Renaming over a link would be harmless to its target, but
                # something planted it: refuse rather than paper over it.
                raise OSError(errno.EEXIST, f"{name} is not a regular file")
        suffix = name[name.rfind(".") :] if "." in name else TEMP_SUFFIX
        tmp = temp_name(name.removesuffix(suffix), suffix, ops.token())
        fd = ops.open(tmp, os.O_WRONLY | NEW_FILE_FLAGS, 0o600, dir_fd=dir_fd)
        try:
            try:
                ops.fchmod(fd, 0o600)
                write_all(ops, fd, data, 0)
                ops.fsync(fd)
            finally:
                ops.close(fd)
            ops.replace(tmp, name, dir_fd=dir_fd)
        except OSError:
            self.discard(dir_fd, tmp)
            raise
        ops.fsync_dir(dir_fd)

    def discard(self, dir_fd: int, name: str) -> None:
        """Remove a file that is of no use any more, if it can be."""
        # Best effort: a leftover temp file is ignored by every reader.
        with contextlib.suppress(OSError):
            self.ops.unlink(name, dir_fd=dir_fd)
