"""Child of the committed-stream crash sweep (`test_committed_crash.py`).

Run as `python _committed_agent.py '<json>'` with `backend`, `root`,
`session`, `stop_after` and `committed`. Drives `TURNS` turns over a real
backend, each streamed with `stream_turn(text, committed=...)`, and writes
every yielded event to stdout at once, one JSON line `{"seq", "event"}`
(the event as the codec encodes it). When the session's `stop_after`-th
event is appended (0: never) (a `session_event` hook) it writes `{"stop": true}` and
stops the world until the test kills it with SIGKILL; a run that gets past
every point writes `{"done": true}`.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import attrs  # noqa: E402
import msgspec  # noqa: E402
from tests.loop.support import SpyTool, backend_host_config  # noqa: E402

from turnkeep import AgentLoop, Host, Session, SessionEvent, hookimpl  # noqa: E402
from turnkeep.agent.models import ModelInfo, ModelOutput, ModelRequest  # noqa: E402
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel  # noqa: E402

TURNS = 3
SESSION = "committed-sweep"


@attrs.frozen
class Pausing:
    """The script, letting other tasks run before each output, as a real
    model's network reads do: so a live consumer gets to print events the
    turn has not flushed yet."""

    inner: ScriptedModel

    def describe(self) -> ModelInfo:
        """A test double: named by its class."""
        return ModelInfo(name="Pausing", provider="test")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        async for output in self.inner.stream(request):
            await asyncio.sleep(0)
            yield output


def script() -> ScriptedModel:
    """Per turn: an unsafe call (flushed before it runs), a safe one, an answer."""
    replies: list[Reply] = []
    for turn in range(1, TURNS + 1):
        replies += [
            Reply(f"acting {turn}", (ScriptedCall("act", {"turn": turn}),)),
            Reply(f"looking {turn}", (ScriptedCall("look", {"turn": turn}),)),
            Reply(f"done {turn}"),
        ]
    return ScriptedModel(replies)


def tools() -> list[SpyTool]:
    return [SpyTool("act"), SpyTool("look", replay="safe")]


def write(message: dict[str, Any]) -> None:
    os.write(1, msgspec.json.encode(message) + b"\n")


class Stopper:
    """Stops the world when the `stop_after`-th event is appended."""

    def __init__(self, stop_after: int) -> None:
        self.stop_after = stop_after
        self.seen = 0

    @hookimpl
    def session_event(self, session: Session, event: SessionEvent) -> None:
        self.seen += 1
        if self.seen == self.stop_after:
            self.stop()

    def stop(self) -> NoReturn:
        write({"stop": True})
        read_end, _write_end = os.pipe()
        os.read(read_end, 1)  # nothing is ever written: blocks until killed
        raise AssertionError("unreachable")


async def drive(cmd: dict[str, Any]) -> None:
    config = backend_host_config(cmd["backend"], Path(cmd["root"]))
    async with Host(config, plugins=[Stopper(cmd["stop_after"])]) as host:
        loop = AgentLoop.create(
            "sweep",
            host=host,
            model=Pausing(script()),
            tools=tools(),
            session_id=SESSION,
        )
        for turn in range(1, TURNS + 1):
            stream = loop.stream_turn(f"turn {turn}", committed=cmd["committed"])
            async for event in stream:
                write({"seq": event.seq, "event": host.codec.encode(event).decode()})
    write({"done": True})


if __name__ == "__main__":
    asyncio.run(drive(msgspec.json.decode(sys.argv[1])))
