"""Instruction counts of a benchmark's modes under valgrind's callgrind.

Wall time on a shared two-core machine swings with whatever else runs;
instruction counts do not (the same binary, inputs and environment give the
same total). A benchmark module that offers `--ir MODE` (run one mode and
exit) can be measured here: `count` runs it under callgrind and returns the
total, so per-item figures are differences between a mode and a setup-only
mode divided by the number of items.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def valgrind() -> str:
    """The valgrind executable, or exit saying it is missing."""
    found = shutil.which("valgrind")
    if found is None:
        raise SystemExit("--callgrind needs valgrind on PATH")
    return found


def count(module: str, mode: str, *args: str) -> int:
    """Instructions that `python -m MODULE --ir MODE ARGS...` executes."""
    out = Path(tempfile.mkdtemp(prefix="bench-cg-"))
    target = out / "callgrind.out"
    try:
        subprocess.run(
            [
                valgrind(),
                "--tool=callgrind",
                f"--callgrind-out-file={target}",
                sys.executable,
                "-m",
                module,
                "--ir",
                mode,
                *args,
            ],
            check=True,
            capture_output=True,
            # Hash randomisation changes dict and set layouts, hence counts.
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        found = re.search(
            r"^(?:summary|totals): (\d+)", target.read_text(), re.MULTILINE
        )
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if found is None:
        raise RuntimeError(f"no instruction total in callgrind's output of {mode}")
    return int(found.group(1))
