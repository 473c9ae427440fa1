"""Open per request: what a fresh process pays to continue a stored session.

Web backends open a session, run one turn and close it, per request, often
in a process that never saw the session before. Every figure here is one
such process (`benchmarks/fresh.py` says where its span starts and ends:
from the host's construction, imports done, to the first write's return or
the model's first call; the same span for the peers), the median over
`REPS` processes, next to its baseline measured in the same run:

1. **Ready to append**: `Host` + `sessions.open` + one `append` + `flush`
   on sessions of `benchmarks/streamed.py` turns (about 1k, 100k and 1M
   events at full size) on JSONL, SQLite and PostgreSQL; against the same
   span on the smallest session (goal: <= 1.3x at the largest, and <= 25 ms).
2. **To the model's first call**: `AgentLoop.open` + `run_turn` until the
   model is called, on the streamed session, against the same conversation
   stored with one delta per reply (goal <= 1.2x) and against reading and
   decoding the history the model was given with msgspec alone (<= 1.5x).
   Also the resident set the open session holds (goal: <= 3x the text of its
   history + 2 MB) and open + turn + close.
3. **`TurnkeepSession.add_items`** as the process's first write on a session
   of `ITEMS` items, against the Agents SDK's `SQLiteSession` (goal <= 2x).
4. **`TurnkeepSaver.get_state`** in a process that is not the writer, on a
   thread of `CHECKPOINTS` checkpoints, against LangGraph's `SqliteSaver`
   (goal <= 1.5x): the first call (the span) and the median of later ones.

Sizes: by default (`make bench-all`) 3 and 33 turns, 10,000 items, 300
checkpoints, 3 processes per figure; `BENCH_FULL=1` 3, 330 and 3,300 turns
(~1k, 100k, 1M events), 100,000 items, 1,200 checkpoints; `make bench`
(`BENCH_QUICK=1`) 1 and 2 only, on SQLite, 2 and 6 turns, one process per
figure (importing the peers costs seconds per process). `BENCH_OPEN_TURNS`
(comma-separated), `BENCH_OPEN_ITEMS`, `BENCH_OPEN_CHECKPOINTS`,
`BENCH_OPEN_REPS` and `BENCH_OPEN_BACKENDS` override them. PostgreSQL
(`TURNKEEP_BENCH_POSTGRES_DSN`, else the test DSN) is skipped with a message
when no server answers.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from benchmarks import streamed
from benchmarks.streamed import verdict
from turnkeep import Host

FULL = os.environ.get("BENCH_FULL", "") == "1"
QUICK = os.environ.get("BENCH_QUICK") == "1" and not FULL


def _sizes(name: str, full: str, default: str, quick: str) -> str:
    return os.environ.get(name, full if FULL else quick if QUICK else default)


TURNS = tuple(
    int(n) for n in _sizes("BENCH_OPEN_TURNS", "3,330,3300", "3,33", "2,6").split(",")
)
ITEMS = int(_sizes("BENCH_OPEN_ITEMS", "100000", "10000", "2000"))
CHECKPOINTS = int(_sizes("BENCH_OPEN_CHECKPOINTS", "1200", "300", "60"))
REPS = int(_sizes("BENCH_OPEN_REPS", "3", "3", "1"))
ITEMS_PER_CALL = 400
ROOT = Path(__file__).resolve().parents[1]
GOALS = {
    "ready_ms": 25.0,
    "ready_growth": 1.3,
    "first_call_over_one_delta": 1.2,
    "first_call_over_decode": 1.5,
    "rss_text_factor": 3.0,
    "items_over_sdk": 2.0,
    "state_over_sdk": 1.5,
}


@contextmanager
def scratch() -> Generator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bench-open-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def fresh(job: dict[str, Any]) -> dict[str, Any]:
    """Run one job in a new interpreter (`benchmarks/fresh.py`); its figures."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.fresh", msgspec.json.encode(job).decode()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"fresh process {job['kind']} failed:\n{done.stderr[-3000:]}"
        )
    return msgspec.json.decode(done.stdout.strip().splitlines()[-1])


def median_of(jobs: Callable[[], dict[str, Any]], reps: int) -> dict[str, float]:
    runs = [jobs() for _ in range(reps)]
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def backends() -> list[str]:
    """`BENCH_OPEN_BACKENDS` (SQLite alone in the quick run), PostgreSQL if up."""
    named = os.environ.get("BENCH_OPEN_BACKENDS", "sqlite" if QUICK else "")
    wanted = named.split(",") if named else list(streamed.BACKENDS)
    return [b for b in wanted if b != "postgres" or streamed.postgres_up()]


# -- 1 and 2: the loop's sessions ----------------------------------------------


async def populate(backend: str, root: Path, schema: str) -> dict[str, Any]:
    """Streamed and one-delta sessions of every size; their events and text."""
    clock = streamed.FakeClock()
    config = streamed.store_config(backend, root, schema=schema)
    stored: dict[str, Any] = {}
    async with Host(config, clock=clock) as host:
        for turns in TURNS:
            for shape, one_delta in (("streamed", False), ("one_delta", True)):
                sid = f"{shape}-{turns}"
                text = await streamed.fill(
                    host,
                    clock,
                    sid,
                    turns,
                    one_delta=one_delta,
                    conversation=f"c{turns}",
                )
                session = await host.sessions.open(sid)
                stored[sid] = {"events": session.next_seq, "text_bytes": text}
                await host.sessions.close(sid)
    return stored


def loop_figures(backend: str, root: Path, schema: str) -> dict[str, Any]:
    stored = asyncio.run(populate(backend, root, schema))
    base = {"backend": backend, "root": str(root), "schema": schema}
    rows: list[dict[str, Any]] = []
    for turns in TURNS:
        row: dict[str, Any] = {"turns": turns}
        for shape in ("streamed", "one_delta"):
            sid = f"{shape}-{turns}"
            dump = str(root / f"{sid}.messages.json")
            job = base | {
                "session": sid,
                "one_delta": shape == "one_delta",
                "conversation": f"c{turns}",
            }
            row[shape] = stored[sid] | median_of(
                lambda job=job, dump=dump: fresh(job | {"kind": "loop", "dump": dump}),
                REPS,
            )
            if shape == "streamed":
                row[shape] |= median_of(
                    lambda dump=dump: fresh({"kind": "decode", "dump": dump}), REPS
                )
        row["ready_s"] = median_of(
            lambda turns=turns: fresh(
                base | {"kind": "append", "session": f"streamed-{turns}"}
            ),
            REPS,
        )["ready_s"]
        rows.append(row)
    return {"sizes": rows}


def report_loop(backend: str, figures: dict[str, Any]) -> dict[str, Any]:
    rows = figures["sizes"]
    first, last = rows[0], rows[-1]
    ratios = {
        "ready_growth": last["ready_s"] / first["ready_s"],
        "ready_ms": last["ready_s"] * 1e3,
    }
    print(f"  {backend}:")
    for row in rows:
        s, d = row["streamed"], row["one_delta"]
        print(
            f"    {s['events']:>9,} events ({row['turns']:,} turns, "
            f"{s['text_bytes'] / 1e6:.2f} MB text): ready to append "
            f"{row['ready_s'] * 1e3:7.1f} ms ({row['ready_s'] / first['ready_s']:.2f}x "
            f"the {first['streamed']['events']:,}-event session's)"
        )
        over_one = s["first_call_s"] / d["first_call_s"]
        over_decode = s["first_call_s"] / s["decode_s"]
        rss_goal = GOALS["rss_text_factor"] * s["text_bytes"] + 2e6
        rss_verdict = "met" if s["session_rss"] <= rss_goal else "NOT met"
        print(
            f"      to the model's first call {s['first_call_s'] * 1e3:7.1f} ms: "
            f"{over_one:.2f}x one delta per reply ({d['first_call_s'] * 1e3:.1f} ms) "
            f"{verdict(over_one, GOALS['first_call_over_one_delta'])}, "
            f"{over_decode:.1f}x decoding its {s['messages']:,} messages with msgspec "
            f"({s['decode_s'] * 1e3:.2f} ms) "
            f"{verdict(over_decode, GOALS['first_call_over_decode'])}"
        )
        print(
            f"      open + turn + close {s['close_s'] * 1e3:7.1f} ms; the open session "
            f"holds {s['session_rss'] / 1e6:.1f} MB, "
            f"{s['session_rss'] / s['text_bytes']:.1f}x "
            f"its text (one delta per reply: {d['session_rss'] / 1e6:.1f} MB) "
            f"(goal <= 3x text + 2 MB = {rss_goal / 1e6:.1f} MB: {rss_verdict})"
        )
        row["ratios"] = {
            "first_call_over_one_delta": over_one,
            "first_call_over_decode": over_decode,
            "rss_over_goal": s["session_rss"] / rss_goal,
        }
    print(
        "    ready to append, largest / smallest session "
        f"{ratios['ready_growth']:.2f}x "
        f"{verdict(ratios['ready_growth'], GOALS['ready_growth'])}; "
        f"{ratios['ready_ms']:.1f} ms {verdict(ratios['ready_ms'], GOALS['ready_ms'])}"
    )
    return figures | {"ratios": ratios}


# -- 3: the Agents SDK's first write ---------------------------------------------


def sdk_turn(n: int) -> list[dict[str, Any]]:
    """The four Responses items of a turn (~1.5 KB)."""
    rnd = streamed.turn_rng("items", n, "items")
    said, answer = streamed.cut(rnd, 300), streamed.cut(rnd, 600)
    return [
        {"role": "user", "content": said},
        {
            "type": "function_call",
            "call_id": f"call_{n}",
            "name": "fetch",
            "arguments": '{"page": 1}',
        },
        {"type": "function_call_output", "call_id": f"call_{n}", "output": answer},
        {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": answer, "annotations": []}],
        },
    ]


async def fill_items(session: Any, items: int) -> None:
    batch: list[dict[str, Any]] = []
    for n in range(items // 4):
        batch += sdk_turn(n)
        if len(batch) >= ITEMS_PER_CALL:
            await session.add_items(batch)
            batch = []
    if batch:
        await session.add_items(batch)


def items_figures(kinds: list[str], root: Path, schema: str) -> dict[str, Any]:
    from agents.memory import SQLiteSession

    from turnkeep_openai_agents import TurnkeepSession, shutdown

    peer_path = str(root / "sdk.db")
    targets = {
        b: streamed.store_spec(b, root / f"oai-{b}", schema=schema) for b in kinds
    }
    for backend, target in targets.items():
        (root / f"oai-{backend}").mkdir(exist_ok=True)
        ours = TurnkeepSession("items", store=target)
        asyncio.run(fill_items(ours, ITEMS))
        ours.close()
    shutdown()
    peer = SQLiteSession("items", peer_path)
    asyncio.run(fill_items(peer, ITEMS))
    peer.close()
    job = {"kind": "items", "session": "items", "items": sdk_turn(ITEMS)}
    out = {
        "sdk": median_of(
            lambda: fresh(
                job | {"peer": True, "target": peer_path, "backend": "sqlite"}
            ),
            REPS,
        )["first_write_s"]
    }
    for backend, target in targets.items():
        out[backend] = median_of(
            lambda t=target, b=backend: fresh(
                job | {"peer": False, "target": t, "backend": b}
            ),
            REPS,
        )["first_write_s"]
    print(
        "  TurnkeepSession.add_items, a fresh process's first write, "
        f"{ITEMS:,} items stored:"
    )
    print(f"    SQLiteSession (SDK)      {out['sdk'] * 1e3:8.1f} ms")
    ratios: dict[str, float] = {}
    for backend in kinds:
        ratios[backend] = out[backend] / out["sdk"]
        print(
            f"    TurnkeepSession {backend:<8} {out[backend] * 1e3:8.1f} ms  "
            f"{ratios[backend]:6.2f}x the SDK's "
            f"{verdict(ratios[backend], GOALS['items_over_sdk'])}"
        )
    return {"items": ITEMS, "first_write_s": out, "ratios": ratios}


# -- 4: LangGraph's get_state from a reader ---------------------------------------


def graph(saver: Any, steps: int) -> Any:
    """A graph that adds one short message per step, `steps` times."""
    graph_module: Any = importlib.import_module("langgraph.graph")
    messages: Any = importlib.import_module("langchain_core.messages")

    def step(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state["messages"])
        text = streamed.cut(streamed.turn_rng("graph", n, "step"), 100)
        return {"messages": [messages.AIMessage(content=text, id=f"m{n}")]}

    def route(state: dict[str, Any]) -> str:
        return "step" if len(state["messages"]) <= steps else graph_module.END

    builder = graph_module.StateGraph(graph_module.MessagesState)
    builder.add_node("step", step)
    builder.add_edge(graph_module.START, "step")
    builder.add_conditional_edges("step", route)
    return builder.compile(checkpointer=saver)


def _run_graph(saver: Any, steps: int) -> None:
    messages: Any = importlib.import_module("langchain_core.messages")
    config = {"configurable": {"thread_id": "thread"}, "recursion_limit": steps + 10}
    graph(saver, steps).invoke(
        {"messages": [messages.HumanMessage(content="go", id="m0")]}, config
    )


def state_figures(kinds: list[str], root: Path, schema: str) -> dict[str, Any]:
    import sqlite3

    from turnkeep_langgraph import TurnkeepSaver

    sqlite_module: Any = importlib.import_module("langgraph.checkpoint.sqlite")
    peer_path = str(root / "langgraph.db")
    conn = sqlite3.connect(peer_path, check_same_thread=False)
    peer = sqlite_module.SqliteSaver(conn)
    _run_graph(peer, CHECKPOINTS)
    conn.close()
    targets = {
        b: streamed.store_spec(b, root / f"lg-{b}", schema=schema) for b in kinds
    }
    for backend, target in targets.items():
        (root / f"lg-{backend}").mkdir(exist_ok=True)
        with TurnkeepSaver(store=target) as saver:
            _run_graph(saver, CHECKPOINTS)
    job = {"kind": "state", "session": "thread"}
    out = {
        "sdk": median_of(
            lambda: fresh(
                job | {"peer": True, "target": peer_path, "backend": "sqlite"}
            ),
            REPS,
        )
    }
    for backend, target in targets.items():
        out[backend] = median_of(
            lambda t=target, b=backend: fresh(
                job | {"peer": False, "target": t, "backend": b}
            ),
            REPS,
        )
    print(
        "  get_state from a process that is not the writer, "
        f"{CHECKPOINTS:,} checkpoints:"
    )
    base = out["sdk"]
    print(
        f"    SqliteSaver (LangGraph)  first {base['first_get_s'] * 1e3:7.1f} ms, "
        f"then {base['get_s'] * 1e3:6.2f} ms per call"
    )
    ratios: dict[str, dict[str, float]] = {}
    for backend in kinds:
        ours = out[backend]
        first = ours["first_get_s"] / base["first_get_s"]
        later = ours["get_s"] / base["get_s"]
        ratios[backend] = {"first": first, "later": later}
        print(
            f"    TurnkeepSaver {backend:<10} "
            f"first {ours['first_get_s'] * 1e3:7.1f} ms "
            f"{first:5.2f}x {verdict(first, GOALS['state_over_sdk'])}, then "
            f"{ours['get_s'] * 1e3:6.2f} ms {later:5.2f}x "
            f"{verdict(later, GOALS['state_over_sdk'])}"
        )
    return {"checkpoints": CHECKPOINTS, "seconds": out, "ratios": ratios}


def main() -> dict[str, Any]:
    import logging

    logging.getLogger("turnkeep_sqlite").setLevel(logging.ERROR)
    kinds = backends()
    print(
        f"fresh processes, median of {REPS}; sessions of {', '.join(map(str, TURNS))} "
        f"streamed turns ({streamed.DELTAS} deltas x {streamed.DELTA_CHARS} characters "
        f"per reply, {streamed.TOOL_BYTES // 1024} KB tool output)"
    )
    schema = f"tk_bench_open_{os.getpid()}"
    results: dict[str, Any] = {"turns": list(TURNS), "reps": REPS, "goals": GOALS}
    try:
        with scratch() as root:
            results["loop"] = {}
            for backend in kinds:
                here = root / backend
                here.mkdir()
                figures = loop_figures(backend, here, f"{schema}_loop")
                results["loop"][backend] = report_loop(backend, figures)
            if QUICK:
                print(
                    "  the peers' fresh processes (add_items, get_state): left to "
                    "`make bench-all` (quick run)"
                )
            else:
                results["items"] = items_figures(kinds, root, f"{schema}_oai")
                results["state"] = state_figures(kinds, root, f"{schema}_lg")
    finally:
        if "postgres" in kinds:
            for part in ("loop", "oai", "lg"):
                streamed.drop_schema(f"{schema}_{part}")
    return results


if __name__ == "__main__":
    main()
