"""`turnkeep serve` under load: N SSE followers while a writer appends.

Everything runs on this machine over loopback, bounded in size and time.
A SQLite store; the service (`turnkeep.serve`, uvicorn) in a process of its
own; a writer in another process appending flushes of BATCH events as fast
as it can; N followers in this process reading `GET /sessions/{id}/stream`.

- `writer_alone`: the writer's events/s with nobody following (the raw
  baseline, measured in the same run, on a session of its own, before and
  after the followed run: the better of the two);
- `writer_followed`: the same writer while N clients follow its session;
  `followed / alone` near 1 says followers do not slow the writer;
- `delivered`: events/s summed over the followers, from the writer's
  first commit to the last follower's last event;
- `delay`: from the moment a flush returned in the writer (durable) to the
  moment a follower read its event off the socket (p50, p99, max;
  `time.monotonic_ns` is one clock for every process on Linux). The
  service polls the store every `POLL` seconds, which bounds the floor.

`BENCH_SERVE_FOLLOWERS` (default 20; 100 with `BENCH_FULL`) and
`BENCH_SERVE_EVENTS` (default 2,000; 20,000 with `BENCH_FULL`) size it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
import uvicorn

from turnkeep import Config, Host
from turnkeep.config import ServeConfig
from turnkeep.events import UserMessageData
from turnkeep.serve import create_app

FULL = bool(os.environ.get("BENCH_FULL"))
FOLLOWERS = int(os.environ.get("BENCH_SERVE_FOLLOWERS") or (100 if FULL else 20))
EVENTS = int(os.environ.get("BENCH_SERVE_EVENTS") or (20_000 if FULL else 2_000))
BATCH = 4
POLL = 0.02
DEADLINE = 300.0
ROOT = Path(__file__).resolve().parents[1]


def config(path: Path) -> Config:
    return Config(
        persistence="sqlite",
        plugins=("sqlite",),
        backends={"sqlite": {"path": str(path)}},
        redact_secrets=False,
    )


# -- the processes -------------------------------------------------------------


async def serve_process(path: Path, port: int) -> None:
    """Serve the store (the `server` subcommand)."""
    async with Host(config(path)) as host:
        settings = ServeConfig(
            port=port,
            requests_per_second=100_000,
            burst=100_000,
            streams_per_client=100_000,
        )
        app = create_app(host, settings, poll_interval=POLL, queue_size=65_536)
        server = uvicorn.Server(
            uvicorn.Config(
                app, host="127.0.0.1", port=port, log_level="warning", access_log=False
            )
        )
        await server.serve()


async def write_process(path: Path, session_id: str, events: int) -> None:
    """Append `events` in flushes of BATCH once told to (the `writer` subcommand).

    Prints `ready` once the session is stored, then, at the end, one JSON
    object: each flush's last seq and the monotonic ns it returned at.
    """
    async with Host(config(path)) as host:
        session = host.sessions.create(session_id)
        session.append(UserMessageData(text="start"))
        await session.flush()
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        flushes: list[tuple[int, int]] = []
        seq = 0
        start = time.monotonic_ns()
        while seq < events:
            for _ in range(BATCH):
                session.append(UserMessageData(text=f"event {seq + 1} " + "x" * 200))
                seq += 1
            await session.flush()
            flushes.append((seq, time.monotonic_ns()))
        elapsed = time.monotonic_ns() - start
        print(msgspec.json.encode({"flushes": flushes, "ns": elapsed}).decode())


# -- the run -------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(*args: str, pipes: bool = True) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_serve", *args],
        cwd=ROOT,
        stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
        stdout=subprocess.PIPE if pipes else subprocess.DEVNULL,
        text=True,
    )


def writer_ready(path: Path, session_id: str, events: int) -> subprocess.Popen[str]:
    """A writer process whose session is stored, waiting for `go`."""
    proc = spawn("writer", str(path), session_id, str(events))
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    return proc


def go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.close()


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """What the writer reported once it is done."""
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.stdout.close()
    proc.wait(timeout=DEADLINE)
    return msgspec.json.decode(out.strip().splitlines()[-1])


async def follow(url: str, want: int, got: list[tuple[int, int]]) -> None:
    """Read the stream until seq `want`, noting when each seq arrived.

    Chunks are scanned for `id:` lines as bytes (a line parser per event
    would measure the client more than the service).
    """
    rest = b""
    async with (
        httpx.AsyncClient(timeout=DEADLINE) as client,
        client.stream("GET", url) as reply,
    ):
        assert reply.status_code == 200
        async for chunk in reply.aiter_raw():
            now = time.monotonic_ns()
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                if line.startswith(b"id: "):
                    seq = int(line[4:])
                    got.append((seq, now))
                    if seq >= want:
                        return


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def followed(base: str, path: Path, n: int, events: int) -> dict[str, Any]:
    proc = writer_ready(path, "followed", events)
    url = f"{base}/sessions/followed/stream?after=0"
    got: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    tasks = [asyncio.create_task(follow(url, events, g)) for g in got]
    await asyncio.sleep(0.5)  # every follower connected
    go(proc)
    done = await asyncio.to_thread(finish, proc)
    await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE)
    committed: dict[int, int] = {}
    previous = 0
    for last, at in done["flushes"]:
        for seq in range(previous + 1, last + 1):
            committed[seq] = at
        previous = last
    delays = [
        (at - committed[seq]) / 1e6 for g in got for seq, at in g if seq in committed
    ]
    first = min(at for _, at in done["flushes"])
    end = max(g[-1][1] for g in got)
    received = sum(len(g) for g in got)
    complete = all([s for s, _ in g] == list(range(1, events + 1)) for g in got)
    return {
        "writer_events_per_s": events / (done["ns"] / 1e9),
        "delivered_events_per_s": received / ((end - first) / 1e9),
        "delay_ms_p50": statistics.median(delays),
        "delay_ms_p99": percentile(delays, 99),
        "delay_ms_max": max(delays),
        "every_follower_got_every_event_once_in_order": complete,
    }


def alone(path: Path, session_id: str) -> float:
    """The writer's events/s with nobody following its session."""
    proc = writer_ready(path, session_id, EVENTS)
    go(proc)
    return EVENTS / (finish(proc)["ns"] / 1e9)


def main() -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    path = scratch / "store.sqlite3"
    port = free_port()
    server = spawn("server", str(path), str(port), pipes=False)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/sessions", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.1)
        before = alone(path, "alone-before")
        measured = asyncio.run(followed(base, path, FOLLOWERS, EVENTS))
        # The baseline runs before and after (the machine's load moves);
        # the better of the two is the writer's speed alone.
        alone_rate = max(before, alone(path, "alone-after"))
    finally:
        server.terminate()
        server.wait(timeout=30)
    result = {
        "followers": FOLLOWERS,
        "events": EVENTS,
        "batch": BATCH,
        "poll_s": POLL,
        "writer_alone_events_per_s": alone_rate,
        **measured,
        "writer_followed_over_alone": measured["writer_events_per_s"] / alone_rate,
    }
    print(
        f"{FOLLOWERS} followers, {EVENTS:,} events in flushes of {BATCH} "
        f"(SQLite, service polling every {POLL * 1000:.0f} ms)\n"
        f"  writer alone (baseline)     {alone_rate:>10,.0f} events/s\n"
        f"  writer while followed       {measured['writer_events_per_s']:>10,.0f} "
        f"events/s  ({result['writer_followed_over_alone']:.2f}x of alone)\n"
        f"  delivered to followers      {measured['delivered_events_per_s']:>10,.0f} "
        "events/s (all followers)\n"
        f"  commit -> client delay      p50 {measured['delay_ms_p50']:.1f} ms, "
        f"p99 {measured['delay_ms_p99']:.1f} ms, "
        f"max {measured['delay_ms_max']:.1f} ms\n"
        "  every follower got every event once, in order: "
        f"{measured['every_follower_got_every_event_once_in_order']}"
    )
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["server"]:
        asyncio.run(serve_process(Path(sys.argv[2]), int(sys.argv[3])))
    elif sys.argv[1:2] == ["writer"]:
        asyncio.run(write_process(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
    else:
        main()
