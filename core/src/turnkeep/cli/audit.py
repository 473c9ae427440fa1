"""`turnkeep audit`: list the audit trail of a session, or of the store.

Reads what the processes that acted recorded (`turnkeep.audit`): takeovers,
refused writes, repairs and quarantines, recoveries, refused turns,
resolutions, and, in the store's log, deletions. It records nothing itself.
A backend without the capability is said to keep no trail (exit 1).
"""

from __future__ import annotations

import click

from turnkeep.audit import AuditRecord, has_audit_log
from turnkeep.auditing import read_trail
from turnkeep.cli.output import clean, clean_id, emit_json, format_time
from turnkeep.cli.runtime import about, common_options, execute, fail, open_store
from turnkeep.errors import SessionNotFoundError
from turnkeep.ids import validate_session_id

__all__ = ["audit", "register"]


@click.command(
    "audit",
    epilog="\b\nExamples:\n"
    "  turnkeep audit             # the store's log: deletions\n"
    "  turnkeep audit 01jx...     # one session's records\n"
    "  turnkeep audit 01jx... --json",
)
@click.argument("session_id", metavar="[ID]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@common_options
def audit(session_id: str | None, as_json: bool) -> None:
    """List who took over, repaired, recovered, refused or deleted what.

    With ID: that session's records, then what the store's log says about
    it (its deletion, for a session deleted and since stored again). A
    deleted session's records went with it; the store's log keeps its id,
    the time and the reason. Without ID: the store's log.
    """

    async def body() -> int:
        async with open_store() as store:
            backend = store.backend
            if not has_audit_log(backend):
                fail(f"the {store.name!r} backend keeps no audit trail")
            if session_id is None:
                records = await read_trail(backend, None)
            else:
                with about(session_id):
                    wanted = validate_session_id(session_id)
                    try:
                        records = await read_trail(backend, wanted)
                    except SessionNotFoundError:
                        records = []
                    stored = bool(records) or await backend.has(wanted)
                    records += [
                        r
                        for r in await read_trail(backend, None)
                        if r.session_id == wanted
                    ]
                    if not records and not stored:
                        raise SessionNotFoundError(
                            f"no stored session {wanted!r} and no record of it"
                        )
        if as_json:
            emit_json(records)
        elif not records:
            click.echo("no audit records")
        for record in [] if as_json else records:
            click.echo(_line(record, whole_store=session_id is None))
        return 0

    execute(body)


def _line(record: AuditRecord, *, whole_store: bool) -> str:
    where = f"{clean(record.host)} pid {record.pid}"
    about_ = (
        f" {clean_id(record.session_id)}" if whole_store and record.session_id else ""
    )
    detail = " ".join(f"{clean(k)}={clean(str(v))}" for k, v in record.detail.items())
    return (
        f"{format_time(record.at)}  {clean(record.action):<12}{about_}  {where}: "
        f"{clean(record.reason)}" + (f"  [{detail}]" if detail else "")
    )


def register(group: click.Group) -> None:
    """Add this module's commands to the `turnkeep` group."""
    group.add_command(audit)
