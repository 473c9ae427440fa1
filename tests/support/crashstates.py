"""Power-loss states of a recorded file-system trace (ALICE-style model).

Wrap a backend's `FileOps` in `RecordingFileOps`: every call is performed and
the ones that change durable state are recorded (creates, writes, truncates,
fsyncs, directory fsyncs, renames, unlinks, mkdirs, failed fsyncs), in order,
together with `mark`s the test adds (for example one after each
acknowledged flush). `CrashModel(trace).states(k, rng, n)` then gives `n`
disk states a power loss right before operation `k` may legally leave
(research/reliability.md, 3.2):

- file data fsynced before the crash is intact;
- each 512-byte sector changed since a file's last fsync independently ends
  up new, zeroed, garbage or untouched (a sector holding fsynced bytes only
  new or untouched: sector writes are atomic), and the file's size is
  anything between its fsynced and its written size;
- each directory operation (create, rename, unlink, mkdir) done since the
  directory's last fsync is independently applied or not (a rename is
  atomic: old name or new name);
- nothing else survives.

`materialise` writes a state into a directory (dirs 0700, files 0600), so
the real loader can be run on it; `check_trace` asserts the protocol's
ordering rules on a trace. The model knows nothing about any file format.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, TypeAlias

import attrs

from turnkeep_jsonl import FileOps

__all__ = [
    "CrashModel",
    "Op",
    "RecordingFileOps",
    "State",
    "Trace",
    "check_trace",
    "materialise",
]

SECTOR: Final = 512
_ALL_FATES: Final = ("new", "old", "zero", "junk")

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


# -- the model ----------------------------------------------------------------

Node: TypeAlias = tuple[str, int | DirPath]
"""`("f", inode)` or `("d", directory path)`."""

State: TypeAlias = dict[str, bytes | None]
"""A disk state: relative path -> file bytes, or `None` for a directory."""


@attrs.define
class _File:
    synced: bytes = b""
    current: bytearray = attrs.field(factory=bytearray)


@attrs.define
class _Dir:
    durable: dict[str, Node] = attrs.field(factory=dict[str, Node])
    current: dict[str, Node] = attrs.field(factory=dict[str, Node])
    pending: list[tuple[str, str, str, Node]] = attrs.field(
        factory=list[tuple[str, str, str, Node]]
    )


@attrs.define
class CrashModel:
    """Replays a trace and draws legal crash states from it.

    Points are best visited in increasing order: the replay then continues
    from the previous point instead of starting over.
    """

    trace: Trace
    _done: int = attrs.field(init=False, default=0)
    _files: dict[int, _File] = attrs.field(init=False, factory=dict[int, _File])
    _dirs: dict[DirPath, _Dir] = attrs.field(init=False, factory=lambda: {(): _Dir()})

    def _replay(self, point: int) -> tuple[dict[int, _File], dict[DirPath, _Dir]]:
        if point < self._done:
            self._done = 0
            self._files = {}
            self._dirs = {(): _Dir()}
        files, dirs = self._files, self._dirs
        for op in self.trace.ops[self._done : point]:
            _apply(op, files, dirs)
        self._done = point
        return files, dirs

    def states(self, point: int, rng: random.Random, count: int) -> Iterator[State]:
        """`count` random legal states of a power loss before operation `point`."""
        files, dirs = self._replay(point)
        states = [_draw(files, dirs, rng) for _ in range(count)]
        yield from states

    def logical(self, point: int) -> State:
        """What a process crash (not a power loss) at `point` leaves: everything."""
        files, dirs = self._replay(point)
        state: State = {}
        _walk(
            dirs,
            (),
            lambda d: dict(d.current),
            files,
            state,
            lambda f: bytes(f.current),
        )
        return state


def _apply(op: Op, files: dict[int, _File], dirs: dict[DirPath, _Dir]) -> None:
    """Advance the model by one recorded operation."""
    kind = op.kind
    if kind == "create":
        files[op.inode] = _File()
        node: Node = ("f", op.inode)
        dirs[op.dir].current[op.name] = node
        dirs[op.dir].pending.append(("add", op.name, "", node))
    elif kind == "mkdir":
        path = (*op.dir, op.name)
        dirs[path] = _Dir()
        node = ("d", path)
        dirs[op.dir].current[op.name] = node
        dirs[op.dir].pending.append(("add", op.name, "", node))
    elif kind == "write":
        current = files[op.inode].current
        end = op.offset + len(op.data)
        if len(current) < op.offset:
            current.extend(bytes(op.offset - len(current)))
        current[op.offset : end] = op.data
    elif kind == "truncate":
        current = files[op.inode].current
        del current[op.offset :]
        current.extend(bytes(op.offset - len(current)))
    elif kind == "fsync" and op.inode in files:
        files[op.inode].synced = bytes(files[op.inode].current)
    elif kind == "fsync_dir":
        d = dirs[op.dir]
        d.durable = dict(d.current)
        d.pending.clear()
    elif kind == "rename":
        d = dirs[op.dir]
        node = d.current.pop(op.name)
        d.current[op.dst] = node
        d.pending.append(("rename", op.name, op.dst, node))
    elif kind == "unlink":
        d = dirs[op.dir]
        node = d.current.pop(op.name)
        d.pending.append(("unlink", op.name, "", node))


def _draw(
    files: dict[int, _File], dirs: dict[DirPath, _Dir], rng: random.Random
) -> State:
    def entries(d: _Dir) -> dict[str, Node]:
        out = dict(d.durable)
        for kind, name, dst, node in d.pending:
            if rng.random() < 0.5:
                continue
            if kind == "add":
                out[name] = node
            elif kind == "rename":
                out.pop(name, None)
                out[dst] = node
            else:
                out.pop(name, None)
        return out

    contents: dict[int, bytes] = {}

    def content(f: _File) -> bytes:
        key = id(f)
        if key not in contents:
            contents[key] = _sectors(f.synced, bytes(f.current), rng)
        return contents[key]

    state: State = {}
    _walk(dirs, (), entries, files, state, content)
    return state


def _walk(
    dirs: dict[DirPath, _Dir],
    path: DirPath,
    entries: Callable[[_Dir], dict[str, Node]],
    files: dict[int, _File],
    state: State,
    content: Callable[[_File], bytes],
) -> None:
    for name, (kind, ref) in sorted(entries(dirs[path]).items()):
        here = (*path, name)
        if kind == "d":
            assert isinstance(ref, tuple)
            state["/".join(here)] = None
            _walk(dirs, ref, entries, files, state, content)
        else:
            assert isinstance(ref, int)
            state["/".join(here)] = content(files[ref])


def _sectors(synced: bytes, current: bytes, rng: random.Random) -> bytes:
    """A file's bytes after a crash, sector by sector (see the module doc)."""
    if synced == current:
        return synced
    low, high = sorted((len(synced), len(current)))
    size = rng.randint(low, high)
    out = bytearray(size)
    for start in range(0, size, SECTOR):
        end = min(start + SECTOR, size)
        old = synced[start:end].ljust(end - start, b"\0")
        new = current[start:end].ljust(end - start, b"\0")
        if old == new:
            out[start:end] = new
            continue
        fates = (
            ("new", "old") if start < len(synced) else ("new", "old", "zero", "junk")
        )
        fate = rng.choice(fates)
        if fate == "new":
            out[start:end] = new
        elif fate == "old":
            out[start:end] = old
        elif fate == "junk":
            out[start:end] = rng.randbytes(end - start)
        # "zero": already zeros
    return bytes(out)


def materialise(state: State, base: Path) -> None:
    """Write a state below `base` (directories 0700, files 0600)."""
    for relative, data in sorted(state.items()):
        target = base / relative
        if data is None:
            target.mkdir(mode=0o700)
            target.chmod(0o700)
        else:
            target.write_bytes(data)
            target.chmod(0o600)


def check_trace(
    trace: Trace, *, ack: str = "ack", ignore: Callable[[str], bool] = lambda _: False
) -> list[str]:
    """The protocol rules a trace breaks (empty: none).

    - every mark `ack` comes after an fsync of each file written since the
      previous one, and after an fsync of each directory whose entries were
      created or renamed since then (names `ignore` accepts are exempt: lock
      files carry no data);
    - a file is fsynced before it is renamed (temp file before rename);
    - the logs (`*.jsonl`) are fsynced before a sidecar (`*.meta`) is renamed;
    - after a failed fsync, the descriptor is never written or fsynced again.
    """
    problems: list[str] = []
    unsynced: set[int] = set()
    written: set[int] = set()
    dirty: dict[DirPath, list[str]] = {}
    failed: set[int] = set()
    names: dict[int, str] = {}
    for index, op in enumerate(trace.ops):
        kind = op.kind
        if kind in ("write", "truncate"):
            if op.fd in failed:
                problems.append(
                    f"#{index}: {kind} on fd {op.fd} after its fsync failed"
                )
            unsynced.add(op.inode)
            written.add(op.inode)
        elif kind == "fsync":
            if op.fd in failed:
                problems.append(
                    f"#{index}: fsync retried on fd {op.fd} after a failure"
                )
            unsynced.discard(op.inode)
        elif kind == "fsync_failed":
            failed.add(op.fd)
        elif kind == "fsync_dir":
            dirty.pop(op.dir, None)
        elif kind in ("create", "mkdir", "rename"):
            name = op.dst if kind == "rename" else op.name
            if kind != "mkdir":
                names[op.inode] = name
            if not ignore(name):
                dirty.setdefault(op.dir, []).append(name)
            if kind == "rename":
                if op.inode in unsynced:
                    problems.append(f"#{index}: {op.name} renamed before its fsync")
                if name.endswith(".meta"):
                    logs = [i for i in unsynced if names.get(i, "").endswith(".jsonl")]
                    if logs:
                        problems.append(f"#{index}: sidecar renamed before log fsync")
        elif kind == "mark" and op.label == ack:
            late = sorted(written & unsynced)
            if late:
                problems.append(f"#{index}: ack with unsynced files {late}")
            for path, entries in dirty.items():
                problems.append(f"#{index}: ack before fsync of {path} ({entries})")
            written.clear()
            dirty.clear()
    return problems
