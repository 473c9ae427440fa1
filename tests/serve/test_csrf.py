"""Writes signed in by cookie: only with the page's anti-forgery header.

The turn runs in a real second process (`tests/cli/_slow_turn.py`). A
cookie write without `X-Turnkeep-CSRF`, or with a wrong one, is refused
before anything is recorded; with the token the page carries it cancels.
"""

from __future__ import annotations

import re
import subprocess

import httpx
import pytest
from tests.cli.support import Store, converse
from tests.cli.test_cancel import running_turn
from tests.serve.conftest import Served, config

from turnkeep.cancelrequest import cancel_requests

__all__ = ["running_turn"]

TOKEN = "Vq3xZ8pL0sN4tY7wB2mK6r"  # noqa: S105 - a test token
META = re.compile(r'<meta name="turnkeep-csrf" content="([0-9a-f]+)">')

pytestmark = pytest.mark.timeout(120)


async def signed_in_token(client: httpx.AsyncClient, session_id: str) -> str:
    """Sign in with the form, then read the anti-forgery token off the page."""
    login = await client.post("/login", data={"token": TOKEN})
    assert login.status_code == 303
    assert "turnkeep_8765" in client.cookies
    page = await client.get(f"/view/{session_id}")
    assert page.status_code == 200
    assert 'id="cancel"' in page.text
    found = META.search(page.text)
    assert found is not None
    return found.group(1)


@pytest.mark.asyncio
async def test_a_cookie_write_needs_the_pages_header(
    served: Served, store: Store, running_turn: tuple[str, subprocess.Popen[bytes]]
) -> None:
    session_id, proc = running_turn
    path = f"/sessions/{session_id}/cancel"
    async with served(store, config(token=TOKEN)) as other:
        foreign = await signed_in_token(other, session_id)  # another sign-in's token
    async with served(store, config(token=TOKEN)) as client:
        csrf = await signed_in_token(client, session_id)
        assert csrf != foreign
        refused: list[dict[str, str]] = [
            {},
            {"X-Turnkeep-CSRF": ""},
            {"X-Turnkeep-CSRF": "0" * len(csrf)},
            {"X-Turnkeep-CSRF": csrf[:-1]},
            {"X-Turnkeep-CSRF": foreign},
            {"X-Turnkeep-CSRF": TOKEN},
        ]
        for headers in refused:
            reply = await client.post(path, headers=headers, json={"confirm": True})
            assert reply.status_code == 403, headers
            assert reply.json()["code"] == "csrf-mismatch"
        # The header without the cookie is no sign-in at all.
        kept = httpx.Cookies(client.cookies)
        client.cookies.clear()
        reply = await client.post(
            path, headers={"X-Turnkeep-CSRF": csrf}, json={"confirm": True}
        )
        assert reply.status_code == 401
        client.cookies = kept
        async with store.host() as host:
            requests = cancel_requests(host.require_persistence())
            assert await requests.cancel_requested(session_id, 0) is None
        assert proc.poll() is None  # nothing recorded: the turn runs on
        # The confirmation is still required with a good header.
        reply = await client.post(path, headers={"X-Turnkeep-CSRF": csrf}, json={})
        assert reply.status_code == 400
        assert reply.json()["code"] == "confirmation-required"
        reply = await client.post(
            path, headers={"X-Turnkeep-CSRF": csrf}, json={"confirm": True}
        )
        assert reply.status_code == 202, reply.text
        assert reply.json()["request"] == 1
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"turn ended cancelled\n"


@pytest.mark.asyncio
async def test_only_a_signed_in_reader_gets_the_token_and_the_button(
    served: Served, store: Store
) -> None:
    await converse(store, "idle")
    async with served(store, config(token=TOKEN, open_reads=True)) as client:
        page = await client.get("/view/idle")
        assert page.status_code == 200
        assert "turnkeep-csrf" not in page.text
        assert 'id="cancel"' not in page.text
        client.cookies.set("turnkeep_8765", TOKEN)  # the token is no sign-in
        page = await client.get("/view/idle")
        assert "turnkeep-csrf" not in page.text
        client.cookies.clear()
        csrf = await signed_in_token(client, "idle")
        # A good cookie write on a session nobody holds: nothing to cancel.
        reply = await client.post(
            "/sessions/idle/cancel",
            headers={"X-Turnkeep-CSRF": csrf},
            json={"confirm": True},
        )
        assert reply.status_code == 409
        assert reply.json()["code"] == "no-running-turn"
        # Bearer writes need no anti-forgery header.
        reply = await client.post(
            "/recover", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert reply.status_code == 200, reply.text
