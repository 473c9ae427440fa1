"""The web page: the session list, a transcript, and signing in.

Server-rendered HTML; one small script and one stylesheet shipped in
`static/` (no build step, nothing from another origin: the pages'
Content-Security-Policy allows their own origin only). The list is a plain
form (`q` searches titles on the page the backend returned, `status`
filters), so it works without the script; the script follows a session
live (`page.js`, over `GET /sessions/{id}/stream`). A browser cannot put
the bearer token on those requests, so with a token configured and reads
not open the pages ask for it once (`/login`) and keep a signed session
derived from it in an HttpOnly cookie that reads accept
(`turnkeep.serve.signin`). For a reader signed in that way the transcript
carries the anti-forgery token in a `<meta name="turnkeep-csrf">` and a
cancel button; the script sends the token as `X-Turnkeep-CSRF`, the only
way a write accepts the cookie (`turnkeep.serve.guard`).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from html import escape
from importlib.resources import files
from typing import Final
from urllib.parse import parse_qs, urlencode

import attrs
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from turnkeep.packs import expand_all
from turnkeep.serve.api import Api
from turnkeep.serve.listing import list_page
from turnkeep.serve.paths import url_id
from turnkeep.serve.problems import Problem
from turnkeep.serve.query import STATUSES, json_body
from turnkeep.serve.transcript import render_events, size_text

__all__ = ["CSP", "Pages", "static_files"]

CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def static_files() -> dict[str, tuple[bytes, str]]:
    """The shipped script and stylesheet: name -> (bytes, media type)."""
    root = files("turnkeep.serve") / "static"
    return {
        "page.js": ((root / "page.js").read_bytes(), "text/javascript"),
        "page.css": ((root / "page.css").read_bytes(), "text/css"),
    }


def _time(ms: int) -> str:
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return (
        f'<time datetime="{moment.isoformat()}">'
        f"{moment.strftime('%Y-%m-%d %H:%M:%S')} UTC</time>"
    )


def _document(
    title: str, body: str, *, status: int = 200, csrf: str | None = None
) -> HTMLResponse:
    token = (
        "" if csrf is None else f'<meta name="turnkeep-csrf" content="{escape(csrf)}">'
    )
    html = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{token}"
        f"<title>{escape(title)} · turnkeep</title>"
        '<link rel="stylesheet" href="/static/page.css">'
        '<script src="/static/page.js" defer></script></head><body>'
        '<header><a href="/" class="home">turnkeep</a></header>'
        f"<main>{body}</main></body></html>"
    )
    return HTMLResponse(html, status_code=status, headers=_HEADERS)


@attrs.define(eq=False)
class Pages:
    """The HTML endpoints, over the same `Api` (guard, backend, bounds)."""

    api: Api
    static: dict[str, tuple[bytes, str]] = attrs.field(factory=static_files)

    async def index(self, request: Request) -> Response:
        """`GET /`: the session list, with search and a status filter."""
        try:
            self.api.guard.check(request, write=False)
        except Problem as exc:
            if exc.status == 401:
                return RedirectResponse("/login", status_code=303)
            raise
        where, limit, cursor = self.api.list_query(request)
        listed = await list_page(self.api.backend, where, limit=limit, cursor=cursor)
        shown = len(listed.items)
        rows = "".join(
            "<tr>"
            f'<td class="title"><a href="/view/{escape(url_id(m.id))}">'
            f"{escape(m.summary.title or m.summary.first_prompt or m.id)}</a>"
            f'<div class="id">{escape(m.id)}</div></td>'
            f'<td><span class="badge {m.summary.status}">{m.summary.status}</span></td>'
            f'<td class="num">{m.summary.turns}</td>'
            f"<td>{_time(m.summary.updated_at)}</td>"
            f'<td class="num">{size_text(m.summary.size)}</td>'
            f'<td class="num">{m.summary.event_count}</td>'
            "</tr>"
            for m in listed.items
        )
        q = request.query_params.get("q", "")
        chosen = request.query_params.get("status", "")
        options = "".join(
            f'<option value="{s}"{" selected" if s == chosen else ""}>'
            f"{s or 'any status'}</option>"
            for s in ["", *sorted(STATUSES)]
        )
        more = ""
        if listed.next_cursor is not None:
            query = {k: v for k, v in request.query_params.items() if k != "cursor"}
            query["cursor"] = listed.next_cursor
            more = f'<a class="next" href="/?{escape(urlencode(query))}">next page</a>'
        empty = "" if rows else '<p class="empty">No session on this page matches.</p>'
        body = (
            "<h1>Sessions</h1>"
            '<form class="search" method="get" action="/">'
            f'<input type="search" name="q" value="{escape(q)}" '
            'placeholder="search titles" aria-label="search titles">'
            f'<select name="status" aria-label="status">{options}</select>'
            '<button type="submit">Search</button></form>'
            '<table class="sessions"><thead><tr><th>title</th><th>status</th>'
            "<th>turns</th><th>updated</th><th>size</th><th>events</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>{empty}"
            f'<p class="scanned">{shown} on this page. {more}</p>'
        )
        return _document("Sessions", body)

    async def view(self, request: Request) -> Response:
        """`GET /view/{id}`: one session's transcript, followed live."""
        try:
            self.api.guard.check(request, write=False)
        except Problem as exc:
            if exc.status == 401:
                return RedirectResponse("/login", status_code=303)
            raise
        loaded = await self.api.load(request)
        meta = loaded.meta
        raws = expand_all(loaded.events)  # a packed record: its events' bytes
        events = self.api.host.codec.decode_log(raws, session_id=meta.id)
        live = meta.summary.status == "active"
        transcript = render_events(events, [len(r) for r in raws], live=live)
        summary = meta.summary
        title = summary.title or summary.first_prompt or meta.id
        csrf = self.api.guard.csrf_token(request)
        cancel = (
            ""
            if csrf is None
            else '<p class="cancel"><button type="button" id="cancel">'
            "Cancel the running turn</button> "
            '<span id="cancel-result" role="status"></span></p>'
        )
        body = (
            f"<h1>{escape(title)}</h1>"
            '<dl class="meta">'
            f'<dt>session</dt><dd class="id">{escape(meta.id)}</dd>'
            f'<dt>status</dt><dd><span class="badge {summary.status}" id="status">'
            f"{summary.status}</span></dd>"
            f'<dt>usage</dt><dd id="usage">{summary.turns} turns, '
            f"{summary.event_count} events, {size_text(summary.size)}</dd>"
            f"<dt>updated</dt><dd>{_time(summary.updated_at)}</dd></dl>"
            '<p class="follow"><label><input type="checkbox" id="follow" checked> '
            'follow live</label> <span id="follow-state"></span></p>'
            f"{cancel}"
            f'<div id="transcript" data-session="{escape(meta.id)}" '
            f'data-path="{escape(url_id(meta.id))}" '
            f'data-last-seq="{len(events) - 1}">{transcript}</div>'
        )
        return _document(title, body, csrf=csrf)

    async def static_file(self, request: Request) -> Response:
        """`GET /static/{name}`: the shipped script or stylesheet."""
        found = self.static.get(request.path_params["name"])
        if found is None:
            raise Problem(404, "not-found", "no such file")
        content, media = found
        return Response(
            content, media_type=media, headers={"Cache-Control": "no-cache"}
        )

    async def login_form(self, request: Request) -> Response:
        """`GET /login`: ask for the token."""
        return _login()

    async def login(self, request: Request) -> Response:
        """`POST /login` (form `token=...`): sign in with a session cookie."""
        guard = self.api.guard
        wait = guard.budgets.take(guard.address_key(request))
        if wait is not None:
            raise Problem(
                429,
                "rate-limited",
                "too many requests; retry later",
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
            )
        guard.attempt(request)  # an address that failed too often waits first
        body = await json_body_or_form(request, self.api.config.max_body)
        if not guard.sign_in(request, body.get("token", "")):
            return _login("That token is not valid.", status=401)
        signin = guard.signin
        assert signin is not None  # noqa: S101 - a token was accepted, so one is set
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            signin.name,
            signin.issue(),
            max_age=signin.lifetime,
            httponly=True,
            samesite="strict",
            path="/",
            secure=guard.clients.is_https(request),
        )
        return response


def _login(error: str = "", *, status: int = 200) -> HTMLResponse:
    note = f'<p class="error">{escape(error)}</p>' if error else ""
    return _document(
        "Sign in",
        "<h1>Sign in</h1>"
        "<p>This service needs its token to show sessions.</p>"
        f'{note}<form method="post" action="/login" class="login">'
        '<input type="password" name="token" aria-label="token" autofocus>'
        '<button type="submit">Sign in</button></form>',
        status=status,
    )


async def json_body_or_form(request: Request, max_body: int) -> dict[str, str]:
    """A url-encoded form body as a dict (the login form posts one)."""
    kind = request.headers.get("content-type", "")
    if kind.startswith("application/x-www-form-urlencoded"):
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body:
            raise Problem(413, "body-too-large", f"the body is over {max_body} bytes")
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > max_body:
                raise Problem(
                    413, "body-too-large", f"the body is over {max_body} bytes"
                )
        parsed = parse_qs(raw.decode("utf-8", "replace"), max_num_fields=8)
        return {k: v[0] for k, v in parsed.items()}
    found = await json_body(request, max_body)
    if not isinstance(found, dict):
        raise Problem(422, "invalid-body", "expected a form with a token")
    return {str(k): str(v) for k, v in found.items()}  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
