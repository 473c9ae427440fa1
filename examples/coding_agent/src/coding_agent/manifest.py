"""The workspace in each turn's commit manifest: a tree hash, cheap when unchanged.

`WorkspaceManifest` is a turnkeep plugin: its `turn_manifest` names the
workspace as `{"workspace": "sha256:<tree hash>"}`, so each `turn/end`
says which tree the turn left behind, and a resume whose workspace was
changed meanwhile (an edit by hand, a `git checkout`) is refused with what
differs, or recorded (`--accept-drift`).

The tree hash is the SHA-256 of the sorted listing of the workspace's
files: each relative path with the SHA-256 of its content (a symlink: of
its target's text), skipping `.git` directories and the session store
when it lies inside the workspace. Each file's hash is kept with its size,
mtime, ctime and inode, so an unchanged tree is only stat'ed; a file
modified less than `RACY_SECONDS` ago is hashed again each time (its
mtime may not move on a second write within the clock's granularity, as
git's "racily clean" entries). The walk runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from turnkeep import Session, hookimpl

__all__ = ["RACY_SECONDS", "TreeHasher", "WorkspaceManifest", "store_paths"]

RACY_SECONDS: Final = 2.0
"""A file modified this recently is hashed again rather than trusted by stat."""

_SKIPPED_DIRS: Final = frozenset({".git"})

_Key = tuple[int, int, int, int]


@attrs.define(eq=False)
class TreeHasher:
    """Hashes one directory tree, remembering each file's hash by its stat.

    Args:
        root: the tree's root.
        skip: absolute paths left out (a directory with all it holds; a
            file together with its `-wal`/`-shm`/`-journal` companions).
    """

    root: Path
    skip: tuple[str, ...] = attrs.field(
        default=(),
        converter=lambda paths: tuple(str(Path(p)) for p in paths),  # pyright: ignore[reportUnknownLambdaType, reportUnknownArgumentType, reportUnknownVariableType]
    )
    hashed: int = 0
    """How many file contents were read so far (for tests and figures)."""
    _known: dict[str, tuple[_Key, str]] = attrs.field(
        factory=dict[str, tuple[_Key, str]]
    )
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def listing(self) -> dict[str, str]:
        """Each file's relative path (POSIX) and content hash."""
        out: dict[str, str] = {}
        seen: dict[str, tuple[_Key, str]] = {}
        racy = time.time_ns() - int(RACY_SECONDS * 1e9)
        for directory, dirs, files in os.walk(self.root):
            dirs[:] = sorted(
                d
                for d in dirs
                if d not in _SKIPPED_DIRS and not self._skipped(directory, d)
            )
            for name in files:
                if self._skipped(directory, name):
                    continue
                path = os.path.join(directory, name)
                relative = Path(path).relative_to(self.root).as_posix()
                digest = self._hash(path, relative, seen, racy)
                if digest is not None:
                    out[relative] = digest
        self._known = seen  # forget files that are gone
        return out

    def tree_hash(self) -> str:
        """The tree's version: `sha256:` and the hash of the sorted listing."""
        with self._lock:  # one walk at a time updates what is known
            listing = self.listing()
        lines = "".join(f"{p}\0{h}\n" for p, h in sorted(listing.items()))
        return (
            "sha256:"
            + hashlib.sha256(lines.encode("utf-8", "surrogateescape")).hexdigest()
        )

    def _skipped(self, directory: str, name: str) -> bool:
        path = os.path.join(directory, name)
        return any(
            path == s or path.startswith((s + os.sep, s + "-")) for s in self.skip
        )

    def _hash(
        self,
        path: str,
        relative: str,
        seen: dict[str, tuple[_Key, str]],
        racy: int,
    ) -> str | None:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None  # removed while we walked
        key = (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
        known = self._known.get(relative)
        if known is not None and known[0] == key and info.st_mtime_ns < racy:
            seen[relative] = known
            return known[1]
        if stat.S_ISLNK(info.st_mode):
            digest = "link:" + _sha256(
                os.readlink(path).encode("utf-8", "surrogateescape")
            )
        elif stat.S_ISREG(info.st_mode):
            try:
                digest = _file_sha256(path)
            except FileNotFoundError:
                return None
            self.hashed += 1
        else:
            return None  # sockets, fifos: no content to version
        seen[relative] = (key, digest)
        return digest


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    # Non-blocking and checked: a FIFO swapped in after the `lstat` must not
    # hold the walk's thread waiting for a writer (R23).
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FileNotFoundError(path)  # no longer the regular file we saw
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def store_paths(backends: Mapping[str, Mapping[str, Any]]) -> list[Path]:
    """The store locations a host's configuration names (`path` options)."""
    return [
        Path(str(options["path"])).expanduser().resolve()
        for options in backends.values()
        if options.get("path")
    ]


@attrs.define(eq=False)
class WorkspaceManifest:
    """The `turn_manifest` plugin naming each tracked session's workspace.

    One per host (`open_agent` registers it once): each session is tracked
    with its workspace's root (`track`), so loops over different workspaces
    can share the host; a session not tracked is not named.

    Args:
        skip: paths that are not any workspace's (the session store).
    """

    skip: tuple[Path, ...] = attrs.field(default=(), converter=tuple)
    _trees: dict[Path, TreeHasher] = attrs.field(factory=dict[Path, TreeHasher])
    _sessions: dict[str, TreeHasher] = attrs.field(factory=dict[str, TreeHasher])

    def track(self, session_id: str, root: Path) -> None:
        """Name `root` in the manifest of session `session_id`'s turns."""
        hasher = self._trees.get(root)
        if hasher is None:
            hasher = self._trees[root] = TreeHasher(root, self.skip)
        self._sessions[session_id] = hasher

    @hookimpl
    async def turn_manifest(self, session: Session) -> dict[str, str] | None:
        """`{"workspace": "sha256:..."}`, hashed in a worker thread."""
        hasher = self._sessions.get(session.id)
        if hasher is None:
            return None
        return {"workspace": await asyncio.to_thread(hasher.tree_hash)}
