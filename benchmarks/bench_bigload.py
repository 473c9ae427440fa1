"""Reliability item 31: loading a large session, its time and its memory.

One session of `EVENTS` events (about 200 bytes each) is stored through the
JSONL and the SQLite backend; then fresh processes (`python -m
benchmarks.bench_bigload JOB`), one figure each, median of `REPS`:

- **load**: `backend.load` + `EventCodec.decode_log` of the whole session,
  with the process's peak resident set grown over its start (`ru_maxrss`);
- **raw**: the same events' stored bytes read (the JSONL file, or one
  `SELECT` of the SQLite rows) and decoded to the same typed events by the
  codec alone: the least a process holding them can pay, in time and in
  memory (its peak growth is the "decoded size" the item compares with).

Goals (`docs/reliability.md`, item 31): a million events load within 10 s
and 100,000 within 1 s, with the loader's memory at most 1.5x the decoded
events'. Each figure is printed with its verdict; none is asserted.

Sizes: `BENCH_FULL=1` 1,000,000 events; by default (`make bench-all`)
100,000; `BENCH_QUICK=1` 20,000. `BENCH_BIGLOAD_EVENTS` overrides.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

FULL = os.environ.get("BENCH_FULL", "") == "1"
QUICK = os.environ.get("BENCH_QUICK") == "1" and not FULL
EVENTS = int(
    os.environ.get(
        "BENCH_BIGLOAD_EVENTS", 1_000_000 if FULL else 20_000 if QUICK else 100_000
    )
)
REPS = 1 if QUICK else 3
BACKENDS = ("jsonl", "sqlite")
GOALS: dict[str, float] = {
    "load_s_1m": 10.0,
    "load_s_100k": 1.0,
    "rss_over_decoded": 1.5,
}
BATCH = 1000


def store_path(backend: str, root: Path) -> Path:
    return root / ("store" if backend == "jsonl" else "s.sqlite3")


def persistence(backend: str, root: Path, *, fast: bool = False) -> Any:
    """The backend over `root` (`fast`: setup only, fsync off)."""
    if backend == "jsonl":
        from turnkeep_jsonl import JsonlPersistence, OsFileOps

        class NoSync(OsFileOps):
            def fsync(self, fd: int) -> None:
                del fd

            def fsync_dir(self, fd: int) -> None:
                del fd

        ops = NoSync() if fast else OsFileOps()
        return JsonlPersistence(store_path(backend, root), ops=ops)
    from turnkeep_sqlite import SqliteConfig, SqlitePersistence

    return SqlitePersistence(SqliteConfig(path=store_path(backend, root)))


async def populate(backend: str, root: Path, events: int) -> None:
    """Store one session `big` of `events` events, `BATCH` per flush."""
    from benchmarks.workload import Workload, records
    from turnkeep import SessionMeta, SessionSummary
    from turnkeep.persistence import EventCodec, SessionHeader

    store = persistence(backend, root, fast=True)
    await store.create(
        SessionMeta(
            header=SessionHeader(id="big", created_at=1),
            summary=SessionSummary(updated_at=1),
        )
    )
    codec = EventCodec()
    workload = Workload(seed=31, text_min=50, text_max=250)  # ~200 B events
    pending: list[Any] = []
    written = 0
    for turn in workload.session(events // 12 + 2):
        for record in records(turn, codec):  # type: ignore[arg-type]
            if written + len(pending) == events:
                break
            pending.append(record)
            if len(pending) == BATCH:
                await store.append("big", pending)
                written += len(pending)
                pending = []
    if pending:
        await store.append("big", pending)
    await store.aclose()


def stored_bytes(backend: str, root: Path) -> list[bytes]:
    """The raw baseline's read: each stored event's bytes, with no backend."""
    path = store_path(backend, root)
    if backend == "jsonl":
        (log,) = path.glob("g-*/*.jsonl")
        lines = log.read_bytes().splitlines()
        # Event lines only (the header, owner and commit lines are marks).
        return [line for line in lines if line.startswith(b'{"type"')]
    import sqlite3

    with sqlite3.connect(path) as conn:
        return [
            bytes(row[0]) for row in conn.execute("SELECT raw FROM events ORDER BY seq")
        ]


def job(kind: str, backend: str, root: Path) -> dict[str, Any]:
    """One fresh process's figure: seconds and peak resident growth (bytes)."""
    from turnkeep.persistence import EventCodec

    codec = EventCodec()
    store = persistence(backend, root) if kind == "load" else None
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    if store is not None:
        loaded = asyncio.run(store.load("big"))
        events = codec.decode_log(loaded.events, session_id="big")
        del loaded
    else:
        raws = stored_bytes(backend, root)
        events = [codec.decode(raw) for raw in raws]
        del raws
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"events": len(events), "seconds": seconds, "rss_growth": peak - base}


def fresh(kind: str, backend: str, root: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_bigload", kind, backend, str(root)],
        check=True,
        capture_output=True,
        text=True,
    )
    return msgspec.json.decode(out.stdout.strip().splitlines()[-1])


def measure(backend: str, events: int, reps: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="bench-bigload-"))
    try:
        asyncio.run(populate(backend, root, events))
        runs: dict[str, list[dict[str, Any]]] = {"load": [], "raw": []}
        for _ in range(reps):
            for kind in ("load", "raw"):  # interleaved: the same machine state
                runs[kind].append(fresh(kind, backend, root))
        size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures: dict[str, Any] = {"events": events, "store_bytes": size}
    for kind, done in runs.items():
        assert all(r["events"] == events for r in done), done
        figures[f"{kind}_s"] = statistics.median(r["seconds"] for r in done)
        figures[f"{kind}_rss"] = statistics.median(r["rss_growth"] for r in done)
    figures["load_over_raw"] = figures["load_s"] / figures["raw_s"]
    # A tiny session may not raise the peak at all: count at least a page.
    figures["rss_over_decoded"] = figures["load_rss"] / max(figures["raw_rss"], 4096)
    return figures


def time_goal(events: int) -> float:
    """The item's time goal, scaled linearly to `events` (1 s per 100,000)."""
    return GOALS["load_s_100k"] * events / 100_000


def report(backend: str, f: dict[str, Any]) -> None:
    goal = time_goal(f["events"])
    met = "met" if f["load_s"] <= goal else "NOT met"
    rss_met = "met" if f["rss_over_decoded"] <= GOALS["rss_over_decoded"] else "NOT met"
    print(f"{backend}: {f['events']:,} events, {f['store_bytes'] / 1e6:.0f} MB stored")
    print(
        f"  load + decode  {f['load_s']:7.2f} s   (goal <= {goal:g} s: {met}); "
        f"raw read + decode {f['raw_s']:.2f} s ({f['load_over_raw']:.2f}x)"
    )
    print(
        f"  peak memory    {f['load_rss'] / 1e6:7.0f} MB  decoded events alone "
        f"{f['raw_rss'] / 1e6:.0f} MB: {f['rss_over_decoded']:.2f}x "
        f"(goal <= {GOALS['rss_over_decoded']:g}x: {rss_met})"
    )


def main() -> dict[str, Any]:
    print(f"item 31: one session of {EVENTS:,} events, median of {REPS} processes")
    results: dict[str, Any] = {"events": EVENTS, "reps": REPS, "goals": GOALS}
    for backend in BACKENDS:
        figures = measure(backend, EVENTS, REPS)
        report(backend, figures)
        results[backend] = figures
    return results


if __name__ == "__main__":
    if len(sys.argv) == 4:
        print(
            msgspec.json.encode(
                job(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
            ).decode()
        )
    else:
        main()
