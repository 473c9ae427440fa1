"""What one fresh process measures, for `bench_open`: a span, then exit.

`python -m benchmarks.fresh JSON` imports what its job needs, then times
one span and prints one JSON line. The span starts when the imports are
done, at the construction of the host (or of the peer's session or saver
object), and ends when the first write returns or the first model call
starts: the same span for turnkeep and for the peers. Jobs (`kind`):

- `loop`: `Host` + `AgentLoop.open` + `run_turn` + close on a stored
  session; the span ends at the model's first call (`first_call_s`), the
  turn and the close are timed after it, and the resident set the open
  session added over the started host is reported (`session_rss`);
  `dump` names a file for the history the model was given (encoded);
- `append`: `Host` + `sessions.open` + one `Session.append` + `flush`;
- `decode`: the baseline of `loop`: read the dumped history and decode it
  with msgspec, as a process holding only the messages would;
- `items`: the first `add_items` of `TurnkeepSession` or of the Agents
  SDK's `SQLiteSession` (`peer`);
- `state`: the first `get_state` of a LangGraph graph on `TurnkeepSaver`
  or on LangGraph's `SqliteSaver` (`peer`), then `GETS` more (median).
"""

from __future__ import annotations

import asyncio
import importlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

GETS = 10


async def loop_job(job: dict[str, Any]) -> dict[str, Any]:
    from benchmarks import streamed
    from turnkeep import AgentLoop, Host
    from turnkeep.agent import encode_messages

    importlib.import_module(f"turnkeep_{job['backend']}")
    root = Path(job["root"])
    config = streamed.store_config(job["backend"], root, schema=job["schema"])
    perf = time.perf_counter
    start = perf()
    clock = streamed.FakeClock()
    host = await Host(config, clock=clock).start()
    started_rss = streamed.rss_bytes()
    model = streamed.StreamedModel(
        clock, one_delta=job["one_delta"], conversation=job["conversation"]
    )
    agent = await AgentLoop.open(
        "bench", job["session"], host=host, model=model, tools=[streamed.fetch]
    )
    session_rss = streamed.rss_bytes() - started_rss
    await agent.run_turn(streamed.prompt(job["conversation"], 0))
    turned = perf()
    await agent.close()
    await host.aclose()
    closed = perf()
    assert model.first_call is not None
    assert model.first_request is not None
    if job.get("dump"):
        # After the spans: nothing timed waits on this write.
        Path(job["dump"]).write_bytes(encode_messages(model.first_request.messages))  # noqa: ASYNC240
    return {
        "first_call_s": model.first_call - start,
        "turn_s": turned - start,
        "close_s": closed - start,
        "session_rss": session_rss,
    }


async def append_job(job: dict[str, Any]) -> dict[str, Any]:
    from benchmarks import streamed
    from turnkeep import Host
    from turnkeep.events import UserMessageData

    importlib.import_module(f"turnkeep_{job['backend']}")
    config = streamed.store_config(
        job["backend"], Path(job["root"]), schema=job["schema"]
    )
    start = time.perf_counter()
    host = await Host(config).start()
    session = await host.sessions.open(job["session"])
    session.append(UserMessageData(text="one more thing"))
    await session.flush()
    ready = time.perf_counter() - start
    await host.aclose()
    return {"ready_s": ready}


def decode_job(job: dict[str, Any]) -> dict[str, Any]:
    from turnkeep import Message

    decoder = msgspec.json.Decoder(list[Message])
    start = time.perf_counter()
    messages = decoder.decode(Path(job["dump"]).read_bytes())
    took = time.perf_counter() - start
    return {"decode_s": took, "messages": len(messages)}


async def items_job(job: dict[str, Any]) -> dict[str, Any]:
    from agents.memory import SQLiteSession

    from turnkeep_openai_agents import TurnkeepSession, shutdown

    importlib.import_module(f"turnkeep_{job['backend']}")
    items: list[Any] = job["items"]
    start = time.perf_counter()
    if job["peer"]:
        peer = SQLiteSession(job["session"], job["target"])
        await peer.add_items(items)
        took = time.perf_counter() - start
        peer.close()
    else:
        ours = TurnkeepSession(job["session"], store=job["target"])
        await ours.add_items(items)
        took = time.perf_counter() - start
        ours.close()
        shutdown()
    return {"first_write_s": took}


def state_job(job: dict[str, Any]) -> dict[str, Any]:
    import sqlite3

    from benchmarks import bench_open

    importlib.import_module(f"turnkeep_{job['backend']}")
    sqlite_module: Any = importlib.import_module("langgraph.checkpoint.sqlite")
    # What `graph` imports, imported before the span as an application would.
    importlib.import_module("langgraph.graph")
    importlib.import_module("langchain_core.messages")
    from turnkeep_langgraph import TurnkeepSaver

    config = {"configurable": {"thread_id": job["session"]}}
    perf = time.perf_counter
    start = perf()
    if job["peer"]:
        conn = sqlite3.connect(job["target"], check_same_thread=False)
        saver: Any = sqlite_module.SqliteSaver(conn)
        close: Any = conn.close
    else:
        saver = TurnkeepSaver(store=job["target"])
        close = saver.close
    graph = bench_open.graph(saver, 0)
    values = graph.get_state(config).values
    first = perf() - start
    times: list[float] = []
    for _ in range(GETS):
        t = perf()
        graph.get_state(config)
        times.append(perf() - t)
    close()
    return {
        "first_get_s": first,
        "get_s": statistics.median(times),
        "messages": len(values["messages"]),
    }


def main(argv: list[str]) -> None:
    job: dict[str, Any] = msgspec.json.decode(argv[0])
    kind = job["kind"]
    if kind == "decode":
        out = decode_job(job)
    elif kind == "state":
        out = state_job(job)
    else:
        runner = {"loop": loop_job, "append": append_job, "items": items_job}[kind]
        out = asyncio.run(runner(job))
    sys.stdout.write(msgspec.json.encode(out).decode() + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
