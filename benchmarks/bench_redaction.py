"""Secret redaction's share of a durable turn, measured in one run.

Turns of K = 12 events (`benchmarks.workload`) with about 6 KB of text each
(user text, the streamed reply and its assembled copy, tool output), run
round-robin, REPS times:

- `fsync`: one `os.fsync` of a file just written (what the disk adds);
- `raw_turn`: the raw durable turn: the 12 events encoded with msgspec, one
  `os.write` and one `os.fsync` (the baseline of `bench_jsonl`);
- `jsonl_off` / `jsonl_on`: the turn through turnkeep itself, 12
  `Session.append` + `Session.flush` on the JSONL backend (fsync on), with
  redaction off and on; the two run interleaved, turn by turn;
- `redact_clean`: the builtin redactor's `redact_event` on the 12 events of
  a turn whose text holds no trigger (most of a conversation);
- `redact_triggered`: the same with a trigger word and a colon (`token:`)
  in every text field, so each field also takes the combined regex pass;
- `redact_prose`: the same with capitals, `:`, `-` and `A` in every text
  field (every needed character is there, and a capital of `bearer`);
- `high_entropy`: `redact_clean` with the opt-in high-entropy rule on (it
  has no pre-filter: every text takes the regex pass);
- `sequential`: the rules applied one regex at a time, as before issue 12
  (for reference; it is not what runs).

Goal (issue 12): redaction at most 10% of turnkeep's own durable turn,
`max(redact_clean, redact_triggered, redact_prose) / jsonl_off <= 0.10`.
Medians and best runs are printed: on a busy machine CPU-bound redaction
slows down more than an fsync does. `python -m benchmarks.bench_redaction
--callgrind` measures the same share in instructions (valgrind's callgrind,
independent of load; an fsync costs no instructions, so the measured fsync
time is printed next to it).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.workload import Workload
from turnkeep import Config, Host, Session, SessionEvent
from turnkeep.events import (
    AssistantChunk,
    AssistantMessage,
    ToolCall,
    ToolResult,
    UserMessage,
)
from turnkeep.redaction import SecretRedactor
from turnkeep.secretscan import DEFAULT_RULES

TURNS = 40
DURABLE = 16
"""Turns per repetition through `Session.append` + `flush` (each fsyncs)."""
REPS = 7
IR_TURNS = 12
"""Turns per callgrind run (the interpreter is ~50 times slower there)."""

_encode = msgspec.json.Encoder().encode


def text_bytes(turn: list[SessionEvent]) -> int:
    total = 0
    for event in turn:
        data = event.data
        if isinstance(event, UserMessage | AssistantChunk | AssistantMessage):
            total += len(data.text.encode())
        elif isinstance(event, ToolResult):
            total += len(data.output.encode())
        elif isinstance(event, ToolCall):
            total += len(_encode(data.arguments))
    return total


def with_insert(turn: list[SessionEvent], insert: str) -> list[SessionEvent]:
    """`turn` with `insert` in the middle of every text field."""
    out: list[SessionEvent] = []
    for event in turn:
        data = event.data
        for name in ("text", "output"):
            if hasattr(data, name):
                value = getattr(data, name)
                half = len(value) // 2
                data = msgspec.structs.replace(
                    data, **{name: value[:half] + insert + value[half:]}
                )
        out.append(msgspec.structs.replace(event, data=data))
    return out


_REDACT_MODES = ("redact_clean", "redact_triggered", "redact_prose")
"""The turns whose worst share is held to the goal."""

TRIGGER = " token: x "
"""A trigger and the `:` an assignment needs, but no secret: the field takes
the regex pass and is kept as it is."""
PROSE = " Note: A well-known case, e.g. Bob's. "
"""Capitals, `:`, `-` and `A`: the places of needed characters and of a
capital of `bearer` are looked at (prose rather than the benchmark's words)."""


def workload(turns: int) -> list[list[SessionEvent]]:
    wl = Workload(seed=12, text_min=1000, text_max=2000)
    return [wl.turn(t + 1, t * 12) for t in range(turns)]


def jsonl_host(root: Path, redact: bool) -> Host:
    return Host(
        Config(
            persistence="jsonl",
            plugins=("jsonl",),
            backends={"jsonl": {"path": str(root / f"redact-{redact}")}},
            redact_secrets=redact,
        )
    )


async def durable_turn(session: Session, turn: list[SessionEvent]) -> None:
    """turnkeep's durable turn: 12 appends, then the flush (one fsync)."""
    append = session.append
    for event in turn:
        append(event.data)
    await session.flush()


def redact_turns(
    source: list[list[SessionEvent]], session: Session, redactor: SecretRedactor
) -> None:
    redact = redactor.redact_event
    for turn in source:
        for event in turn:
            redact(session, event)


def fsync_us(directory: Path, rounds: int = 20) -> float:
    """Median microseconds of one `os.fsync` after a 6 KB write."""
    fd = os.open(directory / "fsync.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    times: list[float] = []
    try:
        for _ in range(rounds):
            os.write(fd, b"x" * 6000)
            t = time.perf_counter()
            os.fsync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
    return statistics.median(times) * 1e6


def main() -> dict[str, Any]:
    if "--ir" in sys.argv:
        ir_mode(sys.argv[sys.argv.index("--ir") + 1])
        return {}
    if "--callgrind" in sys.argv:
        return callgrind()
    turns = workload(TURNS)
    triggered = [with_insert(turn, TRIGGER) for turn in turns]
    prose = [with_insert(turn, PROSE) for turn in turns]
    kb = statistics.mean(text_bytes(turn) for turn in turns) / 1024
    scratch = Path(tempfile.mkdtemp(prefix="bench-redaction-"))
    loop = asyncio.new_event_loop()
    hosts = {on: jsonl_host(scratch, on) for on in (True, False)}
    for started in hosts.values():
        loop.run_until_complete(started.start())
    sessions = {on: host.sessions.create() for on, host in hosts.items()}
    probe = sessions[False]

    def run_redactor(
        source: list[list[SessionEvent]], redactor: SecretRedactor | None = None
    ) -> Callable[[], float]:
        chosen = redactor or SecretRedactor()

        def run() -> float:
            t = time.perf_counter()
            redact_turns(source, probe, chosen)
            return (time.perf_counter() - t) / len(source)

        return run

    patterns = [(re.compile(rule.regex), rule.name) for rule in DEFAULT_RULES]

    def sequential() -> float:
        t = time.perf_counter()
        for turn in turns:
            for event in turn:
                text = getattr(event.data, "text", None) or getattr(
                    event.data, "output", ""
                )
                for pattern, name in patterns:
                    text = pattern.sub(f"[REDACTED:{name}]", text)
        return (time.perf_counter() - t) / len(turns)

    fd = os.open(scratch / "raw.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def raw_turn() -> float:
        t = time.perf_counter()
        for turn in turns[:10]:
            os.write(fd, b"".join(_encode(e) + b"\n" for e in turn))
            os.fsync(fd)
        return (time.perf_counter() - t) / 10

    durable: dict[bool, float] = {}

    async def interleaved() -> None:
        spent = {True: 0.0, False: 0.0}
        for n, turn in enumerate(turns[:DURABLE]):
            order = (True, False) if n % 2 else (False, True)
            for on in order:
                step: Awaitable[None] = durable_turn(sessions[on], turn)
                t = time.perf_counter()
                await step
                spent[on] += time.perf_counter() - t
        for on in spent:
            durable[on] = spent[on] / DURABLE

    def jsonl_off() -> float:
        loop.run_until_complete(interleaved())
        return durable[False]

    def jsonl_on() -> float:
        return durable[True]  # measured with jsonl_off, turn by turn

    variants: dict[str, Callable[[], float]] = {
        "fsync": lambda: fsync_us(scratch, 10) / 1e6,
        "raw_turn": raw_turn,
        "jsonl_off": jsonl_off,
        "jsonl_on": jsonl_on,
        "redact_clean": run_redactor(turns),
        "redact_triggered": run_redactor(triggered),
        "redact_prose": run_redactor(prose),
        "high_entropy": run_redactor(turns, SecretRedactor(high_entropy=True)),
        "sequential": sequential,
    }
    samples: dict[str, list[float]] = {k: [] for k in variants}
    try:
        for fn in variants.values():
            fn()  # warm-up
        for _ in range(REPS):
            for name, fn in variants.items():
                samples[name].append(fn())
    finally:
        os.close(fd)
        for on, started in hosts.items():
            loop.run_until_complete(started.sessions.close(sessions[on].id))
            loop.run_until_complete(started.aclose())
        loop.close()
        shutil.rmtree(scratch, ignore_errors=True)

    medians = {k: statistics.median(v) * 1e6 for k, v in samples.items()}
    best = {k: min(v) * 1e6 for k, v in samples.items()}
    print(
        f"turns of 12 events, {kb:.1f} KB of text each; {REPS} repetitions "
        "(round-robin); per turn, median and best:"
    )
    for name in variants:
        us, low = medians[name], best[name]
        ratio = f"x{us / medians['jsonl_off']:.3f} / x{low / best['jsonl_off']:.3f}"
        per_kb = "" if name in ("fsync", "raw_turn") else f"   {low / kb:7.1f} us/KB"
        print(f"  {name:<17} {us:9.1f} us {low:9.1f} us   {ratio} jsonl_off{per_kb}")
    result: dict[str, Any] = {"kb": kb, "median_us": medians, "best_us": best}
    for label, values in (("median", medians), ("best", best)):
        added = values["jsonl_on"] - values["jsonl_off"]
        worst = max(values[k] for k in _REDACT_MODES)
        ratio = worst / values["jsonl_off"]
        verdict = "meets" if ratio <= 0.10 else "misses"
        clean = values["redact_clean"] / values["jsonl_off"]
        print(
            f"redaction / turnkeep durable turn ({label}) = {worst:.1f} / "
            f"{values['jsonl_off']:.1f} us = {ratio:.3f} ({verdict} 0.10); "
            f"clean turn {clean:.3f}; "
            f"on - off = {added:+.1f} us ({added / values['jsonl_off']:+.3f})"
        )
        result[f"ratio_clean_{label}"] = clean
        result[f"ratio_{label}"] = ratio
    return result


# -- instruction counts ----------------------------------------------------------

_IR_MODES = (
    "setup",
    "redact_clean",
    "redact_triggered",
    "redact_prose",
    "jsonl_off",
    "jsonl_on",
)


def ir_mode(mode: str) -> None:
    """Run IR_TURNS turns of `mode` after a warm-up that every mode shares."""
    turns = workload(IR_TURNS)
    triggered = [with_insert(turn, TRIGGER) for turn in turns]
    prose = [with_insert(turn, PROSE) for turn in turns]
    scratch = Path(tempfile.mkdtemp(prefix="bench-redaction-ir-"))

    async def run() -> None:
        async with jsonl_host(scratch, True) as on, jsonl_host(scratch, False) as off:
            sessions = {True: on.sessions.create(), False: off.sessions.create()}
            redactor = SecretRedactor()
            for warm in (True, False):
                await durable_turn(sessions[warm], turns[0])
            redact_turns(
                turns[:1] + triggered[:1] + prose[:1], sessions[False], redactor
            )
            if mode == "redact_clean":
                redact_turns(turns, sessions[False], redactor)
            elif mode == "redact_triggered":
                redact_turns(triggered, sessions[False], redactor)
            elif mode == "redact_prose":
                redact_turns(prose, sessions[False], redactor)
            elif mode in ("jsonl_off", "jsonl_on"):
                for turn in turns:
                    await durable_turn(sessions[mode == "jsonl_on"], turn)
            for on_, host in ((True, on), (False, off)):
                await host.sessions.close(sessions[on_].id)

    try:
        asyncio.run(run())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def callgrind() -> dict[str, Any]:
    """Instructions per turn of each mode, minus the shared setup."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--callgrind needs valgrind on PATH")
    out = Path(tempfile.mkdtemp(prefix="bench-redaction-cg-"))
    totals: dict[str, int] = {}
    try:
        for mode in _IR_MODES:
            target = out / f"{mode}.out"
            subprocess.run(
                [
                    valgrind,
                    "--tool=callgrind",
                    f"--callgrind-out-file={target}",
                    sys.executable,
                    "-m",
                    "benchmarks.bench_redaction",
                    "--ir",
                    mode,
                ],
                check=True,
                capture_output=True,
                env={**os.environ, "PYTHONHASHSEED": "0"},
            )
            text = target.read_text()
            found = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
            if found is None:
                raise RuntimeError(f"no instruction total in {target}")
            totals[mode] = int(found.group(1))
        fsync = fsync_us(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    per_turn = {
        mode: (totals[mode] - totals["setup"]) / IR_TURNS for mode in _IR_MODES[1:]
    }
    print(f"instructions per turn (callgrind, {IR_TURNS} turns minus setup):")
    for mode, ir in per_turn.items():
        print(f"  {mode:<17} {ir / 1e3:10.1f} k  x{ir / per_turn['jsonl_off']:.3f}")
    worst = max(per_turn[k] for k in _REDACT_MODES)
    ratio = worst / per_turn["jsonl_off"]
    added = (per_turn["jsonl_on"] - per_turn["jsonl_off"]) / per_turn["jsonl_off"]
    verdict = "meets" if ratio <= 0.10 else "misses"
    print(
        f"redaction / turnkeep durable turn (instructions) = {ratio:.3f} "
        f"({verdict} 0.10); on - off = {added:+.3f}; fsync (not counted: "
        f"no instructions) measured now: {fsync:.0f} us median"
    )
    return {"ir_per_turn": per_turn, "ratio_ir": ratio, "fsync_us": fsync}


if __name__ == "__main__":
    main()
