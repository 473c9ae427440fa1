"""turnkeep-sqlite next to raw sqlite3 (and peers, when installed), in one run.

`uv run --no-sync python -m benchmarks sqlite` prints, for each scenario, the
median of interleaved repetitions and the ratio to its same-run baseline:

1. durable turn: one session, T=200 turns of K=12 events, one durable append
   per turn, vs raw sqlite3 (WAL, synchronous=FULL, one `executemany`
   transaction per turn); plus per-turn flatness and bytes on disk;
2. 64 sessions flushing concurrently: aggregate durable turns/s vs the raw
   one-transaction-per-turn baseline at the same concurrency (64 threads
   sharing one connection under a lock: no busy-handler sleeps);
3. load of a 100k-event session (with core's `EventCodec.decode_log`) vs raw
   `SELECT ... ORDER BY seq` plus a typed msgspec decode of every row, for
   the session written per turn and written as one flush;
4. list 5,000 sessions with titles vs a raw `SELECT id, title, updated_at`
   on an indexed table, sorted as turnkeep lists (newest first) and
   unsorted, and vs the 13 columns the listing is made of read as plain
   tuples (what turnkeep read before schema 6 stored each session's
   listing as one JSON value in its index);
5. peers on the durable-turn workload, if importable
   (`benchmarks/peers.py`): LangGraph's `SqliteSaver` and the OpenAI Agents
   SDK's `SQLiteSession`, each fed the turn as its own items.

With `BENCH_QUICK=1` (`make bench`) 2. and 5. are left to the modules that
run beside it: `bench_scaling` (2. at 1-64 sessions) and `bench_loop` (the
peers on the user's path).

Sizes: `BENCH_REPS` (5; 3 with `BENCH_QUICK=1`), `BENCH_TURNS` (200),
`BENCH_LOAD_EVENTS` (100000), `BENCH_LIST_SESSIONS` (5000),
`BENCH_CONCURRENT_TURNS` (20 per session).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import shutil
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from benchmarks import peers
from benchmarks.workload import K, Workload, records
from turnkeep import SessionMeta
from turnkeep.events import VOCABULARY
from turnkeep.meta import SessionSummary
from turnkeep.persistence import EventCodec, EventRecord, SessionHeader
from turnkeep_sqlite import SqliteConfig, SqlitePersistence

QUICK = os.environ.get("BENCH_QUICK") == "1"
REPS = int(os.environ.get("BENCH_REPS", "3" if QUICK else "5"))
TURNS = int(os.environ.get("BENCH_TURNS", "200"))
LOAD_EVENTS = int(os.environ.get("BENCH_LOAD_EVENTS", "100000"))
LIST_SESSIONS = int(os.environ.get("BENCH_LIST_SESSIONS", "5000"))
CONCURRENT_TURNS = int(os.environ.get("BENCH_CONCURRENT_TURNS", "20"))
SESSIONS = 64
CODEC = EventCodec()

_RAW_SCHEMA = (
    "CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
    "type TEXT NOT NULL, time INTEGER NOT NULL, data BLOB NOT NULL, "
    "PRIMARY KEY (session_id, seq))",
    "CREATE TABLE sessions (id TEXT PRIMARY KEY, title TEXT, updated_at INTEGER)",
    "CREATE INDEX sessions_recent ON sessions (updated_at DESC, id)",
)


@contextmanager
def tempdir() -> Generator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bench-sqlite-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def raw_connect(path: Path, synchronous: str = "FULL") -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    for statement in _RAW_SCHEMA:
        conn.execute(statement)
    return conn


def raw_append(conn: sqlite3.Connection, sid: str, turn: list[EventRecord]) -> None:
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
        [(sid, r.seq, r.type, r.time, r.raw) for r in turn],
    )
    conn.execute("COMMIT")


def meta(sid: str, title: str | None = None) -> SessionMeta:
    return SessionMeta(
        header=SessionHeader(id=sid, created_at=1), summary=SessionSummary(title=title)
    )


def fit(ys: list[float]) -> float:
    """Least-squares slope of `ys` over their index."""
    n = len(ys)
    mx, my = (n - 1) / 2, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in range(n))
    return sum((x - mx) * (y - my) for x, y in zip(range(n), ys, strict=True)) / sxx


def report(name: str, ours: list[float], base: list[float], goal: str) -> float:
    """Print medians and the median of the per-repetition ratios (paired runs)."""
    ratio = statistics.median(o / b for o, b in zip(ours, base, strict=True))
    print(
        f"  {name}: turnkeep {statistics.median(ours) * 1e3:.2f} ms, baseline "
        f"{statistics.median(base) * 1e3:.2f} ms, ratio {ratio:.2f}x (goal {goal})"
    )
    return ratio


# -- 1 and 5. durable turns, in lockstep ---------------------------------------
#
# fsync latency on a shared machine drifts by 2-5x within seconds, so the
# contestants of a comparison take turns *per turn*: each turn is appended by
# every contestant in a rotating order before the next turn starts, and each
# one's time is the sum over its own appends. Every run uses fresh files.


class Contestant:
    """One store appending the workload one durable turn at a time."""

    name = "?"
    goal = 0.0  # for peers: how many times slower than turnkeep they should be

    async def open(self, directory: Path) -> None: ...

    def prepare(self, plain: list[dict[str, Any]]) -> Any:
        """The turn as this store takes it (converted outside the timed region)."""
        return plain

    async def step(self, turn: list[EventRecord], native: Any) -> None:
        raise NotImplementedError

    async def close(self) -> int:
        """Close; return the bytes on disk."""
        return 0


class Raw(Contestant):
    name = "raw sqlite3 (WAL, FULL, 1 txn/turn)"

    async def open(self, directory: Path) -> None:
        self.path = directory / "raw.sqlite3"
        self.conn = raw_connect(self.path)

    async def step(self, turn: list[EventRecord], native: Any) -> None:
        raw_append(self.conn, "s", turn)

    async def close(self) -> int:
        self.conn.close()
        return self.path.stat().st_size


class Ours(Contestant):
    name = "turnkeep-sqlite"

    async def open(self, directory: Path) -> None:
        self.path = directory / "store" / "s.sqlite3"
        self.backend = SqlitePersistence(SqliteConfig(path=self.path))
        await self.backend.create(meta("s", "bench"))
        await self.backend.has("s")  # opened before timing, as the others are

    async def step(self, turn: list[EventRecord], native: Any) -> None:
        await self.backend.append("s", turn)

    async def close(self) -> int:
        await self.backend.aclose()
        return sum(p.stat().st_size for p in self.path.parent.iterdir())


async def lockstep(
    turns: list[list[EventRecord]], kinds: list[type[Contestant]]
) -> tuple[dict[str, float], dict[str, list[float]], dict[str, int]]:
    """One run: total seconds, per-turn seconds and disk bytes per contestant."""
    plain = [[msgspec.json.decode(r.raw) for r in turn] for turn in turns]
    with tempdir() as d:
        contestants = [kind() for kind in kinds]
        for n, c in enumerate(contestants):
            (d / str(n)).mkdir()
            await c.open(d / str(n))
        per_turn: dict[str, list[float]] = {c.name: [] for c in contestants}
        for index, turn in enumerate(turns):
            shift = index % len(contestants)
            for c in contestants[shift:] + contestants[:shift]:
                native = c.prepare(plain[index])
                start = time.perf_counter()
                await c.step(turn, native)
                per_turn[c.name].append(time.perf_counter() - start)
        disk = {c.name: await c.close() for c in contestants}
    return {k: sum(v) for k, v in per_turn.items()}, per_turn, disk


def durable_turn(turns: list[list[EventRecord]]) -> dict[str, Any]:
    ratios: list[float] = []
    totals: dict[str, list[float]] = {Ours.name: [], Raw.name: []}
    curves: list[list[float]] = []
    disks: list[int] = []
    asyncio.run(lockstep(turns[:20], [Raw, Ours]))  # warm-up
    for _ in range(REPS):
        total, per_turn, disk = asyncio.run(lockstep(turns, [Raw, Ours]))
        ratios.append(total[Ours.name] / total[Raw.name])
        for name, value in total.items():
            totals[name].append(value)
        curves.append(per_turn[Ours.name])
        disks.append(disk[Ours.name])
    payload = sum(len(r.raw) for t in turns for r in t)
    n = len(turns)
    curve = [statistics.median(xs) for xs in zip(*curves, strict=True)]
    print(
        f"1. durable turn, one session, T={n} x K={K} ({payload / 1e6:.2f} MB "
        "payload), contestants in lockstep"
    )
    ours, raw = (
        statistics.median(totals[Ours.name]),
        statistics.median(totals[Raw.name]),
    )
    ratio = statistics.median(ratios)
    print(
        f"  per turn: turnkeep {ours / n * 1e6:.0f} us, raw {raw / n * 1e6:.0f} us; "
        f"ratio {ratio:.2f}x (goal <= 1.15x; per run: "
        f"{', '.join(f'{r:.2f}' for r in ratios)})"
    )
    print(
        "  turnkeep per-turn medians: first 10 "
        f"{statistics.mean(curve[:10]) * 1e6:.0f} us, last 10 "
        f"{statistics.mean(curve[-10:]) * 1e6:.0f} us, slope "
        f"{fit(curve) * 1e6:+.3f} us per turn of history"
    )
    print(
        f"  disk after close: {statistics.median(disks) / payload:.2f}x payload "
        "(goal <= 1.3x)"
    )
    return {"ratio": ratio, "disk": statistics.median(disks) / payload}


# -- 2. concurrency --------------------------------------------------------------


def concurrent(
    work: dict[str, list[list[EventRecord]]], reps: int = REPS, quiet: bool = False
) -> dict[str, Any]:
    """Durable turns per second of turnkeep and of raw, all sessions at once."""
    total = sum(len(t) for t in work.values())
    ours: list[float] = []
    base: list[float] = []

    def run_raw() -> None:
        with tempdir() as d:
            conn = raw_connect(d / "raw.sqlite3")
            lock = threading.Lock()

            def session(sid: str) -> None:
                for turn in work[sid]:
                    with lock:
                        raw_append(conn, sid, turn)

            threads = [threading.Thread(target=session, args=(s,)) for s in work]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            base.append(time.perf_counter() - start)
            conn.close()

    async def run_ours() -> None:
        with tempdir() as d:
            backend = SqlitePersistence(SqliteConfig(path=d / "store" / "s.sqlite3"))
            for sid in work:
                await backend.create(meta(sid))

            async def session(sid: str) -> None:
                for turn in work[sid]:
                    await backend.append(sid, turn)

            start = time.perf_counter()
            await asyncio.gather(*(session(s) for s in work))
            ours.append(time.perf_counter() - start)
            await backend.aclose()

    for _ in range(reps):
        run_raw()
        asyncio.run(run_ours())
    o, b = total / statistics.median(ours), total / statistics.median(base)
    ratio = statistics.median(b_ / o_ for o_, b_ in zip(ours, base, strict=True))
    if not quiet:
        print(f"2. {len(work)} sessions flushing concurrently, {total} durable turns")
        print(
            f"  turnkeep {o:,.0f} turns/s, raw one-txn-per-turn {b:,.0f} turns/s: "
            f"{ratio:.1f}x (median of paired runs; goal >= 4x)"
        )
    return {
        "sessions": len(work),
        "ratio": ratio,
        "turnkeep_turns_per_s": o,
        "raw_turns_per_s": b,
    }


# -- 3. load ---------------------------------------------------------------------


def load(
    turns: list[list[EventRecord]],
    reps: int = REPS,
    quiet: bool = False,
    how: str = "",
) -> dict[str, Any]:
    """Warm load + decode of one session by turnkeep and by raw SQL + msgspec.

    Each of `turns` is written as one flush (`how` says so in the output).
    """
    decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_union())
    ours: list[float] = []
    base: list[float] = []
    tail: list[float] = []
    with tempdir() as d:
        raw = raw_connect(d / "raw.sqlite3", "OFF")
        for turn in turns:
            raw_append(raw, "s", turn)
        raw.close()
        path = d / "store" / "s.sqlite3"
        setup = SqlitePersistence(
            SqliteConfig(path=path, synchronous="OFF", allow_non_durable=True)
        )
        events = sum(len(t) for t in turns)

        async def fill() -> None:
            await setup.create(meta("s"))
            for turn in turns:
                await setup.append("s", turn)
            await setup.aclose()

        asyncio.run(fill())

        # Warm: both sides keep their connection open across repetitions, as
        # a running application does; the first repetition is discarded.
        raw_conn = sqlite3.connect(d / "raw.sqlite3")
        backend = SqlitePersistence(SqliteConfig(path=path))

        def run_raw() -> None:
            start = time.perf_counter()
            rows = raw_conn.execute(
                "SELECT data FROM events WHERE session_id = ? ORDER BY seq", ("s",)
            )
            decoded = [decoder.decode(r[0]) for r in rows]
            base.append(time.perf_counter() - start)
            assert len(decoded) == events

        async def run_ours() -> None:
            start = time.perf_counter()
            loaded = await backend.load("s")
            decoded = CODEC.decode_log(loaded.events, session_id="s")
            ours.append(time.perf_counter() - start)
            assert len(decoded) == events

        async def run_tail() -> None:
            # Following the session: its last 10 events, read incrementally.
            start = time.perf_counter()
            last = await backend.last_seq("s")
            got = await backend.load_after("s", last - 10, 10)
            tail.append(time.perf_counter() - start)
            assert len(got) == 10

        async def run_all() -> None:
            await backend.has("s")
            for _ in range(reps + 1):
                run_raw()
                await run_ours()
                await run_tail()
            await backend.aclose()

        gc.freeze()
        asyncio.run(run_all())
        gc.unfreeze()
        raw_conn.close()
    del ours[0], base[0], tail[0]  # the warm-up
    result = {
        "events": events,
        "turnkeep_s": statistics.median(ours),
        "raw_s": statistics.median(base),
        "tail_s": statistics.median(tail),
    }
    if not quiet:
        print(f"3. load of a {events:,}-event session (warm{how})")
        result["ratio"] = report("load + decode", ours, base, "<= 1.2x")
        print(
            f"  last 10 (last_seq + load_after): {result['tail_s'] * 1e3:.3f} ms, "
            f"{result['tail_s'] / result['turnkeep_s']:.4f}x the load"
        )
    return result


_SAME_FIELDS = (
    "SELECT id, format_version, created_at, cwd, parent_id, parent_seq, updated_at, "
    "title, first_prompt, status, next_seq, turns, size FROM sessions "
    "WHERE next_seq > 0 ORDER BY updated_at DESC, id LIMIT ?"
)


def _union() -> Any:
    result: Any = None
    for cls in VOCABULARY:
        result = cls if result is None else result | cls
    return result


# -- 4. list ---------------------------------------------------------------------


def listing(turns: list[list[EventRecord]]) -> dict[str, Any]:
    ours: list[float] = []
    paged: list[float] = []
    base: list[float] = []
    unsorted: list[float] = []
    same: list[float] = []
    with tempdir() as d:
        raw = raw_connect(d / "raw.sqlite3", "OFF")
        path = d / "store" / "s.sqlite3"
        setup = SqlitePersistence(
            SqliteConfig(path=path, synchronous="OFF", allow_non_durable=True)
        )

        async def fill() -> None:
            for n in range(LIST_SESSIONS):
                sid = f"session-{n:05d}"
                await setup.create(meta(sid, f"title {n}"))
                for turn in turns:
                    await setup.append(sid, turn)
                    raw_append(raw, sid, turn)
                raw.execute(
                    "INSERT INTO sessions VALUES (?, ?, ?)", (sid, f"title {n}", n)
                )
            await setup.aclose()

        asyncio.run(fill())
        raw.close()

        def run_raw() -> None:
            conn = sqlite3.connect(d / "raw.sqlite3")
            start = time.perf_counter()
            rows = conn.execute(
                "SELECT id, title, updated_at FROM sessions "
                "ORDER BY updated_at DESC, id"
            ).fetchall()
            base.append(time.perf_counter() - start)
            assert len(rows) == LIST_SESSIONS
            # The same without an order: what reading the rows costs alone.
            start = time.perf_counter()
            rows = conn.execute("SELECT id, title, updated_at FROM sessions").fetchall()
            unsorted.append(time.perf_counter() - start)
            conn.close()
            assert len(rows) == LIST_SESSIONS
            # The same query on turnkeep's own table, every field it returns,
            # as plain tuples: what the metadata objects cost on top.
            conn = sqlite3.connect(path)
            start = time.perf_counter()
            rows = conn.execute(_SAME_FIELDS, (LIST_SESSIONS,)).fetchall()
            same.append(time.perf_counter() - start)
            conn.close()
            assert len(rows) == LIST_SESSIONS

        async def run_ours() -> None:
            backend = SqlitePersistence(SqliteConfig(path=path))
            await backend.has("x")
            start = time.perf_counter()
            page = await backend.list(limit=LIST_SESSIONS)
            ours.append(time.perf_counter() - start)
            assert len(page.items) == LIST_SESSIONS
            start = time.perf_counter()
            cursor, seen = None, 0
            while True:
                part = await backend.list(limit=100, cursor=cursor)
                seen += len(part.items)
                if (cursor := part.next_cursor) is None:
                    break
            paged.append(time.perf_counter() - start)
            assert seen == LIST_SESSIONS
            await backend.aclose()

        for _ in range(REPS + 1):
            run_raw()
            asyncio.run(run_ours())
    del ours[0], base[0], unsorted[0], paged[0], same[0]  # the warm-up
    print(f"4. list {LIST_SESSIONS:,} sessions with titles")
    ratio = report("one page vs ids+titles+updated_at, sorted", ours, base, "<= 2x")
    loose = report(
        "one page vs ids+titles+updated_at, unsorted", ours, unsorted, "<= 2x"
    )
    report("one page vs its 13 columns as tuples", ours, same, "info")
    print(f"  in pages of 100: {statistics.median(paged) * 1e3:.2f} ms")
    return {
        "ratio": ratio,
        "ratio_unsorted": loose,
        "turnkeep_s": statistics.median(ours),
        "raw_sorted_s": statistics.median(base),
        "raw_unsorted_s": statistics.median(unsorted),
    }


# -- 5. peers (lockstep with turnkeep) -----------------------------------------


class _Peer(Contestant):
    """A store of `benchmarks.peers`, fed the turn as its own items."""

    kind: type[peers.OpenAISession] | type[peers.LangGraphSaver]

    async def open(self, directory: Path) -> None:
        self.store = self.kind(directory)

    def prepare(self, plain: list[dict[str, Any]]) -> Any:
        return self.kind.convert(plain)

    async def step(self, turn: list[EventRecord], native: Any) -> None:
        await self.store.add(native)

    async def close(self) -> int:
        return self.store.close()


class LangGraph(_Peer):
    """Per turn `put_writes` + `put` of the growing message state."""

    name = peers.LangGraphSaver.name
    kind = peers.LangGraphSaver
    goal = 8.0


class OpenAI(_Peer):
    """`add_items` of the turn as the Responses items the SDK keeps."""

    name = peers.OpenAISession.name
    kind = peers.OpenAISession
    goal = 1.8


def peer_turns(turns: list[list[EventRecord]]) -> dict[str, Any]:
    print("5. peers on the durable-turn workload, in lockstep with turnkeep")
    kinds: list[type[Contestant]] = [Ours]
    gone = peers.missing()
    for kind in (LangGraph, OpenAI):
        if kind.kind.key in gone:
            print(f"  {kind.name}: not installed, skipped")
        else:
            kinds.append(kind)
    if len(kinds) == 1:
        print("  " + peers.INSTALL_HINT)
        return {}
    ratios: dict[str, list[float]] = {k.name: [] for k in kinds[1:]}
    totals: dict[str, list[float]] = {k.name: [] for k in kinds}
    for _ in range(REPS):
        total, _curves, _disk = asyncio.run(lockstep(turns, kinds))
        for name in totals:
            totals[name].append(total[name])
        for name in ratios:
            ratios[name].append(total[name] / total[Ours.name])
    n = len(turns)
    print(
        "  turnkeep-sqlite: "
        f"{statistics.median(totals[Ours.name]) / n * 1e6:.0f} us per turn"
    )
    out: dict[str, Any] = {}
    for kind in kinds[1:]:
        ratio = statistics.median(ratios[kind.name])
        out[kind.name] = ratio
        print(
            f"  {kind.name}: {statistics.median(totals[kind.name]) / n * 1e6:.0f} us "
            f"per turn, {ratio:.1f}x turnkeep's time (goal >= {kind.goal}x)"
        )
    return out


def main() -> dict[str, Any]:
    # Setup phases fill stores with synchronous=OFF on purpose; the backend
    # logs a warning for that at each open, which is noise here.
    logging.getLogger("turnkeep_sqlite").setLevel(logging.ERROR)
    print(
        f"SQLite {sqlite3.sqlite_version}, {REPS} repetitions, medians; "
        "ratios are turnkeep / baseline"
    )
    workload = Workload()
    turns = [records(t, CODEC) for t in workload.session(TURNS)]
    results: dict[str, Any] = {"durable_turn": durable_turn(turns)}
    if QUICK:
        # bench_scaling measures it at 1, 4, 16 and 64 sessions in this run.
        print("2. 64 sessions flushing concurrently: left to bench_scaling (quick run)")
    else:
        work = {
            f"c{n:02d}": [
                records(t, CODEC) for t in Workload(seed=n).session(CONCURRENT_TURNS)
            ]
            for n in range(SESSIONS)
        }
        results["concurrent"] = concurrent(work)
    big = [records(t, CODEC) for t in Workload(seed=7).session(-(-LOAD_EVENTS // K))]
    results["load"] = load(big)
    # Grouping must not matter: the same events written as one flush.
    one = load([[r for turn in big for r in turn]], how=", written as one flush")
    results["load_one_flush"] = one
    grouped = one["turnkeep_s"] / results["load"]["turnkeep_s"]
    print(f"  one flush / per turn: {grouped:.3f} (grouping should not matter: 1.0)")
    results["list"] = listing([records(t, CODEC) for t in Workload(seed=3).session(2)])
    if QUICK:
        # bench_loop measured the peers on the user's path in this run.
        print("5. peers: left to bench_loop (quick run)")
    else:
        results["peers"] = peer_turns(turns)
    return results
