"""The workspace: the one directory the coding agent's tools may touch.

Every path a tool receives is relative to the workspace root and is refused
(`ToolError`) if it is absolute, contains NUL, or resolves (following
symlinks) outside the root; files are opened with `O_NOFOLLOW`, so a symlink
planted at the last component is refused rather than followed out. Only
regular files are read: a FIFO, a device or a socket is refused before it
is opened, and the open itself never waits (`O_NONBLOCK`), since an open
that blocks would hold a thread that no cancel or timeout can stop (R23).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

import attrs

from turnkeep.errors import ToolError

__all__ = ["MAX_READ_BYTES", "Workspace", "special_kind"]

MAX_READ_BYTES: Final = 64 * 1024
"""The most a tool reads from one file (more is cut, and says so)."""


@attrs.frozen
class Workspace:
    """A directory tools are confined to.

    Args:
        root: the directory (made absolute and resolved).
    """

    root: Path = attrs.field(converter=lambda p: Path(p).resolve(strict=True))  # pyright: ignore[reportUnknownLambdaType, reportUnknownArgumentType]

    def resolve(self, relative: str) -> Path:
        """Return the absolute path of `relative`, refusing escapes.

        Raises:
            ToolError: the path is empty, absolute, has NUL, or leads out of
                the workspace (through `..` or a symlink).
        """
        if not relative or "\x00" in relative:
            raise ToolError("a path must be non-empty text without NUL")
        if os.path.isabs(relative):
            raise ToolError(
                f"{relative!r} is absolute; paths are relative to the workspace"
            )
        target = (self.root / relative).resolve(strict=False)
        if target != self.root and self.root not in target.parents:
            raise ToolError(f"{relative!r} leads outside the workspace; refused")
        return target

    def relative(self, path: Path) -> str:
        """`path` relative to the root, for messages."""
        return path.relative_to(self.root).as_posix() or "."

    def read_text(self, relative: str, limit: int = MAX_READ_BYTES) -> str:
        """Read a text file (at most `limit` bytes, marked when cut)."""
        path = self.resolve(relative)
        try:
            _refuse_special(relative, os.lstat(path).st_mode)
            # O_NONBLOCK: a FIFO swapped in since the look above opens at once
            # instead of waiting for a writer, in a thread no cancel can stop.
            fd = os.open(
                path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
            )
        except FileNotFoundError:
            raise ToolError(f"{relative!r} does not exist") from None
        except OSError as exc:
            raise ToolError(f"cannot open {relative!r}: {exc.strerror}") from None
        try:
            _refuse_special(relative, os.fstat(fd).st_mode)
            os.set_blocking(fd, True)  # a regular file: reads never wait anyway
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(limit + 1)
        text = data[:limit].decode("utf-8", "replace")
        if len(data) > limit:
            text += f"\n[... cut at {limit} bytes]"
        return text

    def write_text(self, relative: str, content: str) -> int:
        """Write a text file atomically (temp file, fsync, rename); return bytes.

        Missing parent directories are created, each checked to stay inside.
        """
        path = self.resolve(relative)
        if path == self.root:
            raise ToolError("cannot write to the workspace directory itself")
        parent = path.parent
        parent.mkdir(parents=True, exist_ok=True)
        if parent.resolve() != parent:
            raise ToolError(f"{relative!r}: a parent directory changed; refused")
        if path.is_symlink():
            raise ToolError(f"{relative!r} is a symlink; refused")
        data = content.encode("utf-8")
        temp = parent / f".{path.name}.{os.getpid()}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
        return len(data)


def special_kind(mode: int) -> str | None:
    """What a file that is not a regular one is (`None` for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _refuse_special(relative: str, mode: int) -> None:
    kind = special_kind(mode)
    if kind is not None:
        raise ToolError(f"{relative!r} is {kind}, not a regular file; not read")
