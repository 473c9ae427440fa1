"""Behaviour of the JSONL backend beyond the conformance kit, and its error paths.

Catalog (rebuilt when missing or damaged, compacted, never trusted for a
session a writer holds), listing across instances, takeover paths (in
place vs rewrite), reconciliation of a log changed under its owner, lazy
creation, retries after failures, configuration and the host, and the
typed error of every refusal the backend makes.
"""

from __future__ import annotations

import errno
import os
import shutil
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
    SessionCorruptError,
    SessionExistsError,
    SessionFencedError,
    SessionNotFoundError,
    StorageError,
)
from turnkeep.host import Host
from turnkeep.meta import SessionSummary
from turnkeep_jsonl import JsonlConfig, JsonlPersistence, default_path
from turnkeep_jsonl.format import Owner, encode_owner
from turnkeep_jsonl.names import (
    CATALOG,
    QUARANTINE_DIR,
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


def first_group(root: Path) -> Path:
    return next(root.glob("g-*"))


# -- catalog and listing -------------------------------------------------------


async def test_listing_survives_a_missing_then_rebuilt_catalog(
    store: Path, open_backend: Open
) -> None:
    writer = open_backend()
    for n in range(5):
        await writer.create(meta(f"s{n}", title=f"title {n}"))
        await writer.append(f"s{n}", batch(0, n))
        await writer.release(f"s{n}")
    (store / CATALOG).unlink()
    reader = open_backend()
    listed = await reader.list()
    assert sorted(m.id for m in listed.items) == [f"s{n}" for n in range(5)]
    assert {m.summary.title for m in listed.items} == {f"title {n}" for n in range(5)}
    assert not (store / CATALOG).exists(), "list wrote the catalog"
    await writer.create(meta("new"))
    await writer.append("new", batch(0))  # a writer rebuilds it
    assert (store / CATALOG).exists()
    assert len((await open_backend().list()).items) == 6


async def test_a_damaged_catalog_is_rebuilt_or_partly_trusted(
    store: Path, open_backend: Open
) -> None:
    writer = open_backend()
    for n in range(3):
        await writer.create(meta(f"s{n}"))
        await writer.append(f"s{n}", batch(0, n))
        await writer.release(f"s{n}")
    data = (store / CATALOG).read_bytes()
    # A broken head: unusable, the files are read instead.
    (store / CATALOG).write_bytes(b"garbage" + data)
    assert len((await open_backend().list()).items) == 3
    # A damaged snapshot line: the others still count; a torn last line too.
    lines = data.split(b"\n")
    lines[1] = lines[1].replace(b"entry", b"entrx")
    (store / CATALOG).write_bytes(b"\n".join(lines) + b'{"mark":"ent')
    reader = open_backend()
    listed = {m.id for m in (await reader.list()).items}
    assert listed <= {"s0", "s1", "s2"}
    assert len(listed) >= 2


async def test_the_catalog_is_compacted(store: Path, open_backend: Open) -> None:
    writer = JsonlPersistence(store, ops=NoSyncFileOps())._impl
    writer.create(meta("s"))
    writer.append("s", batch(0))
    for n in range(400):
        writer.release("s")
        writer.claim("s", False)
        writer.update("s", SessionSummary(title=f"t{n}" * 30))
    writer.release("s")
    writer.close()
    # 800 lines of a few hundred bytes each were appended; compaction keeps
    # the file near one line per session.
    assert (store / CATALOG).stat().st_size < 150_000
    (item,) = (await open_backend().list()).items
    assert item.summary.title == "t399" * 30


async def test_another_writers_session_is_listed_from_its_files(
    store: Path, open_backend: Open
) -> None:
    writer = open_backend()
    reader = open_backend()
    await writer.create(meta("s", title="first"))
    seq = 0
    for index in range(3):
        flush = batch(seq, index)
        await writer.append("s", flush)
        seq += len(flush)
        (item,) = (await reader.list()).items
        assert item.summary.event_count == seq
        assert item.summary.updated_at == flush[-1].time
    await writer.update("s", SessionSummary(title="second"))
    (item,) = (await reader.list()).items
    assert item.summary.title == "second"


async def test_paging_merges_settled_and_moving_sessions(
    store: Path, open_backend: Open
) -> None:
    writer = open_backend()
    for n in range(12):
        await writer.create(meta(f"s{n:02}"))
        await writer.append(f"s{n:02}", batch(0, n))
        if n % 3:
            await writer.release(f"s{n:02}")  # the others stay held (moving)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await writer.list(limit=5, cursor=cursor)
        seen += [m.id for m in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sorted(seen) == [f"s{n:02}" for n in range(12)]
    assert len(seen) == 12


# -- takeover paths ------------------------------------------------------------


def stamp_owner(log: Path, **changes: object) -> None:
    """Append an owner line for a made-up previous owner (as if it wrote last)."""
    data = log.read_bytes()
    from turnkeep_jsonl.scan import scan

    state = scan(
        lambda offset, n: data[offset : offset + n],
        len(data),
        session_id="s",
        collect=False,
        max_line=1 << 20,
    ).state
    fields: dict[str, object] = {
        "flush": state.flush + 1,
        "epoch": state.epoch + 1,
        "seq": state.seq,
        "time": state.time,
        "pid": os.getpid(),
        "host": "",
        "boot": "",
    }
    fields.update(changes)
    log.write_bytes(data + encode_owner(Owner(**fields)))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("owner", "rewrites"),
    [
        ({"host": "elsewhere"}, True),  # cannot tell: assume alive
        ({"pid": 1}, True),  # alive (init), here
        ({"pid": 2**22 + 12345}, False),  # no such process: gone
    ],
    ids=["other-host", "live-pid", "dead-pid"],
)
async def test_a_claim_rewrites_when_the_last_owner_may_live(
    store: Path, open_backend: Open, owner: dict[str, object], rewrites: bool
) -> None:
    from turnkeep_jsonl.handle import BOOT, HOST

    log = write_session(store, [batch(0)])
    stamp_owner(log, **{"host": HOST, "boot": BOOT, **owner})
    inode = log.stat().st_ino
    backend = open_backend()
    await backend.append("s", batch(len(batch(0)), 1))
    assert (log.stat().st_ino != inode) == rewrites
    assert (await backend.load("s")).events == raws([batch(0), batch(len(batch(0)), 1)])


async def test_a_log_grown_by_valid_units_fences_its_holder(
    store: Path, open_backend: Open
) -> None:
    holder = open_backend()
    await holder.create(meta("s"))
    await holder.append("s", batch(0))
    log = log_file(store)
    # Someone else appends a whole valid unit behind the holder's back.
    stamp_owner(log, pid=2**22 + 1)
    with pytest.raises(SessionFencedError):
        await holder.append("s", batch(len(batch(0)), 1))
    with pytest.raises(SessionFencedError):
        await holder.append("s", batch(len(batch(0)), 1))  # stays fenced


async def test_a_log_cut_short_fences_its_holder(
    store: Path, open_backend: Open
) -> None:
    holder = open_backend()
    await holder.create(meta("s"))
    await holder.append("s", batch(0))
    await holder.append("s", batch(len(batch(0)), 1))
    log = log_file(store)
    log.write_bytes(log.read_bytes()[:-10])
    with pytest.raises(SessionFencedError):
        await holder.append("s", batch(999))


async def test_a_torn_tail_under_a_live_holder_is_repaired_and_kept(
    store: Path, open_backend: Open
) -> None:
    holder = open_backend()
    await holder.create(meta("s"))
    await holder.append("s", batch(0))
    log = log_file(store)
    with log.open("ab") as f:
        f.write(b'{"type":"user/message","seq":')
    await holder.append("s", batch(len(batch(0)), 1))
    (kept,) = (store / QUARANTINE_DIR).iterdir()
    assert kept.read_bytes() == b'{"type":"user/message","seq":'
    assert (await holder.load("s")).events == raws([batch(0), batch(len(batch(0)), 1)])


class StealDuringFsync(NoSyncFileOps):
    """Lets another owner take the log over while our flush is being fsynced."""

    def __init__(self, on_fsync: Callable[[], None]) -> None:
        self.on_fsync = on_fsync
        self.armed = False

    def fsync(self, fd: int) -> None:
        if self.armed:
            self.armed = False
            self.on_fsync()


async def test_a_takeover_between_write_and_acknowledgement_is_not_acknowledged(
    store: Path, open_backend: Open
) -> None:
    copied = 0

    def rename_over() -> None:
        # What a takeover's rewrite does: the log as it was before our write
        # goes to a new file renamed onto the name.
        log = log_file(store)
        new = log.with_suffix(".new")
        new.write_bytes(log.read_bytes()[:copied])
        new.chmod(0o600)
        os.replace(new, log)

    ops = StealDuringFsync(rename_over)
    holder = open_backend(ops)
    await holder.create(meta("s"))
    await holder.append("s", batch(0))
    copied = log_size(store)
    ops.armed = True
    with pytest.raises(SessionFencedError):
        await holder.append("s", batch(len(batch(0)), 1))
    # The flush went to the orphaned file: the log has only the first one.
    assert (await open_backend().load("s")).events == raws([batch(0)])


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
    with pytest.raises(StorageError):
        await backend.append("s", batch(seq, 1))
    with pytest.raises(StorageError):
        await backend.append("s", batch(seq, 1))  # poisoned: refused again
    await backend.claim("s")  # a new handle: rescan (the flush did land)
    loaded = await backend.load("s")
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


async def test_a_group_directory_owned_by_someone_else_is_ignored(
    store: Path, open_backend: Open
) -> None:
    write_session(store, [batch(0)])
    os.chown(first_group(store), 65534, 65534)
    backend = open_backend()
    assert not await backend.has("s")


async def test_delete_removes_everything_and_fences_a_holder(
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
    await open_backend().delete("s")
    names = file_names(store)
    assert names <= {CATALOG, "catalog.lock", f"{session_name('s')}.lock"}
    with pytest.raises(SessionFencedError):
        await holder.append("s", batch(len(batch(0)), 1))
    assert [m.id for m in (await other.list()).items] == []


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
        from turnkeep.events import UserMessage, UserMessageData

        session.append(UserMessage, UserMessageData(text="hello"))
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
        from turnkeep.events import UserMessage, UserMessageData

        session.append(UserMessage, UserMessageData(text="hi"))
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
