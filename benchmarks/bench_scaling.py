"""How turnkeep scales: load time against session size, throughput against
concurrent sessions, each next to its raw baseline in the same run.

- load: `bench_jsonl.load` and `bench_sqlite.load` (a warm load and decode of
  one session, against reading the same file and decoding every line with
  msgspec / a raw `SELECT` decoded with msgspec) at a few session sizes;
- concurrency: `bench_sqlite.concurrent` (N sessions appending durable turns
  at once through one backend, against raw one-transaction-per-turn SQLite
  at the same concurrency) at a few values of N.

Sizes: quick by default; `BENCH_FULL=1` (`make bench-full`) measures larger
sessions. `BENCH_SCALING_REPS` (3; 2 with `BENCH_QUICK=1`, as `make bench`
runs it) repetitions per point, medians.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from benchmarks import bench_jsonl, bench_sqlite
from benchmarks.workload import K, Workload, records

FULL = os.environ.get("BENCH_FULL", "") == "1"
QUICK = os.environ.get("BENCH_QUICK") == "1"  # `make bench`
REPS = int(os.environ.get("BENCH_SCALING_REPS", "2" if QUICK else "3"))
LOAD_SIZES = (1_000, 10_000, 50_000, 100_000) if FULL else (1_000, 5_000, 20_000)
CONCURRENCY = (1, 4, 16, 64)
TURNS_PER_SESSION = 20


def load_curve(sizes: tuple[int, ...] = LOAD_SIZES, reps: int = REPS) -> dict[str, Any]:
    """Median load seconds per session size, for both backends and raw."""
    curve: dict[str, list[float]] = {
        "jsonl.turnkeep_s": [],
        "jsonl.raw_s": [],
        "sqlite.turnkeep_s": [],
        "sqlite.raw_s": [],
    }
    for size in sizes:
        jsonl = bench_jsonl.load(size, reps)
        turns = [
            records(t, bench_sqlite.CODEC)
            for t in Workload(seed=7).session(-(-size // K))
        ]
        turns[-1] = turns[-1][: size - K * (len(turns) - 1)]  # exactly `size`
        sqlite = bench_sqlite.load(turns, reps, quiet=True)
        for backend, result in (("jsonl", jsonl), ("sqlite", sqlite)):
            curve[f"{backend}.turnkeep_s"].append(result["turnkeep_s"])
            curve[f"{backend}.raw_s"].append(result["raw_s"])
        print(
            f"  load {size:>7,} events: JSONL {jsonl['turnkeep_s'] * 1e3:7.1f} ms "
            f"(raw {jsonl['raw_s'] * 1e3:6.1f}), SQLite "
            f"{sqlite['turnkeep_s'] * 1e3:7.1f} ms (raw {sqlite['raw_s'] * 1e3:6.1f})"
        )
    return {"events": list(sizes), **curve}


def concurrency_curve(
    levels: tuple[int, ...] = CONCURRENCY, reps: int = REPS
) -> dict[str, Any]:
    """Durable turns per second against the number of concurrent sessions."""
    ours: list[float] = []
    raw: list[float] = []
    for n in levels:
        work = {
            f"c{i:02d}": [
                records(t, bench_sqlite.CODEC)
                for t in Workload(seed=i).session(TURNS_PER_SESSION)
            ]
            for i in range(n)
        }
        result = bench_sqlite.concurrent(work, reps, quiet=True)
        ours.append(result["turnkeep_turns_per_s"])
        raw.append(result["raw_turns_per_s"])
        print(
            f"  {n:>3} sessions: turnkeep SQLite {ours[-1]:8,.0f} turns/s, raw "
            f"one-txn-per-turn {raw[-1]:8,.0f} turns/s ({result['ratio']:.1f}x)"
        )
    return {
        "sessions": list(levels),
        "turns_per_session": TURNS_PER_SESSION,
        "sqlite.turnkeep_turns_per_s": ours,
        "sqlite.raw_turns_per_s": raw,
    }


def main() -> dict[str, Any]:
    # Setup fills stores with synchronous=OFF on purpose; the backend warns.
    logging.getLogger("turnkeep_sqlite").setLevel(logging.ERROR)
    print(f"median of {REPS} repetitions per point ({'full' if FULL else 'quick'})")
    print("load (warm) against session size:")
    load = load_curve()
    print("throughput against concurrent sessions (backend called directly):")
    return {"load": load, "concurrency": concurrency_curve()}


if __name__ == "__main__":
    main()
