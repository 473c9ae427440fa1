"""Power-loss states of a recorded file-system trace (ALICE-style model).

Wrap a backend's `FileOps` in `RecordingFileOps` (from `recording`, also
exported here): every call is performed and the ones that change durable
state are recorded (creates, writes, truncates, fsyncs, directory fsyncs,
renames, unlinks, mkdirs, failed fsyncs), in order, together with `mark`s
the test adds (for example one after each acknowledged flush).
`CrashModel(trace).states(k, rng, n)` then gives `n`
disk states a power loss right before operation `k` may legally leave
(`docs/reliability.md`, item 7):

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

import itertools
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, TypeAlias

import attrs

from .recording import DirPath, Op, RecordingFileOps, Trace

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

    def all_states(self, point: int, limit: int) -> list[State] | None:
        """Every legal state of a power loss before `point`, enumerated.

        Every combination of: each pending directory operation applied or
        not, and for each file every size between its fsynced and written
        sizes at sector granularity (and both ends) with every fate of every
        sector that changed (junk is one fixed pattern). `None` when there
        are more than `limit` combinations; duplicates are dropped.
        """
        files, dirs = self._replay(point)
        pending = [(path, i) for path, d in dirs.items() for i in range(len(d.pending))]
        inodes = sorted(files)
        variants = [
            _all_contents(files[i].synced, bytes(files[i].current)) for i in inodes
        ]
        total = 2 ** len(pending)
        for options in variants:
            total *= len(options)
        if total > limit:
            return None
        inode_of = {id(files[i]): i for i in inodes}
        seen: set[tuple[tuple[str, bytes | None], ...]] = set()
        states: list[State] = []
        for bits in itertools.product((False, True), repeat=len(pending)):
            applied = {key for key, bit in zip(pending, bits, strict=True) if bit}
            for contents in itertools.product(*variants):
                chosen = dict(zip(inodes, contents, strict=True))
                state: State = {}
                _walk(
                    dirs,
                    (),
                    lambda d, applied=applied: _entries(d, dirs, applied),
                    files,
                    state,
                    lambda f, chosen=chosen: chosen[inode_of[id(f)]],
                )
                key = tuple(sorted(state.items()))
                if key not in seen:
                    seen.add(key)
                    states.append(state)
        return states

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


def _entries(
    d: _Dir, dirs: dict[DirPath, _Dir], applied: set[tuple[DirPath, int]]
) -> dict[str, Node]:
    """`d`'s entries with exactly the pending operations in `applied`."""
    path = next(p for p, other in dirs.items() if other is d)
    out = dict(d.durable)
    for index, (kind, name, dst, node) in enumerate(d.pending):
        if (path, index) not in applied:
            continue
        if kind == "add":
            out[name] = node
        elif kind == "rename":
            out.pop(name, None)
            out[dst] = node
        else:
            out.pop(name, None)
    return out


_JUNK: Final = bytes(range(256)) * 2
"""The one junk pattern enumeration uses (a sector of it)."""


def _all_contents(synced: bytes, current: bytes) -> list[bytes]:
    """Every byte string a file may hold after a crash (see `all_states`)."""
    if synced == current:
        return [synced]
    low, high = sorted((len(synced), len(current)))
    sizes = sorted({low, high, *range(low - low % SECTOR + SECTOR, high, SECTOR)})
    out: list[bytes] = []
    for size in sizes:
        pieces: list[list[bytes]] = []
        for start in range(0, size, SECTOR):
            end = min(start + SECTOR, size)
            old = synced[start:end].ljust(end - start, b"\0")
            new = current[start:end].ljust(end - start, b"\0")
            if old == new:
                pieces.append([new])
            elif start < len(synced):
                pieces.append([new, old])
            else:
                zero = bytes(end - start)
                pieces.append(
                    list(dict.fromkeys([new, old, zero, _JUNK[: end - start]]))
                )
        out.extend(b"".join(combo) for combo in itertools.product(*pieces))
    return list(dict.fromkeys(out))


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
      files carry no data, only their holder's advisory identity, which no
      crash state needs);
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
            if ignore(names.get(op.inode, "")):
                continue
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
