"""A resume reads the log once; reading costs the same however flushes grouped events.

- `claim` keeps what its scan verified for the `load` that follows (a resume,
  as `SessionStore.resume` does it): the log is opened and read once, counted
  through the backend's `FileOps`. Any write in between, a second load, or a
  log that changed behind the handle makes `load` read it afresh.
- `scan` reads a flush larger than its read chunk in linear time: the same
  events written as one flush or per turn are read with the same work and
  give the same result, at every chunk size, truncation point and flipped
  byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from plugins.jsonl.helpers import T0, log_file, meta, raws, turn, turns, write_session
from support.faultyops import NoSyncFileOps
from turnkeep.errors import SessionCorruptError
from turnkeep.meta import SessionSummary
from turnkeep_jsonl import JsonlPersistence, scan as scan_module
from turnkeep_jsonl.names import LOG_SUFFIX, session_name
from turnkeep_jsonl.scan import ScanResult, scan

MAX_LINE = 1 << 20
LOG_NAME = session_name("s") + LOG_SUFFIX


class CountingOps(NoSyncFileOps):
    """Counts how often the log of `s` is opened and how many of its bytes are read."""

    def __init__(self) -> None:
        self.logs: set[int] = set()
        self.log_opens = 0
        self.log_bytes = 0

    def open(
        self, path: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None
    ) -> int:
        fd = super().open(path, flags, mode, dir_fd=dir_fd)
        if path == LOG_NAME:
            self.logs.add(fd)
            self.log_opens += 1
        return fd

    def close(self, fd: int) -> None:
        self.logs.discard(fd)
        super().close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        data = super().pread(fd, size, offset)
        if fd in self.logs:
            self.log_bytes += len(data)
        return data

    def reset(self) -> None:
        self.log_opens = 0
        self.log_bytes = 0


BATCHES = turns(40)


async def _stored(store: Path) -> int:
    backend = JsonlPersistence(store, ops=NoSyncFileOps())
    await backend.create(meta("s"))
    for batch in BATCHES:
        await backend.append("s", batch)
    await backend.aclose()  # released: the next claim appends in place
    return log_file(store).stat().st_size


@pytest.mark.asyncio
async def test_a_resume_opens_and_reads_the_log_once(store: Path) -> None:
    size = await _stored(store)
    ops = CountingOps()
    backend = JsonlPersistence(store, ops=ops)
    await backend.claim("s")
    loaded = await backend.load("s")
    assert ops.log_opens == 1
    assert ops.log_bytes == size  # every byte checked, none twice
    assert loaded.events == raws(BATCHES)
    fresh = JsonlPersistence(store)
    try:
        assert await fresh.load("s") == loaded  # what a reading load reports
    finally:
        await fresh.aclose()
        await backend.aclose()


@pytest.mark.asyncio
async def test_only_the_first_load_after_a_claim_is_served_from_it(
    store: Path,
) -> None:
    await _stored(store)
    ops = CountingOps()
    backend = JsonlPersistence(store, ops=ops)
    await backend.claim("s")
    first = await backend.load("s")
    ops.reset()
    assert await backend.load("s") == first
    assert ops.log_opens == 1  # read again
    await backend.aclose()


@pytest.mark.asyncio
async def test_a_write_after_the_claim_makes_load_read_the_log(store: Path) -> None:
    await _stored(store)
    ops = CountingOps()
    backend = JsonlPersistence(store, ops=ops)
    await backend.claim("s")
    seq = len(raws(BATCHES))
    extra = turn(seq, len(BATCHES))
    await backend.append("s", extra)
    ops.reset()
    loaded = await backend.load("s")
    assert ops.log_opens == 1
    assert loaded.events == [*raws(BATCHES), *raws([extra])]
    await backend.aclose()


@pytest.mark.asyncio
async def test_a_log_changed_behind_the_claim_is_read_again(store: Path) -> None:
    await _stored(store)
    ops = CountingOps()
    backend = JsonlPersistence(store, ops=ops)
    await backend.claim("s")
    log = log_file(store)
    log.write_bytes(log.read_bytes() + b'{"type":"torn')  # a torn tail
    ops.reset()
    loaded = await backend.load("s")
    assert ops.log_opens == 1
    assert loaded.events == raws(BATCHES)
    await backend.aclose()


# -- one flush or many: the same work -----------------------------------------


def _scan(data: bytes) -> ScanResult:
    return scan(
        lambda offset, n: data[offset : offset + n],
        len(data),
        session_id="s",
        collect=True,
        max_line=MAX_LINE,
    )


def _outcome(data: bytes) -> object:
    try:
        result = _scan(data)
    except SessionCorruptError as exc:
        return ("corrupt", exc.offset)
    return (result.events, result.end, result.damage, result.state)


def _logs(tmp_path: Path) -> dict[str, bytes]:
    batches = turns(30, span=200)
    one = [[r for batch in batches for r in batch]]
    return {
        "per turn": write_session(tmp_path / "a", batches).read_bytes(),
        "one flush": write_session(tmp_path / "b", one).read_bytes(),
    }


def test_a_large_flush_is_read_in_linear_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = _logs(tmp_path)
    monkeypatch.setattr(scan_module, "CHUNK", 512)
    seen: list[int] = []
    fast = scan_module._fast  # pyright: ignore[reportPrivateUsage]

    def counted(buf: bytes, *args: object) -> tuple[int, bool]:
        seen.append(len(buf))
        return fast(buf, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(scan_module, "_fast", counted)
    work: dict[str, int] = {}
    for name, data in logs.items():
        seen.clear()
        assert len(_scan(data).events) == len(raws(turns(30, span=200)))
        work[name] = sum(seen)
        # Each byte goes through the fast path a bounded number of times
        # (re-splitting a growing buffer made it grow with the flush).
        assert work[name] <= 3 * len(data), (name, work[name], len(data))


@pytest.mark.parametrize("chunk", [256, 301, 1000, 4099])
def test_every_chunk_size_and_cut_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    logs = _logs(tmp_path)
    for data in logs.values():
        cuts = range(0, len(data) + 1, max(1, len(data) // 400))
        expected = {cut: _outcome(data[:cut]) for cut in cuts}
        with monkeypatch.context() as patch:
            patch.setattr(scan_module, "CHUNK", chunk)
            for cut in cuts:
                assert _outcome(data[:cut]) == expected[cut], (chunk, cut)


@pytest.mark.parametrize("chunk", [256, 4099])
def test_damage_inside_a_unit_that_spans_chunks_reads_as_with_one_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    # A unit spanning chunks is checksummed piece by piece as it is read: a
    # flipped byte in any of its pieces is found as a one-chunk read finds it.
    for data in _logs(tmp_path).values():
        spots = range(len(data) // 7, len(data), max(1, len(data) // 60))
        damaged = [
            data[:spot] + bytes([data[spot] ^ 0x01]) + data[spot + 1 :]
            for spot in spots
        ]
        expected = [_outcome(d) for d in damaged]
        with monkeypatch.context() as patch:
            patch.setattr(scan_module, "CHUNK", chunk)
            assert [_outcome(d) for d in damaged] == expected, chunk
        intact = _outcome(data)
        assert all(outcome != intact for outcome in expected)  # each one is seen


def test_a_file_that_shrinks_while_read_ends_the_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _logs(tmp_path)["one flush"]
    monkeypatch.setattr(scan_module, "CHUNK", 256)
    shrunk = data[: len(data) // 2]
    result = scan(
        lambda offset, n: shrunk[offset : offset + n],
        len(data),  # the size seen before the file shrank
        session_id="s",
        collect=True,
        max_line=MAX_LINE,
    )
    assert result.events == []  # the one flush is cut: nothing whole
    assert result.size == len(shrunk)


@pytest.mark.asyncio
async def test_a_summary_update_after_the_claim_shows_in_the_load(
    store: Path,
) -> None:
    await _stored(store)
    backend = JsonlPersistence(store, ops=CountingOps())
    await backend.claim("s")
    await backend.update("s", SessionSummary(updated_at=T0 + 1, title="renamed"))
    assert (await backend.load("s")).meta.summary.title == "renamed"
    await backend.aclose()
