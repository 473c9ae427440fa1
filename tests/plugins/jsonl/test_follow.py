"""JSONL `wait_for_commit`: inotify wakes the follower, polling is the fallback.

- `Inotify` reports a watched file's writes and its directory's renames.
- With both polling intervals set to a minute, a follower still wakes at
  once on a commit (by another instance or another process), a takeover
  (the log renamed over, then written) and a delete: only inotify can have
  woken it; writes beside the log do not end its wait.
- Where inotify cannot be had (`inotify_init1` or `inotify_add_watch`
  fails) or `follow="poll"` is configured, the follower polls, and still
  wakes.
- No descriptor is left open after many waits, woken, timed out, refused or
  cancelled.
"""

from __future__ import annotations

import asyncio
import errno
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from tests.support.waiting import eventually

from support.faultyops import NoSyncFileOps
from turnkeep.conformance import BackendHarness
from turnkeep.errors import SessionNotFoundError
from turnkeep_jsonl import JsonlPersistence, follow
from turnkeep_jsonl.config import JsonlConfig
from turnkeep_jsonl.inotify import (
    IN_MODIFY,
    IN_MOVED_TO,
    Event,
    Inotify,
    wait_closed,
)

linux = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="inotify is Linux-only"
)

_PROMPT = 10.0
"""A woken follower returns within this: far less than the slowed polls.

Well over what a wake takes (milliseconds: a hop to the backend's thread
and one read), as CI's busy machine can take a second or more for it;
a follower left to the slowed polls takes `within` (30 s) or more.
"""
_SLOW = 60.0
"""Both polling intervals, slowed so that only inotify can wake in time."""

Open = Callable[[], JsonlPersistence]


@pytest_asyncio.fixture
async def open_backend(tmp_path: Path) -> AsyncIterator[Open]:
    """Backend instances over one store (as separate processes would have)."""
    opened: list[JsonlPersistence] = []

    def open_one() -> JsonlPersistence:
        backend = JsonlPersistence(tmp_path / "store", ops=NoSyncFileOps())
        opened.append(backend)
        return backend

    yield open_one
    for backend in opened:
        await backend.aclose()


@pytest.fixture
def slow_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polling and the safety net at a minute: a prompt wake is inotify's."""
    monkeypatch.setattr(follow, "POLL_SECONDS", _SLOW)
    monkeypatch.setattr(follow, "SAFETY_SECONDS", _SLOW)


class Opens:
    """Counts `Inotify.open`, optionally failing it as a full system would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fail: bool) -> None:
        self.calls = 0
        real = Inotify.open

        def counted() -> Inotify:
            self.calls += 1
            if fail:
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
            return real()

        monkeypatch.setattr(Inotify, "open", staticmethod(counted))


async def _stored(writer: JsonlPersistence, count: int = 4) -> str:
    meta = BackendHarness.meta()
    await writer.create(meta)
    await writer.append(meta.id, BackendHarness.records(0, count))
    return meta.id


async def _woken_by(
    follower: JsonlPersistence, sid: str, after: int, act: Callable[[], object]
) -> tuple[int, float]:
    """The follower's answer when `act` (awaited if async) runs, and how soon."""
    task = asyncio.ensure_future(follower.wait_for_commit(sid, after, 30.0))
    await asyncio.sleep(0.1)
    assert not task.done(), "the follower returned before anything happened"
    done = act()
    if asyncio.iscoroutine(done):
        await done
    acted = time.monotonic()
    last = await task
    return last, time.monotonic() - acted


def _open_fds() -> int:
    assert wait_closed(), "an inotify instance handed over was never closed"
    return len(os.listdir("/proc/self/fd"))


# -- inotify ------------------------------------------------------------------


@linux
def test_inotify_reports_writes_and_renames(tmp_path: Path) -> None:
    log, other = tmp_path / "log", tmp_path / "other"
    log.write_bytes(b"")
    with Inotify.open() as inotify:
        file_wd = inotify.watch(str(log), IN_MODIFY)
        dir_wd = inotify.watch(str(tmp_path), IN_MOVED_TO, directory=True)
        assert inotify.read() == []  # nothing yet, and no blocking
        with log.open("ab") as f:
            f.write(b"x")
        other.write_bytes(b"y")
        other.replace(log)
        assert inotify.read()[:2] == [
            Event(file_wd, IN_MODIFY, b""),
            Event(dir_wd, IN_MOVED_TO, b"log"),
        ]
        with pytest.raises(FileNotFoundError):
            inotify.watch(str(tmp_path / "missing"), IN_MODIFY)
        with pytest.raises(NotADirectoryError):
            inotify.watch(str(log), IN_MOVED_TO, directory=True)
        fd = inotify.fd
    assert inotify.fd == -1
    assert not os.path.exists(f"/proc/self/fd/{fd}")
    inotify.close()  # again: nothing to do


@linux
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_polls")
async def test_a_commit_by_another_instance_wakes_the_follower_through_inotify(
    open_backend: Open,
) -> None:
    writer, follower = open_backend(), open_backend()
    sid = await _stored(writer)
    for start in range(4, 10):  # several waits: each one watches afresh
        last, delay = await _woken_by(
            follower,
            sid,
            start - 1,
            lambda s=start: writer.append(sid, BackendHarness.records(s, 1)),
        )
        assert last == start
        assert delay < _PROMPT, f"woke {delay:.2f} s after the commit"


_WRITER = """
import asyncio, sys
from turnkeep.conformance import BackendHarness
from turnkeep_jsonl import JsonlPersistence

async def main() -> None:
    writer = JsonlPersistence(sys.argv[1])
    meta = BackendHarness.meta()
    await writer.create(meta)
    await writer.append(meta.id, BackendHarness.records(0, 4))
    print(meta.id, flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    await writer.append(meta.id, BackendHarness.records(4, 2))
    await writer.aclose()

asyncio.run(main())
"""


@linux
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_polls")
async def test_a_commit_by_another_process_wakes_the_follower_through_inotify(
    open_backend: Open, tmp_path: Path
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _WRITER,
        str(tmp_path / "store"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        sid = (await asyncio.wait_for(proc.stdout.readline(), 60.0)).decode().strip()
        follower = open_backend()
        task = asyncio.ensure_future(follower.wait_for_commit(sid, 3, 30.0))
        await asyncio.sleep(0.1)
        assert not task.done(), "the follower returned before the commit"
        proc.stdin.write(b"commit\n")
        await proc.stdin.drain()
        assert await asyncio.wait_for(task, 10.0) == 5
    finally:
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 30.0) == 0


@linux
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_polls")
async def test_a_takeover_that_replaces_the_log_is_followed(
    open_backend: Open, tmp_path: Path
) -> None:
    writer, thief, follower = open_backend(), open_backend(), open_backend()
    sid = await _stored(writer)
    (log,) = (tmp_path / "store").glob("g-*/*.jsonl")
    before = log.stat().st_ino
    # The takeover renames a copy over the log, then the thief commits to
    # the new file: the follower's watch must move to it.
    task = asyncio.ensure_future(follower.wait_for_commit(sid, 3, 30.0))
    await asyncio.sleep(0.1)
    await thief.claim(sid, steal=True)
    assert log.stat().st_ino != before, "the takeover kept the file: nothing tested"
    await asyncio.sleep(0.1)
    assert not task.done(), "a takeover is not a commit"
    await thief.append(sid, BackendHarness.records(4, 2))
    acted = time.monotonic()
    assert await task == 5
    assert time.monotonic() - acted < _PROMPT
    last, delay = await _woken_by(
        follower,
        sid,
        await follower.last_seq(sid),
        lambda: thief.append(sid, BackendHarness.records(6, 1)),
    )
    assert last == 6
    assert delay < _PROMPT


@linux
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_polls")
async def test_a_delete_ends_the_wait_through_inotify(open_backend: Open) -> None:
    writer, follower = open_backend(), open_backend()
    sid = await _stored(writer)
    task = asyncio.ensure_future(follower.wait_for_commit(sid, 3, 30.0))
    await asyncio.sleep(0.1)
    await writer.delete(sid)
    deleted = time.monotonic()
    with pytest.raises(SessionNotFoundError):
        await task
    assert time.monotonic() - deleted < _PROMPT


@linux
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_polls")
async def test_writes_to_other_files_do_not_end_the_wait(open_backend: Open) -> None:
    writer, follower = open_backend(), open_backend()
    sid = await _stored(writer)
    other = await _stored(writer)  # same directory (same cwd): same group
    task = asyncio.ensure_future(follower.wait_for_commit(sid, 3, 30.0))
    for start in range(4, 8):
        await writer.append(other, BackendHarness.records(start, 1))
    await writer.request_cancel(sid, "a file beside the log, not the log")
    await asyncio.sleep(0.2)
    assert not task.done(), "a write beside the log was taken for a commit"
    await writer.append(sid, BackendHarness.records(4, 1))
    assert await asyncio.wait_for(task, _PROMPT) == 4


# -- the fallback ---------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_polls")
async def test_without_a_commit_the_wait_ends_at_within_unchanged(
    open_backend: Open,
) -> None:
    # Neither the safety net nor a poll fires in 0.3 s: `within` ends it.
    follower = open_backend()
    sid = await _stored(open_backend())
    started = time.monotonic()
    assert await follower.wait_for_commit(sid, 3, 0.3) == 3
    assert 0.25 <= time.monotonic() - started < _PROMPT


@pytest.mark.asyncio
async def test_when_inotify_cannot_start_the_follower_polls(
    open_backend: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    opens = Opens(monkeypatch, fail=True)
    monkeypatch.setattr(follow, "SAFETY_SECONDS", _SLOW)  # only the poll can wake
    writer, follower = open_backend(), open_backend()
    sid = await _stored(writer)
    assert await follower.wait_for_commit(sid, 3, 0) == 3  # opens the store
    before = _open_fds()
    last, delay = await _woken_by(
        follower, sid, 3, lambda: writer.append(sid, BackendHarness.records(4, 1))
    )
    assert (last, opens.calls) == (4, 1)
    assert delay < _PROMPT
    assert _open_fds() == before


@linux
@pytest.mark.asyncio
async def test_when_no_watch_can_be_added_the_follower_polls(
    open_backend: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(self: Inotify, path: str, mask: int, *, directory: bool = False) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(Inotify, "watch", full)
    monkeypatch.setattr(follow, "SAFETY_SECONDS", _SLOW)
    writer, follower = open_backend(), open_backend()
    sid = await _stored(writer)
    assert await follower.wait_for_commit(sid, 3, 0) == 3  # opens the store
    before = _open_fds()
    last, delay = await _woken_by(
        follower, sid, 3, lambda: writer.append(sid, BackendHarness.records(4, 1))
    )
    assert last == 4
    assert delay < _PROMPT
    assert _open_fds() == before, "the unusable inotify instance was left open"


@pytest.mark.asyncio
async def test_follow_poll_never_opens_inotify(
    open_backend: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    opens = Opens(monkeypatch, fail=False)
    writer = open_backend()
    follower = JsonlPersistence.from_config(
        JsonlConfig(path=writer.path, follow="poll")
    )
    try:
        sid = await _stored(writer)
        last, delay = await _woken_by(
            follower, sid, 3, lambda: writer.append(sid, BackendHarness.records(4, 1))
        )
        assert (last, opens.calls) == (4, 0)
        assert delay < _PROMPT
        with pytest.raises(SessionNotFoundError):
            await _woken_by(follower, sid, 4, lambda: writer.delete(sid))
    finally:
        await follower.aclose()


def test_an_unknown_follow_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="follow"):
        JsonlConfig(follow="inotify")
    with pytest.raises(ValueError, match="follow"):
        JsonlPersistence(tmp_path, follow="sometimes")


# -- descriptors ------------------------------------------------------------------


@linux
@pytest.mark.asyncio
async def test_no_descriptor_is_left_after_many_waits(open_backend: Open) -> None:
    writer, follower = open_backend(), open_backend()
    sid = await _stored(writer)
    assert await follower.wait_for_commit(sid, 3, 0.01) == 3  # opens the store
    before = _open_fds()
    for _ in range(100):  # timed out
        assert await follower.wait_for_commit(sid, 3, 0.001) == 3
    for seq in range(4, 14):  # woken
        last, _ = await _woken_by(
            follower,
            sid,
            seq - 1,
            lambda s=seq: writer.append(sid, BackendHarness.records(s, 1)),
        )
        assert last == seq
    for _ in range(20):  # cancelled while waiting
        task = asyncio.ensure_future(follower.wait_for_commit(sid, 13, 30.0))
        # It watches once two hops to the backend's thread are done: a busy
        # machine takes more than a moment for them.
        await eventually(
            lambda t=task: _open_fds() > before or t.done(),
            what="the follower to watch",
            within=10.0,
        )
        assert _open_fds() > before, "the waiting follower watches nothing"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert _open_fds() == before
    # And a wait ended by a delete.
    with pytest.raises(SessionNotFoundError):
        await _woken_by(follower, sid, 13, lambda: writer.delete(sid))
    assert _open_fds() <= before  # the deleted session's files are closed too


@linux
@pytest.mark.asyncio
async def test_an_instance_is_closed_off_the_event_loop(
    open_backend: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Closing an instance with watches waits for the kernel (at times tens
    # of milliseconds): never on the loop's thread, where it would stall
    # every other task, the writer's acknowledgements included.
    closed_on: list[str] = []
    real = Inotify.close

    def close(self: Inotify) -> None:
        if self.fd >= 0:
            closed_on.append(threading.current_thread().name)
        real(self)

    monkeypatch.setattr(Inotify, "close", close)
    writer, follower = open_backend(), open_backend()
    sid = await _stored(writer)
    last, _ = await _woken_by(
        follower, sid, 3, lambda: writer.append(sid, BackendHarness.records(4, 1))
    )
    assert last == 4
    assert await follower.wait_for_commit(sid, 4, 0.001) == 4  # timed out
    assert wait_closed()
    assert len(closed_on) == 2
    assert threading.main_thread().name not in closed_on
