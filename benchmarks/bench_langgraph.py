"""A LangGraph graph of 200 steps on `TurnkeepSaver`, next to LangGraph's savers.

One graph, run by every contestant in the same process run: a node that
adds an assistant message of 200-2000 characters (`benchmarks/workload.py`
text) to a `messages` channel (LangGraph's `add_messages`) and loops back
to itself `BENCH_LG_STEPS` (200) times, with `durability="sync"` (each
step's checkpoint is stored before the next step starts, for every saver
alike). The graph runs twice over: with `invoke` (the savers' sync
methods) and with `ainvoke` (an async node, the savers' async methods).
Contestants, sync:

- `InMemorySaver`: the raw baseline, LangGraph's own cost with no storage;
- `TurnkeepSaver` on SQLite, JSONL and (when a server answers) PostgreSQL;
- LangGraph's `SqliteSaver` (WAL, `synchronous=FULL`, as turnkeep's SQLite)
  and `PostgresSaver` (when a server answers).

and async, under `asyncio.run`:

- `InMemorySaver` again: the raw baseline of the async rows;
- `TurnkeepSaver` on the same store specs (its host on the saver's own
  loop thread, each call crossing to it), and on SQLite once more with a
  `Host` started on the graph's loop (no crossing);
- LangGraph's `AsyncSqliteSaver` (aiosqlite, WAL, `synchronous=FULL`) and
  `AsyncPostgresSaver` (when a server answers).

Per contestant: the median time per step (node entry to node entry: the
step's checkpoint and writes included), its growth with history (median of
the last 20 steps over the first 20), and the bytes on disk afterwards
against the payload (the messages' text). Ratios are against
`InMemorySaver` run the same way, sync or async (time), and the payload
(disk). Repetitions: `BENCH_LG_REPS`, 2 by default (`make bench-all`, about
half a minute with a PostgreSQL server) and 3 with `BENCH_FULL=1`; the
median of each measure is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncGenerator, Callable, Generator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.workload import Workload

STEPS = int(os.environ.get("BENCH_LG_STEPS", "200"))
FULL = os.environ.get("BENCH_FULL", "") == "1"
REPS = int(os.environ.get("BENCH_LG_REPS", "3" if FULL else "2"))
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
AsyncContestant = Callable[
    [Path], contextlib.AbstractAsyncContextManager[tuple[Saver, Callable[[], int]]]
]


def _texts() -> list[str]:
    workload = Workload(seed=11)
    return [workload.text() for _ in range(STEPS)]


def build_graph(
    saver: Saver, texts: list[str], stamps: list[float], *, is_async: bool = False
) -> Any:
    """The looping one-node graph, compiled with `saver` (an async node if asked)."""
    graph_module: Any = importlib.import_module("langgraph.graph")
    messages: Any = importlib.import_module("langchain_core.messages")
    state_schema = graph_module.MessagesState

    def step(state: dict[str, Any]) -> dict[str, Any]:
        stamps.append(time.perf_counter())
        n = len(state["messages"])
        return {"messages": [messages.AIMessage(content=texts[n - 1], id=f"m{n}")]}

    async def astep(state: dict[str, Any]) -> dict[str, Any]:
        return step(state)

    def route(state: dict[str, Any]) -> str:
        return "step" if len(state["messages"]) <= STEPS else graph_module.END

    builder = graph_module.StateGraph(state_schema)
    builder.add_node("step", astep if is_async else step)
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
    final = graph.get_state(config).values["messages"]
    return _steps(start, stamps, final, texts)


async def arun(saver: Saver, texts: list[str], thread: str) -> list[float]:
    """`run` with `ainvoke`: an async node, the saver's async methods."""
    messages: Any = importlib.import_module("langchain_core.messages")
    stamps: list[float] = []
    graph = build_graph(saver, texts, stamps, is_async=True)
    config = {"configurable": {"thread_id": thread}, "recursion_limit": STEPS + 10}
    start = time.perf_counter()
    await graph.ainvoke(
        {"messages": [messages.HumanMessage(content="go", id="m0")]},
        config,
        durability="sync",
    )
    stamps.append(time.perf_counter())
    final = (await graph.aget_state(config)).values["messages"]
    return _steps(start, stamps, final, texts)


def _steps(
    start: float, stamps: list[float], final: list[Any], texts: list[str]
) -> list[float]:
    """The seconds of each step, once the graph is seen to have run to its end."""
    assert len(final) == STEPS + 1, len(final)
    assert final[-1].content == texts[STEPS - 1]
    return [b - a for a, b in zip([start, *stamps], stamps, strict=False)][1:]


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


@contextlib.asynccontextmanager
async def in_memory_async(
    root: Path,
) -> AsyncGenerator[tuple[Saver, Callable[[], int]]]:
    del root
    memory: Any = importlib.import_module("langgraph.checkpoint.memory")
    yield memory.InMemorySaver(), lambda: 0


def turnkeep_async(kind: str) -> AsyncContestant:
    @contextlib.asynccontextmanager
    async def contestant(
        root: Path,
    ) -> AsyncGenerator[tuple[Saver, Callable[[], int]]]:
        from turnkeep_langgraph import TurnkeepSaver

        if kind == "postgres":
            schema = _fresh_schema("tk_bench_lg")
            spec = f"postgres:{DSN}{'&' if '?' in DSN else '?'}schema={schema}"
            async with TurnkeepSaver(store=spec) as saver:
                yield saver, lambda: _schema_bytes(schema)
            return
        target = root / ("threads.db" if kind == "sqlite" else "threads")
        async with TurnkeepSaver(store=f"{kind}:{target}") as saver:
            yield saver, lambda: _size(root)

    return contestant


@contextlib.asynccontextmanager
async def turnkeep_own_host(
    root: Path,
) -> AsyncGenerator[tuple[Saver, Callable[[], int]]]:
    """`TurnkeepSaver` on a SQLite `Host` started on the graph's own loop."""
    from turnkeep.host import Host
    from turnkeep.storespec import parse_spec
    from turnkeep_langgraph import TurnkeepSaver

    spec = parse_spec(f"sqlite:{root / 'threads.db'}")
    async with Host(spec.overrides()) as host, TurnkeepSaver(store=host) as saver:
        yield saver, lambda: _size(root)


@contextlib.asynccontextmanager
async def async_sqlite_saver(
    root: Path,
) -> AsyncGenerator[tuple[Saver, Callable[[], int]]]:
    import aiosqlite

    module: Any = importlib.import_module("langgraph.checkpoint.sqlite.aio")
    # What `AsyncSqliteSaver.from_conn_string` does, with the sync one's pragmas.
    async with aiosqlite.connect(root / "langgraph.sqlite3") as conn:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=FULL")
        saver = module.AsyncSqliteSaver(conn)
        await saver.setup()
        yield saver, lambda: _size(root)


@contextlib.asynccontextmanager
async def async_postgres_saver(
    root: Path,
) -> AsyncGenerator[tuple[Saver, Callable[[], int]]]:
    del root
    module: Any = importlib.import_module("langgraph.checkpoint.postgres.aio")
    schema = _fresh_schema("lg_bench")
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    dsn = f"{DSN}{'&' if '?' in DSN else '?'}options=-csearch_path%3D{schema}"
    async with module.AsyncPostgresSaver.from_conn_string(dsn) as saver:
        await saver.setup()
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


def async_contestants() -> dict[str, tuple[str, AsyncContestant]]:
    """The contestants run with `ainvoke`, as `contestants` (keys end in `_async`)."""
    found: dict[str, tuple[str, AsyncContestant]] = {
        "memory_async": ("async: LangGraph InMemorySaver", in_memory_async),
        "turnkeep_sqlite_async": (
            "async: TurnkeepSaver, SQLite",
            turnkeep_async("sqlite"),
        ),
        "turnkeep_sqlite_host_async": (
            "async: TurnkeepSaver, SQLite, own Host",
            turnkeep_own_host,
        ),
        "turnkeep_jsonl_async": (
            "async: TurnkeepSaver, JSONL",
            turnkeep_async("jsonl"),
        ),
        "sqlite_saver_async": ("async: LangGraph AsyncSqliteSaver", async_sqlite_saver),
    }
    if _postgres_up():
        found["turnkeep_postgres_async"] = (
            "async: TurnkeepSaver, PostgreSQL",
            turnkeep_async("postgres"),
        )
        found["postgres_saver_async"] = (
            "async: LangGraph AsyncPostgresSaver",
            async_postgres_saver,
        )
    return found


# -- measuring -------------------------------------------------------------------------


Measured = tuple[list[float], Callable[[], int]]


def _one(contestant: Contestant, root: Path, texts: list[str], thread: str) -> Measured:
    with contestant(root) as (saver, disk):
        steps = run(saver, texts, thread)
    return steps, disk


async def _aone(
    contestant: AsyncContestant, root: Path, texts: list[str], thread: str
) -> Measured:
    async with contestant(root) as (saver, disk):
        steps = await arun(saver, texts, thread)
    return steps, disk


def measure(reps: int = REPS) -> dict[str, Any]:
    """Run every contestant `reps` times, round-robin, sync then async; the medians."""
    texts = _texts()
    payload = sum(len(t.encode()) for t in texts)
    chosen = contestants()
    chosen_async = async_contestants()
    labels = {k: label for k, (label, _) in (chosen | chosen_async).items()}
    samples: dict[str, list[dict[str, float]]] = {k: [] for k in labels}
    for rep in range(reps):
        for key in labels:
            root = Path(tempfile.mkdtemp(prefix=f"bench-lg-{key}-"))
            try:
                if key in chosen:
                    steps, disk = _one(chosen[key][1], root, texts, f"run{rep}")
                else:
                    steps, disk = asyncio.run(
                        _aone(chosen_async[key][1], root, texts, f"run{rep}")
                    )
                size = disk()  # after the saver closed: what stays on disk
            finally:
                shutil.rmtree(root, ignore_errors=True)
                _drop_schemas()
            samples[key].append(_sample(steps, size))
    out: dict[str, Any] = {"steps": STEPS, "reps": reps, "payload_bytes": payload}
    base = {
        mode: statistics.median(s["us_per_step"] for s in samples[key])
        for mode, key in (("sync", "memory"), ("async", "memory_async"))
    }
    table: dict[str, Any] = {}
    for key, runs in samples.items():
        entry: dict[str, Any] = {
            m: statistics.median(r[m] for r in runs) for m in runs[0]
        }
        entry["label"] = labels[key]
        entry["mode"] = "async" if key in chosen_async else "sync"
        entry["over_memory"] = entry["us_per_step"] / base[entry["mode"]]
        entry["disk_over_payload"] = entry["disk_bytes"] / payload if payload else 0.0
        table[key] = entry
    out["contestants"] = table
    out["ratios"] = _ratios(table)
    return out


def _sample(steps: list[float], size: int) -> dict[str, float]:
    first = statistics.median(steps[:EDGE])
    last = statistics.median(steps[-EDGE:])
    return {
        "us_per_step": statistics.median(steps) * 1e6,
        "p95_us": sorted(steps)[int(len(steps) * 0.95)] * 1e6,
        "first_us": first * 1e6,
        "last_us": last * 1e6,
        "growth": last / first,
        "disk_bytes": float(size),
    }


def _ratios(table: dict[str, Any]) -> dict[str, float]:
    """TurnkeepSaver over LangGraph's saver on the same backend, run the same way."""
    ratios: dict[str, float] = {}
    for backend, peer in (("sqlite", "sqlite_saver"), ("postgres", "postgres_saver")):
        for suffix in ("", "_async"):
            ours = table.get(f"turnkeep_{backend}{suffix}")
            theirs = table.get(f"{peer}{suffix}")
            if not (ours and theirs):
                continue
            name = f"{backend}{suffix}"
            ratios[f"{name}_time_vs_langgraph"] = (
                ours["us_per_step"] / theirs["us_per_step"]
            )
            ratios[f"{name}_disk_vs_langgraph"] = (
                ours["disk_bytes"] / theirs["disk_bytes"]
            )
            ratios[f"{name}_growth_vs_langgraph"] = ours["growth"] / theirs["growth"]
    return ratios


def main() -> dict[str, Any]:
    print(
        f"{STEPS}-step graph (one message of 200-2000 chars per step), "
        f"durability='sync', {REPS} repetitions, medians; 'x mem' is against "
        "InMemorySaver run the same way (invoke, or ainvoke for the async rows)"
    )
    results = measure()
    print(f"payload (message text): {results['payload_bytes']:,} bytes")
    print(
        f"{'contestant':<41} {'µs/step':>9} {'p95':>9} {'x mem':>6} "
        f"{'last20/first20':>14} {'disk':>12} {'disk/payload':>12}"
    )
    for entry in results["contestants"].values():
        print(
            f"{entry['label']:<41} {entry['us_per_step']:>9,.0f} "
            f"{entry['p95_us']:>9,.0f} {entry['over_memory']:>6.2f} "
            f"{entry['growth']:>14.2f} {entry['disk_bytes']:>12,.0f} "
            f"{entry['disk_over_payload']:>12.2f}"
        )
    for name, value in results["ratios"].items():
        print(f"{name}: {value:.2f}x")
    return results
