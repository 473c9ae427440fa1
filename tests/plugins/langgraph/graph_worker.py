"""A small LangGraph graph on `TurnkeepSaver`, run in-process or as a worker.

Five nodes in a chain (`a` .. `e`), each appending its name to the state
and a line to a side-effect file (what a real node's outside effect would
be). As a script, `python graph_worker.py STORE THREAD EFFECTS [STOP_AT]`
runs the graph with `durability="sync"`; at node `STOP_AT` it writes
`EFFECTS.stopped` and sleeps, for the test to kill it there.
"""

from __future__ import annotations

import itertools
import operator
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig

# pyright finds no types for langgraph.graph: its py.typed sits in a namespace
# package that several distributions share.
from langgraph.graph import (  # pyright: ignore[reportMissingTypeStubs]
    END,
    START,
    StateGraph,
)
from langgraph.graph.state import (  # pyright: ignore[reportMissingTypeStubs]
    CompiledStateGraph,
)

from turnkeep_langgraph import TurnkeepSaver

NODES = ("a", "b", "c", "d", "e")


class State(TypedDict):
    steps: Annotated[list[str], operator.add]
    count: int


def build(
    saver: TurnkeepSaver, effects: Path, stop_at: str | None = None
) -> CompiledStateGraph[State, None, State, State]:
    graph = StateGraph(State)

    def node(name: str) -> Any:
        def run(state: State) -> dict[str, Any]:
            with effects.open("a") as f:
                f.write(name + "\n")
            if name == stop_at:
                effects.with_suffix(".stopped").write_text(name)
                time.sleep(120)  # killed here
            return {"steps": [name], "count": state["count"] + 1}

        return run

    for name in NODES:
        graph.add_node(name, node(name))
    graph.add_edge(START, NODES[0])
    for first, second in itertools.pairwise(NODES):
        graph.add_edge(first, second)
    graph.add_edge(NODES[-1], END)
    return graph.compile(checkpointer=saver)


def config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def main(argv: list[str]) -> None:
    store, thread_id, effects = argv[0], argv[1], Path(argv[2])
    stop_at = argv[3] if len(argv) > 3 else None
    with TurnkeepSaver(store=store) as saver:
        graph = build(saver, effects, stop_at)
        graph.invoke({"steps": [], "count": 0}, config(thread_id), durability="sync")


if __name__ == "__main__":
    main(sys.argv[1:])
