"""The JSONL backend next to a raw JSON-lines writer, measured in the same run.

Three measurements, each interleaved round-robin with its raw baseline so both
see the same machine state:

1. Durable turn: T = 200 turns of K = 12 events, one `append` per turn (every
   turn fsynced before the next starts). Baseline: msgspec lines, one
   `os.write` + `os.fsync` per turn, file and directory fsynced on create.
   Both encode the same typed events inside the timed region. Reports the
   ratio of medians (goal <= 1.15), last-10 / first-10 per-turn cost (goal
   <= 1.1), and bytes on disk / event payload bytes (goal <= 1.2).
2. Load of a 100k-event session (`load` + core's `EventCodec.decode_log`)
   vs reading the same file and `msgspec.json.Decoder().decode_lines` on it
   (goal <= 1.2); a resume of it (`claim` + `load` + decode; goal <= 1.3x
   the load); and the same for the same events written as one flush
   (grouping should not matter). Next to it, following the session: the
   last 10 events read incrementally (`last_seq` + `load_after`), which
   should cost a window at the log's end, not the load.
3. List 5,000 sessions with titles from a fresh backend instance vs a raw
   scan that opens each session file and decodes its first line (goal <=
   0.3).

Setup writes (the 100k-event session, the 5,000 sessions) go through the
backend with fsync switched off in its `FileOps`: they are not measured.
Repetitions: 7 per measurement (9 for the list); 3 (5) with `BENCH_QUICK=1`,
as `make bench` runs it.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.workload import K, Workload, records
from turnkeep import SessionMeta, SessionSummary
from turnkeep.persistence import EventCodec, SessionHeader
from turnkeep_jsonl import JsonlPersistence, OsFileOps

QUICK = os.environ.get("BENCH_QUICK") == "1"  # `make bench`: fewer repetitions
TURNS = 200
REPS = 3 if QUICK else 7
LOAD_EVENTS = 100_000
LOAD_REPS = 3 if QUICK else 7
LIST_SESSIONS = 5_000
LIST_REPS = 5 if QUICK else 9

_encode_into = msgspec.json.Encoder().encode_into
_encode = msgspec.json.Encoder().encode


class NoSyncOps(OsFileOps):
    """Setup only: the real calls, minus fsync (nothing is measured with it)."""

    def fsync(self, fd: int) -> None:
        del fd

    def fsync_dir(self, fd: int) -> None:
        del fd


@contextmanager
def scratch() -> Generator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bench-jsonl-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def meta(session_id: str, title: str | None = None) -> SessionMeta:
    return SessionMeta(
        header=SessionHeader(id=session_id, created_at=1_700_000_000_000, cwd="/w"),
        summary=SessionSummary(updated_at=1_700_000_000_000, title=title),
    )


def disk_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


# -- 1. durable turn -----------------------------------------------------------


class RawWriter:
    """The raw baseline: msgspec lines, one os.write + os.fsync per turn."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        self.fd = os.open(
            directory / "s.jsonl", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600
        )
        os.write(self.fd, _encode({"id": "s", "created_at": 1}) + b"\n")
        os.fsync(self.fd)
        dfd = os.open(directory, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
        self.buf = bytearray()

    def turn(self, events: list[object]) -> None:
        buf = self.buf
        buf.clear()
        for event in events:
            _encode_into(event, buf, -1)
            buf += b"\n"
        os.write(self.fd, buf)
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


async def interleaved(
    root: Path, turns: list[list[object]]
) -> tuple[list[float], list[float], list[float]]:
    """One run: raw, raw through a thread hop, and turnkeep, turn by turn.

    Alternating every turn, the three writers see the same machine state;
    each encodes the same typed events inside its timed region.
    """
    codec = EventCodec()
    raw = RawWriter(root / "raw")
    hop = RawWriter(root / "hop")
    backend = JsonlPersistence(root / "store")
    await backend.create(meta("s"))
    raw_t: list[float] = []
    hop_t: list[float] = []
    tk_t: list[float] = []
    perf = time.perf_counter
    for events in turns:
        t = perf()
        raw.turn(events)
        raw_t.append(perf() - t)
        t = perf()
        await asyncio.to_thread(hop.turn, events)
        hop_t.append(perf() - t)
        t = perf()
        await backend.append("s", records(events, codec))  # type: ignore[arg-type]
        tk_t.append(perf() - t)
    raw.close()
    hop.close()
    await backend.aclose()
    return raw_t, hop_t, tk_t


def durable_turn() -> None:
    workload = Workload(seed=7)
    turns: list[list[object]] = [list(t) for t in workload.session(TURNS)]
    payload = sum(len(r.raw) for t in turns for r in records(t))  # type: ignore[arg-type]
    runs: list[tuple[list[float], list[float], list[float]]] = []
    tk_bytes = raw_bytes = 0
    for _ in range(REPS):
        with scratch() as root:
            runs.append(asyncio.run(interleaved(root, turns)))
            raw_bytes = disk_bytes(root / "raw")
            tk_bytes = disk_bytes(root / "store")

    def total(i: int) -> float:
        return statistics.median(sum(run[i]) for run in runs)

    def per_turn(i: int, part: slice) -> float:
        return statistics.median(statistics.mean(run[i][part]) for run in runs)

    raw_total, hop_total, tk_total = total(0), total(1), total(2)
    # Turn 0 creates the session (the file, its directory entry) in every
    # writer: the flatness check compares turns 1-10 with the last 10.
    first, last = slice(1, 11), slice(-10, None)
    print(f"1. durable turn, T={TURNS} x K={K} ({payload / 1e6:.2f} MB payload)")
    print(f"   raw jsonl+fsync       : {raw_total / TURNS * 1e6:8.0f} us/turn")
    print(f"   raw, via to_thread    : {hop_total / TURNS * 1e6:8.0f} us/turn")
    print(f"   turnkeep-jsonl        : {tk_total / TURNS * 1e6:8.0f} us/turn")
    print(f"   ratio to raw          : {tk_total / raw_total:8.3f}   (goal <= 1.15)")
    print(f"   ratio to raw+hop      : {tk_total / hop_total:8.3f}")
    growth = per_turn(2, last) / per_turn(2, first)
    raw_growth = per_turn(0, last) / per_turn(0, first)
    print(
        f"   last10/first10        : {growth:8.3f}   "
        f"(goal <= 1.1; raw {raw_growth:.3f})"
    )
    print(
        f"   disk / payload        : {tk_bytes / payload:8.3f}   (goal <= 1.2; "
        f"raw {raw_bytes / payload:.3f})"
    )


# -- 2. load -------------------------------------------------------------------


async def _populate_big(root: Path, size: int, *, one_flush: bool = False) -> None:
    backend = JsonlPersistence(root, ops=NoSyncOps())
    await backend.create(meta("big"))
    workload = Workload(seed=11)
    codec = EventCodec()
    written = 0
    everything: list[Any] = []
    for events in workload.session(size // K + 1):
        batch = records(events, codec)[: size - written]  # type: ignore[arg-type]
        if not batch:
            break
        if one_flush:
            everything += batch
        else:
            await backend.append("big", batch)
        written += len(batch)
    if one_flush:
        await backend.append("big", everything)
    await backend.aclose()


def load(
    size: int = LOAD_EVENTS, reps: int = LOAD_REPS, *, one_flush: bool = False
) -> dict[str, float]:
    """Median seconds to load and decode a `size`-event session, and raw's.

    Also a resume (`claim` + `load` + decode, as `SessionStore.resume` does
    it; the release after it is not timed). `one_flush`: the session is
    written as one flush instead of one per turn.
    """
    codec = EventCodec()
    decoder = msgspec.json.Decoder()
    with scratch() as root:
        asyncio.run(_populate_big(root / "store", size, one_flush=one_flush))
        (log,) = (root / "store").glob("g-*/*.jsonl")

        def raw() -> int:
            return len(decoder.decode_lines(log.read_bytes()))

        async def ours() -> int:
            loaded = await backend.load("big")
            return len(codec.decode_log(loaded.events, session_id="big"))

        async def resume() -> int:
            await backend.claim("big")
            loaded = await backend.load("big")
            return len(codec.decode_log(loaded.events, session_id="big"))

        async def follow() -> int:
            last = await backend.last_seq("big")
            return len(await backend.load_after("big", last - 10, 10))

        backend = JsonlPersistence(root / "store")
        loop = asyncio.new_event_loop()
        tail_t: list[float] = []
        raw_t: list[float] = []
        tk_t: list[float] = []
        resume_t: list[float] = []
        n = 0
        for _ in range(reps):
            gc.collect()
            t = time.perf_counter()
            raw()
            raw_t.append(time.perf_counter() - t)
            gc.collect()
            t = time.perf_counter()
            n = loop.run_until_complete(ours())
            tk_t.append(time.perf_counter() - t)
            gc.collect()
            t = time.perf_counter()
            loop.run_until_complete(resume())
            resume_t.append(time.perf_counter() - t)
            loop.run_until_complete(backend.release("big"))
            t = time.perf_counter()
            assert loop.run_until_complete(follow()) == 10
            tail_t.append(time.perf_counter() - t)
        loop.run_until_complete(backend.aclose())
        loop.close()
        file_size = log.stat().st_size
    return {
        "events": n,
        "file_bytes": file_size,
        "turnkeep_s": statistics.median(tk_t),
        "resume_s": statistics.median(resume_t),
        "tail_s": statistics.median(tail_t),
        "raw_s": statistics.median(raw_t),
    }


def print_load(result: dict[str, float], one: dict[str, float] | None = None) -> None:
    r, k = result["raw_s"], result["turnkeep_s"]
    print(
        f"2. load of a {result['events']:,.0f}-event session "
        f"({result['file_bytes'] / 1e6:.1f} MB file)"
    )
    print(f"   raw read + msgspec decode_lines : {r * 1e3:8.1f} ms (median)")
    print(f"   turnkeep load + decode_log      : {k * 1e3:8.1f} ms (median)")
    print(f"   ratio                           : {k / r:8.3f}   (goal <= 1.2)")
    if "resume_s" in result:
        resume = result["resume_s"]
        print(f"   resume (claim + load + decode)  : {resume * 1e3:8.1f} ms")
        print(f"   resume / load                   : {resume / k:8.3f}   (goal <= 1.3)")
    if "tail_s" in result:
        tail = result["tail_s"]
        print(f"   last 10 (last_seq + load_after) : {tail * 1e3:8.3f} ms")
        print(f"   last 10 / load                  : {tail / k:8.4f}")
    if one is not None:
        r1, k1 = one["raw_s"], one["turnkeep_s"]
        print("   the same events written as one flush:")
        print(f"   raw read + msgspec decode_lines : {r1 * 1e3:8.1f} ms")
        print(f"   turnkeep load + decode_log      : {k1 * 1e3:8.1f} ms")
        print(f"   ratio to raw                    : {k1 / r1:8.3f}   (goal <= 1.2)")
        print(
            f"   resume / load                   : {one['resume_s'] / k1:8.3f}   "
            "(goal <= 1.3)"
        )
        print(
            f"   one flush / per turn (load)     : {k1 / k:8.3f}   "
            "(grouping should not matter: 1.0)"
        )


# -- 3. list -------------------------------------------------------------------


async def _populate_many(root: Path) -> None:
    backend = JsonlPersistence(root, ops=NoSyncOps())
    workload = Workload(seed=4, text_min=100, text_max=600)
    codec = EventCodec()
    for i in range(LIST_SESSIONS):
        session_id = f"sess-{i:06d}"
        title = f"Session {i}: {workload.text()[:60]}"
        created = meta(session_id, title)
        await backend.create(created)
        # The title rides in the first flush, as the host's write-behind
        # sends it: no sidecar of its own at creation (release writes one).
        summary: SessionSummary | None = created.summary
        for events in workload.session(2):
            await backend.append(session_id, records(events, codec), summary=summary)  # type: ignore[arg-type]
            summary = None
        await backend.release(session_id)
    await backend.aclose()


def raw_scan(root: Path, decode: Callable[[bytes], object]) -> int:
    count = 0
    for group in os.scandir(root):
        if not group.name.startswith("g-"):
            continue
        with os.scandir(group.path) as entries:
            for entry in entries:
                if entry.name.endswith(".jsonl") and not entry.name.startswith("."):
                    with open(entry.path, "rb") as f:
                        decode(f.readline())
                    count += 1
    return count


def listing() -> None:
    decoder = msgspec.json.Decoder()
    with scratch() as root:
        store = root / "store"
        asyncio.run(_populate_many(store))

        async def ours_one_page() -> int:
            backend = JsonlPersistence(store)
            page = await backend.list(limit=LIST_SESSIONS)
            assert all(m.summary.title for m in page.items)
            await backend.aclose()
            return len(page.items)

        async def ours_paged() -> int:
            backend = JsonlPersistence(store)
            count = 0
            cursor: str | None = None
            while True:
                page = await backend.list(limit=100, cursor=cursor)
                count += len(page.items)
                cursor = page.next_cursor
                if cursor is None:
                    break
            await backend.aclose()
            return count

        loop = asyncio.new_event_loop()
        raw_t: list[float] = []
        one_t: list[float] = []
        paged_t: list[float] = []
        for _ in range(LIST_REPS):
            t = time.perf_counter()
            assert raw_scan(store, decoder.decode) == LIST_SESSIONS
            raw_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            assert loop.run_until_complete(ours_one_page()) == LIST_SESSIONS
            one_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            assert loop.run_until_complete(ours_paged()) == LIST_SESSIONS
            paged_t.append(time.perf_counter() - t)
        loop.close()
    r = statistics.median(raw_t)
    one, paged = statistics.median(one_t), statistics.median(paged_t)
    print(f"3. list {LIST_SESSIONS:,} sessions with titles (fresh instance each time)")
    print(f"   raw scan (first line per file) : {r * 1e3:8.2f} ms (median)")
    print(f"   turnkeep list(limit={LIST_SESSIONS})      : {one * 1e3:8.2f} ms")
    print(f"   turnkeep, pages of 100         : {paged * 1e3:8.2f} ms")
    print(f"   ratio (one call)               : {one / r:8.3f}   (goal <= 0.3)")
    print(f"   ratio (paged)                  : {paged / r:8.3f}")


def main() -> None:
    durable_turn()
    print_load(load(), load(one_flush=True))
    listing()


if __name__ == "__main__":
    main()
