"""Secret redaction's share of a durable turn, measured in one run.

Turns of K = 12 events (`benchmarks.workload`) with about 6 KB of text each
(user text, the streamed reply and its assembled copy, tool output), run
round-robin, REPS times:

- `raw_turn`: the raw durable turn: the 12 events encoded with msgspec, one
  `os.write` and one `os.fsync` of a file in a temporary directory (the
  baseline of `bench_jsonl`);
- `redact_clean`: the builtin redactor's `redact_event` on the 12 events of
  a turn whose text holds no trigger (most of a conversation);
- `redact_triggered`: the same with a trigger word (`token`) in every text
  field, so each field also takes the combined regex pass;
- `high_entropy`: `redact_clean` with the opt-in high-entropy rule on (it
  has no pre-filter: every text takes the regex pass);
- `sequential`: the rules applied one regex at a time, as before issue 12
  (for reference; it is not what runs);
- `append_on` / `append_off`: the turn's 12 payloads through
  `Session.append` on hosts with redaction on and off (memory backend,
  flushed outside the timed region): their difference is what redaction
  adds to a turn, hook dispatch included.

Goal: `redact_clean` and `redact_triggered` at most 10% of `raw_turn`. Both
the median and the best run are printed: on a machine busy with other work
CPU-bound redaction slows down more than an fsync does, so the best runs
show the cost without interference and the medians how much there was.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from benchmarks.workload import Workload
from turnkeep import Config, Host, SessionEvent
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
REPS = 7

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


def with_trigger(turn: list[SessionEvent]) -> list[SessionEvent]:
    out: list[SessionEvent] = []
    for event in turn:
        data = event.data
        for name in ("text", "output"):
            if hasattr(data, name):
                value = getattr(data, name)
                half = len(value) // 2
                data = msgspec.structs.replace(
                    data, **{name: value[:half] + " token " + value[half:]}
                )
        out.append(msgspec.structs.replace(event, data=data))
    return out


def main() -> None:
    wl = Workload(seed=12, text_min=1000, text_max=2000)
    turns = [wl.turn(t + 1, t * 12) for t in range(TURNS)]
    triggered = [with_trigger(turn) for turn in turns]
    kb = statistics.mean(text_bytes(turn) for turn in turns) / 1024

    loop = asyncio.new_event_loop()
    host = Host(Config(persistence="memory", plugins="none"))
    loop.run_until_complete(host.start())
    session = host.sessions.create()

    def run_redactor(
        source: list[list[SessionEvent]], redactor: SecretRedactor | None = None
    ) -> Callable[[], float]:
        redact = (redactor or SecretRedactor()).redact_event

        def run() -> float:
            t = time.perf_counter()
            for turn in source:
                for event in turn:
                    redact(session, event)
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

    hosts = {
        on: Host(Config(persistence="memory", plugins="none", redact_secrets=on))
        for on in (True, False)
    }
    for started in hosts.values():
        loop.run_until_complete(started.start())
    payloads = [[e.data for e in turn] for turn in turns]

    def appends(on: bool) -> Callable[[], float]:
        target = hosts[on]

        def run() -> float:
            appending = target.sessions.create()
            append = appending.append
            t = time.perf_counter()
            for turn in payloads:
                for data in turn:
                    append(data)
            elapsed = time.perf_counter() - t
            loop.run_until_complete(target.sessions.close(appending.id))
            return elapsed / len(payloads)

        return run

    scratch = Path(tempfile.mkdtemp(prefix="bench-redaction-"))
    fd = os.open(scratch / "raw.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def raw_turn() -> float:
        t = time.perf_counter()
        for turn in turns[:10]:
            os.write(fd, b"".join(_encode(e) + b"\n" for e in turn))
            os.fsync(fd)
        return (time.perf_counter() - t) / 10

    variants: dict[str, Callable[[], float]] = {
        "raw_turn": raw_turn,
        "redact_clean": run_redactor(turns),
        "redact_triggered": run_redactor(triggered),
        "high_entropy": run_redactor(turns, SecretRedactor(high_entropy=True)),
        "sequential": sequential,
        "append_on": appends(True),
        "append_off": appends(False),
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
        shutil.rmtree(scratch, ignore_errors=True)
        loop.run_until_complete(host.aclose())
        for started in hosts.values():
            loop.run_until_complete(started.aclose())
        loop.close()

    medians = {k: statistics.median(v) * 1e6 for k, v in samples.items()}
    best = {k: min(v) * 1e6 for k, v in samples.items()}
    print(
        f"turns of 12 events, {kb:.1f} KB of text each; {REPS} repetitions "
        "(round-robin); per turn, median and best:"
    )
    for name in variants:
        us, low = medians[name], best[name]
        ratio = f"x{us / medians['raw_turn']:.3f} / x{low / best['raw_turn']:.3f} raw"
        per_kb = "" if name == "raw_turn" else f"   {low / kb:7.1f} us/KB (best)"
        print(f"  {name:<17} {us:9.1f} us {low:9.1f} us   {ratio}{per_kb}")
    for label, values in (("median", medians), ("best", best)):
        added = values["append_on"] - values["append_off"]
        print(
            f"redaction added to a turn's appends ({label}): {added:.1f} us = "
            f"x{added / values['raw_turn']:.3f} raw durable turn"
        )
        worst = max(values["redact_clean"], values["redact_triggered"])
        ratio = worst / values["raw_turn"]
        verdict = "meets" if ratio <= 0.10 else "misses"
        print(f"redaction / raw durable turn ({label}) = {ratio:.3f} ({verdict} 0.10)")


if __name__ == "__main__":
    main()
