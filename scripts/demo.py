"""The main job: a short scripted conversation through the turnkeep host.

Runs on the default store that configuration selects (in-memory when no
persistence plugin is installed), flushes at every turn end, and prints the
log and the model history derived from it.
"""

from __future__ import annotations

import asyncio

from turnkeep import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessage,
    AssistantMessageData,
    Host,
    TurnEnd,
    TurnEndData,
    TurnStart,
    TurnStartData,
    UserMessage,
    UserMessageData,
    derive_messages,
    load_config,
)

SCRIPT = [
    ("What is turnkeep?", "A host that keeps agent sessions durable."),
    ("And if the process dies?", "The last durable turn is where you resume."),
]


async def main() -> None:
    """Run the scripted conversation and print what was stored."""
    config = load_config()
    async with Host(config) as host:
        backend = host.persistence_name or "none (in memory only)"
        print(f"persistence backend: {backend}")
        session = host.sessions.create()
        for turn, (question, answer) in enumerate(SCRIPT, start=1):
            session.append(TurnStart, TurnStartData(turn=turn))
            session.append(UserMessage, UserMessageData(text=question))
            for word in answer.split(" "):
                session.append(AssistantChunk, AssistantChunkData(text=word + " "))
            session.append(AssistantMessage, AssistantMessageData(text=answer))
            session.append(TurnEnd, TurnEndData(turn=turn, status="completed"))
            await session.flush()
            print(f"turn {turn} flushed: {len(session.events)} events so far")
        for message in derive_messages(session.events):
            print(f"  {message.role:>9}: {message.content}")
        await host.sessions.close(session.id)


if __name__ == "__main__":
    asyncio.run(main())
