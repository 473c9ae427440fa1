"""turnkeep-openai-agents: the OpenAI Agents SDK's `Session` on any turnkeep store.

`TurnkeepSession(session_id, store=...)` keeps an Agents SDK conversation in
a turnkeep store (JSONL, SQLite, PostgreSQL, memory, or any installed
backend): every change is one durable event on the session's append-only
log, `turnkeep show` prints its items, and it is safe from any event loop
or thread. `shutdown()` closes the hosts it started (done at exit too).

`TurnkeepSession` and `shutdown` are imported on first use: the plugin
(`turnkeep_openai_agents.plugin`), which every turnkeep host and command
loads, must not pay for importing the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .events import EVENT_TYPES, ClearData, ItemsData, PopData, Ref

if TYPE_CHECKING:
    from .runtime import shutdown
    from .session import TurnkeepSession

__all__ = [
    "EVENT_TYPES",
    "ClearData",
    "ItemsData",
    "PopData",
    "Ref",
    "TurnkeepSession",
    "shutdown",
]


def __getattr__(name: str) -> Any:
    if name == "TurnkeepSession":
        from .session import TurnkeepSession

        return TurnkeepSession
    if name == "shutdown":
        from .runtime import shutdown

        return shutdown
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
