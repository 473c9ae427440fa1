"""A long session on the user's path: does a turn cost the same at turn 20,000?

`bench_loop` measures flatness at T = 1,000, where a cost that grows with
the history is still small beside the fsync. Here one session runs many
more turns of `bench_loop`'s lean agent (`AgentLoop.run_turn`), in blocks
of `BLOCK` turns, in two ways, turn by turn in lockstep:

- on the memory backend: the loop's own CPU, no disk, so any growth in
  what a turn does (history, scans, summaries) shows undiluted;
- on JSONL, next to the raw baseline of `bench_loop` (the same turn's events
  written with one `os.write` + `fsync` behind `asyncio.to_thread`), so the
  file's own growth shows in the raw column too.

Printed per backend: microseconds per turn of the first and last block and
last / first (goal: at most 1.1, as for `bench_loop`'s last 10 / first 10),
next to raw's own last / first, and last / first divided by raw's (what is
left once the machine's own drift over the run is taken out). Turns:
`BENCH_LONG_TURNS` (5,000; 20,000 with `BENCH_FULL=1`).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

from benchmarks.bench_loop import RawJsonl, _config, lean_agent, scratch
from benchmarks.workload import Workload
from turnkeep import AgentLoop, Host

FULL = os.environ.get("BENCH_FULL", "") == "1"
TURNS = int(os.environ.get("BENCH_LONG_TURNS", "20000" if FULL else "5000"))
BLOCK = 1_000
"""Turns per block; a block's figure is its median turn."""
LABELS = {
    "memory": "turnkeep memory, AgentLoop.run_turn",
    "jsonl": "turnkeep JSONL, AgentLoop.run_turn",
    "raw": "raw write+fsync (hop), the same turn",
}
"""Every contestant: key -> what the report and the summary call it."""


async def _timed_turn(agent: AgentLoop, text: str) -> float:
    start = time.perf_counter()
    await agent.run_turn(text)
    return time.perf_counter() - start


async def run(turns: int = TURNS) -> dict[str, Any]:
    """Median microseconds per turn of each block, per contestant."""
    prompts = Workload(seed=13)
    blocks: dict[str, list[float]] = {"memory": [], "jsonl": [], "raw": []}
    with scratch() as root:
        raw = RawJsonl(root / "raw")
        async with (
            Host({"persistence": "memory"}) as memory,
            Host(_config("jsonl", root / "jsonl")) as jsonl,
        ):
            in_memory, on_disk = lean_agent(memory), lean_agent(jsonl)
            for _ in range(max(1, turns // BLOCK)):
                times: dict[str, list[float]] = {key: [] for key in blocks}
                for _ in range(BLOCK):
                    text = prompts.text()
                    times["memory"].append(await _timed_turn(in_memory, text))
                    session = jsonl.sessions.get(on_disk.session_id)
                    start = len(session.events)
                    times["jsonl"].append(await _timed_turn(on_disk, text))
                    produced = list(session.events[start:])
                    began = time.perf_counter()
                    await asyncio.to_thread(raw.turn, produced)
                    times["raw"].append(time.perf_counter() - began)
                for key, values in times.items():
                    blocks[key].append(statistics.median(values) * 1e6)
            await in_memory.close()
            await on_disk.close()
        raw.close()
    ratios = {key: b[-1] / b[0] for key, b in blocks.items()}
    return {
        "turns": turns,
        "block": BLOCK,
        "us_per_turn_by_block": blocks,
        "last_over_first": ratios,
        # The machine's own drift over the run, taken out: raw's ratio.
        "over_raw_drift": {key: ratios[key] / ratios["raw"] for key in blocks},
    }


def report(results: dict[str, Any]) -> None:
    blocks = results["us_per_turn_by_block"]
    ratios, drift = results["last_over_first"], results["over_raw_drift"]
    print(
        f"T={results['turns']} turns of one session, median turn of each block of "
        f"{results['block']}, in lockstep"
    )
    for key, label in LABELS.items():
        first, last = blocks[key][0], blocks[key][-1]
        print(
            f"  {label:<38} first {first:7.0f} us  last {last:7.0f} us  "
            f"last/first {ratios[key]:5.2f}  / raw's {drift[key]:5.2f}"
        )
    print(
        "  goal: last/first <= 1.1; raw's own shows the machine's drift over the "
        "run, which the last column divides out"
    )


def main() -> dict[str, Any]:
    results = asyncio.run(run())
    report(results)
    return results


if __name__ == "__main__":
    main()
