"""The hook specifications of turnkeep (pluggy project name `turnkeep`).

Plugins implement any of these with `@turnkeep.hookimpl`. An implementation
may accept any subset of a spec's arguments (pluggy matches them by name), so
adding an argument to a spec is not a breaking change; renaming or removing
one is. Hooks run last-registered first unless `tryfirst`/`trylast` says
otherwise; pluggy stops a call at the first implementation that raises.

The reference in `docs/hooks.md` is generated from this module, and a test
keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

import pluggy

from turnkeep.hookprotocols import PluginHost, RegisterEventType, RegisterPersistence

if TYPE_CHECKING:
    from turnkeep.effectdata import EffectOutcome
    from turnkeep.events import SessionEvent, ToolCall
    from turnkeep.manifestdata import Manifest
    from turnkeep.session import Session
    from turnkeep.transcripts import TranscriptEntry

__all__ = [
    "PROJECT_NAME",
    "PluginHost",
    "RegisterEventType",
    "RegisterPersistence",
    "hookimpl",
    "hookspec",
]

PROJECT_NAME = "turnkeep"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# -- session lifecycle -------------------------------------------------------


@hookspec
def session_created(session: Session) -> None:
    """A session became live: new, seeded, forked or resumed.

    Called:
        By the session store, synchronously, right after the session is
        registered as live and before `create`/`fork`/`resume` returns. Seed,
        forked and resumed events are already in `session.events`; they were
        not emitted through `session_event`. `session.origin` says which case
        this is.

    Calling convention:
        Synchronous notification; return values are ignored. An exception
        propagates to the caller of `create`/`fork`/`resume` after the session
        is already live.

    Args:
        session: the live session.

    Returns:
        Nothing.

    Contract:
        MUST NOT block or do I/O on the calling thread; schedule async work
        (a persistence plugin registers the session with its backend as a
        task that the next flush awaits). MUST NOT append events.

    Added in: 0.1.
    """


@hookspec
def session_event(session: Session, event: SessionEvent) -> None:
    """One event was appended to a session's log.

    Called:
        By `Session.append`, after the event is numbered and added to
        `session.events`. This is the hot path: it runs for every streamed
        chunk.

    Calling convention:
        Synchronous. An implementation that returns an awaitable is a contract
        violation and the host raises `HookContractError`. If an
        implementation raises `EventRejectedError`, the event is removed from
        the log again (and from the write-behind's buffer, if it was already
        snapshotted) and the error reaches the caller of `append`. A plugin
        that can reject events should be `tryfirst` and buffer nothing for a
        rejected event; an observer should not be `tryfirst`, or it may see an
        event that a later implementation rejects. Any other exception
        propagates with the event kept in the log.

    Args:
        session: the session.
        event: the appended event (frozen; its payload should be treated as
            immutable).

    Returns:
        Nothing.

    Contract:
        MUST NOT do I/O, and MUST NOT register or unregister plugins (the host
        calls this hook through a fast path that relies on it). A persistence
        plugin MUST snapshot (encode) the event here, so a later mutation of
        the live object cannot change what is stored, and a non-serialisable
        event fails at its source with its type named.

    Added in: 0.1.
    """


@hookspec
def redact_event(session: Session, event: SessionEvent) -> SessionEvent | None:
    """Return a redacted copy of an event about to be appended, or `None`.

    Called:
        By `Session.append`, before the event joins the log and before
        `session_event`, so the live log, every stored byte and every model
        history hold the redacted event only. Implementations run in hook
        order, each receiving the previous one's result.

    Calling convention:
        Synchronous. Not called at all (no cost) while no plugin implements
        it. An exception rejects the event: `append` raises `RedactionError`
        and nothing is appended or stored.

    Args:
        session: the session.
        event: the event (already numbered), possibly redacted by an earlier
            implementation.

    Returns:
        A replacement event of the same class, seq and time, or `None` to
        keep `event` as it is.

    Contract:
        MUST be pure and fast; MUST NOT do I/O; MUST NOT change the event's
        class, seq or time. Implemented by `turnkeep.redaction.SecretRedactor`
        (on by default; `redact_secrets = false` turns it off).

    Added in: 0.1.
    """


@hookspec
def redact_text(text: str) -> str | None:
    """Return a redacted copy of metadata text (titles, first prompts), or `None`.

    Called:
        By `Session.set_summary` for each text field before it is kept (and
        later stored), in hook order, each implementation receiving the
        previous one's result.

    Calling convention:
        Synchronous. An exception refuses the summary change with
        `RedactionError`; nothing is changed.

    Args:
        text: the text.

    Returns:
        The redacted text, or `None` to keep it.

    Contract:
        MUST be pure and fast; MUST NOT do I/O.

    Added in: 0.1.
    """


@hookspec
def session_flush(session: Session) -> Awaitable[None] | None:
    """Make everything appended to `session` so far durable.

    Called:
        By `Session.flush` (the agent loop flushes at every `turn/end` and
        before an `unsafe` tool runs), by `SessionStore.close`, and by the
        host while a plugin is being disposed or reloaded.

    Calling convention:
        Implementations may be `async def` or return an awaitable; the host
        awaits all of them together. Their errors surface as one `FlushError`
        (the first cause chained; several are grouped).

    Args:
        session: the session to make durable.

    Returns:
        `None` or an awaitable resolving to `None`.

    Contract:
        When the host's await returns without error, every event appended
        before the call is durable. On failure the unsaved events MUST stay
        buffered, in order, for the next flush to retry. MUST be cheap when
        nothing is buffered.

    Added in: 0.1.
    """


@hookspec
def session_committed(session: Session, first_seq: int, last_seq: int) -> None:
    """Events `first_seq`..`last_seq` of a session became durable.

    Called:
        By the host after a flush, for the events that flush made durable
        (a flush that failed part-way reports the part that landed). Only
        with a persistence backend: without one nothing becomes durable.
        Events loaded from storage are durable already and are not reported.

    Calling convention:
        Synchronous, in seq order, once per flush per process: ranges of one
        session follow each other without gap or overlap, also across plugin
        reloads. An exception is logged (logger `turnkeep`) and does not
        reach the caller of the flush: the events are durable all the same,
        and implementations after the failing one are not called for that
        range.

    Args:
        session: the session; `session.events[first_seq:last_seq + 1]` are
            the committed events.
        first_seq: the first committed seq.
        last_seq: the last committed seq.

    Returns:
        Nothing.

    Contract:
        MUST NOT do I/O on the event loop or block; hand the range to a task
        or a queue. A consumer that must see each event exactly once (a
        projection, a stream to another process) dedups by seq: a new process
        reports what it commits, not what an earlier process committed, and
        a seq it never saw committed may be written again after a crash.

    Added in: 0.2.
    """


@hookspec
def session_closed(session: Session) -> Awaitable[None] | None:
    """A session was closed: flushed, and no longer live.

    Called:
        By `SessionStore.close`, after a successful flush and after the
        session left the live set.

    Calling convention:
        May return an awaitable; the host awaits all of them. Errors
        propagate to the caller of `close`.

    Args:
        session: the closed session (its log stays readable).

    Returns:
        `None` or an awaitable.

    Contract:
        A persistence plugin releases the session's writer role here.

    Added in: 0.1.
    """


# -- effects and outside state ---------------------------------------------------


@hookspec
def reconcile_effect(
    session: Session, call: ToolCall
) -> EffectOutcome | Awaitable[EffectOutcome | None] | None:
    """Say whether an interrupted unsafe call took effect, by looking at the world.

    Called:
        By the agent loop's recovery (`AgentLoop.resume`, `recover`, the
        crash sweep `recover_interrupted`), once per unsafe call a crash
        left without a result, before anything about that turn is
        appended.

    Calling convention:
        Every implementation is asked, in hook order; each may be `async
        def` or return an awaitable. Answer with `turnkeep.effects.done(result)`,
        `not_done()` or `unknown()`, or `None` when the call is not yours.
        `None` and `unknown` abstain; the first definite answer in hook
        order is recorded, unless another says the opposite, in which case
        the outcome stays unknown (`turnkeep.effects.decide`). An exception,
        or a value that is none of these, fails recovery with
        `EffectReconcileError`; nothing is appended.

    Args:
        session: the session being recovered (its log ends inside the turn).
        call: the `tool/call` event: `call.data.call_id` (the idempotency
            key the tool was given), `name`, `arguments`.

    Returns:
        An outcome, `None`, or an awaitable of either.

    Contract:
        MUST NOT append events or run the tool again; only look. Answer
        `done` or `not_done` only when sure: `done` records `result` as the
        call's result, `not_done` tells the model the call did not happen
        (it may call again); `unknown` keeps the call *interrupted, outcome
        unknown*. An `effect/resolved` event names the plugin that settled it.

    Added in: 0.2.
    """


@hookspec
def turn_manifest(session: Session) -> Manifest | Awaitable[Manifest | None] | None:
    """Name the versions of the outside state a session's turns act on.

    Called:
        By the agent loop when it ends a turn (completed or not, recovery's
        too), for that turn's `turn/end`; and by `AgentLoop.resume` and
        `open`, before recovery, to compare the world with the session's
        last committed manifest (`turnkeep.manifests`).

    Calling convention:
        Every implementation is asked, in hook order; each may be `async
        def` or return an awaitable. The answers are merged by name; two
        implementations that give one name different versions are an error.
        `None` (or `{}`) names nothing. An exception or a value that is not
        a mapping of text to text is `ManifestHookError`: on resume it
        refuses the resume (nothing appended); at a turn's end it is logged
        and the manifest names the gap, not the names (see `gather`).

    Args:
        session: the session whose turn ends or that is being resumed.

    Returns:
        A mapping of name to version (both text), `None`, or an awaitable
        of either.

    Contract:
        MUST only look: no events appended, nothing changed. A version MUST
        change when its state changes and SHOULD stay the same text when it
        does not (a content hash, a commit id, a row version). SHOULD be
        cheap on unchanged state (it runs at every turn's end) and run
        blocking I/O off the event loop (`asyncio.to_thread`). Names and
        versions are stored verbatim, never redacted: no secrets in them.

    Added in: 0.2.
    """


# -- capabilities --------------------------------------------------------------


@hookspec
def register_persistence(register: RegisterPersistence) -> None:
    """Contribute named persistence backends.

    Called:
        Once per plugin when the host starts (and for a plugin registered or
        reloaded later, when it is added).

    Calling convention:
        Synchronous. Call `register(name, factory, config_type=None)` once
        per backend: `factory(config)` returns a `SessionPersistence`;
        `config_type`, an attrs class, is what the host structures the
        backend's configuration table (`[backends.<name>]`) into, with
        unknown keys refused; a `max_event_bytes` field it declares receives
        the host's `max_event_bytes` unless the table sets it. Registering a
        name twice raises `PersistenceConflictError`.

    Args:
        register: the registration callback.

    Returns:
        Nothing.

    Contract:
        MUST only register; MUST NOT open files or connections (the host
        activates at most one backend, chosen by configuration).

    Added in: 0.1.
    """


@hookspec
def register_event_types(register: RegisterEventType) -> None:
    """Contribute event types beyond the loop's vocabulary.

    Called:
        When the host starts, before any session is created.

    Calling convention:
        Synchronous. Call `register(cls)` with a `SessionEvent` subclass that
        has a tag (or one made by `define_event_type`).

    Args:
        register: the registration callback.

    Returns:
        Nothing.

    Contract:
        A tag MUST be registered by one plugin only. Readers that lack a type
        refuse a log containing it unless the type is ignorable.

    Added in: 0.1.
    """


@hookspec(firstresult=True)
def render_transcript(
    events: Sequence[SessionEvent],
) -> Sequence[TranscriptEntry] | None:
    """Say what history a stored log means, for `turnkeep show`.

    Called:
        By `turnkeep show` with a session's decoded log, before it renders
        the loop's vocabulary itself.

    Calling convention:
        Synchronous; the first implementation that returns a list wins.

    Args:
        events: the session's decoded log, in seq order.

    Returns:
        The history as `TranscriptEntry`s (oldest first), or `None` when the
        log is not of this plugin's types.

    Contract:
        Read only; answer `None` for a log the plugin does not own.

    Added in: 0.2.
    """


# -- plugin lifecycle ----------------------------------------------------------


@hookspec(historic=True)
def plugin_apply(host: PluginHost) -> None:
    """Start a plugin: the host is ready and sessions may already be live.

    Called:
        Once when the host starts; replayed to every plugin registered later
        (including the fresh instance after a hot reload).

    Calling convention:
        Historic and synchronous. Schedule async start-up work as tasks.

    Args:
        host: the host (its `sessions` store lists the live sessions).

    Returns:
        Nothing.

    Contract:
        Adopt the sessions that are already live without re-writing what is
        already durable.

    Added in: 0.1.
    """


@hookspec
def plugin_dispose(host: PluginHost) -> Awaitable[None] | None:
    """Stop a plugin: drain its buffers and close its handles.

    Called:
        By the host for one plugin at a time: when the plugin is removed or
        reloaded, and for every plugin (newest first) when the host closes.

    Calling convention:
        May return an awaitable; the host awaits it before unregistering the
        plugin.

    Args:
        host: the host.

    Returns:
        `None` or an awaitable.

    Contract:
        MUST reach quiescence before returning: buffers drained (or handed
        over), writes awaited, handles closed. Events that arrive meanwhile
        must not be lost.

    Added in: 0.1.
    """


def _spec_names() -> tuple[str, ...]:
    return tuple(
        name
        for name, value in globals().items()
        if callable(value) and hasattr(value, f"{PROJECT_NAME}_spec")
    )


HOOK_NAMES: tuple[str, ...] = _spec_names()
"""Names of every hook specified here."""
