"""The service's front door (R22): refusals, guessing, tokens and cookies.

Expected refusals answer once and log nothing a person would read as a
crash, under the ASGI transport with exceptions raised and under a real
uvicorn, whose keep-alive connection survives them; a bug logs one
traceback and answers `500 internal-error`.
"""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
from tests.cli.support import Store, converse
from tests.serve.conftest import Served, config, uvicorn_serving

TOKEN = "Vq3xZ8pL0sN4tY7wB2mK6r"  # noqa: S105 - a test token, 22 characters
AUTH = {"Authorization": f"Bearer {TOKEN}"}

pytestmark = pytest.mark.asyncio


def crashes(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records that carry a traceback or read as a crash."""
    return [
        r
        for r in caplog.records
        if r.exc_info is not None or "Exception in ASGI" in r.getMessage()
    ]


async def test_refusals_answer_once_and_log_no_crash(
    sqlite_store: Store, served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    caplog.set_level(logging.INFO)
    async with served(sqlite_store, config(token=TOKEN, burst=1000)) as client:
        asked = [
            ("GET", "/sessions", {}, 401),
            ("GET", "/sessions/s-one", {"Authorization": "Bearer wrong"}, 401),
            ("POST", "/recover", {"Cookie": "x=y"}, 401),
            ("GET", "/sessions/nope", AUTH, 404),
            ("GET", "/sessions/a%00b", AUTH, 400),
            ("POST", "/sessions/s-one/cancel", AUTH, 400),
            ("POST", "/sessions/s-one/cancel?x", AUTH | {"X": "1"}, 400),
        ]
        for method, path, headers, status in asked * 20:
            reply = await client.request(method, path, headers=headers)
            assert reply.status_code == status, reply.text
    assert crashes(caplog) == []
    assert [r for r in caplog.records if r.name != "httpx"] == []


async def test_a_bug_logs_one_traceback_and_answers_500(
    sqlite_store: Store,
    served: Served,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    async with served(sqlite_store) as client:
        backend = client._transport.app.state.api.backend  # type: ignore[attr-defined]

        async def broken(*_: object, **__: object) -> object:
            raise RuntimeError("secret internals")

        monkeypatch.setattr(type(backend), "list", broken)
        reply = await client.get("/sessions")
    assert reply.status_code == 500
    assert reply.json()["code"] == "internal-error"
    assert "secret" not in reply.text
    (record,) = crashes(caplog)
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], RuntimeError)


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bytes]:
    """One request on an open connection; its status and the connection header."""
    writer.write(request)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    fields = {
        k.strip().lower(): v.strip()
        for k, _, v in (line.partition(":") for line in lines[1:] if line)
    }
    await reader.readexactly(int(fields.get("content-length", "0")))
    return status, fields.get("connection", "").encode()


async def test_refusals_keep_the_connection_under_uvicorn(
    sqlite_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    caplog.set_level(logging.INFO)
    async with uvicorn_serving(sqlite_store, config(token=TOKEN, burst=1000)) as (
        address,
        port,
    ):
        reader, writer = await asyncio.open_connection(address, port)
        try:
            for _ in range(30):
                for request, status in (
                    (b"GET /sessions HTTP/1.1\r\nHost: x\r\n\r\n", 401),
                    (
                        b"GET /sessions/nope HTTP/1.1\r\nHost: x\r\n"
                        b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\n",
                        404,
                    ),
                ):
                    got, connection = await _exchange(reader, writer, request)
                    assert got == status
                    assert connection != b"close"
        finally:
            writer.close()
            await writer.wait_closed()
        async with httpx.AsyncClient() as client:
            ok = await client.get(f"http://{address}:{port}/sessions", headers=AUTH)
            assert ok.status_code == 200
    assert crashes(caplog) == []
