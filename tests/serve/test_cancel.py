"""`POST /sessions/{id}/cancel`: confirmed, authorised, it ends a turn elsewhere.

The turn runs in a real second process (`tests/cli/_slow_turn.py`); the
service records the request and the owner ends the turn `cancelled`.
"""

from __future__ import annotations

import subprocess

import pytest
from tests.cli.support import Store, converse
from tests.cli.test_cancel import running_turn
from tests.serve.conftest import Served, config

from turnkeep.cancelrequest import cancel_requests

__all__ = ["running_turn"]

TOKEN = "Vq3xZ8pL0sN4tY7wB2mK6r"  # noqa: S105 - a test token
AUTH = {"Authorization": f"Bearer {TOKEN}"}

pytestmark = pytest.mark.timeout(120)


@pytest.mark.asyncio
async def test_a_confirmed_cancel_ends_the_turn_in_the_other_process(
    served: Served, store: Store, running_turn: tuple[str, subprocess.Popen[bytes]]
) -> None:
    session_id, proc = running_turn
    async with served(store, config(token=TOKEN)) as client:
        path = f"/sessions/{session_id}/cancel"
        assert (await client.post(path, json={"confirm": True})).status_code == 401
        bodies: list[bytes] = [
            b"",
            b'{"confirm": false}',
            b'{"confirm": 1}',
            b'{"confirm": "true"}',
            b'{"confirm": true, "also": 1}',
            b"[true]",
        ]
        for bad in bodies:
            reply = await client.post(
                path,
                headers={**AUTH, "Content-Type": "application/json"},
                content=bad,
            )
            assert reply.status_code == 400, bad
            assert reply.json()["code"] == "confirmation-required"
        async with store.host() as host:
            requests = cancel_requests(host.require_persistence())
            assert await requests.cancel_requested(session_id, 0) is None
        assert proc.poll() is None  # nothing changed: the turn runs on
        missing = await client.post(
            "/sessions/never-stored/cancel", headers=AUTH, json={"confirm": True}
        )
        assert missing.status_code == 404
        assert missing.json()["code"] == "session-not-found"
        reply = await client.post(path, headers=AUTH, json={"confirm": True})
        assert reply.status_code == 202, reply.text
        assert reply.json()["request"] == 1
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"turn ended cancelled\n"


@pytest.mark.asyncio
async def test_a_session_nobody_holds_has_no_turn_to_cancel(
    served: Served, store: Store
) -> None:
    await converse(store, "idle")
    async with served(store, config(token=TOKEN)) as client:
        reply = await client.post(
            "/sessions/idle/cancel", headers=AUTH, json={"confirm": True}
        )
        assert reply.status_code == 409
        assert reply.json()["code"] == "no-running-turn"
