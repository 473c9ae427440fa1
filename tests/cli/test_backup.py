"""`turnkeep backup DEST`: a consistent copy of a live store, and its restore.

JSONL and SQLite: a backup taken while another process keeps flushing
(`_flusher.py`) opens as a store on which `turnkeep verify` passes, and
every session in it holds whole flushes only. PostgreSQL: the backup is one
export per session plus `index.json`, and `turnkeep import` restores each
into a fresh store with the same events. A DEST that exists and is not an
empty folder is refused, nothing written.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from tests.cli.conftest import make_store
from tests.cli.support import Store, cli, converse, one_line_error
from tests.plugins.jsonl.helpers import meta, raws, turns

from turnkeep.codec import EventCodec, EventRecord
from turnkeep.events import SessionEvent, UserMessage
from turnkeep.meta import SessionSummary
from turnkeep.persistence import LoadedSession
from turnkeep_jsonl import JsonlPersistence, OsFileOps
from turnkeep_jsonl.names import LOG_SUFFIX, SIDECAR_SUFFIX

FLUSHER = Path(__file__).parent / "_flusher.py"
_TEXT = re.compile(r"f(\d+):(\d+)/(\d+)")


def decoded(loaded: LoadedSession) -> list[SessionEvent]:
    return EventCodec().decode_log(loaded.events, session_id=loaded.meta.id)


def flushes(events: list[SessionEvent]) -> int:
    """How many whole flushes of `_flusher.py` `events` hold (fails on part of one)."""
    count = 0
    at = 0
    while at < len(events):
        first = events[at]
        assert isinstance(first, UserMessage)
        match = _TEXT.fullmatch(first.data.text)
        assert match is not None, first.data.text
        number, size = int(match[1]), int(match[3])
        assert number == count, f"flush {count} expected at seq {at}, found {number}"
        assert at + size <= len(events), f"flush {number} cut after seq {at}"
        texts = [
            e.data.text for e in events[at : at + size] if isinstance(e, UserMessage)
        ]
        assert texts == [f"f{number}:{i}/{size}" for i in range(size)]
        at += size
        count += 1
    return count


def open_copy(spec: str) -> Store:
    name, _, path = spec.partition(":")
    return Store(name, Path(path))


def test_backup_of_a_live_store_verifies_and_holds_whole_flushes(
    store: Store, tmp_path: Path
) -> None:
    flusher = subprocess.Popen(
        [
            sys.executable,
            str(FLUSHER),
            store.name,
            msgspec.json.encode(store.options()).decode(),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    reports: list[dict[str, object]] = []
    try:
        assert flusher.stdout is not None
        assert flusher.stdout.readline() == b"ready\n", "the writer did not start"
        for n in range(3):
            time.sleep(0.2)  # let the writer get some flushes ahead
            result = cli("backup", str(tmp_path / f"b{n}"), "--json", store=store)
            assert result.exit_code == 0, result.stderr
            reports.append(msgspec.json.decode(result.stdout))
        assert flusher.poll() is None, "the writer stopped while the backups ran"
    finally:
        assert flusher.stdin is not None
        flusher.stdin.close()
        assert flusher.wait(timeout=120) == 0
        assert flusher.stdout is not None
        flusher.stdout.close()
    final = sum(len(asyncio.run(store.load(f"live-{i}")).events) for i in range(3))
    counts: list[int] = []  # events in each copy
    for report in reports:
        assert report["kind"] == "store"
        copy = open_copy(str(report["store"]))
        assert copy.name == store.name
        assert (copy.path.stat().st_mode & 0o777) == 0o600 or copy.name == "jsonl"
        verified = cli("verify", "--all", store=copy)
        assert verified.exit_code == 0, verified.stdout + verified.stderr
        assert sorted(asyncio.run(copy.ids())) == ["live-0", "live-1", "live-2"]
        events = 0
        for i in range(3):
            loaded = asyncio.run(copy.load(f"live-{i}"))
            assert flushes(decoded(loaded)) >= 1
            events += len(loaded.events)
        assert report["events"] == events
        assert report["sessions"] == 3
        assert 0 < events <= final
        counts.append(events)
    # Copies of the moving store, each taken later than the one before, not
    # of its end. (The last backup may have been taken after the writer's
    # last flush: on a busy machine the writer need not run again between
    # that copy and the end of its input. Two more backups, and the sleeps
    # before them, follow the first.)
    assert counts == sorted(counts), counts
    assert counts[0] < final, (counts, final)
    # Files and folders of the copy are private.
    for path in (tmp_path / "b0").rglob("*"):
        assert path.stat().st_mode & 0o777 in (0o600, 0o700), path


def test_backup_copies_a_torn_jsonl_log_up_to_its_last_flush(
    jsonl_store: Store, tmp_path: Path
) -> None:
    from tests.cli.support import log_file, tear

    asyncio.run(converse(jsonl_store, "s"))
    cut = tear(jsonl_store, "s")
    result = cli("backup", str(tmp_path / "b"), "--json", store=jsonl_store)
    assert result.exit_code == 0, result.stderr
    copy = open_copy(msgspec.json.decode(result.stdout)["store"])
    assert (
        log_file(copy, "s").read_bytes()
        == log_file(jsonl_store, "s").read_bytes()[:cut]
    )
    assert cli("verify", "--all", store=copy).exit_code == 0


def test_backup_leaves_out_a_damaged_jsonl_session_and_says_so(
    jsonl_store: Store, tmp_path: Path
) -> None:
    from tests.cli.support import damage

    asyncio.run(converse(jsonl_store, "good"))
    asyncio.run(converse(jsonl_store, "bad"))
    damage(jsonl_store, "bad")
    result = cli("backup", str(tmp_path / "b"), "--json", store=jsonl_store)
    assert result.exit_code == 1
    report = msgspec.json.decode(result.stdout)
    assert [s["session_id"] for s in report["skipped"]] == ["bad"]
    assert "acknowledged" in report["skipped"][0]["reason"]
    assert asyncio.run(open_copy(report["store"]).ids()) == ["good"]


def test_backup_of_postgres_restores_with_import(
    pg_store: Store, tmp_path: Path
) -> None:
    asyncio.run(converse(pg_store, "one"))
    asyncio.run(converse(pg_store, "two", prompts=("hi",)))
    dest = tmp_path / "pg-backup"
    result = cli("backup", str(dest), store=pg_store)
    assert result.exit_code == 0, result.stderr
    assert "backed up 2 sessions" in result.stdout
    index = msgspec.json.decode((dest / "index.json").read_bytes())
    assert index["format"] == "turnkeep-backup"
    assert index["backend"] == "postgres"
    fresh = make_store("jsonl", tmp_path / "restored")
    for entry in index["sessions"]:
        file = dest / entry["file"]
        assert file.stat().st_mode & 0o777 == 0o600
        restored = cli("import", str(file), "--id", entry["id"], store=fresh)
        assert restored.exit_code == 0, restored.stderr
    assert sorted(asyncio.run(fresh.ids())) == ["one", "two"]
    for sid in ("one", "two"):
        original = decoded(asyncio.run(pg_store.load(sid)))
        copy = decoded(asyncio.run(fresh.load(sid)))
        assert len(copy) == len(original) > 0
        for a, b in zip(original, copy, strict=True):
            assert (type(a), a.seq, a.time) == (type(b), b.seq, b.time)
            if isinstance(a, UserMessage):
                assert isinstance(b, UserMessage)
                assert b.data.text == a.data.text  # imported words: untrusted
            else:
                assert b.data == a.data


def test_backup_refuses_a_destination_that_is_not_empty(
    store: Store, tmp_path: Path
) -> None:
    asyncio.run(converse(store, "s"))
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    for dest in (full, a_file):
        result = cli("backup", str(dest), store=store)
        assert result.exit_code == 1
        assert "exists and is not an empty folder" in one_line_error(result)
    assert sorted(p.name for p in full.iterdir()) == ["keep.txt"]
    assert a_file.read_text() == "mine"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("backup", str(empty), "--json", store=store)
    assert result.exit_code == 0, result.stderr
    copy = open_copy(msgspec.json.decode(result.stdout)["store"])
    assert asyncio.run(copy.ids()) == ["s"]


@pytest.mark.parametrize("flag", [[], ["--json"]])
def test_backup_says_what_it_copied(
    store: Store, tmp_path: Path, flag: list[str]
) -> None:
    asyncio.run(converse(store, "s"))
    events = len(asyncio.run(store.load("s")).events)
    result = cli("backup", str(tmp_path / "b"), *flag, store=store)
    assert result.exit_code == 0, result.stderr
    if flag:
        report = msgspec.json.decode(result.stdout)
        assert (report["sessions"], report["events"]) == (1, events)
        assert report["bytes"] > 0
        assert report["destination"] == str(tmp_path / "b")
    else:
        assert f"backed up 1 sessions, {events} events" in result.stdout
        assert "turnkeep --store" in result.stdout


class _WriteBetweenReads(OsFileOps):
    """Runs `between` once: as a backup opens the second of a session's two
    files (sidecar and log) for reading, whichever order it reads them in.

    It forces the window a live backup's writer rarely hits: another
    writer's flush lands (and its sidecar with it) between the two reads.
    """

    def __init__(self, between: Callable[[], None]) -> None:
        self.between = between
        self.armed = False
        self.read: list[str] = []

    def open(
        self, path: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None
    ) -> int:
        kind = next((s for s in (SIDECAR_SUFFIX, LOG_SUFFIX) if path.endswith(s)), "")
        reading = flags & os.O_ACCMODE == os.O_RDONLY
        if self.armed and kind and reading and kind not in self.read:
            self.read.append(kind)
            if len(self.read) == 2:
                self.armed = False
                self.between()
        return super().open(path, flags, mode, dir_fd=dir_fd)


def test_a_jsonl_backup_never_pairs_an_old_log_with_a_newer_sidecar(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    flushes = turns(3, tag="backup")
    asyncio.run(_back_up_while_another_writer_flushes(root, flushes))
    copy = tmp_path / "copy"
    assert cli("verify", "--all", store=Store("jsonl", copy)).exit_code == 0


async def _back_up_while_another_writer_flushes(
    root: Path, flushes: list[list[EventRecord]]
) -> None:
    writer = JsonlPersistence(root)
    await writer.create(meta("s", title="before"))
    for batch in flushes[:2]:
        await writer.append("s", batch)
    await writer.update("s", SessionSummary(title="before"))  # sidecar: flush 2
    await writer.aclose()

    async def another_writer() -> None:
        other = JsonlPersistence(root)
        try:
            await other.claim("s")
            await other.append("s", flushes[2])
            await other.update("s", SessionSummary(title="after"))  # flush 3
        finally:
            await other.aclose()

    ops = _WriteBetweenReads(lambda: asyncio.run(another_writer()))
    backing_up = JsonlPersistence(root, ops=ops)
    ops.armed = True
    try:
        report = await backing_up.backup(root.parent / "copy")
    finally:
        await backing_up.aclose()
    assert len(ops.read) == 2, "the backup read no sidecar and log of the session"
    assert report.skipped == []
    assert (report.sessions, report.events) == (1, len(raws(flushes)))
    copy = JsonlPersistence(root.parent / "copy")
    try:
        loaded = await copy.load("s")
    finally:
        await copy.aclose()
    # The sidecar was read first (flush 2), the log after the third flush.
    assert loaded.events == raws(flushes)
