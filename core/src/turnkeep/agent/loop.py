"""The agent loop: one turn at a time, each durable before the next begins.

`AgentLoop` owns turn admission and the life of a turn around the steps that
`turnkeep.agent.steps` runs:

- admission: one turn (or recovery) at a time per session, refused with
  `TurnInProgressError` before anything changes; then the durability gate
  (`turnkeep.agent.gate`: a new id already stored is refused, and the
  previous turn must be durable);
- a log that ends inside a turn (a crash) is recovered before a new turn;
- every turn ends with `turn/end` and a flush; `cancel` ends a running turn
  with status `cancelled`;
- `recover` answers the calls a crash left without a result (unsafe ones as
  the `reconcile_effect` hook settles them, else *interrupted, outcome
  unknown*; safe ones by running them again), then closes or continues it.

Each turn runs in its own task, so `cancel` can reach it from anywhere and a
streaming consumer (`stream_turn`) only watches it. A loop drives one
session (`create`, `resume`, `open`); the 0.1 forms that name the session
(`run_turn(session_id, text)`) warn, and go in 0.3.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, overload

import attrs

from turnkeep.agent.audited import run_job
from turnkeep.agent.budgets import DEFAULT_MAX_STEPS, TurnBudget, output_reserve
from turnkeep.agent.context import (
    RECORDED,
    ContextMode,
    ContextPlan,
    Recorded,
    adopt_context,
    check_setup,
)
from turnkeep.agent.deprecations import new_session, session_and_text, session_arg
from turnkeep.agent.effects import resolve_in_loop
from turnkeep.agent.gate import DurabilityGate
from turnkeep.agent.manifest import DriftPolicy, check_and_recover
from turnkeep.agent.models import Model
from turnkeep.agent.recovery import RecoveryReport
from turnkeep.agent.steps import TurnRunner
from turnkeep.agent.streams import TurnStream, open_stream
from turnkeep.agent.tools import Tool
from turnkeep.agent.turns import (
    NewTurn,
    Outcome,
    RecoverTurn,
    Running,
    TurnResult,
    request_cancel,
    wait_outcome,
)
from turnkeep.agent.usage import UsageMeter
from turnkeep.agent.watchdog import Watch
from turnkeep.errors import TurnInProgressError
from turnkeep.events import RunContextData, SessionEvent
from turnkeep.host import Host
from turnkeep.redaction import builtin_redactor
from turnkeep.session import Session
from turnkeep.store import CloseReport

__all__ = ["DEFAULT_MAX_STEPS", "RECORDED", "AgentLoop", "TurnResult", "TurnStream"]


@attrs.define(eq=False)
class AgentLoop:
    """Runs an agent's turns over durable sessions.

    Build one with `AgentLoop.create` (a new session) or `await
    AgentLoop.resume` (a stored session). The agent id names the agent; the
    session ids name conversations; they are never derived from each other.

    Attributes:
        agent_id: the agent's id.
        host: the host whose sessions the loop drives.
        model: the model.
        tools: the tools, by name.
        session_id: the session this loop was created or resumed with.
        resumed_from: the stored session `resume` loaded (else `None`).
        instructions: standing instructions passed to the model.
        max_steps: model calls allowed per turn.
        max_tokens: model output tokens allowed per turn (`None`: no limit).
        deadline: seconds a turn may run (`None`: no limit).
        recovery: what `resume` found and did (else `None`).
        on_event: called with every event a turn or recovery of this loop
            appends, as it is appended (for progress output).
        watch: how a running turn is watched (`turnkeep.agent.watchdog`).
    """

    agent_id: str
    host: Host
    model: Model
    tools: Mapping[str, Tool]
    session_id: str
    resumed_from: str | None = None
    instructions: str | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    max_tokens: int | None = None
    deadline: float | None = None
    recovery: RecoveryReport | None = None
    on_event: Callable[[SessionEvent], None] | None = None
    watch: Watch = attrs.field(factory=Watch)
    _plan: ContextPlan = attrs.field(init=False, factory=ContextPlan, repr=False)
    _running: dict[str, Running] = attrs.field(
        init=False, factory=dict[str, Running], repr=False
    )
    _gate: DurabilityGate = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._gate = DurabilityGate(self.host)

    # -- construction ------------------------------------------------------

    @classmethod
    def create(
        cls,
        agent_id: str,
        *,
        host: Host,
        model: Model,
        tools: Iterable[Tool] = (),
        session_id: str | None = None,
        instructions: str | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        max_tokens: int | None = None,
        deadline: float | None = None,
        on_event: Callable[[SessionEvent], None] | None = None,
        watch: Watch | None = None,
    ) -> AgentLoop:
        """Create a loop with a new live session (synchronous).

        Args:
            agent_id: the agent's id (any non-empty text).
            host: a started host.
            model: the model.
            tools: the tools the model may call.
            session_id: the new session's id (generated when omitted).
            instructions: standing instructions for the model.
            max_steps: model calls allowed per turn.
            max_tokens: model output tokens allowed per turn (the model must
                declare its `max_tokens` setting; `turnkeep.agent.budgets`).
            deadline: seconds a turn may run before no further call starts.
            on_event: called with every event the loop's turns append.
            watch: how a running turn is watched (default: not at all).

        Raises:
            ConfigurationError: the agent id, model, tools or budgets are
                invalid.
            SessionExistsError: a live session already has `session_id`.
        """
        indexed = check_setup(agent_id, model, tools)
        loop = cls(agent_id, host, model, indexed, "", on_event=on_event)
        loop.instructions, loop.max_steps = instructions, max_steps
        loop.max_tokens, loop.deadline = max_tokens, deadline
        loop.watch = watch or Watch()
        loop.current_context()  # checks the budgets before a session exists
        loop.session_id = host.sessions.create(session_id).id
        return loop

    @classmethod
    async def resume(
        cls,
        agent_id: str,
        session_id: str,
        *,
        host: Host,
        model: Model,
        tools: Iterable[Tool] = (),
        continue_turn: bool = False,
        steal: bool = False,
        instructions: str | Recorded | None = RECORDED,
        max_steps: int | Recorded = RECORDED,
        max_tokens: int | Recorded | None = RECORDED,
        deadline: float | Recorded | None = RECORDED,
        context: ContextMode = "check",
        drift: DriftPolicy = "refuse",
        on_event: Callable[[SessionEvent], None] | None = None,
        watch: Watch | None = None,
    ) -> AgentLoop:
        """Load a stored session, recover it, and return a loop driving it.

        Turn numbering continues after the stored log's last turn. The run
        context the log recorded is restored first: instructions and budgets
        left at `RECORDED` take their recorded values, and a context that
        differs from the recorded one (`turnkeep.agent.context`) is refused
        unless `context="override"`. If the log ends inside a turn, `recover`
        runs next (see there); its report is in `loop.recovery`.

        Args:
            agent_id: the agent's id.
            session_id: the stored session to load.
            host: a started host with a persistence backend.
            model: the model.
            tools: the tools (recovery re-runs only safe ones among them).
            continue_turn: continue a cut-off turn by asking the model again,
                instead of closing it as interrupted.
            steal: take the session over from another owner (fencing it).
            instructions: as `create`; `RECORDED` takes the recorded one.
            max_steps: as `create`, or `RECORDED`.
            max_tokens: as `create`, or `RECORDED`.
            deadline: as `create`, or `RECORDED`.
            context: `check` refuses a context that differs from the recorded
                one; `override` runs with it, recording the change.
            drift: `refuse` a world that differs from the last committed manifest
                (`turnkeep.agent.manifest`), or `record` it (`run/drift`) and go on.
            on_event: called with every event the loop appends (recovery's too).
            watch: as `create` (it also watches recovery).

        Raises:
            ContextMismatchError: the context differs and `context` is
                `check`; nothing was appended and the session was let go.
            ManifestDriftError: the world differs and `drift` is `refuse` (or
                `ManifestHookError`); nothing was appended, the session let go.
            PersistenceNotConfiguredError: the host has no backend.
            SessionNotFoundError: nothing is stored under `session_id`.
            SessionLockedError: another process drives the session.
            EffectReconcileError: as `recover`; the session was let go.
            FlushError: recovery's results could not be made durable (they
                stay in memory; the next turn retries).
        """
        host.require_persistence()
        check_setup(agent_id, model, tools)
        session = await host.sessions.resume(session_id, steal=steal)
        given = (instructions, max_steps, max_tokens, deadline)
        loop = await cls._adopt(
            session, agent_id, host, model, tools, on_event, given, context
        )
        loop.watch = watch or Watch()
        loop.resumed_from = session_id
        loop.recovery = await check_and_recover(loop, continue_turn, drift)
        return loop

    @classmethod
    async def open(
        cls,
        agent_id: str,
        session_id: str,
        *,
        host: Host,
        model: Model,
        tools: Iterable[Tool] = (),
        continue_turn: bool = False,
        steal: bool = False,
        instructions: str | Recorded | None = RECORDED,
        max_steps: int | Recorded = RECORDED,
        max_tokens: int | Recorded | None = RECORDED,
        deadline: float | Recorded | None = RECORDED,
        context: ContextMode = "check",
        drift: DriftPolicy = "refuse",
        on_event: Callable[[SessionEvent], None] | None = None,
        watch: Watch | None = None,
    ) -> AgentLoop:
        """Continue session `session_id` if it is stored, else start it.

        Race-free across processes: of two processes opening one new id,
        one creates it and the other resumes it (or is refused while the
        first drives it). A stored session is checked and recovered as by
        `resume`; a new one takes the defaults of `create` for `RECORDED`.

        Raises:
            PersistenceNotConfiguredError: the host has no backend.
            SessionLockedError: another process drives the session.
            ConfigurationError, ContextMismatchError, ManifestDriftError,
                FlushError: as `create` and `resume`.
        """
        check_setup(agent_id, model, tools)
        session = await host.sessions.open(session_id, steal=steal)
        given = (instructions, max_steps, max_tokens, deadline)
        loop = await cls._adopt(
            session, agent_id, host, model, tools, on_event, given, context
        )
        loop.watch = watch or Watch()
        if session.origin == "resumed":
            loop.resumed_from = session.id
            loop.recovery = await check_and_recover(loop, continue_turn, drift)
        return loop

    @classmethod
    async def _adopt(
        cls,
        session: Session,
        agent_id: str,
        host: Host,
        model: Model,
        tools: Iterable[Tool],
        on_event: Callable[[SessionEvent], None] | None,
        given: tuple[Any, Any, Any, Any],
        mode: ContextMode,
    ) -> AgentLoop:
        """A loop over a session just loaded, with the recorded context restored."""
        plan, indexed = ContextPlan(), check_setup(agent_id, model, tools)
        settings = await adopt_context(session, host, plan, model, indexed, mode, given)
        loop = cls(agent_id, host, model, indexed, session.id, on_event=on_event)
        loop.instructions, loop.max_steps, loop.max_tokens, loop.deadline = settings
        loop._plan = plan
        return loop

    def current_context(self) -> RunContextData:
        """The run context of the next turn (`ConfigurationError`: bad budgets)."""
        settings = (self.instructions, self.max_steps, self.max_tokens, self.deadline)
        return self._plan.current(settings, self.model, self.tools)

    new_session = new_session  # deprecated: `AgentLoop.create` per conversation

    # -- turns -------------------------------------------------------------

    @overload
    async def run_turn(self, text: str, /) -> TurnResult: ...

    @overload
    async def run_turn(self, session_id: str, text: str, /) -> TurnResult: ...

    async def run_turn(self, *args: str) -> TurnResult:
        """Run one turn: the user's message, model calls and tools, until done.

        `run_turn(text)`; the form `run_turn(session_id, text)` is deprecated.

        Returns:
            How the turn ended (`completed`, `failed` when the model failed
            or a tool could not be made durable before it ran, `cancelled`).

        Raises:
            TurnInProgressError: a turn is already running on the session;
                nothing was changed.
            TurnNotDurableError: the previous turn is still not durable after
                one more flush; the turn did not start.
            FlushError: the turn ended but its final flush failed; the next
                turn retries it. `FlushOutcomeUnknownError` (also at start):
                it may be stored; see docs/agent-loop.md.
            SessionNotFoundError: the session is not live.
        """
        session_id, text = session_and_text("run_turn", args, self.session_id)
        running = self._start(session_id, NewTurn(text))
        outcome = await wait_outcome(running)
        assert outcome.result is not None  # noqa: S101 - a new turn always has one
        return outcome.result

    @overload
    def stream_turn(self, text: str, /, *, committed: bool = False) -> TurnStream: ...

    @overload
    def stream_turn(
        self, session_id: str, text: str, /, *, committed: bool = False
    ) -> TurnStream: ...

    def stream_turn(self, *args: str, committed: bool = False) -> TurnStream:
        """Start a turn and return an async iterator over its events.

        Every event the turn appends is yielded, in seq order, ending with its
        `turn/end`: as it is appended, or with `committed=True` only once it
        is durable (`turnkeep.agent.streams`), so no crash can reuse a seq
        the consumer saw. `await stream.result()` gives the `TurnResult`. An
        admission or durability error is raised by the iteration (and by
        `result`); a committed stream raises it after the durable events.
        Abandoning the iteration does not stop the turn; use `cancel`.

        Raises:
            TurnInProgressError: at once, if a turn is running on the session.
        """
        session_id, text = session_and_text("stream_turn", args, self.session_id)
        running = self._start(session_id, NewTurn(text))
        return open_stream(running, committed=committed, unsaved=self.host.unsaved)

    async def recover(
        self, session_id: str | None = None, *, continue_turn: bool = False
    ) -> RecoveryReport:
        """Finish a turn the log ends inside (after a crash); else do nothing.

        Each call of that turn without a result is answered. An unsafe call
        (or one whose tool is gone or no longer safe) is never run again: the
        `reconcile_effect` hook may settle it (`turnkeep.agent.effects`),
        else it gets an `interrupted` result (outcome unknown); these are
        flushed first. A safe call is run again. Then the turn is closed
        (status `interrupted`), or continued with `continue_turn`.

        Raises:
            TurnInProgressError: a turn is running on the session.
            EffectReconcileError: a reconciler failed; nothing was appended.
            TurnNotDurableError: unsaved events still cannot be flushed.
            FlushError: the interrupted results or the turn's end could not
                be made durable (they stay in memory; the next turn retries).
        """
        running = self._start(
            session_arg("recover", session_id, self.session_id),
            RecoverTurn(continue_turn),
        )
        outcome = await wait_outcome(running)
        assert outcome.report is not None  # noqa: S101 - recovery always reports
        return outcome.report

    async def cancel(self, session_id: str | None = None) -> TurnResult | None:
        """End the running turn with `turn/end` status `cancelled`.

        A model call or tool in flight is cancelled (a tool cancelled while it
        ran gets an `interrupted` result); a flush in progress is let finish,
        so what was durable stays durable and the turn stops right after it.

        Returns:
            The cancelled turn's result, or `None` if no turn was running.
        """
        running = self._running.get(session_arg("cancel", session_id, self.session_id))
        if running is None or running.task is None:
            return None
        request_cancel(running)
        outcome: Outcome = await asyncio.shield(running.task)
        return outcome.result

    resolve = resolve_in_loop  # settles a call of unknown outcome (see there)

    def running(self, session_id: str | None = None) -> bool:
        """Whether a turn (or recovery) is running on the session."""
        return session_arg("running", session_id, self.session_id) in self._running

    async def close(self) -> CloseReport | None:
        """Cancel running turns, then close the loop's session (flushing it).

        Never raises for a session it cannot store: a loop's owner must be
        able to end it (R18), on a full disk too. A session whose flush
        fails for another reason than a takeover is abandoned
        (`SessionStore.close_or_abandon`), and the report says what stayed
        unsaved and why. To keep it live and retry instead, call
        `host.sessions.close(session_id)` first: it raises and keeps it.

        Returns:
            What was stored (see `SessionStore.close`; `outcome` `saved`,
            `fenced` or `abandoned`), or `None` if the session was not live.
        """
        for running in list(self._running.values()):
            if running.task is not None:
                request_cancel(running)
                await asyncio.shield(running.task)
        if any(s.id == self.session_id for s in self.host.sessions.list()):
            return await self.host.sessions.close_or_abandon(self.session_id)
        return None

    # -- internals ---------------------------------------------------------

    def _start(self, session_id: str, job: NewTurn | RecoverTurn) -> Running:
        session = self.host.sessions.get(session_id)
        # The marker lives on the session, so two loops driving one live
        # session are held to one turn at a time as well.
        if session_id in self._running or session.turn_holder is not None:
            raise TurnInProgressError(
                f"session {session_id!r} is already running a turn; wait for it "
                "to end or cancel it (nothing was changed)"
            )
        running = Running(session=session, redactor=builtin_redactor(self.host.pm))
        session.turn_holder = running
        if self.on_event is not None:
            running.sinks.append(self.on_event)
        self._running[session_id] = running
        running.task = asyncio.get_running_loop().create_task(
            self._drive(running, job), name=f"turnkeep turn {session_id!r}"
        )
        return running

    async def _drive(self, running: Running, job: NewTurn | RecoverTurn) -> Outcome:
        try:
            await self._gate.admit(running)
            runner = self._runner(running)
            return await run_job(self.host, runner, running.session, job)
        finally:
            if self._running.get(running.session.id) is running:
                del self._running[running.session.id]
            if running.session.turn_holder is running:
                running.session.turn_holder = None

    def _runner(self, running: Running) -> TurnRunner:
        context = self.current_context()
        return TurnRunner(
            agent_id=self.agent_id,
            model=self.model,
            tools=self.tools,
            instructions=self.instructions,
            running=running,
            flush=functools.partial(self._flush, running),
            budget=TurnBudget(
                context.budgets, reserve=output_reserve(context.model, context.budgets)
            ),
            context=context,
            plan=self._plan,
            meter=UsageMeter(self.host.codec.stored_size),
            watch=self.watch,
            reconcile=self.host.reconcile_effect,
            manifest=self.host.turn_manifest,
            on_unknown=self.host.config.agent.on_unknown,
        )

    async def _flush(self, running: Running, session: Session) -> None:
        try:
            await self._gate.flush(session)
        finally:
            running.flushed()  # also after a failure: part of it may have landed
