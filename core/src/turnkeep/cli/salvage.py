"""Salvaging a damaged session: `turnkeep repair --salvage ID`.

A session with damage inside acknowledged data cannot be loaded, and
`repair` alone refuses it (it only cuts unacknowledged tails). With
`--salvage`, the intact prefix (`turnkeep.salvage.read_intact`: whole
flushes before the first damaged record, every event decodable) is written
to a NEW session, whose header names the damaged one as its parent and the
fork point where the damage starts. The new id is printed on stdout; what
was lost (seqs, bytes, flushes, why) is reported. The damaged original is
never touched: restore it from a backup, inspect it, or delete it with
`turnkeep rm` once the salvaged copy is enough.
"""

from __future__ import annotations

import click
import msgspec

from turnkeep.agent.recovery import open_turn
from turnkeep.cli.output import clean, clean_id, emit_json, shorten
from turnkeep.cli.runtime import CliError, Opened, about, fail, one_line
from turnkeep.clock import now_ms
from turnkeep.ids import new_session_id, validate_session_id
from turnkeep.meta import (
    ForkPoint,
    SessionHeader,
    SessionMeta,
    SessionStatus,
    SessionSummary,
)
from turnkeep.salvage import Damage, read_intact

__all__ = ["Salvaged", "describe_loss", "salvage"]


class Salvaged(msgspec.Struct, frozen=True, kw_only=True):
    """What `repair --salvage --json` prints.

    Attributes:
        session_id: the damaged session (kept as it was).
        new_session_id: the session holding its intact prefix.
        events: how many events were salvaged (seqs `0 .. events-1`).
        lost: what was lost after them.
    """

    session_id: str
    new_session_id: str
    events: int
    lost: Damage


def describe_loss(damage: Damage) -> str:
    """What a salvage lost, for a person."""
    seqs = (
        f"events {damage.first_seq}..{damage.last_seq}"
        if damage.last_seq is not None
        else f"events from {damage.first_seq} on (how many is not known)"
    )
    parts = [seqs]
    if damage.lost_bytes is not None:
        parts.append(f"{damage.lost_bytes} bytes")
    if damage.first_flush is not None:
        flushes = (
            f"flushes {damage.first_flush}..{damage.last_flush}"
            if damage.last_flush is not None and damage.last_flush > damage.first_flush
            else f"flush {damage.first_flush}"
        )
        parts.append(flushes)
    return f"lost {', '.join(parts)}: {one_line(clean(damage.reason))}"


async def salvage(
    store: Opened, session_id: str, *, new_id: str | None, as_json: bool
) -> int:
    """Write the intact prefix of a damaged session to a new one.

    Raises:
        CliError: nothing to salvage (no damage, or none of it is intact),
            the new id is taken, or the store failed (one line each).
    """
    host, backend = store.host, store.backend
    with about(session_id):
        got = await read_intact(
            backend, validate_session_id(session_id), codec=host.codec
        )
    if got.damage is None:
        fail(
            f"nothing to salvage: session {session_id!r} has no damage in "
            "acknowledged data (`turnkeep verify` checks it; `turnkeep fork` "
            "copies it)"
        )
    if not got.events:
        fail(
            f"nothing to salvage: session {session_id!r} is damaged from its "
            f"first event ({describe_loss(got.damage)}); it was left as it is"
        )
    target = validate_session_id(new_id or new_session_id())
    if await backend.has(target):
        fail(f"session {target!r} already exists; choose another --id")
    created = now_ms()
    source = got.meta
    title = source.summary.title
    status: SessionStatus = "interrupted" if open_turn(got.events) else "idle"
    meta = SessionMeta(
        header=SessionHeader(
            id=target,
            created_at=created,
            cwd=source.header.cwd,
            parent=ForkPoint(session_id=session_id, seq=len(got.events)),
        ),
        summary=SessionSummary(
            updated_at=created,
            title=f"{title} (salvaged)" if title else None,
            first_prompt=source.summary.first_prompt,
            status=status,
        ),
    )
    with about(target):
        host.sessions.create(target, seed=got.events, meta=meta)
        closed = await host.sessions.close(target)
    if not closed.saved:
        raise CliError(f"the salvaged copy was not stored: {closed.describe()}")
    if as_json:
        emit_json(
            Salvaged(
                session_id=session_id,
                new_session_id=target,
                events=len(got.events),
                lost=got.damage,
            )
        )
    else:
        click.echo(target)
    click.echo(
        f"salvaged events 0..{len(got.events) - 1} of {clean_id(session_id)} into "
        f"{clean_id(target)}; {describe_loss(got.damage)}. {clean_id(session_id)} "
        "was left as it is" + (f" ({shorten(title, 40)!r})" if title else ""),
        err=True,
    )
    return 0
