"""The token, the budgets, the bind rule, bodies and the recovery sweep."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import MutableMapping
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from tests.cli.support import Store, cli, converse
from tests.serve.conftest import Served, config, killed_in_turn

from turnkeep.config import load_config
from turnkeep.errors import ConfigurationError
from turnkeep.serve import check_bind, create_app
from turnkeep.serve.budgets import Budgets

TOKEN = "Vq3xZ8pL0sN4tY7wB2mK6r"  # noqa: S105 - a test token
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.asyncio
async def test_reads_need_the_token_unless_open(
    sqlite_store: Store, served: Served
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    async with served(sqlite_store, config(token=TOKEN)) as client:
        for path in ("/sessions", "/sessions/s-one", "/sessions/s-one/events"):
            missing = await client.get(path)
            assert missing.status_code == 401
            assert missing.json()["code"] == "unauthorized"
            assert missing.headers["www-authenticate"].startswith("Bearer")
            assert (await client.get(path, headers=AUTH)).status_code == 200
        # Failed attempts (a wrong token, another scheme) are budgeted: a few
        # are free (tests/serve/test_front_door.py).
        wrong = await client.get("/sessions", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        basic = await client.get(
            "/sessions", headers={"Authorization": f"Basic {TOKEN}"}
        )
        assert basic.status_code == 401
        page = await client.get("/")
        assert page.status_code == 303
        assert page.headers["location"] == "/login"
    async with served(sqlite_store, config(token=TOKEN, open_reads=True)) as client:
        assert (await client.get("/sessions")).status_code == 200
        assert (await client.post("/recover")).status_code == 401
        wrong = await client.get("/sessions", headers={"Authorization": "Bearer x"})
        assert wrong.status_code == 401


@pytest.mark.asyncio
async def test_the_page_signs_in_with_a_cookie_that_writes_refuse_alone(
    sqlite_store: Store, served: Served
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    async with served(sqlite_store, config(token=TOKEN)) as client:
        bad = await client.post("/login", data={"token": "guess"})
        assert bad.status_code == 401
        assert not client.cookies
        good = await client.post("/login", data={"token": TOKEN})
        assert good.status_code == 303
        assert "httponly" in good.headers["set-cookie"].lower()
        assert "samesite=strict" in good.headers["set-cookie"].lower()
        assert (await client.get("/sessions")).status_code == 200
        assert (await client.get("/")).status_code == 200
        # The cookie alone never authorises a write (no cross-site writes
        # through it); the page's anti-forgery header must come with it
        # (tests/serve/test_csrf.py).
        alone = await client.post("/recover")
        assert alone.status_code == 403
        assert alone.json()["code"] == "csrf-mismatch"


@pytest.mark.asyncio
async def test_without_a_token_writes_are_refused(
    sqlite_store: Store, served: Served
) -> None:
    async with served(sqlite_store) as client:
        for headers in ({}, AUTH):
            reply = await client.post("/recover", headers=headers)
            assert reply.status_code == 403
            assert reply.json()["code"] == "writes-disabled"
        # Reads are open; a client that sends a token anyway is served.
        assert (await client.get("/sessions", headers=AUTH)).status_code == 200


@pytest.mark.asyncio
async def test_recover_settles_a_session_its_writer_left_inside_a_turn(
    sqlite_store: Store, served: Served
) -> None:
    killed_in_turn(sqlite_store, "s-cut")
    await converse(sqlite_store, "s-fine", prompts=("hi",))
    async with served(sqlite_store, config(token=TOKEN)) as client:
        listed = (await client.get("/sessions", headers=AUTH)).json()
        assert {s["id"]: s["status"] for s in listed["items"]}["s-cut"] == (
            "interrupted"
        )
        reply = await client.post("/recover", headers=AUTH)
        assert reply.status_code == 200, reply.text
        (result,) = reply.json()["results"]
        assert result["session_id"] == "s-cut"
        assert result["action"] == "recovered"
        assert "NOT run again" in result["detail"]
        again = await client.post(
            "/recover", headers=AUTH, json={"session_ids": ["s-cut", "s-fine"]}
        )
        assert [r["action"] for r in again.json()["results"]] == ["clean", "clean"]
        detail = (await client.get("/sessions/s-cut", headers=AUTH)).json()
        assert detail["log"]["open_turn"] is None
        assert detail["log"]["tools"]["interrupted"] == 1


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "bad-json"),
        (b'{"session_ids": 5}', 422, "invalid-body"),
        (b'{"session_ids": ["a"], "everything": true}', 422, "invalid-body"),
        (b"[1, 2]", 422, "invalid-body"),
        (b'{"session_ids": ["a\\u0000b"]}', 400, "invalid-session-id"),
        (b'{"session_ids": ["' + b"x" * 70_000 + b'"]}', 413, "body-too-large"),
    ],
)
async def test_bad_recover_bodies_are_refused_and_change_nothing(
    sqlite_store: Store, served: Served, body: bytes, status: int, code: str
) -> None:
    killed_in_turn(sqlite_store, "s-cut")
    before = sqlite_store.digest()
    async with served(sqlite_store, config(token=TOKEN)) as client:
        reply = await client.post(
            "/recover",
            headers=AUTH | {"Content-Type": "application/json"},
            content=body,
        )
        assert reply.status_code == status, reply.text
        assert reply.json()["code"] == code
    assert sqlite_store.digest() == before


@pytest.mark.asyncio
async def test_a_client_over_its_request_budget_gets_429(
    sqlite_store: Store, served: Served
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    async with served(sqlite_store, config(burst=3, requests_per_second=1)) as client:
        codes = [(await client.get("/sessions")).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        over = await client.get("/sessions")
        assert over.json()["code"] == "rate-limited"
        assert int(over.headers["retry-after"]) >= 1


def test_budgets_refill_and_count_streams() -> None:
    now = [0.0]
    budgets = Budgets(
        rate=2.0, burst=2, streams_per_client=2, max_streams=3, clock=lambda: now[0]
    )
    assert budgets.take("a") is None
    assert budgets.take("a") is None
    wait = budgets.take("a")
    assert wait == pytest.approx(0.5)
    assert budgets.take("b") is None  # budgets are per client
    now[0] = 0.5
    assert budgets.take("a") is None
    assert budgets.open_stream("a")
    assert budgets.open_stream("a")
    assert not budgets.open_stream("a")  # per client
    assert budgets.open_stream("b")
    assert not budgets.open_stream("c")  # in all
    budgets.close_stream("a")
    assert budgets.open_stream("c")
    assert budgets.open_streams == 3


@pytest.mark.asyncio
async def test_too_many_streams_is_429(sqlite_store: Store, served: Served) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    async with served(sqlite_store, config(streams_per_client=1)) as client:
        api = client._transport.app.state.api  # type: ignore[attr-defined]
        assert api.guard.budgets.open_stream("addr:127.0.0.1")
        reply = await client.get("/sessions/s-one/stream")
        assert reply.status_code == 429
        assert reply.json()["code"] == "too-many-streams"


def test_binding_beyond_loopback_needs_a_token() -> None:
    check_bind(config())
    check_bind(config(host="::1"))
    check_bind(config(host="localhost"))
    with pytest.raises(ConfigurationError, match="without a token"):
        check_bind(config(host="0.0.0.0"))  # noqa: S104 - the refusal is tested
    with pytest.raises(ConfigurationError, match="without a token"):
        check_bind(config(host="example.org"))
    check_bind(config(host="0.0.0.0", token=TOKEN, behind_proxy=True))  # noqa: S104


def test_binding_beyond_loopback_needs_a_reverse_proxy(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slow clients would hold uvicorn's connections: a proxy must bound them."""
    for host in ("0.0.0.0", "192.0.2.7", "example.org"):  # noqa: S104
        with pytest.raises(ConfigurationError, match="--behind-proxy"):
            check_bind(config(host=host, token=TOKEN))
        check_bind(config(host=host, token=TOKEN, behind_proxy=True))
    check_bind(config(host="127.0.0.1", token=TOKEN))  # loopback needs none
    monkeypatch.setenv("TURNKEEP_SERVE__TOKEN", TOKEN)
    refused = cli("serve", "--host", "0.0.0.0", store=sqlite_store)  # noqa: S104
    assert refused.exit_code != 0
    assert "What the proxy must enforce" in refused.stderr
    loaded = load_config(env={"TURNKEEP_SERVE__BEHIND_PROXY": "true"})
    assert loaded.serve.behind_proxy is True


def test_serve_settings_come_from_files_and_the_environment(
    tmp_path: pytest.TempPathFactory,
) -> None:
    loaded = load_config(
        env={"TURNKEEP_SERVE__TOKEN": TOKEN, "TURNKEEP_SERVE__OPEN_READS": "true"}
    )
    assert loaded.serve.token == TOKEN
    assert loaded.serve.open_reads is True
    assert loaded.serve.host == "127.0.0.1"
    with pytest.raises(ConfigurationError, match="serve"):
        load_config(env={"TURNKEEP_SERVE__PORTS": "1"})
    with pytest.raises(ConfigurationError):
        load_config(env={"TURNKEEP_SERVE__MAX_PAGE": "0"})


def test_the_command_refuses_a_public_bind_without_a_token(
    sqlite_store: Store,
) -> None:
    result = cli("serve", "--host", "0.0.0.0", store=sqlite_store)  # noqa: S104
    assert result.exit_code == 1
    assert "without a token" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_command_names_the_extra_when_it_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(sys.modules):
        if name == "turnkeep.serve" or name.startswith("turnkeep.serve."):
            monkeypatch.delitem(sys.modules, name)
        elif name == "starlette" or name.startswith("starlette."):
            monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    monkeypatch.setitem(sys.modules, "starlette", None)
    result = cli("serve")
    assert result.exit_code == 2
    assert "pip install 'turnkeep[serve]'" in result.stderr


# -- every route, classified ---------------------------------------------------

ROUTES: dict[tuple[str, str], str] = {
    ("GET", "/sessions"): "read",
    ("GET", "/sessions/{session_id}"): "read",
    ("GET", "/sessions/{session_id}/events"): "read",
    ("GET", "/sessions/{session_id}/stream"): "read",
    ("GET", "/sessions/{session_id}/history"): "read",
    ("GET", "/sessions/{session_id}/audit"): "read",
    ("POST", "/sessions/{session_id}/cancel"): "write",
    ("POST", "/recover"): "write",
    ("GET", "/"): "page",
    ("GET", "/view/{session_id}"): "page",
    ("GET", "/static/{name}"): "public",
    ("GET", "/login"): "public",
    ("POST", "/login"): "public",
}
"""What the guard asks of each route: `read` and `write` (API: 401 without
the token), `page` (HTML: to `/login` without it) or `public` (no token)."""

_PATH_VALUES = {"session_id": "s-one", "name": "page.css"}

Reply = tuple[int, dict[str, str]]


def registered(app: Starlette) -> list[tuple[str, str]]:
    """(method, path) of every route the app serves (`HEAD` goes with `GET`)."""
    found: list[tuple[str, str]] = []
    for route in app.routes:
        assert isinstance(route, Route), f"{route!r} is not a plain route"
        found += [(m, route.path) for m in sorted(route.methods or ()) if m != "HEAD"]
    return found


async def answer(
    app: Starlette, method: str, path: str, headers: dict[str, str]
) -> Reply:
    """The status and headers `app` answers with; its body is not waited for.

    A stream answers and then goes on: the request is cancelled once its
    status is known. An answer that does not start within 10 s fails the
    test instead of hanging it.
    """
    started: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
    asked = False

    async def receive() -> dict[str, object]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client never goes away by itself
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start" and not started.done():
            pairs: list[tuple[bytes, bytes]] = message["headers"]
            found = {k.decode().lower(): v.decode() for k, v in pairs}
            started.set_result((message["status"], found))

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")]
        + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 80),
    }
    task = asyncio.create_task(app(scope, receive, send))
    try:
        async with asyncio.timeout(10):
            await asyncio.wait([started, task], return_when=asyncio.FIRST_COMPLETED)
        if not started.done():
            if task.done():
                task.result()  # raises what the app raised
            raise AssertionError(f"{method} {path}: no answer within 10 s")
        return started.result()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.asyncio
@pytest.mark.parametrize("open_reads", [False, True], ids=["token", "open-reads"])
async def test_every_route_is_guarded_as_classified(
    sqlite_store: Store, open_reads: bool
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    settings = config(token=TOKEN, open_reads=open_reads, burst=10_000)
    wrong = {"Authorization": "Bearer not-the-token"}
    async with sqlite_store.host() as host:
        app = create_app(host, settings)
        async with app.router.lifespan_context(app):
            routes = registered(app)
            unclassified = [r for r in routes if r not in ROUTES]
            assert unclassified == [], (
                f"classify these routes in ROUTES: {unclassified}"
            )
            assert sorted(routes) == sorted(ROUTES)
            for method, template in routes:
                path = template.format(**_PATH_VALUES)
                kind = ROUTES[method, template]
                what = f"{kind} route {method} {template}"
                status, headers = await answer(app, method, path, {})
                if kind == "write" or (kind == "read" and not open_reads):
                    assert status == 401, what
                    assert headers["www-authenticate"].startswith("Bearer"), what
                    assert (await answer(app, method, path, wrong))[0] == 401, what
                elif kind == "page" and not open_reads:
                    assert (status, headers.get("location")) == (303, "/login"), what
                    status, headers = await answer(app, method, path, wrong)
                    assert (status, headers.get("location")) == (303, "/login"), what
                elif kind == "public":
                    assert "www-authenticate" not in headers, what
                    assert status != 303, what
                else:  # reads and pages open to everyone
                    assert status == 200, what
                    assert (await answer(app, method, path, wrong))[0] in (
                        401,
                        303,
                    ), f"{what}: a wrong token is still refused"
                if kind in ("read", "page"):
                    assert (await answer(app, method, path, AUTH))[0] == 200, what
