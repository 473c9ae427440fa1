"""The core conformance kit, run against the JSONL backend."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
from pathlib import Path

import msgspec
import pytest

from turnkeep.conformance import FollowContract, MakeBackend, PersistenceContract
from turnkeep.meta import FORMAT_VERSION
from turnkeep.persistence import SessionPersistence
from turnkeep_jsonl import JsonlPersistence, OsFileOps
from turnkeep_jsonl.format import decode_header, encode_header
from turnkeep_jsonl.names import LOCKS_DIR, LOG_SUFFIX, session_name


class LosesNextSync(OsFileOps):
    """File operations whose next flush is written, then fails its fsync.

    With `lands`, the bytes reach the file (as the page cache keeps them
    after a failed sync); without, they are lost (as a kernel that drops
    the dirty pages of a failed sync loses them), though `pwrite` said they
    were written. Either way the writer cannot tell.
    """

    def __init__(self) -> None:
        self.lands: bool | None = None
        self.log_fd: int | None = None

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        if self.lands is not None and self.log_fd is None:
            self.log_fd = fd
        if fd == self.log_fd and not self.lands:
            return len(data)
        return super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        if fd == self.log_fd:
            self.lands = self.log_fd = None
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().fsync(fd)


class TestJsonlBackend(PersistenceContract):
    supports_reopen = True
    supports_multiple_processes = True
    supports_tail_damage = True
    supports_committed_damage = True
    supports_format_aging = True
    supports_byte_scan = True
    supports_lost_acknowledgement = True
    supports_held = True
    supports_load_after = True
    supports_wait_for_commit = True
    supports_cancel_requests = True
    supports_audit = True
    supports_owner_death = True

    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> MakeBackend:
        self.root = tmp_path / "store"
        return lambda: JsonlPersistence(self.root, ops=LosesNextSync())

    async def kill_owner(self, backend: SessionPersistence) -> None:
        # What SIGKILL leaves: the descriptors close (the `flock`s go with
        # them), and the lock files keep their records, naming a holder
        # that holds nothing (the forked-child path closes exactly so).
        assert isinstance(backend, JsonlPersistence)
        backend._impl.forget_after_fork()  # pyright: ignore[reportPrivateUsage]

    def log_path(self, session_id: str) -> Path:
        (found,) = self.root.glob(f"g-*/{session_name(session_id)}{LOG_SUFFIX}")
        return found

    async def tear_tail(self, session_id: str) -> None:
        # What a crash mid-flush leaves: part of the next flush's lines, no
        # commit line.
        path = self.log_path(session_id)
        with path.open("ab") as f:
            f.write(b'{"type":"user/message","seq":99,"time":1,"data":{"te')

    async def damage_committed(self, session_id: str) -> None:
        # Flip one byte inside the first flush's event lines; later flushes
        # (and their commit lines) stay intact, so the damage is provably in
        # acknowledged data.
        path = self.log_path(session_id)
        data = bytearray(path.read_bytes())
        first_event = data.index(b'{"type"')
        data[first_event + 20] ^= 0x01
        path.write_bytes(bytes(data))

    async def write_newer_format(self, session_id: str) -> None:
        path = self.log_path(session_id)
        data = path.read_bytes()
        end = data.index(b"\n")
        header = decode_header(data[:end])
        assert header is not None
        newer = msgspec.structs.replace(header, format_version=FORMAT_VERSION + 1)
        path.write_bytes(encode_header(newer) + data[end + 1 :])

    async def storage_digest(self) -> bytes:
        return await asyncio.to_thread(store_digest, self.root)

    async def stored_bytes(self) -> dict[str, bytes]:
        return await asyncio.to_thread(self.files_under, self.root)

    async def lose_next_commit_reply(
        self, backend: SessionPersistence, session_id: str, *, lands: bool
    ) -> None:
        # The session's next flush is its next write (the contract appends
        # to it right after this).
        del session_id
        assert isinstance(backend, JsonlPersistence)
        ops = backend.ops
        assert isinstance(ops, LosesNextSync)
        ops.lands = lands


class TestJsonlFollowPolling(FollowContract):
    """[wait-for-commit] with inotify switched off (`follow = "poll"`).

    `TestJsonlBackend` runs the same contract through inotify (on Linux).
    """

    supports_multiple_processes = True
    supports_wait_for_commit = True

    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> MakeBackend:
        root = tmp_path / "store"
        return lambda: JsonlPersistence(root, follow="poll")


def store_digest(root: Path) -> bytes:
    """sha256 over every file's name and bytes (lock files hold no data)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.parent.name != LOCKS_DIR:
            digest.update(os.fsencode(path.relative_to(root)) + b"\0")
            digest.update(path.read_bytes())
    return digest.digest()
