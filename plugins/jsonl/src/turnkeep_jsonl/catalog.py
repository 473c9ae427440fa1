"""The catalog: one small file that lists every session, so `list` opens no log.

Owns `catalog.jsonl`: a snapshot (a head line, then one `entry` line per
session: its header and summary, and whether a writer may be ahead of it,
`open`) followed by a journal of later `entry` and `gone` lines; the last
line about an id wins. The head carries one CRC over the whole snapshot, so
reading it checks one checksum, not thousands.

Writers append under `catalog.lock` (an exclusive `flock`), fsynced, at the
moments that matter: before a new log file appears, before a claimed
session's first write, around a summary update by a non-owner, at release
and at delete. Per flush nothing is written here, so flushes cost the
catalog nothing; `list` re-reads an `open` session from its sidecar and the
end of its log instead. When the journal has grown past a quarter of the
snapshot, the writer that notices folds it into a new snapshot.

The catalog is a cache of the files, never their master: when it is missing
or its head is damaged, writers rebuild it from the files, and `list` reads
the files directly until then (it never writes).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import zlib
from collections.abc import Iterable
from typing import Final, TypeAlias

import attrs
import msgspec

from turnkeep.meta import SessionMeta

from .fileops import FileOps, write_all
from .format import all_sealed, seal, unseal
from .names import CATALOG, CATALOG_LOCK, TEMP_SUFFIX, is_session_log
from .store import Store
from .summary import inspect_session, session_header

__all__ = ["Catalog", "Entry", "Gone"]

_VERSION: Final = 2
"""Version 2 entries carry `turns` and `size` in their summaries. A version 1
catalog is still read, every entry as `open` (its numbers are re-read from
the files), and the next writer replaces it with a version 2 snapshot."""
_COMPACT_SLACK: Final = 64 * 1024
_TEMP_PREFIX: Final = ".catalog."
"""How `Store.write_atomic`'s temporary files for the catalog start (`temp_name`)."""
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_WRITE_FLAGS: Final = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
_LOCK_FLAGS: Final = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class Entry(msgspec.Struct, tag_field="mark", tag="entry", kw_only=True, gc=False):
    """What the catalog knows of one session.

    Attributes:
        open: a writer may have moved it on since this line was written, so
            a reader looks at its files instead.
        meta: its header and summary as of this line.
    """

    open: bool
    meta: SessionMeta


class Gone(msgspec.Struct, tag_field="mark", tag="gone", kw_only=True, gc=False):
    """The session `id` was deleted."""

    id: str


class _Head(msgspec.Struct, tag_field="mark", tag="catalog", kw_only=True):
    """The first line of the catalog file.

    The snapshot is the file's first `base` bytes; its lines after this one
    have the CRC-32 `fcrc`, all together.
    """

    format_version: int
    base: int
    fcrc: str


_Line: TypeAlias = Entry | Gone | _Head
_encode: Final = msgspec.json.Encoder().encode
_lines_decoder: Final = msgspec.json.Decoder(list[_Line])
_line_decoder: Final = msgspec.json.Decoder(_Line)


@attrs.define(eq=False)
class Catalog:
    """The catalog of one store.

    Args:
        store: the store.
        ops: the file-system calls.
        max_line: the longest log line read when a log's numbers must be
            recomputed (see `summary.log_numbers`).
    """

    store: Store
    ops: FileOps
    max_line: int
    _cache_key: tuple[int, int, int] | None = attrs.field(init=False, default=None)
    _cache: dict[str, Entry] = attrs.field(init=False, factory=dict[str, Entry])

    # -- reading -------------------------------------------------------------

    def read(self) -> dict[str, Entry] | None:
        """Every session the catalog lists, by id; `None` if it is unusable.

        The same dict object comes back while the file is unchanged, so
        callers may cache what they derive from it by its identity.

        Raises:
            OSError: the catalog exists but cannot be read.
        """
        root = self.store.root(create=False)
        if root is None:
            return {}
        try:
            fd = self.ops.open(CATALOG, _READ_FLAGS, dir_fd=root)
        except FileNotFoundError:
            return None
        try:
            st = self.ops.fstat(fd)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if key == self._cache_key:
                return self._cache
            data = _read_all(self.ops, fd, st.st_size)
        finally:
            self.ops.close(fd)
        entries = _parse(data)
        if entries is not None:
            self._cache_key, self._cache = key, entries
        return entries

    def scan_files(self) -> dict[str, Entry]:
        """The listing rebuilt from the session files themselves.

        Raises:
            OSError: a directory or file cannot be read.
        """
        entries: dict[str, Entry] = {}
        for fd in self.store.groups().values():
            for filename in self.ops.listdir(fd):
                stem = is_session_log(filename)
                if stem is None:
                    continue
                found = inspect_session(self.ops, fd, stem, max_line=self.max_line)
                if found is None:
                    continue
                meta = SessionMeta(
                    header=session_header(found.header), summary=found.summary
                )
                entries[meta.id] = Entry(open=not found.released, meta=meta)
        return entries

    # -- writing -------------------------------------------------------------

    def append(self, *items: Entry | Gone) -> None:
        """Durably append lines, rebuilding or compacting the file as needed.

        Raises:
            OSError: the catalog could not be written.
        """
        root = self.store.root(create=True)
        assert root is not None  # noqa: S101 - create=True never returns None
        ops = self.ops
        lock = ops.open(CATALOG_LOCK, _LOCK_FLAGS, 0o600, dir_fd=root)
        try:
            ops.fchmod(lock, 0o600)
            ops.flock(lock, fcntl.LOCK_EX)
            self._append_locked(root, items)
        finally:
            ops.close(lock)  # closing drops the flock

    def rewrite(self, *items: Entry | Gone) -> None:
        """Durably replace the catalog by a snapshot with `items` applied.

        Unlike `append`, no earlier line survives: a deleted session's
        title and first prompt leave the file at once (and a catalog
        temporary file a crash left behind goes too).

        Raises:
            OSError: the catalog could not be written (the old one stays).
        """
        root = self.store.root(create=True)
        assert root is not None  # noqa: S101 - create=True never returns None
        ops = self.ops
        lock = ops.open(CATALOG_LOCK, _LOCK_FLAGS, 0o600, dir_fd=root)
        try:
            ops.fchmod(lock, 0o600)
            ops.flock(lock, fcntl.LOCK_EX)
            entries: dict[str, Entry] | None = None
            try:
                fd = ops.open(CATALOG, _WRITE_FLAGS, dir_fd=root)
            except FileNotFoundError:
                pass
            else:
                try:
                    entries = _parse(_read_all(ops, fd, ops.fstat(fd).st_size))
                finally:
                    ops.close(fd)
            self._snapshot(root, entries or self.scan_files(), items)
            # Under the lock nobody else writes one: these are a crash's.
            for name in ops.listdir(root):
                if name.startswith(_TEMP_PREFIX) and name.endswith(TEMP_SUFFIX):
                    self.store.discard(root, name)
        finally:
            ops.close(lock)

    def drop(self) -> None:
        """Remove the catalog (and a crash's temporary copies), durably.

        It is a cache of the files: `list` reads around it until a writer
        rebuilds it. Deleting on a full disk drops it first, since a
        rewrite needs room for a copy and removing it frees some.

        Raises:
            OSError: it could not be removed.
        """
        root = self.store.root(create=False)
        if root is None:
            return
        ops = self.ops
        lock = ops.open(CATALOG_LOCK, _LOCK_FLAGS, 0o600, dir_fd=root)
        try:
            ops.flock(lock, fcntl.LOCK_EX)
            with contextlib.suppress(FileNotFoundError):
                ops.unlink(CATALOG, dir_fd=root)
            for name in ops.listdir(root):
                if name.startswith(_TEMP_PREFIX) and name.endswith(TEMP_SUFFIX):
                    self.store.discard(root, name)
            ops.fsync_dir(root)
        finally:
            ops.close(lock)

    def _append_locked(self, root: int, items: tuple[Entry | Gone, ...]) -> None:
        ops = self.ops
        try:
            fd = ops.open(CATALOG, _WRITE_FLAGS, dir_fd=root)
        except FileNotFoundError:
            self._snapshot(root, self.scan_files(), items)
            return
        try:
            size = ops.fstat(fd).st_size
            head = _head(ops.pread(fd, 4096, 0))
            if head is None or head.format_version != _VERSION:
                self._snapshot(root, self.scan_files(), items)
                return
            data = b"".join([seal(_encode(item)) for item in items])
            write_all(ops, fd, data, size)
            ops.fsync(fd)
            grown = size + len(data)
            if grown > head.base + head.base // 4 + _COMPACT_SLACK:
                entries = _parse(_read_all(ops, fd, grown))
                self._snapshot(root, entries or self.scan_files(), ())
        finally:
            ops.close(fd)

    def _snapshot(
        self, root: int, entries: dict[str, Entry], items: Iterable[_Line]
    ) -> None:
        """Write a fresh catalog holding `entries` with `items` applied."""
        entries = dict(entries)
        _fold(entries, items)
        body = b"".join([seal(_encode(e)) for e in entries.values()])
        crc = f"{zlib.crc32(body):08x}"
        base = len(body)
        while True:  # the head line's length depends on `base` itself
            head = seal(_encode(_Head(format_version=_VERSION, base=base, fcrc=crc)))
            if len(head) + len(body) == base:
                break
            base = len(head) + len(body)
        self.store.write_atomic(root, CATALOG, head + body)


def _read_all(ops: FileOps, fd: int, size: int) -> bytes:
    parts: list[bytes] = []
    offset = 0
    while offset < size:
        part = ops.pread(fd, size - offset, offset)
        if not part:
            break
        parts.append(part)
        offset += len(part)
    return b"".join(parts)


def _head(data: bytes) -> _Head | None:
    newline = data.find(b"\n")
    if newline < 0:
        return None
    body = unseal(data[:newline])
    if body is None:
        return None
    try:
        head = _line_decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(head, _Head) or head.format_version > _VERSION:
        return None
    return head


def _fold(entries: dict[str, Entry], items: Iterable[_Line]) -> None:
    """Apply catalog lines in order: the last line about an id wins."""
    for item in items:
        if isinstance(item, Entry):
            entries[item.meta.header.id] = item
        elif isinstance(item, Gone):
            entries.pop(item.id, None)


def _parse(data: bytes) -> dict[str, Entry] | None:
    """Fold a catalog's lines; `None` when its head is unusable."""
    head = _head(data)
    if head is None:
        return None
    first = data.index(b"\n") + 1
    base = head.base
    if (
        first <= base <= len(data)
        and f"{zlib.crc32(data[first:base]):08x}" == head.fcrc
    ):
        snapshot = data[first:base].split(b"\n")
        snapshot.pop()
        journal = data[base:].split(b"\n")
    else:  # a damaged snapshot: keep whatever lines still check out
        snapshot = []
        journal = data[first:].split(b"\n")
    journal.pop()  # a torn last line (a crash mid-append) is dropped with it
    entries: dict[str, Entry] = {}
    for lines in (snapshot, _intact(journal)):
        _fold(entries, _decode(lines))
    if head.format_version < _VERSION:
        # Written before summaries carried turns and size: re-read them all.
        return {i: msgspec.structs.replace(e, open=True) for i, e in entries.items()}
    return entries


def _decode(lines: list[bytes]) -> list[_Line]:
    try:
        return _lines_decoder.decode(b"[" + b",".join(lines) + b"]")
    except (msgspec.DecodeError, RecursionError):
        pass  # one odd line spoils the batch: decode them one by one
    decoded: list[_Line] = []
    for line in lines:
        try:
            decoded.append(_line_decoder.decode(line))
        except (msgspec.DecodeError, RecursionError):
            continue  # sealed yet not ours (another version): skipped
    return decoded


def _intact(lines: list[bytes]) -> list[bytes]:
    """The lines whose checksum holds (damaged ones dropped)."""
    if all_sealed(lines):
        return lines
    return [line for line in lines if unseal(line) is not None]
