"""Fixtures of the service tests: stores (as the command tests have them),
an app over a started host, and an httpx client on its ASGI transport."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import attrs
import httpx
import msgspec
import pytest
from tests.cli.conftest import isolated, jsonl_store, pg_store, sqlite_store, store
from tests.cli.support import SCRIPT, Store

from turnkeep.config import ServeConfig
from turnkeep.serve import create_app

__all__ = [
    "isolated",
    "jsonl_store",
    "pg_store",
    "serve_process",
    "served",
    "sqlite_store",
    "store",
]

Served = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]


@asynccontextmanager
async def serving(
    store: Store, config: ServeConfig | None = None, **app_options: Any
) -> AsyncGenerator[httpx.AsyncClient]:
    """A client of the service over `store` (lifespan run, host closed after)."""
    async with store.host() as host:
        app = create_app(host, config or ServeConfig(), **app_options)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1"
            ) as client:
                yield client


@pytest.fixture
def served() -> Served:
    return serving


@asynccontextmanager
async def uvicorn_serving(
    store: Store, config: ServeConfig | None = None
) -> AsyncGenerator[tuple[str, int]]:
    """The service under a real uvicorn in this process: its address and port.

    Its logs reach `caplog` (uvicorn logs as `uvicorn.error`).
    """
    import asyncio

    import uvicorn

    async with store.host() as host:
        app = create_app(host, config or ServeConfig())
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
        server = uvicorn.Server(
            uvicorn.Config(app, log_level="info", access_log=False, lifespan="on")
        )
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
            yield "127.0.0.1", port
        finally:
            server.should_exit = True
            await task
            sock.close()


def config(**changes: Any) -> ServeConfig:
    return attrs.evolve(ServeConfig(), **changes)


TURN = Path(__file__).parents[1] / "cli" / "_turn.py"


def killed_in_turn(store: Store, session_id: str) -> None:
    """A session whose writer died inside an unsafe tool (SIGKILL)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(TURN),
            store.name,
            msgspec.json.encode(store.options()).decode(),
            session_id,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"in tool\n", "the turn did not start"
    finally:
        proc.kill()
        proc.wait(timeout=30)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


class Serve(Protocol):
    """Starts the service over a store (with a token if given); its URL."""

    def __call__(self, store: Store, *, token: str | None = None) -> str: ...


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def serve_process() -> Iterator[Serve]:
    """Start `turnkeep --store SPEC serve` on a free port; yields its URL."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(store: Store, *, token: str | None = None) -> str:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEP_")}
        if token is not None:
            env["TURNKEEP_SERVE__TOKEN"] = token
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
                httpx.get(f"{url}/login", timeout=1)
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
