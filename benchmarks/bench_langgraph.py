"""A LangGraph graph of 200 steps on `TurnkeepSaver`, next to LangGraph's savers.

One graph, run by every contestant in the same process run: a node that
adds an assistant message of 200-2000 characters (`benchmarks/workload.py`
text) to a `messages` channel (LangGraph's `add_messages`) and loops back
to itself `BENCH_LG_STEPS` (200) times, with `durability="sync"` (each
step's checkpoint is stored before the next step starts, for every saver
alike). Contestants:

- `InMemorySaver`: the raw baseline, LangGraph's own cost with no storage;
- `TurnkeepSaver` on SQLite, JSONL and (when a server answers) PostgreSQL;
- LangGraph's `SqliteSaver` (WAL, `synchronous=FULL`, as turnkeep's SQLite)
  and `PostgresSaver` (when a server answers).

Per contestant: the median time per step (node entry to node entry: the
step's checkpoint and writes included), its growth with history (median of
the last 20 steps over the first 20), and the bytes on disk afterwards
against the payload (the messages' text). Ratios are against
`InMemorySaver` (time) and the payload (disk). Repetitions: `BENCH_LG_REPS`
(3), the median of each measure is reported.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.workload import Workload

STEPS = int(os.environ.get("BENCH_LG_STEPS", "200"))
REPS = int(os.environ.get("BENCH_LG_REPS", "3"))
DSN = os.environ.get(
    "TURNKEEP_BENCH_POSTGRES_DSN",
    os.environ.get(
        "TURNKEEP_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
    ),
)
EDGE = 20

Saver = Any
Contestant = Callable[
    [Path], contextlib.AbstractContextManager[tuple[Saver, Callable[[], int]]]
]


def _texts() -> list[str]:
    workload = Workload(seed=11)
    return [workload.text() for _ in range(STEPS)]


def build_graph(saver: Saver, texts: list[str], stamps: list[float]) -> Any:
    """The looping one-node graph, compiled with `saver`."""
    graph_module: Any = importlib.import_module("langgraph.graph")
    messages: Any = importlib.import_module("langchain_core.messages")
    state_schema = graph_module.MessagesState

    def step(state: dict[str, Any]) -> dict[str, Any]:
        stamps.append(time.perf_counter())
        n = len(state["messages"])
        return {"messages": [messages.AIMessage(content=texts[n - 1], id=f"m{n}")]}

    def route(state: dict[str, Any]) -> str:
        return "step" if len(state["messages"]) <= STEPS else graph_module.END

    builder = graph_module.StateGraph(state_schema)
    builder.add_node("step", step)
    builder.add_edge(graph_module.START, "step")
    builder.add_conditional_edges("step", route)
    return builder.compile(checkpointer=saver)


def run(saver: Saver, texts: list[str], thread: str) -> list[float]:
    """Run the graph once; the seconds of each step (node entry to node entry)."""
    messages: Any = importlib.import_module("langchain_core.messages")
    stamps: list[float] = []
    graph = build_graph(saver, texts, stamps)
    config = {"configurable": {"thread_id": thread}, "recursion_limit": STEPS + 10}
    start = time.perf_counter()
    graph.invoke(
        {"messages": [messages.HumanMessage(content="go", id="m0")]},
        config,
        durability="sync",
    )
    stamps.append(time.perf_counter())
    steps = [b - a for a, b in zip([start, *stamps], stamps, strict=False)][1:]
    final = graph.get_state(config).values["messages"]
    assert len(final) == STEPS + 1, len(final)
    assert final[-1].content == texts[STEPS - 1]
    return steps


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# -- contestants ---------------------------------------------------------------------


@contextlib.contextmanager
def in_memory(root: Path) -> Generator[tuple[Saver, Callable[[], int]]]:
    del root
    memory: Any = importlib.import_module("langgraph.checkpoint.memory")
    yield memory.InMemorySaver(), lambda: 0


def turnkeep(kind: str) -> Contestant:
    @contextlib.contextmanager
    def contestant(root: Path) -> Generator[tuple[Saver, Callable[[], int]]]:
        from turnkeep_langgraph import TurnkeepSaver

        if kind == "postgres":
            schema = _fresh_schema("tk_bench_lg")
            spec = f"postgres:{DSN}{'&' if '?' in DSN else '?'}schema={schema}"
            with TurnkeepSaver(store=spec) as saver:
                yield saver, lambda: _schema_bytes(schema)
            return
        target = root / ("threads.db" if kind == "sqlite" else "threads")
        with TurnkeepSaver(store=f"{kind}:{target}") as saver:
            yield saver, lambda: _size(root)

    return contestant


@contextlib.contextmanager
def sqlite_saver(root: Path) -> Generator[tuple[Saver, Callable[[], int]]]:
    import sqlite3

    module: Any = importlib.import_module("langgraph.checkpoint.sqlite")
    conn = sqlite3.connect(root / "langgraph.sqlite3", check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    saver = module.SqliteSaver(conn)
    saver.setup()
    try:
        yield saver, lambda: _size(root)
    finally:
        conn.close()


@contextlib.contextmanager
def postgres_saver(root: Path) -> Generator[tuple[Saver, Callable[[], int]]]:
    del root
    module: Any = importlib.import_module("langgraph.checkpoint.postgres")
    schema = _fresh_schema("lg_bench")
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    dsn = f"{DSN}{'&' if '?' in DSN else '?'}options=-csearch_path%3D{schema}"
    with module.PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        yield saver, lambda: _schema_bytes(schema)


_schemas: list[str] = []


def _fresh_schema(prefix: str) -> str:
    """A new schema name, dropped by `_drop_schemas` after the run."""
    schema = f"{prefix}_{os.getpid()}_{len(_schemas)}"
    _drop(schema)
    _schemas.append(schema)
    return schema


def _drop_schemas() -> None:
    while _schemas:
        _drop(_schemas.pop())


def _drop(schema: str) -> None:
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


def _schema_bytes(schema: str) -> int:
    with psycopg.connect(DSN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def _postgres_up() -> bool:
    try:
        with psycopg.connect(DSN, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def contestants() -> dict[str, tuple[str, Contestant]]:
    """Key -> (label, contestant); PostgreSQL ones only when a server answers."""
    found: dict[str, tuple[str, Contestant]] = {
        "memory": ("LangGraph InMemorySaver (no storage)", in_memory),
        "turnkeep_sqlite": ("TurnkeepSaver, SQLite", turnkeep("sqlite")),
        "turnkeep_jsonl": ("TurnkeepSaver, JSONL", turnkeep("jsonl")),
        "sqlite_saver": ("LangGraph SqliteSaver", sqlite_saver),
    }
    if _postgres_up():
        found["turnkeep_postgres"] = ("TurnkeepSaver, PostgreSQL", turnkeep("postgres"))
        found["postgres_saver"] = ("LangGraph PostgresSaver", postgres_saver)
    return found


# -- measuring -------------------------------------------------------------------------


def measure(reps: int = REPS) -> dict[str, Any]:
    """Run every contestant `reps` times, round-robin; the medians."""
    texts = _texts()
    payload = sum(len(t.encode()) for t in texts)
    chosen = contestants()
    samples: dict[str, list[dict[str, float]]] = {k: [] for k in chosen}
    for rep in range(reps):
        for key, (_, contestant) in chosen.items():
            root = Path(tempfile.mkdtemp(prefix=f"bench-lg-{key}-"))
            try:
                with contestant(root) as (saver, disk):
                    steps = run(saver, texts, f"run{rep}")
                size = disk()  # after the saver closed: what stays on disk
            finally:
                shutil.rmtree(root, ignore_errors=True)
                _drop_schemas()
            first = statistics.median(steps[:EDGE])
            last = statistics.median(steps[-EDGE:])
            samples[key].append(
                {
                    "us_per_step": statistics.median(steps) * 1e6,
                    "p95_us": sorted(steps)[int(len(steps) * 0.95)] * 1e6,
                    "first_us": first * 1e6,
                    "last_us": last * 1e6,
                    "growth": last / first,
                    "disk_bytes": float(size),
                }
            )
    out: dict[str, Any] = {"steps": STEPS, "reps": reps, "payload_bytes": payload}
    base = statistics.median(s["us_per_step"] for s in samples["memory"])
    table: dict[str, Any] = {}
    for key, runs in samples.items():
        entry: dict[str, Any] = {
            m: statistics.median(r[m] for r in runs) for m in runs[0]
        }
        entry["label"] = chosen[key][0]
        entry["over_memory"] = entry["us_per_step"] / base
        entry["disk_over_payload"] = entry["disk_bytes"] / payload if payload else 0.0
        table[key] = entry
    out["contestants"] = table
    ratios: dict[str, float] = {}
    for backend, peer in (("sqlite", "sqlite_saver"), ("postgres", "postgres_saver")):
        ours = table.get(f"turnkeep_{backend}")
        theirs = table.get(peer)
        if ours and theirs:
            ratios[f"{backend}_time_vs_langgraph"] = (
                ours["us_per_step"] / theirs["us_per_step"]
            )
            ratios[f"{backend}_disk_vs_langgraph"] = (
                ours["disk_bytes"] / theirs["disk_bytes"]
            )
            ratios[f"{backend}_growth_vs_langgraph"] = ours["growth"] / theirs["growth"]
    out["ratios"] = ratios
    return out


def main() -> dict[str, Any]:
    print(
        f"{STEPS}-step graph (one message of 200-2000 chars per step), "
        f"durability='sync', {REPS} repetitions, medians"
    )
    results = measure()
    print(f"payload (message text): {results['payload_bytes']:,} bytes")
    print(
        f"{'contestant':<38} {'µs/step':>9} {'p95':>9} {'x mem':>6} "
        f"{'last20/first20':>14} {'disk':>12} {'disk/payload':>12}"
    )
    for entry in results["contestants"].values():
        print(
            f"{entry['label']:<38} {entry['us_per_step']:>9,.0f} "
            f"{entry['p95_us']:>9,.0f} {entry['over_memory']:>6.2f} "
            f"{entry['growth']:>14.2f} {entry['disk_bytes']:>12,.0f} "
            f"{entry['disk_over_payload']:>12.2f}"
        )
    for name, value in results["ratios"].items():
        print(f"{name}: {value:.2f}x")
    return results
