"""The user's path: `AgentLoop.run_turn` and `Session.append` + `flush`, in one run.

`make bench` leads with what users call, next to raw baselines and to two
peers measured in the same process and run. turnkeep, the raw baselines and
the OpenAI Agents SDK go turn by turn in lockstep, so they see the same
machine (each turn, the contestants take their step in a rotating order);
LangGraph stores the same turns after them, alone (`ALONE` says why):

- `AgentLoop.run_turn` on JSONL and on SQLite with a lean model that streams
  exactly what it is given (7 text deltas and one safe tool call, then "ok"):
  about 15 events per turn;
- raw (JSONL): the loop's turn encoded with msgspec, one `os.write` and one
  `os.fsync`, behind the same thread hop turnkeep takes (`asyncio.to_thread`);
  raw (SQLite): one `executemany` transaction per turn in WAL mode with
  `synchronous=FULL`, behind the same hop. Both store the events the loop's
  turn appended, so they write the same bytes;
- `Session.append` x 12 + `flush` (the benchmark workload's turn), next to
  the same raw writers storing that turn;
- the peers (`benchmarks/peers.py`): the OpenAI Agents SDK's `SQLiteSession`
  (`add_items` of the loop's turn as Responses items) and LangGraph's
  `SqliteSaver` (`put_writes` + `put` of the growing message state). Each
  turn is converted to their items outside the timed region.

Printed: microseconds per turn, the ratio to raw behind the hop, the peers'
time over turnkeep's (how many times faster turnkeep is), `last10/first10`
(a turn must not cost more as the session grows) and bytes on disk after
close over the payload (the JSON bytes of the loop's events). `main()`
returns everything, per-turn curves and disk samples included, for
`benchmarks/results/latest.json` and the plots.

Sizes: `BENCH_LOOP_TURNS` (200; `make bench-full` runs 1,000), `BENCH_REPS`
(3).

`python -m benchmarks.bench_loop --callgrind` counts instead the loop's own
CPU: instructions per `run_turn` on the memory backend (no I/O, so no
`fsync` and no thread hop), with turnkeep's defaults and with secret
redaction off, under valgrind's callgrind (`benchmarks/callgrind.py`):
the difference between runs of 300 and 100 turns, over 200. Counts repeat
run to run, where wall time on a shared machine does not.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from benchmarks import callgrind, peers
from benchmarks.peers import disk_bytes
from benchmarks.workload import CHUNKS, Workload
from turnkeep import AgentLoop, Host, SessionEvent, function_tool
from turnkeep.agent import ModelOutput, ModelRequest, ModelToolCall, TextDelta
from turnkeep.events import ModelInfo

TURNS = int(os.environ.get("BENCH_LOOP_TURNS", "200"))
REPS = int(os.environ.get("BENCH_REPS", "3"))
BACKENDS = ("jsonl", "sqlite")
_T = TypeVar("_T")
DISK_SAMPLES = 20  # disk sizes taken per run (untimed), for the plot

_encode_into = msgspec.json.Encoder().encode_into
_encode = msgspec.json.Encoder().encode


@contextmanager
def scratch() -> Generator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bench-loop-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- raw baselines -------------------------------------------------------------


class RawJsonl:
    """msgspec lines, one os.write + os.fsync per turn."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        self.fd = os.open(directory / "s.jsonl", os.O_WRONLY | os.O_CREAT, 0o600)
        self.buf = bytearray()

    def turn(self, events: list[SessionEvent]) -> None:
        buf = self.buf
        buf.clear()
        for event in events:
            _encode_into(event, buf, -1)
            buf += b"\n"
        os.write(self.fd, buf)
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


class RawSqlite:
    """One executemany transaction per turn, WAL, synchronous=FULL."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        self.conn = sqlite3.connect(
            directory / "raw.db", isolation_level=None, check_same_thread=False
        )
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute(
            "CREATE TABLE events (session_id TEXT, seq INTEGER, type TEXT, "
            "data BLOB, PRIMARY KEY (session_id, seq))"
        )
        self.encode = msgspec.json.Encoder().encode

    def turn(self, events: list[SessionEvent]) -> None:
        encode = self.encode
        rows = [("s", e.seq, type(e).__name__, encode(e)) for e in events]
        self.conn.execute("BEGIN")
        self.conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?)", rows)
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


RAW: dict[str, Callable[[Path], RawJsonl | RawSqlite]] = {
    "jsonl": RawJsonl,
    "sqlite": RawSqlite,
}


# -- the lean model ---------------------------------------------------------------


class LeanModel:
    """Streams prepared replies: the first call of a turn gives the workload's
    7 chunks and a tool call, the second says "ok". Keeps nothing."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.calling = True

    def describe(self) -> ModelInfo:
        """A test double: named by its class."""
        return ModelInfo(name="LeanModel", provider="test")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        if self.calling:
            self.calling = False
            reply = self.workload.text()
            step = max(1, len(reply) // CHUNKS)
            for i in range(CHUNKS):
                end = len(reply) if i == CHUNKS - 1 else (i + 1) * step
                yield TextDelta(reply[i * step : end])
            yield ModelToolCall("lookup", {"query": reply[:40]})
        else:
            self.calling = True
            yield TextDelta("ok")


def make_lookup(workload: Workload) -> Any:
    @function_tool(replay="safe")
    async def lookup(arguments: Mapping[str, Any], context: object) -> str:
        """Look something up (returns prepared text)."""
        return workload.text()

    return lookup


def lean_agent(host: Host) -> AgentLoop:
    """The benchmark's loop: the lean model and its one safe tool.

    Each loop gets its own copy of the same prepared replies.
    """
    workload = Workload(seed=11)
    return AgentLoop.create(
        "bench", host=host, model=LeanModel(workload), tools=[make_lookup(workload)]
    )


# -- one run ---------------------------------------------------------------------


def _config(backend: str, root: Path) -> dict[str, Any]:
    path = root / ("store" if backend == "jsonl" else "store.db")
    return {
        "persistence": backend,
        "plugins": [backend],
        "backends": {backend: {"path": str(path)}},
    }


#: Every contestant: key -> what the results and the plots call it.
LABELS = {
    "jsonl.run_turn": "turnkeep JSONL, AgentLoop.run_turn",
    "sqlite.run_turn": "turnkeep SQLite, AgentLoop.run_turn",
    "jsonl.raw_loop": "raw write+fsync (hop), the loop's turn",
    "sqlite.raw_loop": "raw SQLite txn (hop), the loop's turn",
    "jsonl.append_flush": "turnkeep JSONL, Session.append x12 + flush",
    "sqlite.append_flush": "turnkeep SQLite, Session.append x12 + flush",
    "jsonl.raw_append": "raw write+fsync (hop), 12 events",
    "sqlite.raw_append": "raw SQLite txn (hop), 12 events",
    "peer.openai": peers.OpenAISession.name,
    "peer.langgraph": peers.LangGraphSaver.name,
}
#: Contestants that store the loop's turns after the lockstep, alone, on the
#: same turns in the same run. LangGraph's saver stores every message so far
#: at each turn: by turn 1,000 a turn costs it ~40x its first and writes ~1 MB,
#: and beside it every other contestant's fsync and caches paid for that
#: (raw write's own last10/first10 went to 1.5-1.8), which no store's ratio
#: or flatness should carry.
ALONE = ("peer.langgraph",)
#: The contestants that store the loop's turns: their disk is compared.
LOOP_STORES = (
    "jsonl.run_turn",
    "sqlite.run_turn",
    "jsonl.raw_loop",
    "sqlite.raw_loop",
    "peer.openai",
    "peer.langgraph",
)


def _rotated(items: list[_T], turn: int) -> list[_T]:
    shift = turn % len(items)
    return items[shift:] + items[:shift]


async def lockstep(root: Path, sample_disk: bool) -> dict[str, Any]:
    """One run: per-turn seconds of every contestant, alternating turn by turn."""
    prompts = Workload(seed=13)
    said = [prompts.text() for _ in range(TURNS)]
    append_turns = [list(t) for t in Workload(seed=12).session(TURNS)]
    times: dict[str, list[float]] = {key: [] for key in LABELS}
    dirs: dict[str, Path] = {}
    raw_loop: dict[str, RawJsonl | RawSqlite] = {}
    raw_append: dict[str, RawJsonl | RawSqlite] = {}
    agents: dict[str, AgentLoop] = {}
    hosts: dict[str, Host] = {}
    sessions: dict[str, Any] = {}
    events_per_turn: list[int] = []
    payload = 0
    samples: dict[str, list[int]] = {"turns": [], "payload": []}
    samples.update({key: [] for key in LOOP_STORES})
    every = max(1, TURNS // DISK_SAMPLES)
    perf = time.perf_counter
    async with AsyncExitStack() as stack:
        for backend in BACKENDS:
            dirs[f"{backend}.run_turn"] = root / f"loop-{backend}"
            dirs[f"{backend}.raw_loop"] = root / f"raw-loop-{backend}"
            raw_loop[backend] = RAW[backend](dirs[f"{backend}.raw_loop"])
            raw_append[backend] = RAW[backend](root / f"raw-append-{backend}")
            host = await stack.enter_async_context(
                Host(_config(backend, dirs[f"{backend}.run_turn"]))
            )
            hosts[backend] = host
            agents[backend] = lean_agent(host)
            append_host = await stack.enter_async_context(
                Host(_config(backend, root / f"append-{backend}"))
            )
            hosts[f"{backend}.append"] = append_host
            sessions[backend] = append_host.sessions.create("s")
        stores = {
            f"peer.{kind.key}": kind(root / f"peer-{kind.key}") for kind in peers.PEERS
        }
        dirs.update({key: store.directory for key, store in stores.items()})
        # Stored apart, after the others (see `ALONE`): the turns it is given.
        alone: dict[str, list[list[Any]]] = {key: [] for key in ALONE}

        for turn in range(TURNS):
            # Phase 1: the loops. Phase 2 stores what they produced.
            produced: dict[str, list[SessionEvent]] = {}
            for backend in _rotated(list(BACKENDS), turn):
                live = hosts[backend].sessions
                agent = agents[backend]
                start = live.get(agent.session_id).next_seq if turn else 0
                t = perf()
                await agent.run_turn(said[turn])
                times[f"{backend}.run_turn"].append(perf() - t)
                produced[backend] = list(live.get(agent.session_id).events[start:])
            loop_turn = produced["jsonl"]
            events_per_turn.append(len(loop_turn))
            payload += sum(len(_encode(e)) for e in loop_turn)
            plain = [msgspec.to_builtins(e) for e in loop_turn]
            natives = {key: store.convert(plain) for key, store in stores.items()}
            steps: list[tuple[str, Callable[[], Awaitable[None]]]] = []
            for backend in BACKENDS:
                steps += _steps(
                    backend,
                    produced[backend],
                    append_turns[turn],
                    raw_loop[backend],
                    raw_append[backend],
                    sessions[backend],
                )
            steps += [
                (key, _peer_step(store, natives[key]))
                for key, store in stores.items()
                if key not in ALONE
            ]
            for key in ALONE:
                alone[key].append(natives[key])
            for key, step in _rotated(steps, turn):
                t = perf()
                await step()
                times[key].append(perf() - t)
            if sample_disk and ((turn + 1) % every == 0 or turn == TURNS - 1):
                samples["turns"].append(turn + 1)
                samples["payload"].append(payload)
                for key in LOOP_STORES:
                    if key not in ALONE:
                        samples[key].append(disk_bytes(dirs[key]))
        for key in ALONE:
            store = stores[key]
            for turn, items in enumerate(alone[key]):
                t = perf()
                await store.add(items)
                times[key].append(perf() - t)
                if sample_disk and ((turn + 1) % every == 0 or turn == TURNS - 1):
                    samples[key].append(disk_bytes(dirs[key]))
        for backend in BACKENDS:
            await agents[backend].close()
            await hosts[f"{backend}.append"].sessions.close(sessions[backend].id)
        closed = {key: store.close() for key, store in stores.items()}
    for writer in (*raw_loop.values(), *raw_append.values()):
        writer.close()
    closed.update({key: disk_bytes(dirs[key]) for key in LOOP_STORES[:4]})
    return {
        "times": times,
        "events_per_turn": events_per_turn,
        "payload": payload,
        "disk": closed,
        "samples": samples,
    }


def _steps(
    backend: str,
    loop_turn: list[SessionEvent],
    append_turn: list[SessionEvent],
    raw_loop: RawJsonl | RawSqlite,
    raw_append: RawJsonl | RawSqlite,
    session: Any,
) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
    async def raw_loop_step() -> None:
        await asyncio.to_thread(raw_loop.turn, loop_turn)

    async def append_flush() -> None:
        for event in append_turn:
            session.append(event.data)
        await session.flush()

    async def raw_append_step() -> None:
        await asyncio.to_thread(raw_append.turn, append_turn)

    return [
        (f"{backend}.raw_loop", raw_loop_step),
        (f"{backend}.append_flush", append_flush),
        (f"{backend}.raw_append", raw_append_step),
    ]


def _peer_step(
    store: peers.OpenAISession | peers.LangGraphSaver, items: list[Any]
) -> Callable[[], Awaitable[None]]:
    async def step() -> None:
        await store.add(items)

    return step


# -- the report --------------------------------------------------------------------

# Turn 0 creates the session everywhere: flatness compares turns 1-10 with
# the last 10.
FIRST, LAST = slice(1, 11), slice(-10, None)
GOALS = {"raw_loop": 1.6, "raw_append": 1.3, "peer.openai": 1.8, "peer.langgraph": 8.0}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the runs, per contestant, and the ratios the goals name."""

    def total(key: str) -> list[float]:
        return [sum(run["times"][key]) for run in runs]

    def mean(key: str, part: slice) -> float:
        return statistics.median(
            statistics.mean(run["times"][key][part]) for run in runs
        )

    def paired(ours: str, theirs: str) -> float:
        return statistics.median(
            t / o for o, t in zip(total(ours), total(theirs), strict=True)
        )

    payload = runs[0]["payload"]
    contestants: dict[str, Any] = {}
    for key, label in LABELS.items():
        first, last = mean(key, FIRST), mean(key, LAST)
        entry: dict[str, Any] = {
            "label": label,
            "us_per_turn": statistics.median(total(key)) / TURNS * 1e6,
            "first10_us": first * 1e6,
            "last10_us": last * 1e6,
            "last10_over_first10": last / first,
            "per_turn_us": [
                statistics.median(xs) * 1e6
                for xs in zip(*(run["times"][key] for run in runs), strict=True)
            ],
        }
        if key in LOOP_STORES:
            disk = statistics.median(run["disk"][key] for run in runs)
            entry["disk_bytes"] = disk
            entry["disk_over_payload"] = disk / payload
        contestants[key] = entry
    ratios: dict[str, Any] = {}
    for backend in BACKENDS:
        ratios[backend] = {
            "run_turn_over_raw": 1
            / paired(f"{backend}.run_turn", f"{backend}.raw_loop"),
            "append_flush_over_raw": 1
            / paired(f"{backend}.append_flush", f"{backend}.raw_append"),
            "openai_over_run_turn": paired(f"{backend}.run_turn", "peer.openai"),
            "langgraph_over_run_turn": paired(f"{backend}.run_turn", "peer.langgraph"),
        }
    return {
        "turns": TURNS,
        "reps": len(runs),
        "events_per_loop_turn": statistics.mean(runs[0]["events_per_turn"]),
        "payload_bytes": payload,
        "contestants": contestants,
        "ratios": ratios,
        "goals": GOALS,
        "disk_samples": runs[0]["samples"],
    }


def report(results: dict[str, Any]) -> None:
    c, r = results["contestants"], results["ratios"]
    print(
        f"T={TURNS} turns ({results['events_per_loop_turn']:.1f} events per loop "
        f"turn, {results['payload_bytes'] / 1e6:.2f} MB payload), median of "
        f"{results['reps']} runs, in lockstep (LangGraph after, alone)"
    )

    def line(key: str, extra: str) -> None:
        e = c[key]
        print(
            f"  {e['label']:<44} {e['us_per_turn']:8.0f} us/turn  "
            f"last10/first10 {e['last10_over_first10']:5.2f}{extra}"
        )

    for backend in BACKENDS:
        rb = r[backend]
        line(
            f"{backend}.run_turn",
            f"  {rb['run_turn_over_raw']:5.2f}x raw+hop (goal <= 1.6)",
        )
        line(f"{backend}.raw_loop", "")
        line(
            f"{backend}.append_flush",
            f"  {rb['append_flush_over_raw']:5.2f}x raw+hop (goal <= 1.3)",
        )
        line(f"{backend}.raw_append", "")
    print("  flatness goal: last10/first10 <= 1.1")
    for key, name, goal in (
        ("peer.openai", "openai", 1.8),
        ("peer.langgraph", "langgraph", 8.0),
    ):
        line(key, "")
        print(
            "    its time / turnkeep run_turn's: "
            + ", ".join(f"{r[b][f'{name}_over_run_turn']:.2f} ({b})" for b in BACKENDS)
            + f"  (goal >= {goal})"
        )
    print("  bytes on disk after close / payload (goal <= 1.2, SQLite <= 1.3):")
    for key in LOOP_STORES:
        e = c[key]
        print(
            f"    {e['label']:<44} {e['disk_bytes'] / 1e6:9.2f} MB "
            f"{e['disk_over_payload']:7.2f}x"
        )


# -- the loop's own CPU, in instructions -------------------------------------

IR_TURNS = (100, 300)
"""Turns of the two callgrind runs whose difference is counted."""
IR_WARM = 50
"""Turns run before the garbage collector's start-up work is set aside."""
IR_KINDS = {"defaults": True, "no-redaction": False}
"""Callgrind variants: whether secret redaction is on."""


async def _ir_turns(turns: int, redact: bool) -> None:
    prompts = Workload(seed=13)
    said = [prompts.text() for _ in range(turns)]
    config = {"persistence": "memory", "redact_secrets": redact}
    async with Host(config) as host:
        agent = lean_agent(host)
        for text in said[:IR_WARM]:
            await agent.run_turn(text)
        # What start-up allocated is collected and set aside here, so the
        # full collections it would cost later (at points that move with
        # the run's length) stay out of the difference of two runs.
        gc.collect()
        gc.freeze()
        for text in said[IR_WARM:]:
            await agent.run_turn(text)
        await agent.close()


def ir_mode(mode: str) -> None:
    """Run `KIND:TURNS` turns (under callgrind, from `instructions`)."""
    kind, turns = mode.split(":")
    asyncio.run(_ir_turns(int(turns), IR_KINDS[kind]))


def instructions() -> dict[str, Any]:
    """Instructions per `run_turn` of each variant (see the module docstring)."""
    callgrind.valgrind()
    low, high = IR_TURNS
    per_turn: dict[str, float] = {}
    for kind in IR_KINDS:
        counts = [
            callgrind.count("benchmarks.bench_loop", f"{kind}:{n}") for n in IR_TURNS
        ]
        per_turn[kind] = (counts[1] - counts[0]) / (high - low)
    print(f"instructions per run_turn, memory backend (turns {low + 1}-{high}):")
    for kind, count in per_turn.items():
        print(f"  {kind:<13} {count / 1e6:7.3f} M")
    share = 1 - per_turn["no-redaction"] / per_turn["defaults"]
    print(f"  secret redaction: {share:.1%} of a turn's instructions")
    return {"instructions_per_turn": per_turn, "redaction_share": share}


def main() -> dict[str, Any]:
    if "--ir" in sys.argv:
        ir_mode(sys.argv[sys.argv.index("--ir") + 1])
        return {}
    if "--callgrind" in sys.argv:
        return instructions()
    gone = peers.missing()
    if gone:
        raise SystemExit(
            f"bench_loop: {', '.join(gone)} not installed; " + peers.INSTALL_HINT
        )
    runs: list[dict[str, Any]] = []
    for rep in range(REPS):
        with scratch() as root:
            runs.append(asyncio.run(lockstep(root, sample_disk=rep == 0)))
    results = summarize(runs)
    report(results)
    return results


if __name__ == "__main__":
    main()
