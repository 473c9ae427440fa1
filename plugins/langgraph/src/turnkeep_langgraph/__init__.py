"""turnkeep-langgraph: a LangGraph checkpointer on any turnkeep store.

`TurnkeepSaver(store="sqlite:./graph.db")` is a `BaseCheckpointSaver`:
each LangGraph thread is one durable turnkeep session, checkpoints are
stored as what changed (`turnkeep_langgraph.events`), and the sessions are
readable with `turnkeep show`, `verify` and `export`.

`TurnkeepSaver` is imported on first use, so the entry point that loads
the event types (`turnkeep_langgraph.events`) does not import LangGraph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .saver import TurnkeepSaver

__all__ = ["TurnkeepSaver"]


def __getattr__(name: str) -> Any:
    if name == "TurnkeepSaver":
        from .saver import TurnkeepSaver

        return TurnkeepSaver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
