"""A real LangGraph graph on `TurnkeepSaver`: run to completion, killed and resumed.

The graph (`graph_worker.py`) chains five nodes. It runs to completion on
every backend, sync and async, with its history readable; and on every
durable backend a worker process running it is killed (SIGKILL) inside the
third node, and a new process resumes the thread from its last checkpoint:
the nodes that had finished do not run again, and the state is complete.
A graph whose subgraph interrupts (human in the loop) is resumed by a new
saver: the interrupt (a pending write) and the subgraph's namespace were
stored. Three branches of one step store their writes at once.
"""

from __future__ import annotations

import asyncio
import operator
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

# pyright finds no types for langgraph.graph and langgraph.types: their
# py.typed sits in a namespace package that several distributions share.
from langgraph.graph import (  # pyright: ignore[reportMissingTypeStubs]
    END,
    START,
    StateGraph,
)
from langgraph.types import (  # pyright: ignore[reportMissingTypeStubs]
    Command,
    interrupt,
)

from turnkeep_langgraph import TurnkeepSaver

from .conftest import spec_for
from .graph_worker import NODES, build, config

WORKER = Path(__file__).with_name("graph_worker.py")
ROOT = Path(__file__).resolve().parents[3]
LEASE_MS = 1000


def test_a_graph_runs_to_completion(store: str, tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    with TurnkeepSaver(store=store) as saver:
        graph = build(saver, effects)
        final = graph.invoke({"steps": [], "count": 0}, config("sync"))
        assert final == {"steps": list(NODES), "count": 5}

        async def run_async() -> dict[str, object]:
            return await graph.ainvoke({"steps": [], "count": 0}, config("async"))

        assert asyncio.run(run_async()) == {"steps": list(NODES), "count": 5}
        for thread_id in ("sync", "async"):
            state = graph.get_state(config(thread_id))
            assert state.values == {"steps": list(NODES), "count": 5}
            assert state.next == ()
            # input, then one checkpoint per node: 7 in all (step -1 .. 5)
            history = list(graph.get_state_history(config(thread_id)))
            assert [(h.metadata or {}).get("step") for h in history] == list(
                range(5, -2, -1)
            )
        # A second invocation on the thread continues from its state.
        again = graph.invoke({"steps": ["more"], "count": 0}, config("sync"))
        assert again["steps"] == [*NODES, "more", *NODES]
    assert effects.read_text().split() == list(NODES) * 3


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize(
    "backend", ["jsonl", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_killed_run_resumes_from_its_last_checkpoint(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PostgreSQL frees a dead worker's sessions when its lease runs out:
    # a short lease keeps the test short (JSONL and SQLite see the death).
    monkeypatch.setenv("TURNKEEP_POSTGRES__LEASE_MS", str(LEASE_MS))
    for store in spec_for(backend, tmp_path):
        effects = tmp_path / "effects"
        stopped = effects.with_suffix(".stopped")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        worker = subprocess.Popen(
            [sys.executable, str(WORKER), store, "killed", str(effects), "c"], env=env
        )
        try:
            deadline = time.monotonic() + 60
            while not stopped.exists():
                assert worker.poll() is None, "the worker ended before node c"
                assert time.monotonic() < deadline, "the worker never reached node c"
                time.sleep(0.05)
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=30)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        assert worker.returncode == -signal.SIGKILL
        assert effects.read_text().split() == ["a", "b", "c"]
        if backend == "postgres":
            time.sleep(LEASE_MS / 1000 + 0.5)

        with TurnkeepSaver(store=store) as saver:
            graph = build(saver, effects)
            state = graph.get_state(config("killed"))
            assert state.values == {"steps": ["a", "b"], "count": 2}
            assert state.next == ("c",)
            final = graph.invoke(None, config("killed"))
        assert final == {"steps": list(NODES), "count": 5}
        # a and b ran once; c ran again (it was cut short), then d and e.
        assert effects.read_text().split() == ["a", "b", "c", "c", "d", "e"]


class Approval(TypedDict):
    request: str
    answer: str
    log: Annotated[list[str], operator.add]


def _approval_graph(saver: TurnkeepSaver) -> Any:
    def ask(state: Approval) -> dict[str, Any]:
        answer = interrupt(f"approve {state['request']}?")
        return {"answer": answer, "log": ["asked"]}

    def act(state: Approval) -> dict[str, Any]:
        return {"log": [f"acted on {state['answer']}"]}

    inner = StateGraph(Approval)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    inner.add_edge("ask", END)

    outer = StateGraph(Approval)
    outer.add_node("review", inner.compile())  # a subgraph: its own namespace
    outer.add_node("act", act)
    outer.add_edge(START, "review")
    outer.add_edge("review", "act")
    outer.add_edge("act", END)
    return outer.compile(checkpointer=saver)


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_an_interrupt_inside_a_subgraph_resumes_with_a_new_saver(
    backend: str, tmp_path: Path
) -> None:
    """Pending writes (the interrupt) and namespaces survive a new saver."""
    for store in spec_for(backend, tmp_path):
        with TurnkeepSaver(store=store) as saver:
            graph = _approval_graph(saver)
            first = graph.invoke(
                {"request": "deploy", "answer": "", "log": []}, config("hitl")
            )
            assert [i.value for i in first["__interrupt__"]] == ["approve deploy?"]
            namespaces = {
                t.config.get("configurable", {}).get("checkpoint_ns")
                for t in saver.list({"configurable": {"thread_id": "hitl"}})
            }
            assert "" in namespaces
            assert any(ns and ns.startswith("review:") for ns in namespaces)
        # A new saver (its store's host started again) sees the interrupt.
        with TurnkeepSaver(store=store) as saver:
            graph = _approval_graph(saver)
            state = graph.get_state(config("hitl"), subgraphs=True)
            assert state.next == ("review",)
            assert [i.value for i in state.interrupts] == ["approve deploy?"]
            final = graph.invoke(Command(resume="yes"), config("hitl"))
        assert final["log"] == ["asked", "acted on yes"]
        assert final["answer"] == "yes"


class Fan(TypedDict):
    found: Annotated[list[str], operator.add]


def test_parallel_branches_store_their_writes(sqlite_store: str) -> None:
    """Three nodes of one step write at once (their put_writes race)."""
    branches = ("left", "middle", "right")

    def branch(name: str) -> Any:
        def run(state: Fan) -> dict[str, Any]:
            return {"found": [name]}

        return run

    def join(state: Fan) -> dict[str, Any]:
        return {"found": ["joined"]}

    builder = StateGraph(Fan)
    for name in branches:
        builder.add_node(name, branch(name))
        builder.add_edge(START, name)
        builder.add_edge(name, "join")
    builder.add_node("join", join)
    builder.add_edge("join", END)
    with TurnkeepSaver(store=sqlite_store) as saver:
        graph = builder.compile(checkpointer=saver)

        async def run_async() -> dict[str, Any]:
            return await graph.ainvoke({"found": []}, config("fan"))

        final = asyncio.run(run_async())
        assert sorted(final["found"][:3]) == sorted(branches)
        assert final["found"][3] == "joined"
        # The checkpoint that scheduled the branches holds their writes.
        history = list(graph.get_state_history(config("fan")))
        writers = [h for h in history if set(h.next) == set(branches)]
        assert len(writers) == 1
        tup = saver.get_tuple(writers[0].config)
        assert tup is not None
        written = sorted(w[2] for w in tup.pending_writes or [] if w[1] == "found")
        assert written == sorted([[b] for b in branches])
