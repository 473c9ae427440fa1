"""Files and folders the `turnkeep` command itself writes: private, always.

A session holds what users and tools said, so every file the command writes
(an `export -o FILE`, the conformance run's generated modules) is mode 0600
and every folder it creates 0700, set explicitly, whatever the umask, as the
stores do with their own files. Stores (an `import` or `migrate` target the
command creates) are written by their backends, which set the same modes.

A file is written atomically: a private temporary file beside the target,
flushed to disk and renamed over it, so an interrupted write leaves either
the old file or the whole new one, never a torn one.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Final

__all__ = ["DIR_MODE", "FILE_MODE", "private_dir", "write_private"]

FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700


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


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` as a private file (0600), atomically.

    A regular file already there is replaced (its old mode with it); a
    symbolic link is followed. A target that is not a regular file (a
    terminal, a pipe, `/dev/null`) is written in place and its mode left
    alone, since it is not a file the command owns.

    Raises:
        OSError: the file cannot be written.
    """
    try:
        existing = path.stat()
    except FileNotFoundError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        with path.open("wb") as out:
            out.write(data)
        return
    target = Path(os.path.realpath(path))
    folder = private_dir(target.parent)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), FILE_MODE)  # explicit, whatever the umask
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _sync_dir(folder)


def _sync_dir(folder: Path) -> None:
    # The rename is durable once the folder's entry is on disk.
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
