"""`turnkeep serve` as a real process (uvicorn) in front of SQLite and
PostgreSQL: sessions written by another process show up, and two service
processes on one PostgreSQL database see the same sessions."""

from __future__ import annotations

import httpx
import pytest
from tests.cli.support import Store, converse
from tests.serve.conftest import Serve


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
    assert missing.json()["code"] == "session-not-found"


@pytest.mark.slow
def test_serves_a_sqlite_store(sqlite_store: Store, serve_process: Serve) -> None:
    import asyncio

    asyncio.run(converse(sqlite_store, "s-one"))
    url = serve_process(sqlite_store)
    check_serves(url, "s-one")
    # A session written after the service started shows up too.
    asyncio.run(converse(sqlite_store, "s-two", prompts=("later",)))
    listed = httpx.get(f"{url}/sessions", timeout=10).json()
    assert listed["items"][0]["id"] == "s-two"


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
