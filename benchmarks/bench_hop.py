"""The thread hop: a bare hop through each mechanism, and the flush path before/after.

No blocking file I/O runs on the event loop, so every flush hops to a thread
and back. Two measurements, in one run:

1. A bare hop: a no-op taken to a thread and its result brought back, in
   blocks of `BLOCK` hops, every mechanism taking its block in turn (the
   order rotates each round), `HOP_ROUNDS` rounds. Mechanisms: an `await`
   that hops nowhere (the floor), `asyncio.to_thread`, a bare dedicated
   thread (one `SimpleQueue`, the result handed back with
   `loop.call_soon_threadsafe(future.set_result, ...)`), and each backend's
   own hop before and now (`benchmarks/hop_before.py` keeps the old ones).
   The SQLite writer's hop carries an empty transaction on an in-memory
   database: that is its mechanism, so it is part of its hop.
   Printed: microseconds per hop, the median block and the low quartile
   (on a shared machine the quartile shows the hop, the median the hop plus
   the neighbours' noise). Then the same with the process on one CPU
   (`one_cpu_hops`): a hop's two wake-ups cost several times more when its
   threads sit on different CPUs, and the scheduler decides that per run.
2. `Session.append` x 12 + `flush` through the host (turnkeep's defaults),
   per turn, on JSONL and SQLite with the hop before and the hop now, next
   to raw write + fsync (JSONL) and raw SQLite (one `executemany`
   transaction, WAL, `synchronous=FULL`) behind `asyncio.to_thread`:
   `HOP_TURNS` turns, every contestant taking its turn in lockstep,
   `BENCH_REPS` runs. Printed: microseconds per turn and the ratios
   now / before and now / raw (medians of the runs' ratios).
"""

from __future__ import annotations

import asyncio
import os
import queue
import sqlite3
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from benchmarks.bench_loop import RawJsonl, RawSqlite, scratch
from benchmarks.hop_before import SharedQueueWorkers, StagedWriter, install_before
from benchmarks.workload import Workload
from turnkeep import Host, SessionEvent, hookimpl
from turnkeep.config import Config
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.workers import Workers
from turnkeep_sqlite import SqliteConfig, SqlitePersistence
from turnkeep_sqlite.writer import Tx, Writer

HOP_ROUNDS = int(os.environ.get("BENCH_HOP_ROUNDS", "300"))
BLOCK = 20
TURNS = int(os.environ.get("BENCH_HOP_TURNS", "200"))
REPS = int(os.environ.get("BENCH_REPS", "3"))
BACKENDS = ("jsonl", "sqlite")


# -- 1. the bare hop -----------------------------------------------------------


def _noop() -> None:
    return None


def _tx_noop(tx: Tx) -> None:
    del tx


class DedicatedThread:
    """The bare reference: one thread, one queue, `call_soon_threadsafe` back."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[
            tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Callable[[], Any]]
            | None
        ] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._queue.get()) is not None:
            loop, future, fn = job
            loop.call_soon_threadsafe(future.set_result, fn())

    def run(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put((loop, future, fn))
        return future

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()


def _memory_writer(kind: type[Writer]) -> Writer:
    return kind(
        path=Path("in-memory"),
        opener=lambda: sqlite3.connect(
            ":memory:", isolation_level=None, check_same_thread=False
        ),
        closer=lambda conn: conn.close(),
        verify=lambda: None,
        busy_timeout_s=5.0,
        max_group=64,
    )


HOPS = {
    "await": "await, no thread (the floor)",
    "to_thread": "asyncio.to_thread",
    "dedicated": "dedicated thread + call_soon_threadsafe",
    "jsonl.before": "JSONL hop before (shared queue, 8 threads)",
    "jsonl.now": "JSONL hop now (last-idle thread first)",
    "sqlite.before": "SQLite writer before (staged, Condition)",
    "sqlite.now": "SQLite writer now (straight to its queue)",
}


async def bare_hops() -> dict[str, list[float]]:
    """Seconds per hop of each block, by mechanism."""
    dedicated = DedicatedThread()
    jsonl_before = SharedQueueWorkers(8, "before")
    jsonl_now = Workers(8, "now")
    sqlite_before = _memory_writer(StagedWriter)
    sqlite_now = _memory_writer(Writer)
    hops: dict[str, Callable[[], Awaitable[Any]]] = {
        "await": lambda: asyncio.sleep(0),
        "to_thread": lambda: asyncio.to_thread(_noop),
        "dedicated": lambda: dedicated.run(_noop),
        "jsonl.before": lambda: jsonl_before.run(_noop),
        "jsonl.now": lambda: jsonl_now.run(_noop),
        "sqlite.before": lambda: sqlite_before.submit(_tx_noop),
        "sqlite.now": lambda: sqlite_now.submit(_tx_noop),
    }
    keys = list(hops)
    blocks: dict[str, list[float]] = {key: [] for key in keys}
    perf = time.perf_counter
    for key in keys:  # warm up: threads started, connections open
        for _ in range(BLOCK):
            await hops[key]()
    for round_ in range(HOP_ROUNDS):
        shift = round_ % len(keys)
        for key in keys[shift:] + keys[:shift]:
            hop = hops[key]
            t = perf()
            for _ in range(BLOCK):
                await hop()
            blocks[key].append((perf() - t) / BLOCK)
    dedicated.stop()
    jsonl_before.stop()
    jsonl_now.stop()
    await asyncio.to_thread(sqlite_before.close)
    await asyncio.to_thread(sqlite_now.close)
    return blocks


def _quartile(values: list[float]) -> float:
    return sorted(values)[len(values) // 4]


# -- 2. Session.append x 12 + flush, before and after ----------------------------


class HopBackends:
    """A plugin: `<backend>-before` and `<backend>-now` stores under one root."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _make(self, name: str) -> JsonlPersistence | SqlitePersistence:
        backend, _, hop = name.partition("-")
        path = self.root / name
        store: JsonlPersistence | SqlitePersistence
        if backend == "jsonl":
            store = JsonlPersistence(path)
        else:
            store = SqlitePersistence(SqliteConfig(path=path / "store.db"))
        if hop == "before":
            install_before(store)
        return store

    @hookimpl
    def register_persistence(self, register: Callable[..., None]) -> None:
        for backend in BACKENDS:
            for hop in ("before", "now"):
                name = f"{backend}-{hop}"
                register(name, lambda _config, name=name: self._make(name))  # pyright: ignore[reportUnknownLambdaType]


_NAMES = {"jsonl": "JSONL", "sqlite": "SQLite"}
APPEND = {
    f"{backend}.{hop}": f"turnkeep {_NAMES[backend]}, hop {hop}"
    for backend in BACKENDS
    for hop in ("before", "now")
}
APPEND["jsonl.raw"] = "raw write+fsync (to_thread)"
APPEND["sqlite.raw"] = "raw SQLite txn (to_thread)"


async def append_run(root: Path) -> dict[str, list[float]]:
    """One run: seconds per turn of every contestant, in lockstep."""
    turns = [list(t) for t in Workload(seed=12).session(TURNS)]
    times: dict[str, list[float]] = {key: [] for key in APPEND}
    plugin = HopBackends(root)
    raws: dict[str, RawJsonl | RawSqlite] = {
        "jsonl.raw": RawJsonl(root / "raw-jsonl"),
        "sqlite.raw": RawSqlite(root / "raw-sqlite"),
    }
    perf = time.perf_counter
    async with AsyncExitStack() as stack:
        sessions: dict[str, Any] = {}
        for key in APPEND:
            if key.endswith(".raw"):
                continue
            backend, hop = key.split(".")
            host = await stack.enter_async_context(
                Host(
                    Config(persistence=f"{backend}-{hop}", plugins="none"),
                    plugins=[plugin],
                )
            )
            sessions[key] = host.sessions.create("s")
            stack.push_async_callback(host.sessions.close, "s")

        def turnkeep_step(
            session: Any, events: list[SessionEvent]
        ) -> Callable[[], Awaitable[None]]:
            async def step() -> None:
                for event in events:
                    session.append(event.data)
                await session.flush()

            return step

        def raw_step(
            raw: RawJsonl | RawSqlite, events: list[SessionEvent]
        ) -> Callable[[], Awaitable[None]]:
            async def step() -> None:
                await asyncio.to_thread(raw.turn, events)

            return step

        keys = list(APPEND)
        for turn, events in enumerate(turns):
            shift = turn % len(keys)
            for key in keys[shift:] + keys[:shift]:
                step = (
                    raw_step(raws[key], events)
                    if key in raws
                    else turnkeep_step(sessions[key], events)
                )
                t = perf()
                await step()
                times[key].append(perf() - t)
    for raw in raws.values():
        raw.close()
    return times


# -- report ----------------------------------------------------------------------


def _hop_table(blocks: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    hop_us = {
        key: {
            "median_us": statistics.median(values) * 1e6,
            "p25_us": _quartile(values) * 1e6,
        }
        for key, values in blocks.items()
    }
    print(f"   {'mechanism':44s} {'median':>8s} {'p25':>8s}   (us per hop)")
    for key, label in HOPS.items():
        row = hop_us[key]
        print(f"   {label:44s} {row['median_us']:8.1f} {row['p25_us']:8.1f}")
    return hop_us


def one_cpu_hops() -> dict[str, dict[str, float]] | None:
    """Part 1 again with this thread, and the threads it starts, on one CPU.

    A hop wakes a thread twice (the worker, then the loop). Where the two
    threads sit on different CPUs, each wake-up reaches a CPU that went idle
    (on a VM, a virtual CPU the host let go), and the hop costs several
    times what it costs when both share one CPU; which of the two a run
    gets is the scheduler's choice, so part 1 swings between them. Pinned,
    every mechanism shows its own cost. `None` where the platform cannot
    pin or has one CPU only.
    """
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        return None
    # The last CPU: the first often takes more of the machine's interrupts.
    cpu = max(allowed)
    os.sched_setaffinity(0, {cpu})  # this thread; the threads it starts inherit it
    try:
        blocks = asyncio.run(bare_hops())
    finally:
        os.sched_setaffinity(0, allowed)
    print(f"   the same, this thread and those it starts on one CPU (CPU {cpu}):")
    return _hop_table(blocks)


def main() -> dict[str, Any]:
    print(f"1. bare hop (a no-op), {HOP_ROUNDS} rounds of {BLOCK}, interleaved")
    hop_us = _hop_table(asyncio.run(bare_hops()))
    pinned = one_cpu_hops()
    tables = [("as scheduled", hop_us)]
    if pinned is not None:
        tables.append(("on one CPU", pinned))
    for where, table in tables:
        for backend in BACKENDS:
            before, now = table[f"{backend}.before"], table[f"{backend}.now"]
            print(
                f"   {where}, {backend} hop now / before: median "
                f"{now['median_us'] / before['median_us']:.2f}, p25 "
                f"{now['p25_us'] / before['p25_us']:.2f}; now / dedicated (p25) "
                f"{now['p25_us'] / table['dedicated']['p25_us']:.2f}"
            )

    runs: list[dict[str, list[float]]] = []
    for _ in range(REPS):
        with scratch() as root:
            runs.append(asyncio.run(append_run(root)))
    # Turn 0 creates the session everywhere: it is left out.
    per_turn = {
        key: statistics.median(statistics.mean(run[key][1:]) for run in runs) * 1e6
        for key in APPEND
    }

    def paired(ours: str, theirs: str) -> float:
        return statistics.median(
            sum(run[ours][1:]) / sum(run[theirs][1:]) for run in runs
        )

    print(f"2. Session.append x 12 + flush, T={TURNS}, {REPS} runs, lockstep")
    for key, label in APPEND.items():
        print(f"   {label:44s} {per_turn[key]:8.0f} us/turn")
    ratios: dict[str, float] = {}
    for backend in BACKENDS:
        ratios[f"{backend}.now_over_before"] = paired(
            f"{backend}.now", f"{backend}.before"
        )
        ratios[f"{backend}.now_over_raw"] = paired(f"{backend}.now", f"{backend}.raw")
        ratios[f"{backend}.before_over_raw"] = paired(
            f"{backend}.before", f"{backend}.raw"
        )
        print(
            f"   {backend}: now / before {ratios[f'{backend}.now_over_before']:.3f}; "
            f"x raw: before {ratios[f'{backend}.before_over_raw']:.2f}, "
            f"now {ratios[f'{backend}.now_over_raw']:.2f}"
        )
    return {
        "hop_us": hop_us,
        "hop_us_one_cpu": pinned,
        "append_flush_us_per_turn": per_turn,
        "ratios": ratios,
        "turns": TURNS,
        "reps": REPS,
    }


if __name__ == "__main__":
    main()
