"""Run every benchmark module (`make bench`), or the ones named on the command line.

Each `benchmarks/bench_*.py` module has a `main()` that measures turnkeep next
to a raw baseline in the same run and prints its ratios. The user's path
(`bench_loop`: `AgentLoop.run_turn`, `Session.append` + `flush`, the peers)
runs first; the modules that call the backends directly follow as a
breakdown.

What the modules' `main()` return goes, with the machine, into
`latest.json`, `summary.md` and PNG plots in `BENCH_OUT` (default
`benchmarks/results/`; see `benchmarks/results.py`).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from pathlib import Path
from typing import Any

from benchmarks import results as results_file

LEAD = ("bench_loop",)


def order(names: list[str]) -> list[str]:
    """The lead modules first, then the rest by name."""
    return [n for n in LEAD if n in names] + sorted(n for n in names if n not in LEAD)


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = order(
        [
            m.name
            for m in pkgutil.iter_modules([str(here)])
            if m.name.startswith("bench_")
        ]
    )
    wanted = [n if n.startswith("bench_") else f"bench_{n}" for n in argv] or names
    for name in wanted:
        if name not in names:
            print(f"no benchmark {name!r}; have: {', '.join(names)}", file=sys.stderr)
            return 2
    results: dict[str, Any] = {"machine": results_file.machine()}
    for name in wanted:
        print(f"\n=== {name} ===", flush=True)
        measured = importlib.import_module(f"benchmarks.{name}").main()
        if measured is not None:
            results[name] = measured
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    out = Path(os.environ.get("BENCH_OUT") or results_file.DEFAULT_OUT)
    written = results_file.write(results, out)
    print(f"\nwrote {', '.join(str(p) for p in written)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
