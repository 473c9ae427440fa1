"""Run the quick benchmarks (`make bench`), all of them, or the ones named.

Each `benchmarks/bench_*.py` module has a `main()` that measures turnkeep next
to a raw baseline in the same run and prints its ratios.

- No arguments (`make bench`): the quick run, under a minute on a two-core
  machine. The user's path first (`bench_loop`: `AgentLoop.run_turn`,
  `Session.append` + `flush`, the peers; `bench_delta`: one streamed delta
  of it next to a bare append), then the backends called directly
  as a breakdown (`bench_jsonl`, `bench_sqlite`, with fewer repetitions:
  `BENCH_QUICK=1`) and the curves the plots draw (`bench_scaling`).
- `--all` (`make bench-all`; `make bench-full` at full size): every module,
  the user's path first. Some of them take minutes (`bench_postgres` runs
  LangGraph at 64 sessions per worker).
- Module names (`loop`, `bench_sqlite`, ...): those, in that order.

What the modules' `main()` return goes, with the machine, into
`latest.json`, `summary.md` and PNG plots in `BENCH_OUT` (default
`benchmarks/results/`; see `benchmarks/results.py`).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import results as results_file, usergoals

LEAD = ("bench_loop",)
QUICK = (
    "bench_loop",
    "bench_delta",
    "bench_stream",
    "bench_open",
    "bench_jsonl",
    "bench_sqlite",
    "bench_scaling",
)
"""What `make bench` runs: the user's path (the lean loop, one streamed delta
of it, then a real model's stream and open per request, small), the backend
breakdown, the curves. The PostgreSQL fleet (`bench_pgfleet`: 16 worker
processes started per history size) is left to `make bench-all`."""
QUICK_SECONDS = 60
"""What the quick run is meant to take; it says so when it took longer."""


def order(names: list[str]) -> list[str]:
    """The lead modules first, then the rest by name."""
    return [n for n in LEAD if n in names] + sorted(n for n in names if n not in LEAD)


def available() -> list[str]:
    """Every benchmark module, the user's path first."""
    here = Path(__file__).parent
    return order(
        [
            m.name
            for m in pkgutil.iter_modules([str(here)])
            if m.name.startswith("bench_")
        ]
    )


def select(argv: list[str], names: list[str]) -> tuple[list[str], bool]:
    """The modules `argv` asks for, and whether that is the quick run.

    Raises:
        SystemExit: a name is not a benchmark module (it lists them).
    """
    if not argv:
        return list(QUICK), True
    if argv == ["--all"]:
        return names, False
    wanted = [n if n.startswith("bench_") else f"bench_{n}" for n in argv]
    unknown = [n for n in wanted if n not in names]
    if unknown:
        raise SystemExit(
            f"no benchmark {', '.join(map(repr, unknown))}; have: {', '.join(names)} "
            "(or --all)"
        )
    return wanted, False


def main(argv: list[str]) -> int:
    names = available()
    wanted, quick = select(argv, names)
    if quick and os.environ.get("BENCH_FULL") != "1":
        # Read by the modules when they are imported, below.
        os.environ.setdefault("BENCH_QUICK", "1")
    start = time.perf_counter()
    results: dict[str, Any] = {"machine": results_file.machine()}
    seconds: dict[str, float] = {}
    for name in wanted:
        print(f"\n=== {name} ===", flush=True)
        began = time.perf_counter()
        measured = importlib.import_module(f"benchmarks.{name}").main()
        seconds[name] = round(time.perf_counter() - began, 1)
        print(f"({name}: {seconds[name]:.0f} s)")
        if measured is not None:
            results[name] = measured
    results["module_seconds"] = seconds
    usergoals.report(results)
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    out = Path(os.environ.get("BENCH_OUT") or results_file.DEFAULT_OUT)
    written = results_file.write(results, out)
    print(f"\nwrote {', '.join(str(p) for p in written)}")
    took = time.perf_counter() - start
    print(f"{len(wanted)} module(s) in {took:.0f} s")
    if quick:
        rest = [n for n in names if n not in wanted]
        print(f"not run here (`make bench-all` runs them too): {', '.join(rest)}")
        if took > QUICK_SECONDS:
            print(
                f"the quick run took over {QUICK_SECONDS} s: is the machine busy? "
                "(see `uptime`)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
