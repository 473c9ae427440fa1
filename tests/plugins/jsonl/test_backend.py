"""The JSONL backend's refusals and recoveries, names, configuration and host.

Lazy creation, retries after failures, the typed error of each refusal,
deletion, summary updates by non-owners, the watermark at claim, closing
with failures, file names, and the backend built by the host from
configuration and the environment.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from plugins.jsonl.helpers import log_file, meta, raws, turn, write_session
from support.faultyops import NoSyncFileOps
from turnkeep.codec import EventRecord
from turnkeep.config import Config, load_config
from turnkeep.errors import (
    ConfigurationError,
    EventRejectedError,
    FlushOutcomeUnknownError,
    SequenceError,
    SessionCorruptError,
    SessionDeletedError,
    SessionExistsError,
    SessionHeldError,
    SessionNotFoundError,
    StorageError,
)
from turnkeep.host import Host
from turnkeep.meta import SessionSummary
from turnkeep_jsonl import JsonlConfig, JsonlPersistence, default_path
from turnkeep_jsonl.names import (
    CATALOG,
    group_name,
    is_session_log,
    session_name,
)

pytestmark = pytest.mark.asyncio
Open = Callable[..., JsonlPersistence]


def batch(seq: int, index: int = 0, tag: str = "") -> list[EventRecord]:
    return turn(seq, index, seed="backend", tag=tag)


def log_size(root: Path) -> int:
    return log_file(root).stat().st_size


def file_names(root: Path) -> set[str]:
    return {p.name for p in root.rglob("*") if p.is_file()}


def files_holding(root: Path, data: bytes) -> list[str]:
    return [p.name for p in root.rglob("*") if p.is_file() and data in p.read_bytes()]


def first_group(root: Path) -> Path:
    return next(root.glob("g-*"))


# -- lazy creation, retries, refusals ------------------------------------------


async def test_create_then_release_leaves_no_session_file(
    store: Path, open_backend: Open
) -> None:
    backend = open_backend()
    await backend.create(meta("s"))
    with pytest.raises(SessionNotFoundError):
        await backend.claim("s")  # not stored yet
    await backend.release("s")
    assert file_names(store) == set()
    assert not await backend.has("s")
    await open_backend().create(meta("s"))  # the id is free again


async def test_a_failed_creation_can_be_retried(
    store: Path, open_backend: Open
) -> None:
    class FailFirstLogCreate(NoSyncFileOps):
        failed = False

        def open(
            self, path: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None
        ) -> int:
            if not self.failed and path.endswith(".jsonl.tmp"):
                self.failed = True
                raise OSError(errno.ENOSPC, "injected")
            return super().open(path, flags, mode, dir_fd=dir_fd)

    backend = open_backend(FailFirstLogCreate())
    await backend.create(meta("s"))
    with pytest.raises(StorageError):
        await backend.append("s", batch(0))
    assert not await backend.has("s")
    await backend.append("s", batch(0))  # nothing half-made stands in the way
    assert (await backend.load("s")).events == raws([batch(0)])


async def test_a_poisoned_session_recovers_by_claiming_again(
    store: Path, open_backend: Open
) -> None:
    class FailOneFsync(NoSyncFileOps):
        count = 0

        def fsync(self, fd: int) -> None:
            self.count += 1
            if self.count == 3:
                raise OSError(errno.EIO, "injected")

    backend = open_backend(FailOneFsync())
    await backend.create(meta("s"))
    await backend.append("s", batch(0))
    seq = len(batch(0))
    flush = batch(seq, 1)
    # Written, then the fsync failed: the flush may be stored (here it is),
    # so it is reported as of unknown outcome, never as not written (R17).
    with pytest.raises(FlushOutcomeUnknownError) as failed:
        await backend.append("s", flush)
    assert (failed.value.first_seq, failed.value.last_seq) == (
        flush[0].seq,
        flush[-1].seq,
    )
    assert not failed.value.fenced
    with pytest.raises(FlushOutcomeUnknownError):
        await backend.append("s", flush)  # poisoned: refused again, still unknown
    await backend.claim("s")  # a new handle: rescan (the flush did land)
    loaded = await backend.load("s")
    assert loaded.events == raws([batch(0), flush])
    await backend.append("s", batch(len(loaded.events), 2))


async def test_malformed_event_bytes_are_refused_before_writing(
    store: Path, open_backend: Open
) -> None:
    backend = open_backend()
    await backend.create(meta("s"))
    for raw in (b"[1]", b'{"a":\n1}', b'{"mark":"commit","flush":1}', b"{}"):
        with pytest.raises(EventRejectedError):
            await backend.append("s", [EventRecord(0, "x", 1, raw)])
    assert not await backend.has("s")


async def test_a_log_planted_under_a_created_session_is_not_overwritten(
    store: Path, open_backend: Open
) -> None:
    backend = open_backend()
    await backend.create(meta("s"))
    other = store.parent / "other"
    write_session(other, [batch(0, tag="planted")])
    target = store / group_name("/w")
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    planted = target / log_file(other).name
    shutil.copyfile(log_file(other), planted)
    with pytest.raises(SessionExistsError):
        await backend.append("s", batch(0))
    assert b"planted" in planted.read_bytes()


async def test_a_foreign_lock_file_is_refused(store: Path, open_backend: Open) -> None:
    backend = open_backend()
    await backend.create(meta("s"))
    await backend.append("s", batch(0))
    await backend.release("s")
    lock = store / "locks" / f"{session_name('s')}.lock"
    os.chown(lock, 65534, 65534)
    with pytest.raises(StorageError, match="lock"):
        await backend.claim("s")


async def test_a_lock_file_with_loose_mode_is_tightened(
    store: Path, open_backend: Open
) -> None:
    backend = open_backend()
    await backend.create(meta("s"))
    await backend.append("s", batch(0))
    await backend.release("s")
    lock = store / "locks" / f"{session_name('s')}.lock"
    lock.chmod(0o644)
    await backend.claim("s")
    assert lock.stat().st_mode & 0o777 == 0o600


async def test_a_store_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("not a directory")
    backend = JsonlPersistence(path)
    with pytest.raises(StorageError):
        await backend.create(meta("s"))
    with pytest.raises(StorageError):
        await backend.load("s")
    await backend.aclose()


async def test_a_store_under_a_file_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    backend = JsonlPersistence(tmp_path / "file" / "store")
    with pytest.raises(StorageError):
        await backend.create(meta("s"))
    await backend.aclose()


async def test_reads_of_a_missing_store_create_nothing(tmp_path: Path) -> None:
    backend = JsonlPersistence(tmp_path / "absent" / "store")
    assert not await backend.has("s")
    assert (await backend.list()).items == []
    with pytest.raises(SessionNotFoundError):
        await backend.load("s")
    with pytest.raises(SessionNotFoundError):
        await backend.delete("s")
    with pytest.raises(SessionNotFoundError):
        await backend.update("s", SessionSummary())
    await backend.aclose()
    assert not (tmp_path / "absent").exists()


async def test_a_group_directory_owned_by_someone_else_is_not_used(
    store: Path, open_backend: Open
) -> None:
    write_session(store, [batch(0)])
    group = first_group(store)
    os.chown(group, 65534, 65534)
    backend = open_backend()
    # Not read, and not reported missing either: the reason is named.
    with pytest.raises(StorageError, match="owned by uid 65534") as caught:
        await backend.has("s")
    assert str(group) in str(caught.value)
    assert not await backend.has("other")


async def test_delete_removes_everything_and_a_forced_one_fences_a_holder(
    store: Path, open_backend: Open
) -> None:
    holder = open_backend()
    await holder.create(meta("s", title="t"))
    await holder.append("s", batch(0))
    log = log_file(store)
    with log.open("ab") as f:
        f.write(b"torn")
    other = open_backend()
    await holder.release("s")
    await other.claim("s")  # cuts the tail into quarantine
    await other.release("s")
    await holder.claim("s")
    with pytest.raises(SessionHeldError):
        await open_backend().delete("s")
    assert await other.has("s")
    await open_backend().delete("s", force=True)
    names = file_names(store)
    assert names <= {CATALOG, "catalog.lock", f"{session_name('s')}.lock"}
    with pytest.raises(SessionDeletedError):
        await holder.append("s", batch(len(batch(0)), 1))
    assert [m.id for m in (await other.list()).items] == []


async def test_delete_leaves_no_byte_of_the_session_in_any_file(
    store: Path, open_backend: Open
) -> None:
    # What the kit's scan cannot stage: a torn tail kept in quarantine, and
    # temporary files a crash left (the session's and the catalog's).
    marker = b"zq-quarantined-and-temporary"
    backend = open_backend()
    await backend.create(meta("s", title="t"))
    await backend.append("s", batch(0))
    kept = open_backend()
    await kept.create(meta("kept"))
    await kept.append("kept", batch(0))
    await backend.release("s")
    with log_file(store, "s").open("ab") as f:
        f.write(b'{"type":"user/message","seq":99,"data":"' + marker)
    other = open_backend()
    await other.claim("s")  # cuts the torn tail into quarantine
    await other.release("s")
    group = log_file(store, "s").parent
    (group / f".{session_name('s')}.0123456789abcdef.meta.tmp").write_bytes(marker)
    (store / ".catalog.0123456789abcdef.jsonl.tmp").write_bytes(marker)
    assert files_holding(store, marker)
    await open_backend().delete("s")
    assert files_holding(store, marker) == []
    stem = session_name("s") + "."
    assert not [name for name in file_names(store) if stem in name]
    assert [m.id for m in (await kept.list()).items] == ["kept"]


async def test_update_by_a_non_owner_keeps_the_watermark_and_the_owner_keeps_it(
    store: Path, open_backend: Open
) -> None:
    owner = open_backend()
    await owner.create(meta("s"))
    await owner.append("s", batch(0))
    await owner.update("s", SessionSummary(title="owner"))
    await open_backend().update("s", SessionSummary(title="bystander", status="idle"))
    await owner.release("s")  # re-reads the sidecar: the bystander's title stays
    loaded = await open_backend().load("s")
    assert loaded.meta.summary.title == "bystander"
    assert loaded.meta.summary.status == "idle"


async def test_a_fenced_owner_updates_like_a_bystander(
    store: Path, open_backend: Open
) -> None:
    owner = open_backend()
    await owner.create(meta("s"))
    await owner.append("s", batch(0))
    await open_backend().claim("s", steal=True)
    await owner.update("s", SessionSummary(title="late"))
    assert (await open_backend().load("s")).meta.summary.title == "late"


async def test_a_damaged_header_refuses_a_bystander_update(
    store: Path, open_backend: Open
) -> None:
    log = write_session(store, [batch(0)])
    data = bytearray(log.read_bytes())
    data[5] ^= 1
    log.write_bytes(bytes(data))
    with pytest.raises(SessionCorruptError):
        await open_backend().update("s", SessionSummary(title="x"))


async def test_the_watermark_refuses_a_claim_too(
    store: Path, open_backend: Open
) -> None:
    owner = JsonlPersistence(store, ops=NoSyncFileOps())._impl
    owner.create(meta("s"))
    owner.append("s", batch(0))
    owner.append("s", batch(len(batch(0)), 1))
    owner.update("s", SessionSummary(title="covered"))
    owner.close()
    log = log_file(store)
    log.write_bytes(log.read_bytes()[:-5])  # the last acknowledged flush is torn
    with pytest.raises(SessionCorruptError):
        await open_backend().claim("s")


async def test_closing_reports_a_release_that_failed(store: Path) -> None:
    class FailReleases(NoSyncFileOps):
        fail = False

        def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
            if self.fail and bytes(data[:18]) == b'{"mark":"release",':
                raise OSError(errno.EIO, "injected")
            return super().pwrite(fd, data, offset)

    ops = FailReleases()
    backend = JsonlPersistence(store, ops=ops)
    for name in ("a", "b"):
        await backend.create(meta(name))
        await backend.append(name, batch(0))
    ops.fail = True
    with pytest.raises(StorageError):
        await backend.aclose()
    await backend.aclose()  # idempotent
    for name in ("a", "b"):  # both were let go anyway
        other = JsonlPersistence(store)
        await other.claim(name)
        await other.aclose()


# -- names ---------------------------------------------------------------------


async def test_names_are_short_or_hashed_and_recognisable() -> None:
    short = session_name("abc")
    assert short.startswith("s-")
    assert is_session_log(short + ".jsonl") == short
    long = session_name("x" * 200)
    assert long.startswith("h-")
    assert len(long) == 66
    assert is_session_log(long + ".jsonl") == long
    assert is_session_log(".s-abc.1234.jsonl.tmp") is None
    assert is_session_log("s-ABC.jsonl") is None
    assert group_name(None) == "g-none"
    assert group_name("/").startswith("g-root-")
    assert group_name("/home/me/Proj ëct") != group_name("/home/me/proj ëct")


# -- configuration and the host ------------------------------------------------


async def test_the_host_builds_the_backend_from_configuration(tmp_path: Path) -> None:
    config = Config(
        persistence="jsonl",
        plugins=("jsonl",),
        backends={"jsonl": {"path": str(tmp_path / "store"), "threads": 2}},
    )
    async with Host(config) as host:
        backend = host.require_persistence()
        session = host.sessions.create()
        from turnkeep.events import UserMessageData

        session.append(UserMessageData(text="hello"))
        await session.flush()
        assert await backend.has(session.id)
    assert any((tmp_path / "store").glob("g-*/*.jsonl"))


async def test_the_environment_sets_the_path(tmp_path: Path) -> None:
    config = load_config(
        tmp_path,
        env={
            "TURNKEEP_PERSISTENCE": "jsonl",
            "TURNKEEP_JSONL__PATH": str(tmp_path / "e"),
        },
    )
    config = Config(
        persistence=config.persistence, plugins=("jsonl",), backends=config.backends
    )
    async with Host(config) as host:
        session = host.sessions.create()
        from turnkeep.events import UserMessageData

        session.append(UserMessageData(text="hi"))
        await session.flush()
    assert any((tmp_path / "e").glob("g-*/*.jsonl"))


async def test_bad_options_are_configuration_errors(tmp_path: Path) -> None:
    for options in ({"threads": 0}, {"unknown": 1}, {"max_event_bytes": -1}):
        config = Config(
            persistence="jsonl", plugins=("jsonl",), backends={"jsonl": options}
        )
        with pytest.raises(ConfigurationError):
            await Host(config).start()


async def test_the_default_store_is_in_the_user_data_directory() -> None:
    backend = JsonlPersistence.from_config(JsonlConfig())
    assert backend.path == default_path().absolute()
    assert "turnkeep" in str(backend.path)


# -- concurrency ----------------------------------------------------------------


async def test_many_sessions_flush_concurrently(
    store: Path, open_backend: Open
) -> None:
    backend = open_backend()
    names = [f"c{n}" for n in range(20)]
    for name in names:
        await backend.create(meta(name))

    async def drive(name: str) -> list[bytes]:
        seq = 0
        written: list[bytes] = []
        for index in range(10):
            flush = turn(seq, index, seed=name)
            await backend.append(name, flush)
            written += [r.raw for r in flush]
            seq += len(flush)
        return written

    results = await asyncio.gather(*(drive(name) for name in names))
    reader = open_backend()
    for name, written in zip(names, results, strict=True):
        assert (await reader.load(name)).events == written


async def test_concurrent_appends_to_one_session_never_interleave(
    store: Path, open_backend: Open
) -> None:
    backend = open_backend()
    await backend.create(meta("s"))
    first = batch(0)
    outcomes = await asyncio.gather(
        *(backend.append("s", first) for _ in range(5)), return_exceptions=True
    )
    assert sum(o is None for o in outcomes) == 1
    assert all(isinstance(o, SequenceError) for o in outcomes if o is not None)
    assert (await backend.load("s")).events == raws([first])


async def test_a_cancelled_flush_finishes_and_the_next_one_waits_for_it(
    store: Path, open_backend: Open
) -> None:
    gate = threading.Event()
    entered = threading.Event()

    class SlowFsync(NoSyncFileOps):
        hold = False

        def fsync(self, fd: int) -> None:
            if self.hold:
                entered.set()
                gate.wait(timeout=10)

    ops = SlowFsync()
    backend = open_backend(ops)
    await backend.create(meta("s"))
    await backend.append("s", batch(0))
    ops.hold = True
    second = batch(len(batch(0)), 1)
    task = asyncio.create_task(backend.append("s", second))
    await asyncio.to_thread(entered.wait, 10)  # the flush is inside fsync now
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    ops.hold = False
    retry = asyncio.create_task(backend.append("s", second))
    gate.set()  # the cancelled flush completes; the retry ran after it
    with pytest.raises(SequenceError) as info:
        await retry
    assert info.value.expected == len(batch(0)) + len(second)
    assert (await backend.load("s")).events == raws([batch(0), second])
