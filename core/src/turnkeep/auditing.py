"""Recording the audit trail from the process that acts (see `turnkeep.audit`).

Implemented here; called where an action happens: the session store (a
takeover), the write-behind (a write a fence refused), maintenance (repair,
quarantine), the agent loop (recovery, a refused turn, a resolution), the
command line and retention (deletion). Each records *after* its action
succeeded, so a record never claims what did not happen.

A failed audit write never fails nor undoes the action: the action's own
data is already durable, and losing it to save its record would be the
worse loss. The failure is logged on the `turnkeep.audit` logger at
WARNING (the command line shows it on stderr) and `note` answers `None`. A
backend without the capability records nothing, silently: its users chose
it. A session deleted between the action and its record (a forced delete
racing a refused write) gets the record in the store's log instead.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

from turnkeep.audit import (
    AuditAction,
    AuditRecord,
    audit_log,
    audit_record,
)
from turnkeep.capabilities import delete_session, probe_held
from turnkeep.errors import SessionNotFoundError
from turnkeep.persistence import SessionPersistence

__all__ = ["claim_recorded", "delete_recorded", "note", "read_trail"]

log = logging.getLogger("turnkeep.audit")

_PAGE: Final = 500


async def note(
    backend: object,
    action: AuditAction,
    session_id: str | None,
    reason: str,
    *,
    detail: Mapping[str, str | int] | None = None,
) -> AuditRecord | None:
    """Record this process's action if `backend` keeps an audit trail.

    A `deletion` (and a record about no session) goes to the store's log,
    anything else to the session's records.

    Returns:
        The stored record; `None` when the backend keeps no trail or the
        record could not be written (logged, see the module docstring).
    """
    trail = audit_log(backend)
    if trail is None:
        return None
    record = audit_record(action, session_id, reason, detail=detail)
    scope = None if action == "deletion" else session_id
    try:
        try:
            return await trail.record_audit(scope, record)
        except SessionNotFoundError:
            if scope is None:
                raise
            # Deleted meanwhile: the store's log keeps what this process did.
            return await trail.record_audit(None, record)
    except Exception as exc:  # noqa: BLE001 - a backend's own error types too
        # Why swallowed: the action is done and durable (see the docstring).
        log.warning(
            "the audit record of a %s of session %r could not be written: %s",
            action,
            session_id,
            exc,
        )
        return None


async def delete_recorded(
    backend: SessionPersistence,
    session_id: str,
    reason: str,
    *,
    force: bool = False,
) -> AuditRecord | None:
    """Delete a session (`delete_session`), then record it in the store's log.

    The record keeps the id, the time, the reason and whether the delete
    was forced: nothing of the session's content.

    Raises:
        SessionNotFoundError, SessionHeldError, ConfigurationError: as
            `delete_session` (nothing deleted, nothing recorded).
    """
    await delete_session(backend, session_id, force=force)
    detail = {"forced": "yes"} if force else None
    return await note(backend, "deletion", session_id, reason, detail=detail)


async def claim_recorded(
    backend: SessionPersistence, session_id: str, *, steal: bool
) -> Callable[[], Awaitable[None]]:
    """`backend.claim(...)`; returns what records the takeover, if it was one.

    The caller awaits the returned step once the session is its own (after
    loading it), so that a record that fails or is cancelled never leaves a
    claim behind without a session. Stealing a session nobody holds is no
    takeover and records nothing; with a backend that cannot tell (no
    `held`), a steal is recorded.

    Raises:
        As `claim`.
    """
    if not steal:
        await backend.claim(session_id)
        return _nothing
    holds = None
    if audit_log(backend) is not None:
        holds = await probe_held(backend, [session_id])
    await backend.claim(session_id, steal=True)
    if holds is not None and not holds.get(session_id, False):
        return _nothing

    async def record() -> None:
        await note(
            backend,
            "takeover",
            session_id,
            "taken over (steal): the previous owner is fenced out",
            detail={"holder": "unknown" if holds is None else "live"},
        )

    return record


async def _nothing() -> None:
    """No takeover: nothing to record."""


async def read_trail(backend: object, scope: str | None) -> list[AuditRecord]:
    """Every record of a scope, oldest first (empty without the capability).

    Raises:
        SessionNotFoundError, InvalidSessionIdError: as `audit_records`.
    """
    trail = audit_log(backend)
    if trail is None:
        return []
    found: list[AuditRecord] = []
    while True:
        after = found[-1].number if found else 0
        page = await trail.audit_records(scope, after, _PAGE)
        found.extend(page)
        if len(page) < _PAGE:
            return found
