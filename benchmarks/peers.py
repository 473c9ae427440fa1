"""The peers measured beside turnkeep, and how a turn becomes their items.

Two session stores from other frameworks, driven the way their own loops
drive them:

- the OpenAI Agents SDK's `agents.memory.SQLiteSession`: one `add_items` per
  turn (the SDK runs it in a worker thread and commits once, WAL with
  SQLite's default `synchronous`);
- LangGraph's `SqliteSaver` (`langgraph.checkpoint.sqlite`): per turn a
  `put_writes` with the turn's messages, then a `put` of a checkpoint whose
  state is every message so far, as `MessagesState` keeps it.

Both are bench-only packages (the `bench` dependency group): they are
imported by name, so the rest of `benchmarks/` runs without them.

A turn is handed over as plain event dicts (`{"type", "seq", "time",
"data"}`, what `msgspec.to_builtins` makes of a turnkeep event) and turned
into each peer's own items by `sdk_items` and `langchain_messages`. Callers
convert outside their timed region: an application builds those objects
anyway.
"""

from __future__ import annotations

import importlib
import importlib.util
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

Event = Mapping[str, Any]

#: Importable module of each peer, by the name results and plots use.
MODULES = {
    "openai": "agents.memory",
    "langgraph": "langgraph.checkpoint.sqlite",
}
INSTALL_HINT = "the peers are in the `bench` dependency group: run `make bench`"


def missing() -> list[str]:
    """The peers whose package is not installed."""
    out: list[str] = []
    for name, module in MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # the parent package is missing
            found = False
        if not found:
            out.append(name)
    return out


def disk_bytes(directory: Path) -> int:
    """Bytes of every file under `directory` (SQLite's -wal and -shm too)."""
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


# -- conversions (untimed) -------------------------------------------------------


def sdk_items(events: Iterable[Event]) -> list[dict[str, Any]]:
    """A turn as the Responses items the Agents SDK keeps in its session.

    The user's message, each assistant message, each function call and its
    output. Stream chunks and turn markers are not session items.
    """
    items: list[dict[str, Any]] = []
    for event in events:
        kind, data = event["type"], event["data"]
        if kind == "user/message":
            items.append({"role": "user", "content": data["text"]})
        elif kind == "assistant/message":
            items.append(
                {
                    "id": f"msg_{event['seq']}",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": data["text"], "annotations": []}
                    ],
                }
            )
        elif kind == "tool/call":
            items.append(
                {
                    "type": "function_call",
                    "call_id": data["call_id"],
                    "name": data["name"],
                    # The Responses API carries arguments as a JSON string.
                    "arguments": msgspec.json.encode(data["arguments"]).decode(),
                }
            )
        elif kind == "tool/result":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": data["call_id"],
                    "output": data["output"],
                }
            )
    return items


def langchain_messages(events: Iterable[Event]) -> list[Any]:
    """A turn as the LangChain messages a `MessagesState` graph would hold.

    A tool call joins the assistant message before it (LangChain keeps tool
    calls on the `AIMessage`); stream chunks are streamed, never checkpointed.
    """
    messages_module: Any = importlib.import_module("langchain_core.messages")
    ai_message = messages_module.AIMessage
    out: list[Any] = []
    last_ai: int | None = None  # where the assistant message a call joins sits
    for event in events:
        kind, data = event["type"], event["data"]
        if kind == "user/message":
            out.append(
                messages_module.HumanMessage(
                    content=data["text"], id=f"human_{event['seq']}"
                )
            )
        elif kind == "assistant/message":
            last_ai = len(out)
            out.append(ai_message(content=data["text"], id=f"ai_{event['seq']}"))
        elif kind == "tool/call" and last_ai is not None:
            ai = out[last_ai]
            call = {
                "name": data["name"],
                "args": dict(data["arguments"]),
                "id": data["call_id"],
                "type": "tool_call",
            }
            out[last_ai] = ai_message(
                content=ai.content, id=ai.id, tool_calls=[*ai.tool_calls, call]
            )
        elif kind == "tool/result":
            out.append(
                messages_module.ToolMessage(
                    content=data["output"],
                    tool_call_id=data["call_id"],
                    id=f"tool_{event['seq']}",
                )
            )
    return out


# -- the stores --------------------------------------------------------------------


class OpenAISession:
    """`SQLiteSession(session_id, file)`, one `add_items` per turn."""

    name = "OpenAI Agents SQLiteSession"
    key = "openai"

    def __init__(self, directory: Path) -> None:
        memory: Any = importlib.import_module("agents.memory")
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.session = memory.SQLiteSession("s", directory / "agents.sqlite3")

    @staticmethod
    def convert(events: Sequence[Event]) -> list[dict[str, Any]]:
        return sdk_items(events)

    async def add(self, items: list[Any]) -> None:
        await self.session.add_items(items)

    def close(self) -> int:
        """Close; return the bytes on disk."""
        self.session.close()
        return disk_bytes(self.directory)


class LangGraphSaver:
    """`SqliteSaver` as LangGraph's loop calls it: `put_writes`, then `put`."""

    name = "LangGraph SqliteSaver"
    key = "langgraph"

    def __init__(self, directory: Path) -> None:
        base: Any = importlib.import_module("langgraph.checkpoint.base")
        module: Any = importlib.import_module("langgraph.checkpoint.sqlite")
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.empty = base.empty_checkpoint
        # What `SqliteSaver.from_conn_string` does.
        self.conn = sqlite3.connect(
            directory / "langgraph.sqlite3", check_same_thread=False
        )
        self.saver = module.SqliteSaver(self.conn)
        self.saver.setup()
        self.config: Any = {"configurable": {"thread_id": "s", "checkpoint_ns": ""}}
        self.history: list[Any] = []
        self.steps = 0

    @staticmethod
    def convert(events: Sequence[Event]) -> list[Any]:
        return langchain_messages(events)

    async def add(self, items: list[Any]) -> None:
        self.steps += 1
        if self.steps > 1:
            self.saver.put_writes(self.config, [("messages", items)], f"t{self.steps}")
        self.history.extend(items)
        checkpoint = self.empty()
        checkpoint["channel_values"] = {"messages": list(self.history)}
        checkpoint["channel_versions"] = {"messages": self.steps}
        self.config = self.saver.put(
            self.config, checkpoint, {"step": self.steps}, {"messages": self.steps}
        )

    def close(self) -> int:
        """Close; return the bytes on disk."""
        self.conn.close()
        return disk_bytes(self.directory)


PEERS: tuple[type[OpenAISession] | type[LangGraphSaver], ...] = (
    OpenAISession,
    LangGraphSaver,
)
