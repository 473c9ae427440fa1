"""What one streamed delta costs in the loop, next to a bare chunk append.

A model streams a ~1,500-character reply as 300 deltas of 5 characters (as
a real model's stream does). Measured in one run, round by round in
lockstep, on the memory backend (no I/O: the CPU of the path itself):

- `bare`: `Session.append(AssistantChunkData(...))` of the same 300 pieces,
  secret redaction off: the baseline;
- `bare_redacted`: the same with redaction on (each piece scanned after
  the tail of the ones before it, as a direct append is);
- `loop` / `loop_off`: the loop's per-delta path, redaction on (the
  default) and off: a turn whose model streams 300 deltas less a turn
  whose model streams one, over 299. It holds everything a delta costs the
  loop: the model's stream read, holding back for redaction, the append
  with its snapshot, the usage count, delivery to the turn's streams, and
  the delta's share of the turn's flush and of the incremental readers;
- `model`: reading the model's stream alone, per delta (the test model's
  own cost, inside `loop`).

Goal (issue 34, item 6): `loop / bare <= 2`. Printed: microseconds per
delta (median over rounds of each round's best) and the ratios.

`python -m benchmarks.bench_delta --callgrind` counts instructions per
delta instead (valgrind's callgrind, `benchmarks/callgrind.py`): steady
against a busy machine, where wall time is not.

Sizes: `BENCH_DELTA_ROUNDS` (40; 15 in the quick run).
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from benchmarks import callgrind
from benchmarks.workload import Workload
from turnkeep import AgentLoop, Host, Session
from turnkeep.agent import ModelOutput, ModelRequest, TextDelta
from turnkeep.events import AssistantChunkData, ModelInfo

DELTAS = 300
SIZE = 5
QUICK = os.environ.get("BENCH_QUICK") == "1"
ROUNDS = int(os.environ.get("BENCH_DELTA_ROUNDS", "15" if QUICK else "40"))
TRIES = 3
"""Tries per round of each contestant; a round keeps each one's best."""
GOAL = 2.0


def pieces() -> list[str]:
    """The reply's 300 deltas of 5 characters (ordinary prose, no secret)."""
    words = Workload(seed=34).corpus
    return [words[i * SIZE : (i + 1) * SIZE] for i in range(DELTAS)]


class DeltaModel:
    """Streams prepared deltas: `count` of them per call."""

    def __init__(self, deltas: list[str], count: int) -> None:
        self.deltas = deltas
        self.count = count

    def describe(self) -> ModelInfo:
        """A test double: named by its class."""
        return ModelInfo(name="DeltaModel", provider="test")

    async def stream(self, request: ModelRequest | None) -> AsyncIterator[ModelOutput]:
        for text in self.deltas[: self.count]:
            yield TextDelta(text)


def append_all(session: Session, deltas: list[str]) -> float:
    """Seconds per bare chunk append."""
    append = session.append
    started = time.perf_counter()
    for text in deltas:
        append(AssistantChunkData(text=text))
    return (time.perf_counter() - started) / len(deltas)


async def read_model(model: DeltaModel) -> float:
    """Seconds per delta of reading the model's stream alone."""
    started = time.perf_counter()
    async for _ in model.stream(None):
        pass
    return (time.perf_counter() - started) / model.count


async def turn(loop: AgentLoop) -> float:
    started = time.perf_counter()
    await loop.run_turn("go on")
    return time.perf_counter() - started


def host(redact: bool) -> Host:
    return Host({"persistence": "memory", "redact_secrets": redact})


async def measure(rounds: int) -> dict[str, Any]:
    deltas = pieces()
    hosts = {"on": host(True), "off": host(False)}
    for started in hosts.values():
        await started.start()
    sessions = {k: h.sessions.create() for k, h in hosts.items()}
    loops = {
        (k, n): AgentLoop.create("bench", host=h, model=DeltaModel(deltas, n))
        for k, h in hosts.items()
        for n in (DELTAS, 1)
    }
    streamed = DeltaModel(deltas, DELTAS)
    samples: dict[str, list[float]] = {
        k: [] for k in ("bare", "bare_redacted", "loop", "loop_off", "model")
    }
    for index in range(rounds + 1):  # the first round warms up
        best: dict[str, float] = {}
        for _ in range(TRIES):
            for key, redact in (("bare", "off"), ("bare_redacted", "on")):
                took = append_all(sessions[redact], deltas)
                best[key] = min(best.get(key, took), took)
                await sessions[redact].flush()
            for key, redact in (("loop", "on"), ("loop_off", "off")):
                long = await turn(loops[redact, DELTAS])
                short = await turn(loops[redact, 1])
                best[key + ":long"] = min(best.get(key + ":long", long), long)
                best[key + ":short"] = min(best.get(key + ":short", short), short)
            took = await read_model(streamed)
            best["model"] = min(best.get("model", took), took)
        if index == 0:
            continue
        for key in ("bare", "bare_redacted", "model"):
            samples[key].append(best[key])
        for key in ("loop", "loop_off"):
            per = (best[key + ":long"] - best[key + ":short"]) / (DELTAS - 1)
            samples[key].append(per)
        gc.collect()
    for loop in loops.values():
        await loop.close()
    for started in hosts.values():
        await started.aclose()
    us = {k: statistics.median(v) * 1e6 for k, v in samples.items()}
    bare = us["bare"]
    return {
        "deltas": DELTAS,
        "delta_chars": SIZE,
        "rounds": rounds,
        "us_per_delta": us,
        "loop_over_bare": us["loop"] / bare,
        "loop_off_over_bare": us["loop_off"] / bare,
        "bare_redacted_over_bare": us["bare_redacted"] / bare,
        "loop_without_model_over_bare": (us["loop"] - us["model"]) / bare,
        "goal": GOAL,
    }


def report(results: dict[str, Any]) -> None:
    us = results["us_per_delta"]
    bare = us["bare"]
    print(
        f"per delta ({results['deltas']} deltas of {results['delta_chars']} "
        f"characters, memory backend; median of {results['rounds']} rounds):"
    )
    for key, label in (
        ("bare", "Session.append, redaction off (baseline)"),
        ("bare_redacted", "Session.append, redaction on"),
        ("loop", "the loop's per-delta path, redaction on"),
        ("loop_off", "the loop's per-delta path, redaction off"),
        ("model", "  of which the test model's stream"),
    ):
        print(f"  {label:<44} {us[key]:6.2f} us  {us[key] / bare:5.2f}x")
    verdict = "met" if results["loop_over_bare"] <= GOAL else "NOT met"
    print(
        f"  goal: the loop's path <= {GOAL:.0f}x a bare append: "
        f"{results['loop_over_bare']:.2f}x ({verdict})"
    )


# -- instructions -----------------------------------------------------------------

IR_REPLIES = (4, 12)
"""Replies of the two callgrind runs whose difference is counted."""


async def _ir(kind: str, replies: int) -> None:
    deltas = pieces()
    redact = kind != "bare"
    async with host(redact) as started:
        if kind == "bare":
            session = started.sessions.create()
            for _ in range(replies):
                append_all(session, deltas)
                await session.flush()
            return
        model = DeltaModel(deltas, DELTAS if kind == "loop" else 1)
        loop = AgentLoop.create("bench", host=started, model=model)
        await loop.run_turn("warm up")
        gc.collect()
        gc.freeze()
        for _ in range(replies):
            await loop.run_turn("go on")
        await loop.close()


def instructions() -> dict[str, Any]:
    """Instructions per delta: bare appends, and the loop's per-delta path."""
    callgrind.valgrind()
    low, high = IR_REPLIES
    per_reply: dict[str, float] = {}
    for kind in ("bare", "loop", "loop1"):
        counts = [
            callgrind.count("benchmarks.bench_delta", f"{kind}:{n}") for n in IR_REPLIES
        ]
        per_reply[kind] = (counts[1] - counts[0]) / (high - low)
    bare = per_reply["bare"] / DELTAS
    loop = (per_reply["loop"] - per_reply["loop1"]) / (DELTAS - 1)
    print("instructions per delta (memory backend):")
    print(f"  Session.append, redaction off   {bare:9.0f}")
    print(f"  the loop's path, redaction on   {loop:9.0f}  {loop / bare:5.2f}x")
    return {"ir_bare": bare, "ir_loop": loop, "ir_loop_over_bare": loop / bare}


def main() -> dict[str, Any]:
    if "--ir" in sys.argv:
        kind, replies = sys.argv[sys.argv.index("--ir") + 1].split(":")
        asyncio.run(_ir(kind, int(replies)))
        return {}
    if "--callgrind" in sys.argv:
        return instructions()
    results = asyncio.run(measure(ROUNDS))
    report(results)
    return results


if __name__ == "__main__":
    main()
