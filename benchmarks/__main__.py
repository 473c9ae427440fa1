"""Run every benchmark module (`make bench`), or the ones named on the command line.

Each `benchmarks/bench_*.py` module has a `main()` that measures turnkeep next
to a raw baseline in the same run and prints its ratios.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(
        m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_")
    )
    wanted = [n if n.startswith("bench_") else f"bench_{n}" for n in argv] or names
    for name in wanted:
        if name not in names:
            print(f"no benchmark {name!r}; have: {', '.join(names)}", file=sys.stderr)
            return 2
        print(f"\n=== {name} ===", flush=True)
        importlib.import_module(f"benchmarks.{name}").main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
