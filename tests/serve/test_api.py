"""The JSON endpoints over a real store (ASGI transport, no sockets).

Sessions are written by the agent loop through a host of their own; the
service reads them through another, as it would from another process.
"""

from __future__ import annotations

from html import escape

import msgspec
import pytest
from tests.cli.support import Store, converse
from tests.serve.conftest import Served, killed_in_turn

from turnkeep.agent.messages import derive_messages, encode_messages
from turnkeep.auditing import note
from turnkeep.codec import EventCodec
from turnkeep.errors import StorageError
from turnkeep.packs import expand_all
from turnkeep.serve.paths import url_id

pytestmark = pytest.mark.asyncio


async def test_lists_sessions_with_status_usage_and_pages(
    store: Store, served: Served
) -> None:
    await converse(store, "s-one")
    await converse(store, "s-two", prompts=("only one",))
    async with served(store) as client:
        reply = await client.get("/sessions")
        assert reply.status_code == 200
        body = reply.json()
        assert [s["id"] for s in body["items"]] == ["s-two", "s-one"]
        one = body["items"][1]
        assert one["status"] == "idle"
        assert one["usage"]["turns"] == 3
        assert one["usage"]["events"] > 10
        assert one["usage"]["bytes"] > 100
        assert body["next_cursor"] is None
        first = (await client.get("/sessions", params={"limit": 1})).json()
        assert [s["id"] for s in first["items"]] == ["s-two"]
        second = (
            await client.get(
                "/sessions", params={"limit": 1, "cursor": first["next_cursor"]}
            )
        ).json()
        assert [s["id"] for s in second["items"]] == ["s-one"]


async def test_filters_by_status_time_and_title(
    sqlite_store: Store, served: Served
) -> None:
    await converse(sqlite_store, "s-one", prompts=("deploy the site",))
    killed_in_turn(sqlite_store, "s-cut")
    async with served(sqlite_store) as client:
        cut = (await client.get("/sessions", params={"status": "interrupted"})).json()
        assert [s["id"] for s in cut["items"]] == ["s-cut"]
        both = (
            await client.get("/sessions", params={"status": "idle,interrupted"})
        ).json()
        assert {s["id"] for s in both["items"]} == {"s-one", "s-cut"}
        found = (await client.get("/sessions", params={"q": "DEPLOY THE"})).json()
        assert [s["id"] for s in found["items"]] == ["s-one"]
        newest = max(s["updated_at"] for s in both["items"])
        late = (
            await client.get("/sessions", params={"updated_after": newest + 1})
        ).json()
        assert late == {"items": [], "next_cursor": None}
        early = (
            await client.get("/sessions", params={"updated_before": "2000-01-01"})
        ).json()
        assert early["items"] == []
        iso = (
            await client.get(
                "/sessions", params={"updated_after": "2000-01-01T00:00:00+00:00"}
            )
        ).json()
        assert len(iso["items"]) == 2


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"status": "sleeping"}, "bad-parameter"),
        ({"limit": "0"}, "bad-parameter"),
        ({"limit": "501"}, "bad-parameter"),
        ({"limit": "ten"}, "bad-parameter"),
        ({"updated_after": "yesterday"}, "bad-parameter"),
        ({"updated_before": "1960-01-01"}, "bad-parameter"),
        ({"q": "x" * 201}, "bad-parameter"),
        ({"cursor": "not-a-cursor"}, "invalid-cursor"),
    ],
)
async def test_bad_list_input_is_400_with_a_code(
    sqlite_store: Store, served: Served, params: dict[str, str], code: str
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    async with served(sqlite_store) as client:
        reply = await client.get("/sessions", params=params)
        assert reply.status_code == 400, reply.text
        assert reply.json()["code"] == code
        assert "Traceback" not in reply.text


async def test_one_session_has_summary_usage_and_what_its_log_says(
    sqlite_store: Store, served: Served
) -> None:
    await converse(sqlite_store, "s-one")
    killed_in_turn(sqlite_store, "s-cut")
    async with served(sqlite_store) as client:
        one = (await client.get("/sessions/s-one")).json()
        assert one["session"]["usage"]["turns"] == 3
        assert one["log"]["tools"] == {
            "calls": 1,
            "ok": 1,
            "error": 0,
            "interrupted": 0,
            "unanswered": 0,
        }
        assert one["log"]["user_messages"] == 3
        assert one["log"]["open_turn"] is None
        cut = (await client.get("/sessions/s-cut")).json()
        assert cut["session"]["status"] == "interrupted"
        assert cut["log"]["open_turn"] == 1
        assert len(cut["log"]["interrupted_calls"]) == 1
        assert cut["log"]["tools"]["unanswered"] == 1


async def test_unknown_ids_are_404_and_bad_ids_400(
    sqlite_store: Store, served: Served
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    async with served(sqlite_store) as client:
        for path in ("", "/events", "/history", "/stream"):
            reply = await client.get(f"/sessions/nope{path}")
            assert reply.status_code == 404, (path, reply.text)
            assert reply.json() == {
                "code": "session-not-found",
                "message": reply.json()["message"],
                "session_id": "nope",
            }
            bad = await client.get(f"/sessions/a%00b{path}")
            assert bad.status_code == 400, (path, bad.text)
            assert bad.json()["code"] == "invalid-session-id"


async def test_events_are_the_committed_records_after_a_seq(
    store: Store, served: Served
) -> None:
    await converse(store, "s-one")
    stored = expand_all((await store.load("s-one")).events)
    async with served(store) as client:
        page = (
            await client.get("/sessions/s-one/events", params={"after": 2, "limit": 4})
        ).json()
        assert [msgspec.json.encode(e) for e in page["events"]] == [
            msgspec.json.encode(msgspec.json.decode(r)) for r in stored[3:7]
        ]
        assert page["next_after"] == 6
        assert page["last_seq"] == len(stored) - 1
        rest = (await client.get("/sessions/s-one/events", params={"after": 6})).json()
        assert len(rest["events"]) == len(stored) - 7
        end = (
            await client.get(
                "/sessions/s-one/events", params={"after": len(stored) - 1}
            )
        ).json()
        assert end["events"] == []
        for params in ({"after": -2}, {"limit": 0}, {"after": "x"}):
            bad = await client.get("/sessions/s-one/events", params=params)
            assert bad.status_code == 400
            assert bad.json()["code"] == "bad-parameter"


async def test_history_is_the_derived_model_history(
    sqlite_store: Store, served: Served
) -> None:
    await converse(sqlite_store, "s-one")
    stored = expand_all((await sqlite_store.load("s-one")).events)
    expected = derive_messages(EventCodec().decode_log(stored, session_id="s-one"))
    async with served(sqlite_store) as client:
        reply = await client.get("/sessions/s-one/history")
        assert reply.status_code == 200
        assert reply.content == b'{"messages":' + encode_messages(expected) + b"}"


async def test_audit_lists_a_sessions_records_in_pages(
    sqlite_store: Store, served: Served
) -> None:
    await converse(sqlite_store, "s-one")
    async with sqlite_store.host() as host:
        backend = host.require_persistence()
        for why in ("first", "second", "third"):
            await note(backend, "repair", "s-one", f"{why} repair")
    async with served(sqlite_store) as client:
        reply = await client.get("/sessions/s-one/audit", params={"limit": 2})
        assert reply.status_code == 200
        body = reply.json()
        assert [r["reason"] for r in body["records"]] == [
            "first repair",
            "second repair",
        ]
        assert {r["action"] for r in body["records"]} == {"repair"}
        assert body["next_after"] == 2
        rest = await client.get("/sessions/s-one/audit", params={"after": 2})
        assert [r["number"] for r in rest.json()["records"]] == [3]
        missing = await client.get("/sessions/s-none/audit")
        assert missing.status_code == 404
        bad = await client.get("/sessions/s-one/audit", params={"after": -1})
        assert bad.status_code == 400


async def test_unknown_routes_and_methods_answer_json(
    sqlite_store: Store, served: Served
) -> None:
    async with served(sqlite_store) as client:
        missing = await client.get("/nothing/here")
        assert missing.status_code == 404
        assert missing.json()["code"] == "not-found"
        wrong = await client.delete("/sessions")
        assert wrong.status_code == 405
        assert wrong.json()["code"] == "method-not-allowed"
        cancel = await client.post("/sessions/s-one/cancel", json={"confirm": True})
        assert cancel.status_code == 403  # a write, and no token is configured
        assert cancel.json()["code"] == "writes-disabled"


async def test_storage_failure_is_503_and_a_bug_500_without_traceback(
    sqlite_store: Store, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    await converse(sqlite_store, "s-one", prompts=("hi",))
    async with served(sqlite_store) as client:
        api = client._transport.app.state.api  # type: ignore[attr-defined]
        backend = api.backend

        async def broken(*_: object, **__: object) -> object:
            raise RuntimeError("secret internals /etc/passwd")

        async def unavailable(*_: object, **__: object) -> object:
            raise StorageError("disk on fire")

        monkeypatch.setattr(type(backend), "list", broken)
        reply = await client.get("/sessions")
        assert reply.status_code == 500
        assert reply.json()["code"] == "internal-error"
        assert "secret" not in reply.text
        assert "Traceback" not in reply.text
        page = await client.get("/")
        assert page.status_code == 500
        assert page.json()["code"] == "internal-error"
        monkeypatch.setattr(type(backend), "load", unavailable)
        reply = await client.get("/sessions/s-one")
        assert reply.status_code == 503
        assert reply.json()["code"] == "storage"


async def test_pages_escape_stored_text_and_load_nothing_from_elsewhere(
    sqlite_store: Store, served: Served
) -> None:
    await converse(sqlite_store, "s-x", prompts=('<script>alert("x")</script>',))
    async with served(sqlite_store) as client:
        for path in ("/", "/view/s-x"):
            page = await client.get(path)
            assert page.status_code == 200
            assert '<script>alert("x")' not in page.text
            assert "&lt;script&gt;alert(&quot;x&quot;)" in page.text
            policy = page.headers["content-security-policy"]
            assert "default-src 'self'" in policy
            assert "script-src 'self'" in policy
            assert "http://" not in page.text.replace("http://127.0.0.1", "")
            assert "https://" not in page.text
        script = await client.get("/static/page.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        assert "textContent" in script.text
        assert "innerHTML" not in script.text
        assert (await client.get("/static/page.css")).status_code == 200
        missing = await client.get("/static/other.js")
        assert missing.status_code == 404
        assert missing.json()["code"] == "not-found"


ODD_IDS = ("a/b", ".", "..", "~x", "sp ace", "caf\u00e9", "a%2Fb", "-dash")


async def test_every_stored_id_is_reachable_over_http(
    sqlite_store: Store, served: Served
) -> None:
    for session_id in ODD_IDS:
        await converse(sqlite_store, session_id, prompts=("hi",))
    async with served(sqlite_store) as client:
        listed = (await client.get("/sessions")).json()
        assert sorted(s["id"] for s in listed["items"]) == sorted(ODD_IDS)
        index = (await client.get("/")).text
        for session_id in ODD_IDS:
            segment = url_id(session_id)
            assert "/" not in segment
            assert segment not in (".", "..")
            assert f'href="/view/{escape(segment)}"' in index
            detail = await client.get(f"/sessions/{segment}")
            assert detail.status_code == 200, (session_id, detail.text)
            assert detail.json()["session"]["id"] == session_id
            events = await client.get(f"/sessions/{segment}/events")
            assert events.json()["events"][0]["type"] == "turn/start"
            page = await client.get(f"/view/{segment}")
            assert page.status_code == 200
            assert f'data-path="{escape(segment)}"' in page.text
        assert url_id("-dash") == "-dash"  # plain ids stay as they are
        assert url_id("a/b") == "~YS9i"
        bad = await client.get("/sessions/~not*base64")
        assert bad.status_code == 400
        assert bad.json()["code"] == "invalid-session-id"
        gone = await client.get(f"/sessions/{url_id('x/y')}")
        assert gone.status_code == 404
        assert gone.json()["session_id"] == "x/y"
