"""The core conformance kit, run against the JSONL backend."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import msgspec
import pytest

from turnkeep.conformance import MakeBackend, PersistenceContract
from turnkeep.meta import FORMAT_VERSION
from turnkeep.persistence import SessionPersistence
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.format import decode_header, encode_header
from turnkeep_jsonl.names import LOCKS_DIR, LOG_SUFFIX, session_name


class TestJsonlBackend(PersistenceContract):
    supports_reopen = True
    supports_multiple_processes = True
    supports_tail_damage = True
    supports_committed_damage = True
    supports_format_aging = True
    supports_byte_scan = True
    supports_held = True
    supports_owner_death = True

    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> MakeBackend:
        self.root = tmp_path / "store"
        return lambda: JsonlPersistence(self.root)

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


def store_digest(root: Path) -> bytes:
    """sha256 over every file's name and bytes (lock files hold no data)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.parent.name != LOCKS_DIR:
            digest.update(os.fsencode(path.relative_to(root)) + b"\0")
            digest.update(path.read_bytes())
    return digest.digest()
