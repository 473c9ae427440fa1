"""A session whose process was killed mid-turn is listed `interrupted`.

Real processes on every bundled backend: two workers each run a turn and
stop inside an unsafe tool (its call durable, the summary `active`); one is
killed with SIGKILL. `turnkeep ls`, `turnkeep show` and
`host.sessions.stored` then show the killed worker's session `interrupted`
and the live one's `active`, without writing anything: the stored status
stays until recovery settles the turn. PostgreSQL's workers hold 1-second
leases, so a dead one's hold runs out within the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.cli.conftest import make_store
from tests.cli.support import Store, cli

from turnkeep.capabilities import probe_held

TURN = Path(__file__).with_name("_turn.py")
DEADLINE_S = 30.0


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store of every bundled backend (PostgreSQL: a fresh schema)."""
    if request.param == "postgres":
        yield request.getfixturevalue("pg_store")
    else:
        yield make_store(request.param, tmp_path)


def start_turn(store: Store, session_id: str) -> subprocess.Popen[bytes]:
    """A worker process inside its turn's unsafe tool when this returns."""
    options: dict[str, Any] = store.options()
    if store.name == "postgres":
        options["lease_ms"] = 1000
    proc = subprocess.Popen(
        [
            sys.executable,
            str(TURN),
            store.name,
            msgspec.json.encode(options).decode(),
            session_id,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"in tool\n", "the worker did not reach its tool"
    return proc


def statuses(store: Store) -> dict[str, str]:
    result = cli("ls", "--json", store=store)
    assert result.exit_code == 0, result.output
    rows = msgspec.json.decode(result.stdout)["sessions"]
    return {r["id"]: r["status"] for r in rows}


async def wait_until_gone(store: Store, session_id: str) -> None:
    """Until no live owner holds `session_id` (at once, but for leases)."""
    async with store.host() as host:
        deadline = time.monotonic() + DEADLINE_S
        while (await probe_held(host.require_persistence(), [session_id])) != {
            session_id: False
        }:
            assert time.monotonic() < deadline, f"{session_id} still held"
            await asyncio.sleep(0.1)  # a lease running out: nothing else to wait on


async def stored_view(store: Store) -> tuple[dict[str, str], str]:
    """`host.sessions.stored()`'s statuses, and the stored status of `crashed`."""
    async with store.host() as host:
        page = await host.sessions.stored()
        loaded = await host.require_persistence().load("crashed")
        return {m.id: m.summary.status for m in page.items}, loaded.meta.summary.status


def test_a_killed_turn_is_listed_interrupted_and_a_live_one_active(
    any_store: Store,
) -> None:
    store = any_store
    crashed = start_turn(store, "crashed")
    alive = start_turn(store, "alive")
    try:
        assert statuses(store) == {"crashed": "active", "alive": "active"}
        os.kill(crashed.pid, signal.SIGKILL)
        crashed.wait(timeout=30)
        asyncio.run(wait_until_gone(store, "crashed"))

        assert statuses(store) == {"crashed": "interrupted", "alive": "active"}
        for session_id, status in (("crashed", "interrupted"), ("alive", "active")):
            shown = cli("show", session_id, "--json", store=store)
            assert shown.exit_code == 0, shown.output
            assert msgspec.json.decode(shown.stdout)["session"]["status"] == status
            text = cli("show", session_id, store=store)
            assert f"status   {status}," in text.stdout
        listed, kept = asyncio.run(stored_view(store))
        assert listed == {"crashed": "interrupted", "alive": "active"}
        assert kept == "active"  # listing wrote nothing
        # The live worker finishes its turn undisturbed by the probes.
        assert alive.stdin is not None
        alive.stdin.close()
        assert alive.wait(timeout=60) == 0
        assert statuses(store) == {"crashed": "interrupted", "alive": "idle"}
    finally:
        for proc in (crashed, alive):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=30)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
