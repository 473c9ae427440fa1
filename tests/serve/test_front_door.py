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
from tests.cli.support import Store, cli, converse, one_line_error
from tests.serve.conftest import Served, config, uvicorn_serving

from turnkeep.errors import ConfigurationError
from turnkeep.serve import check_bind, create_app
from turnkeep.serve.budgets import Budgets, Failures
from turnkeep.serve.signin import SignIn
from turnkeep.serve.tokens import check_token

TOKEN = "Vq3xZ8pL0sN4tY7wB2mK6r"  # noqa: S105 - a test token, 22 characters
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def crashes(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records that carry a traceback or read as a crash."""
    return [
        r
        for r in caplog.records
        if r.exc_info is not None or "Exception in ASGI" in r.getMessage()
    ]


@pytest.mark.asyncio
async def test_refusals_answer_once_and_log_no_crash(
    sqlite_store: Store, served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    caplog.set_level(logging.INFO)
    async with served(sqlite_store, config(token=TOKEN, burst=1000)) as client:
        guard = client._transport.app.state.api.guard  # type: ignore[attr-defined]
        guard.failures = Failures(free=1000)  # wrong tokens answer 401 here
        asked = [
            ("GET", "/sessions", {}, 401),
            ("GET", "/sessions/s-one", {"Authorization": "Bearer wrong"}, 401),
            ("POST", "/recover", {"Cookie": "x=y"}, 401),
            ("GET", "/sessions/nope", AUTH, 404),
            ("GET", "/sessions/a%00b", AUTH, 400),
            ("POST", "/sessions/s-one/cancel", AUTH, 400),
        ]
        for method, path, headers, status in asked * 20:
            reply = await client.request(method, path, headers=headers)
            assert reply.status_code == status, reply.text
        guard.budgets = Budgets(
            rate=0.001, burst=1, streams_per_client=1, max_streams=1
        )
        codes = [(await client.get("/sessions")).status_code for _ in range(2)]
        assert codes == [401, 429]
    assert crashes(caplog) == []
    assert [r for r in caplog.records if r.name != "httpx"] == []


@pytest.mark.asyncio
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


@pytest.mark.asyncio
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


# -- guessing, weak tokens, proxies ----------------------------------------------

PROXIED = {"trusted_proxies": ("127.0.0.1",)}


def via(address: str, headers: dict[str, str] | None = None) -> dict[str, str]:
    """Headers of a request a trusted proxy forwards from `address`."""
    return {"X-Forwarded-For": f"203.0.113.77, {address}"} | (headers or {})


@pytest.mark.asyncio
async def test_failed_authentications_make_the_address_wait(
    sqlite_store: Store, served: Served
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    async with served(sqlite_store, config(token=TOKEN, **PROXIED)) as client:
        guard = client._transport.app.state.api.guard  # type: ignore[attr-defined]
        now = [0.0]
        guard.failures = Failures(clock=lambda: now[0])
        wrong = {"Authorization": "Bearer Vq3xZ8pL0sN4tY7wB2mK6s"}
        codes = [
            (await client.get("/sessions", headers=via("10.0.0.1", wrong))).status_code
            for _ in range(6)
        ]
        assert codes == [401] * 6
        # Now even the right token waits: a guess is not even looked at.
        held = await client.get("/sessions", headers=via("10.0.0.1", AUTH))
        assert held.status_code == 429
        assert held.json()["code"] == "rate-limited"
        assert held.headers["retry-after"] == "1"
        login = await client.post(
            "/login", data={"token": TOKEN}, headers=via("10.0.0.1")
        )
        assert login.status_code == 429
        # Another address is not held up.
        other = await client.get("/sessions", headers=via("10.0.0.2", AUTH))
        assert other.status_code == 200
        # Each further failure doubles the wait.
        now[0] = 1.5
        bad = await client.get("/sessions", headers=via("10.0.0.1", wrong))
        assert bad.status_code == 401
        held = await client.get("/sessions", headers=via("10.0.0.1", AUTH))
        assert held.headers["retry-after"] == "2"
        now[0] = 4.0
        good = await client.get("/sessions", headers=via("10.0.0.1", AUTH))
        assert good.status_code == 200  # and the failures are forgotten
        assert guard.failures.wait("10.0.0.1") is None


@pytest.mark.asyncio
async def test_sign_in_failures_are_budgeted_like_bearer_ones(
    sqlite_store: Store, served: Served
) -> None:
    async with served(sqlite_store, config(token=TOKEN)) as client:
        codes = [
            (await client.post("/login", data={"token": "guess"})).status_code
            for _ in range(7)
        ]
        assert codes == [401] * 6 + [429]
        held = await client.post("/login", data={"token": TOKEN})
        assert held.status_code == 429
        assert "turnkeep_8765" not in client.cookies


@pytest.mark.asyncio
async def test_requests_without_credentials_spend_the_request_budget(
    sqlite_store: Store, served: Served
) -> None:
    async with served(
        sqlite_store, config(token=TOKEN, burst=3, requests_per_second=1)
    ) as client:
        codes = [(await client.get("/sessions")).status_code for _ in range(4)]
        assert codes == [401, 401, 401, 429]


def test_failures_double_the_wait_up_to_a_ceiling_and_are_forgotten() -> None:
    now = [0.0]
    failures = Failures(free=2, first_wait=1.0, longest_wait=8.0, clock=lambda: now[0])
    failures.failed("a")
    failures.failed("a")
    assert failures.wait("a") is None
    waits: list[float | None] = []
    for _ in range(6):
        failures.failed("a")
        waits.append(failures.wait("a"))
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert failures.wait("b") is None
    now[0] = 3600.0 + 1.0
    assert failures.wait("a") is None
    failures.failed("a")
    assert failures.wait("a") is None  # afresh: one free failure again


@pytest.mark.asyncio
async def test_forwarded_headers_count_only_from_trusted_proxies(
    sqlite_store: Store, served: Served
) -> None:
    async with served(sqlite_store, config(burst=2, requests_per_second=1)) as client:
        # Not trusted: the header is the client's own word, and ignored.
        codes = [
            (await client.get("/sessions", headers=via(f"10.0.0.{n}"))).status_code
            for n in range(3)
        ]
        assert codes == [200, 200, 429]
    async with served(
        sqlite_store, config(burst=2, requests_per_second=1, **PROXIED)
    ) as client:
        codes = [
            (await client.get("/sessions", headers=via(f"10.0.0.{n}"))).status_code
            for n in range(3)
        ]
        assert codes == [200, 200, 200]
        # A trusted proxy's chain is read from the right: the first hop
        # that is not a trusted proxy is the client.
        for _ in range(2):
            await client.get("/sessions", headers={"X-Forwarded-For": "10.0.0.9"})
        chained = await client.get(
            "/sessions", headers={"X-Forwarded-For": "1.1.1.1, 10.0.0.9, 127.0.0.1"}
        )
        assert chained.status_code == 429


@pytest.mark.parametrize(
    ("proxies", "headers", "secure"),
    [
        ((), {}, False),
        ((), {"X-Forwarded-Proto": "https"}, False),
        (("127.0.0.0/8",), {"X-Forwarded-Proto": "https"}, True),
        (("127.0.0.0/8",), {"X-Forwarded-Proto": "http"}, False),
    ],
)
@pytest.mark.asyncio
async def test_the_cookie_is_secure_when_a_trusted_proxy_spoke_tls(
    sqlite_store: Store,
    served: Served,
    proxies: tuple[str, ...],
    headers: dict[str, str],
    secure: bool,
) -> None:
    async with served(
        sqlite_store, config(token=TOKEN, trusted_proxies=proxies)
    ) as client:
        login = await client.post("/login", data={"token": TOKEN}, headers=headers)
        assert login.status_code == 303
        assert ("; secure" in login.headers["set-cookie"].lower()) is secure


@pytest.mark.parametrize(
    "weak",
    [
        "",
        " ",
        "a",
        "change-me",
        "Vq3xZ8pL0sN4tY7wB2mK6",  # 21 characters
        "a" * 40,
        "abababababababababababab",
        "Vq3xZ8pL0sN4tY7wB2mK6r q",  # a space
        "Vq3xZ8pL0sN4tY7wB2mK6r\u00e9",
    ],
)
@pytest.mark.asyncio
async def test_a_weak_token_is_refused_at_start(sqlite_store: Store, weak: str) -> None:
    with pytest.raises(ConfigurationError, match="too weak") as info:
        check_bind(config(token=weak))
    assert len(weak) < 5 or weak not in str(info.value)  # never repeated
    async with sqlite_store.host() as host:
        with pytest.raises(ConfigurationError, match="--new-token"):
            create_app(host, config(token=weak))


def test_serve_refuses_a_weak_token_and_prints_a_strong_one(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNKEEP_SERVE__TOKEN", "change-me-please")
    refused = cli("serve", store=sqlite_store)
    assert refused.exit_code != 0
    assert "too weak" in one_line_error(refused)
    made = {cli("serve", "--new-token").output.strip() for _ in range(3)}
    assert len(made) == 3
    for token in made:
        check_token(token)
        assert len(token) >= 43


# -- the sign-in cookie ------------------------------------------------------------

OTHER_TOKEN = "Hs9Qe2Wd7Rt4Yu1Io6Pa3Sd"  # noqa: S105 - a rotated test token


def cookie_header(reply: httpx.Response) -> dict[str, str]:
    """The `Set-Cookie` of `reply` as attribute -> value (lower-case names)."""
    parts = [p.strip() for p in reply.headers["set-cookie"].split(";")]
    name, _, value = parts[0].partition("=")
    attributes = {k.lower(): v for k, _, v in (p.partition("=") for p in parts[1:])}
    return {"name": name, "value": value} | attributes


@pytest.mark.asyncio
async def test_the_cookie_is_a_signed_session_never_the_token(
    sqlite_store: Store, served: Served
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    async with served(sqlite_store, config(token=TOKEN)) as client:
        login = await client.post("/login", data={"token": TOKEN})
        cookie = cookie_header(login)
        assert cookie["name"] == "turnkeep_8765"  # unique to the port
        assert TOKEN not in login.headers["set-cookie"]
        assert {"httponly", "samesite", "max-age", "path"} <= cookie.keys()
        assert cookie["samesite"].lower() == "strict"
        assert cookie["max-age"] == str(12 * 3600)
        assert (await client.get("/sessions")).status_code == 200
        again = await client.post("/login", data={"token": TOKEN})
        assert cookie_header(again)["value"] != cookie["value"]  # a new session
        # The token itself, or a tampered session, is no sign-in.
        # The last character changed (to one it is not: "A" or "B").
        last = "B" if cookie["value"].endswith("A") else "A"
        for value in (TOKEN, cookie["value"][:-1] + last, cookie["value"] + "x"):
            client.cookies.set("turnkeep_8765", value)
            assert (await client.get("/sessions")).status_code == 401
    async with served(
        sqlite_store, config(token=TOKEN, name="agents", port=9000)
    ) as client:
        login = await client.post("/login", data={"token": TOKEN})
        assert cookie_header(login)["name"] == "turnkeep_agents"


@pytest.mark.asyncio
async def test_instances_sharing_a_token_accept_each_others_cookies(
    sqlite_store: Store, served: Served
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    async with served(sqlite_store, config(token=TOKEN)) as first:
        login = await first.post("/login", data={"token": TOKEN})
        value = cookie_header(login)["value"]
        page = await first.get("/view/s-one")
        csrf = page.text.split('name="turnkeep-csrf" content="')[1].split('"')[0]
    # Another instance behind the same load balancer: same token.
    async with served(sqlite_store, config(token=TOKEN)) as second:
        second.cookies.set("turnkeep_8765", value)
        assert (await second.get("/sessions")).status_code == 200
        reply = await second.post(
            "/sessions/s-one/cancel",
            headers={"X-Turnkeep-CSRF": csrf},
            json={"confirm": True},
        )
        assert reply.status_code == 409  # admitted; nothing is running
    # The token rotated: every cookie signed under the old one is void.
    async with served(sqlite_store, config(token=OTHER_TOKEN)) as rotated:
        rotated.cookies.set("turnkeep_8765", value)
        assert (await rotated.get("/sessions")).status_code == 401
        assert (await rotated.get("/view/s-one")).status_code == 303


def test_a_sign_in_expires_and_its_csrf_token_is_its_own() -> None:
    now = [1_000_000.0]
    signin = SignIn(token=TOKEN, lifetime=60, name="n", clock=lambda: now[0])
    value = signin.issue()
    session = signin.session_of(value)
    assert session is not None
    assert signin.session_of(signin.issue()) != session
    other = SignIn(token=TOKEN, lifetime=60, name="n", clock=lambda: now[0])
    assert other.session_of(value) == session  # derived from the token only
    assert other.csrf_of(session) == signin.csrf_of(session)
    assert signin.csrf_of("another") != signin.csrf_of(session)
    rotated = SignIn(token=OTHER_TOKEN, lifetime=60, name="n", clock=lambda: now[0])
    assert rotated.session_of(value) is None
    assert rotated.csrf_of(session) != signin.csrf_of(session)
    now[0] += 59
    assert signin.session_of(value) == session
    now[0] += 1
    assert signin.session_of(value) is None
    assert signin.session_of(None) is None
    assert signin.session_of("x" * 1000) is None


# -- budgets per client, not per token ------------------------------------------


@pytest.mark.asyncio
async def test_each_signed_in_browser_and_each_address_has_its_own_budget(
    sqlite_store: Store, served: Served
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    settings = config(token=TOKEN, burst=3, requests_per_second=1, **PROXIED)
    async with served(sqlite_store, settings) as client:
        app = client._transport.app  # type: ignore[attr-defined]
        browsers: list[httpx.AsyncClient] = []
        for n in range(2):
            browser = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://127.0.0.1",
                headers={"X-Forwarded-For": "10.0.0.5"},  # one address, two people
            )
            browsers.append(browser)
            login = await browser.post("/login", data={"token": TOKEN})
            assert login.status_code == 303, n
        try:
            first, second = browsers
            codes = [(await first.get("/sessions")).status_code for _ in range(4)]
            assert codes == [200, 200, 200, 429]
            assert (await second.get("/sessions")).status_code == 200
        finally:
            for browser in browsers:
                await browser.aclose()
        # The bearer token from two addresses: two budgets.
        codes = [
            (await client.get("/sessions", headers=via("10.0.0.1", AUTH))).status_code
            for _ in range(4)
        ]
        assert codes == [200, 200, 200, 429]
        other = await client.get("/sessions", headers=via("10.0.0.2", AUTH))
        assert other.status_code == 200


# -- bodies nested too deep --------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["/login", "/recover", "/sessions/s-one/cancel"])
async def test_a_body_nested_32000_deep_is_bad_json(
    sqlite_store: Store, served: Served, path: str
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    body = b"[" * 32_000 + b"]" * 32_000
    async with served(sqlite_store, config(token=TOKEN)) as client:
        reply = await client.post(
            path,
            content=body,
            headers=AUTH | {"Content-Type": "application/json"},
        )
        assert reply.status_code == 400, reply.text
        assert reply.json()["code"] == "bad-json"
        assert "nested too deep" in reply.json()["message"]
