"""The token, the budgets, the bind rule, bodies and the recovery sweep."""

from __future__ import annotations

import sys

import pytest
from tests.cli.support import Store, cli, converse
from tests.serve.conftest import Served, config, killed_in_turn

from turnkeep.config import load_config
from turnkeep.errors import ConfigurationError
from turnkeep.serve import check_bind
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
    check_bind(config(host="0.0.0.0", token=TOKEN))  # noqa: S104


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
