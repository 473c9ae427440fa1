"""The JSON and SSE endpoints.

Reads (`GET /sessions`, `/sessions/{id}`, `/events`, `/stream`,
`/history`) show committed events only: what the backend holds durably,
read through its incremental read. `POST /recover` runs the recovery
sweep (`turnkeep.agent.sweep`), one at a time. Every endpoint asks the
`Guard` first; what can go wrong is answered by `turnkeep.serve.problems`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

import attrs
import msgspec
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response

from turnkeep.agent.messages import derive_messages
from turnkeep.agent.sweep import recover_interrupted
from turnkeep.audit import audit_log
from turnkeep.cancelrequest import ask_to_cancel
from turnkeep.config import ServeConfig
from turnkeep.eventreads import last_durable_seq, read_after
from turnkeep.host import Host
from turnkeep.ids import validate_session_id
from turnkeep.listing import with_liveness
from turnkeep.persistence import LoadedSession, SessionPersistence
from turnkeep.serve.follow import READ_PAGE, Tails
from turnkeep.serve.guard import Guard
from turnkeep.serve.listing import SessionQuery, list_page
from turnkeep.serve.problems import Problem, json_response
from turnkeep.serve.query import (
    int_param,
    json_body,
    path_session_id,
    status_param,
    time_param,
)
from turnkeep.serve.views import (
    CancelView,
    EventsView,
    RecoveredView,
    RecoverView,
    SessionDetail,
    SessionPageView,
    log_view,
    session_view,
)

__all__ = ["Api", "RecoverRequest"]

_MAX_SEQ: Final = 2**62
_MAX_TEXT: Final = 200
_SEND_BATCH: Final = 64
"""Events sent in one write at most (fewer sends when a client is behind)."""


class RecoverRequest(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """`POST /recover`'s body (optional): which sessions to look at.

    Without `session_ids`, every stored session whose summary says a turn
    is running is looked at.
    """

    session_ids: list[str] | None = None


@attrs.define(eq=False)
class Api:
    """The endpoints, over one started host."""

    host: Host
    config: ServeConfig
    guard: Guard
    tails: Tails
    heartbeat: float = 15.0
    send_timeout: float = 30.0
    sweeping: asyncio.Lock = attrs.field(init=False, factory=asyncio.Lock)
    """Held while this process sweeps (`POST /recover` or the timer)."""

    @property
    def backend(self) -> SessionPersistence:
        """The host's backend."""
        return self.host.require_persistence()

    # -- reads -------------------------------------------------------------

    async def sessions(self, request: Request) -> Response:
        """`GET /sessions?limit=&cursor=&status=&updated_after=&updated_before=&q=`."""
        self.guard.check(request, write=False)
        where, limit, cursor = self.list_query(request)
        page = await list_page(self.backend, where, limit=limit, cursor=cursor)
        return json_response(
            SessionPageView(
                items=[session_view(m) for m in page.items],
                next_cursor=page.next_cursor,
            )
        )

    def list_query(self, request: Request) -> tuple[SessionQuery, int, str | None]:
        """The filter, page size and cursor a listing request asks for."""
        limit = int_param(request, "limit", 50, minimum=1, maximum=self.config.max_page)
        text = request.query_params.get("q") or None
        if text is not None and len(text) > _MAX_TEXT:
            raise Problem(
                400,
                "bad-parameter",
                f"query parameter 'q': over {_MAX_TEXT} characters",
            )
        where = SessionQuery(
            statuses=status_param(request),
            updated_after=time_param(request, "updated_after"),
            updated_before=time_param(request, "updated_before"),
            text=text,
        )
        return where, limit, request.query_params.get("cursor") or None

    async def session(self, request: Request) -> Response:
        """`GET /sessions/{id}`: summary, status, usage and what the log says."""
        self.guard.check(request, write=False)
        loaded = await self.load(request)
        events = self.host.codec.decode_log(loaded.events, session_id=loaded.meta.id)
        return json_response(
            SessionDetail(session=session_view(loaded.meta), log=log_view(events))
        )

    async def load(self, request: Request) -> LoadedSession:
        """The session the path names, with a crashed turn shown `interrupted`."""
        session_id = path_session_id(request)
        loaded = await self.backend.load(session_id)
        (meta,) = await with_liveness(self.backend, [loaded.meta])
        return msgspec.structs.replace(loaded, meta=meta)

    async def events(self, request: Request) -> Response:
        """`GET /sessions/{id}/events?after=SEQ&limit=N`: committed events."""
        self.guard.check(request, write=False)
        session_id = path_session_id(request)
        after = int_param(request, "after", -1, minimum=-1, maximum=_MAX_SEQ)
        limit = int_param(
            request, "limit", 100, minimum=1, maximum=self.config.max_page
        )
        raws = await read_after(self.backend, session_id, after, limit)
        last = await last_durable_seq(self.backend, session_id)
        return json_response(
            EventsView(
                events=[msgspec.Raw(r) for r in raws],
                next_after=after + len(raws),
                last_seq=max(last, after + len(raws)),
            )
        )

    async def history(self, request: Request) -> Response:
        """`GET /sessions/{id}/history`: the model history the log derives."""
        self.guard.check(request, write=False)
        session_id = path_session_id(request)
        loaded = await self.backend.load(session_id)
        events = self.host.codec.decode_log(loaded.events, session_id=session_id)
        return json_response({"messages": derive_messages(events)})

    async def audit(self, request: Request) -> Response:
        """`GET /sessions/{id}/audit?after=N&limit=M`: its audit records.

        What the processes that acted on the session recorded (takeovers,
        refusals, recoveries, ...; `turnkeep.audit`), oldest first, numbered
        above `after`. 404 for a session that is not stored (a deleted
        session's records went with it), 501 `audit-unsupported` for a
        backend that keeps no trail.
        """
        self.guard.check(request, write=False)
        session_id = path_session_id(request)
        after = int_param(request, "after", 0, minimum=0, maximum=_MAX_SEQ)
        limit = int_param(
            request, "limit", 100, minimum=1, maximum=self.config.max_page
        )
        trail = audit_log(self.backend)
        if trail is None:
            raise Problem(
                501,
                "audit-unsupported",
                f"the {self.host.persistence_name!r} backend keeps no audit trail",
            )
        records = await trail.audit_records(session_id, after, limit)
        next_after = records[-1].number if records else after
        return json_response({"records": records, "next_after": next_after})

    # -- the stream --------------------------------------------------------

    async def stream(self, request: Request) -> Response:
        """`GET /sessions/{id}/stream`: SSE of committed events, one per seq.

        Starts after `Last-Event-ID` (a reconnecting client's last seq),
        else after `?after=SEQ`, else at the log's end (new events only).
        """
        key = self.guard.check(request, write=False)
        session_id = path_session_id(request)
        last = await last_durable_seq(self.backend, session_id)  # 404 before 200
        after = self._resume_point(request, last)
        if not self.guard.budgets.open_stream(key):
            raise Problem(
                429,
                "too-many-streams",
                "too many open streams for this client (or in all); close one",
                headers={"Retry-After": "5"},
            )
        return EventSourceResponse(
            self._committed(session_id, after, key),
            ping=self.heartbeat,
            send_timeout=self.send_timeout,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    def _resume_point(self, request: Request, last: int) -> int:
        header = request.headers.get("last-event-id")
        if header is not None and header.strip():
            try:
                value = int(header)
            except ValueError:
                raise Problem(
                    400, "bad-parameter", "Last-Event-ID must be a seq (an integer)"
                ) from None
            if value < -1:
                raise Problem(400, "bad-parameter", "Last-Event-ID must be >= -1")
            return value
        return int_param(request, "after", last, minimum=-1, maximum=_MAX_SEQ)

    async def _committed(
        self, session_id: str, after: int, key: str
    ) -> AsyncIterator[ServerSentEvent | bytes]:
        sub = None
        try:
            position = after
            async for chunk, last in self._backlog(session_id, position):
                position = last
                yield chunk
            sub = self.tails.subscribe(session_id)
            # Whatever landed between the backlog and the subscription.
            async for chunk, last in self._backlog(session_id, position):
                position = last
                yield chunk
            while True:
                items = await sub.take(_SEND_BATCH)
                if items is None:
                    yield _DROPPED
                    return
                out = bytearray()
                for seq, raw in items:
                    if seq <= position:
                        continue
                    if seq > position + 1:  # a gap: fill it from the log
                        async for chunk, last in self._backlog(
                            session_id, position, until=seq - 1
                        ):
                            out += chunk
                            position = last
                    out += _sse(seq, raw)
                    position = seq
                if out:
                    yield bytes(out)
        finally:
            if sub is not None:
                self.tails.unsubscribe(sub)
            self.guard.budgets.close_stream(key)

    async def _backlog(
        self, session_id: str, after: int, until: int | None = None
    ) -> AsyncIterator[tuple[bytes, int]]:
        """The committed events after `after` (to `until`) as SSE chunks.

        Each chunk comes with the last seq it holds.
        """
        position = after
        while until is None or position < until:
            page = READ_PAGE if until is None else min(READ_PAGE, until - position)
            raws = await read_after(self.backend, session_id, position, page)
            for start in range(0, len(raws), _SEND_BATCH):
                out = bytearray()
                for raw in raws[start : start + _SEND_BATCH]:
                    position += 1
                    out += _sse(position, raw)
                yield bytes(out), position
            if len(raws) < page:
                return

    # -- writes ------------------------------------------------------------

    async def cancel(self, request: Request) -> Response:
        """`POST /sessions/{id}/cancel` with `{"confirm": true}`: cancel its turn.

        Records a request for the process that runs the session's turn
        (`turnkeep.cancelrequest`), which ends it `cancelled` within about a
        fifth of a second. Any other body is refused (400,
        `confirmation-required`) before anything is looked up or written; a
        session no live process holds has no running turn: 409,
        `no-running-turn`, nothing recorded.
        """
        self.guard.check(request, write=True)
        session_id = path_session_id(request)
        body = await json_body(request, self.config.max_body)
        if not (
            isinstance(body, dict)
            and body.keys() == {"confirm"}
            and body["confirm"] is True
        ):
            raise Problem(
                400,
                "confirmation-required",
                'cancelling a turn needs the body {"confirm": true}; nothing was done',
            )
        answer = await ask_to_cancel(
            self.backend,
            session_id,
            "turnkeep serve",
            name=self.host.persistence_name or "?",
        )
        if answer.request is None:
            raise Problem(
                409,
                "no-running-turn",
                "no live process holds this session, so no turn is running; "
                "nothing was requested",
            )
        return json_response(
            CancelView(
                session_id=session_id,
                request=answer.request.number,
                requested_at=answer.request.requested_at,
            ),
            status=202,
        )

    async def recover(self, request: Request) -> Response:
        """`POST /recover`: settle the sessions a crash left inside a turn."""
        self.guard.check(request, write=True)
        body = await json_body(request, self.config.max_body)
        try:
            asked = msgspec.convert(
                body if body is not None else {}, RecoverRequest, strict=True
            )
        except msgspec.ValidationError as exc:
            raise Problem(422, "invalid-body", f"invalid body: {exc}") from None
        ids = (
            [validate_session_id(i) for i in asked.session_ids]
            if asked.session_ids is not None
            else None
        )
        if self.sweeping.locked():
            raise Problem(409, "recover-running", "a recovery sweep is running")
        async with self.sweeping:
            results = await recover_interrupted(self.host, session_ids=ids)
        return json_response(
            RecoverView(
                results=[
                    RecoveredView(
                        session_id=r.session_id,
                        action=r.action,
                        detail=r.report.describe() if r.report is not None else None,
                        error=r.error,
                    )
                    for r in results
                ]
            )
        )


def _sse(seq: int, raw: bytes) -> bytes:
    """One SSE message: `id` is the seq, `data` the stored event's JSON.

    A stored event is one line of JSON (the codec escapes line breaks
    inside strings); one that is not is sent line by line, as SSE allows.
    """
    lines = raw.splitlines() or [b""]
    data = b"".join(b"data: " + line + b"\n" for line in lines)
    return b"id: %d\n%s\n" % (seq, data)


_DROPPED: Final = ServerSentEvent(
    data='{"code":"slow-client","message":"this client fell behind and was dropped; '
    'reconnect with Last-Event-ID"}',
    event="dropped",
)
