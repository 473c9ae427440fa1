"""The benchmarks, run small: `benchmarks/` lives at the repository root.

It is not an installed package, so its tests put the root on `sys.path`.
`loop_results` runs `bench_loop` once per test session at `TURNS` turns.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

TURNS = 12


@pytest.fixture(scope="session")
def loop_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from benchmarks import bench_loop

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench_loop, "TURNS", TURNS)
        root = tmp_path_factory.mktemp("bench-loop")
        run = asyncio.run(bench_loop.lockstep(root, sample_disk=True))
        return bench_loop.summarize([run])
