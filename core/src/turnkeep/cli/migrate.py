"""Copying sessions between backends: `migrate --from SPEC --to SPEC`.

Works on the persistence protocol only, so any pair of installed backends
works and events travel as their exact stored bytes (no decoding beyond the
envelope's seq, type and time). The source is only read. Each session is
copied in batches, each one atomic flush at the destination, so an
interrupted run (Ctrl-C, a kill, a crash) leaves whole batches behind and the
next run picks up where it stopped: sessions already complete are skipped, a
partial copy continues from the destination's next seq after its prefix is
checked byte for byte. A destination session that disagrees with the source
is never overwritten. At the end every copied session is loaded again on
both sides and its event count and SHA-256 compared.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Final, Literal

import attrs
import click
import msgspec
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from turnkeep.cli.checks import stored_ids
from turnkeep.cli.output import clean, clean_id, console, emit_json_line
from turnkeep.cli.runtime import (
    EXIT_PROBLEMS,
    StoreSpec,
    describe_error,
    execute,
    open_store,
    parse_spec,
)
from turnkeep.codec import EventRecord
from turnkeep.errors import TurnkeepError
from turnkeep.ids import validate_session_id
from turnkeep.packs import expand_all
from turnkeep.persistence import LoadedSession, SessionPersistence

__all__ = ["digest", "register"]

Action = Literal["copied", "resumed", "complete", "conflict", "failed"]

_DEFAULT_BATCH: Final = 500
_MAX_BATCH_BYTES: Final = 8 * 1024 * 1024


class _Envelope(msgspec.Struct):
    type: str
    seq: int
    time: int


_envelope: Final = msgspec.json.Decoder(_Envelope)


def digest(raws: Sequence[bytes]) -> str:
    """SHA-256 of a log's event lines (each stored event plus a newline)."""
    h = hashlib.sha256()
    for raw in raws:
        h.update(raw)
        h.update(b"\n")
    return h.hexdigest()


class Copied(msgspec.Struct, frozen=True, kw_only=True):
    """What happened to one session (one JSON line with `--json`)."""

    session_id: str
    action: Action
    events: int
    copied: int = 0
    error: str | None = None


class Checked(msgspec.Struct, frozen=True, kw_only=True):
    """The end-of-run comparison of one session."""

    session_id: str
    source_events: int
    destination_events: int
    sha256: str
    ok: bool


class _Report(msgspec.Struct, frozen=True, kw_only=True):
    verified: list[Checked]
    ok: bool


def _spec(_ctx: click.Context, _param: click.Parameter, value: str) -> StoreSpec:
    try:
        return parse_spec(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


@click.command(
    "migrate",
    epilog="\b\nExamples:\n"
    "  turnkeep migrate --from jsonl:~/.local/share/turnkeep/sessions \\\n"
    "                   --to sqlite:./sessions.db --all\n"
    "  turnkeep migrate --from sqlite:./s.db \\\n"
    "                   --to postgres:postgresql://db/app 01jx...\n"
    "\nRun the same command again after an interruption: it resumes.",
)
@click.option(
    "--from",
    "source",
    metavar="SPEC",
    required=True,
    callback=_spec,
    help="The store to copy from (never modified).",
)
@click.option(
    "--to",
    "target",
    metavar="SPEC",
    required=True,
    callback=_spec,
    help="The store to copy into.",
)
@click.argument("session_ids", metavar="[ID]...", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Copy every session of the source.")
@click.option(
    "--batch",
    type=click.IntRange(1),
    default=_DEFAULT_BATCH,
    show_default=True,
    help="Events per atomic write at the destination.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON line per session, then the verification.",
)
def migrate(
    source: StoreSpec,
    target: StoreSpec,
    session_ids: tuple[str, ...],
    every: bool,
    batch: int,
    as_json: bool,
) -> None:
    """Copy sessions to another backend, resumably, and verify the copies."""
    if every == bool(session_ids):
        raise click.UsageError("name session ids or pass --all (not both)")
    if source == target:
        raise click.UsageError("--from and --to name the same store")

    async def body() -> int:
        async with open_store(source) as src, open_store(target, create=True) as dst:
            ids = (
                [i async for i in stored_ids(src.backend)]
                if every
                else [validate_session_id(i) for i in session_ids]
            )
            copier = _Copier(src.backend, dst.backend, batch)
            results = await _run(copier, ids, as_json)
            checks = [
                await _check(src.backend, dst.backend, r.session_id)
                for r in results
                if r.action not in ("conflict", "failed")
            ]
        ok = all(c.ok for c in checks) and all(
            r.action not in ("conflict", "failed") for r in results
        )
        if as_json:
            emit_json_line(_Report(verified=checks, ok=ok))
        else:
            _print_checks(checks, source, target)
        return 0 if ok else EXIT_PROBLEMS

    execute(body)


async def _run(copier: _Copier, ids: Sequence[str], as_json: bool) -> list[Copied]:
    results: list[Copied] = []
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[events]} events"),
        console=console(err=True),
        disable=as_json,
        transient=False,
    )
    with progress:
        task = progress.add_task("migrating", total=len(ids), events=0)
        try:
            for session_id in ids:
                progress.update(
                    task, description=f"migrating {clean_id(session_id)[:40]}"
                )
                result = await copier.copy(session_id)
                results.append(result)
                progress.update(task, advance=1, events=copier.events_copied)
                if as_json:
                    emit_json_line(result)
                elif result.error is not None:
                    progress.console.print(
                        Text(f"{result.action}: {clean(result.error)}", "red")
                    )
        except (asyncio.CancelledError, KeyboardInterrupt):
            progress.console.print(
                "interrupted: run the same command again to resume the migration"
            )
            raise
    return results


@attrs.define
class _Copier:
    source: SessionPersistence
    target: SessionPersistence
    batch: int
    events_copied: int = 0

    async def copy(self, session_id: str) -> Copied:
        try:
            return await self._copy(session_id)
        except TurnkeepError as exc:
            return Copied(
                session_id=session_id,
                action="failed",
                events=0,
                error=describe_error(exc, session_id),
            )

    async def _copy(self, session_id: str) -> Copied:
        loaded = await self.source.load(session_id)
        # Copied one event per record: the destination may not store packs.
        raws = expand_all(loaded.events)
        target = self.target
        have = 0
        if await target.has(session_id):
            present = await target.load(session_id)
            problem = _disagreement(loaded, present)
            if problem is not None:
                return Copied(
                    session_id=session_id,
                    action="conflict",
                    events=len(raws),
                    error=f"{session_id!r} at the destination {problem}; it was left "
                    "as it is (delete it there to copy it again)",
                )
            have = len(expand_all(present.events))
            if have == len(raws):
                await self._summary(session_id, loaded, present)
                return Copied(session_id=session_id, action="complete", events=have)
            await target.claim(session_id)
        else:
            await target.create(loaded.meta)
        try:
            await self._append(session_id, raws, have)
            await target.update(session_id, loaded.meta.summary)
        finally:
            await target.release(session_id)
        return Copied(
            session_id=session_id,
            action="resumed" if have else "copied",
            events=len(raws),
            copied=len(raws) - have,
        )

    async def _append(self, session_id: str, raws: list[bytes], start: int) -> None:
        at = start
        while at < len(raws):
            records: list[EventRecord] = []
            size = 0
            while (
                at < len(raws)
                and len(records) < self.batch
                and (not records or size + len(raws[at]) <= _MAX_BATCH_BYTES)
            ):
                raw = raws[at]
                envelope = _envelope.decode(raw)
                records.append(EventRecord(at, envelope.type, envelope.time, raw))
                size += len(raw)
                at += 1
            await self.target.append(session_id, records)
            self.events_copied += len(records)

    async def _summary(
        self, session_id: str, loaded: LoadedSession, present: LoadedSession
    ) -> None:
        want, have = loaded.meta.summary, present.meta.summary
        if (want.title, want.first_prompt, want.status) != (
            have.title,
            have.first_prompt,
            have.status,
        ):
            # The run that copied the events stopped before the summary.
            await self.target.update(session_id, want)


def _disagreement(source: LoadedSession, present: LoadedSession) -> str | None:
    a, b = source.meta.header, present.meta.header
    if (a.created_at, a.cwd, a.parent) != (b.created_at, b.cwd, b.parent):
        return "is another session (its header differs)"
    present = _expanded(present)
    source = _expanded(source)
    have = len(present.events)
    if have > len(source.events):
        return f"has {have} events, more than the source's {len(source.events)}"
    if present.events != source.events[:have]:
        return "holds different events"
    return None


def _expanded(loaded: LoadedSession) -> LoadedSession:
    """`loaded` with one entry per event (packed records expanded)."""
    return msgspec.structs.replace(loaded, events=expand_all(loaded.events))


async def _check(
    source: SessionPersistence, target: SessionPersistence, session_id: str
) -> Checked:
    a = expand_all((await source.load(session_id)).events)
    b = expand_all((await target.load(session_id)).events)
    sha = digest(a)
    return Checked(
        session_id=session_id,
        source_events=len(a),
        destination_events=len(b),
        sha256=sha,
        ok=len(a) == len(b) and digest(b) == sha,
    )


def _print_checks(checks: list[Checked], source: StoreSpec, target: StoreSpec) -> None:
    out = console()
    table = Table(
        title=f"{source.describe()} -> {target.describe()}",
        box=None,
        header_style="bold",
    )
    for name in ("SESSION", "EVENTS", "SHA-256", "CHECK"):
        table.add_column(name, no_wrap=True)
    for check in checks:
        count = (
            str(check.source_events)
            if check.source_events == check.destination_events
            else f"{check.source_events} != {check.destination_events}"
        )
        table.add_row(
            Text(clean_id(check.session_id)),
            count,
            check.sha256[:16],
            Text("ok", "green") if check.ok else Text("MISMATCH", "bold red"),
        )
    out.print(table)
    bad = sum(1 for c in checks if not c.ok)
    out.print(
        f"{len(checks)} session(s) verified"
        + (f", {bad} mismatched" if bad else ": counts and checksums match")
    )


def register(group: click.Group) -> None:
    """Add this module's commands to the `turnkeep` group."""
    group.add_command(migrate)
