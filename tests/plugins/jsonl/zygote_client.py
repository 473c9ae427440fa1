"""Driving the fork server (`_zygote.py`) from the turnkeep-jsonl tests.

Imported as `plugins.jsonl.zygote_client`; the `zygote` fixture in
`conftest.py` starts one per test module.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec

from plugins.jsonl.helpers import turn
from turnkeep.codec import EventRecord

ZYGOTE = Path(__file__).with_name("_zygote.py")
LOCKED, FENCED, UNKNOWN = 3, 4, 8


class Zygote:
    """The fork server, driven by JSON lines."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ZYGOTE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def call(self, **cmd: Any) -> Any:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(msgspec.json.encode(cmd) + b"\n")
        self.proc.stdin.flush()
        reply = msgspec.json.decode(self.proc.stdout.readline())
        assert "error" not in reply, reply
        return reply["ok"]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b'{"op":"exit"}\n')
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def acks(path: Path) -> list[list[int]]:
    """The numbers on each `ACK` line of an ack file."""
    if not path.exists():
        return []
    return [
        [int(x) for x in line.split()[1:]]
        for line in path.read_text().splitlines()
        if line.startswith("ACK")
    ]


def workload(
    turns: int, *, seed: int, big: bool = False, tag: str = "", streamed: bool = False
) -> list[list[EventRecord]]:
    out: list[list[EventRecord]] = []
    seq = 0
    for index in range(turns):
        out.append(turn(seq, index, seed=seed, big=big, tag=tag, streamed=streamed))
        seq += sum(r.span for r in out[-1])
    return out


def flushes_in(events: list[bytes], batches: list[list[EventRecord]]) -> int:
    """How many whole flushes of `batches` `events` are (asserting it is a prefix)."""
    count = 0
    total = 0
    for batch in batches:
        if total == len(events):
            break
        total += len(batch)
        count += 1
    assert total == len(events), "not a whole number of flushes"
    assert events == [r.raw for b in batches[:count] for r in b]
    return count
