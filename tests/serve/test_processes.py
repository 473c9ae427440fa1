"""`turnkeep serve` as a real process (uvicorn) in front of SQLite and
PostgreSQL: sessions written by another process show up, and two service
processes on one PostgreSQL database see the same sessions."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from tests.cli.support import SCRIPT, Store, converse

Serve = Callable[[Store], str]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def serve_process() -> Iterator[Serve]:
    """Start `turnkeep --store SPEC serve` on a free port; yields its URL."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(store: Store) -> str:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEP_")}
        proc = subprocess.Popen(
            [str(SCRIPT), "--store", store.spec, "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                assert proc.stderr is not None
                raise AssertionError(proc.stderr.read().decode())
            try:
                httpx.get(f"{url}/sessions", timeout=1)
                return url
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError("turnkeep serve did not start")

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def check_serves(url: str, session_id: str) -> None:
    listed = httpx.get(f"{url}/sessions", timeout=10).json()
    assert session_id in [s["id"] for s in listed["items"]]
    events = httpx.get(f"{url}/sessions/{session_id}/events", timeout=10).json()
    assert events["events"][0]["type"] == "turn/start"
    page = httpx.get(f"{url}/view/{session_id}", timeout=10)
    assert page.status_code == 200
    assert "look it up" in page.text
    missing = httpx.get(f"{url}/sessions/nope", timeout=10)
    assert missing.status_code == 404
    assert missing.json()["code"] == "session_not_found"


@pytest.mark.slow
def test_serves_a_sqlite_store(sqlite_store: Store, serve_process: Serve) -> None:
    import asyncio

    asyncio.run(converse(sqlite_store, "s-one"))
    url = serve_process(sqlite_store)
    check_serves(url, "s-one")
    # A session written after the service started shows up too.
    asyncio.run(converse(sqlite_store, "s-two", prompts=("later",)))
    listed = httpx.get(f"{url}/sessions", timeout=10).json()
    assert [s["id"] for s in listed["items"]][0] == "s-two"


@pytest.mark.slow
@pytest.mark.postgres
def test_two_services_on_one_postgres_database_see_the_same_sessions(
    pg_store: Store, serve_process: Serve
) -> None:
    import asyncio

    first = serve_process(pg_store)
    second = serve_process(pg_store)
    asyncio.run(converse(pg_store, "s-one"))
    for url in (first, second):
        check_serves(url, "s-one")
    one = httpx.get(f"{first}/sessions/s-one", timeout=10).json()
    two = httpx.get(f"{second}/sessions/s-one", timeout=10).json()
    assert one == two
