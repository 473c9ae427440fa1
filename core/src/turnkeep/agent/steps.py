"""Inside one turn: the order of its events and its durability points.

`TurnRunner` is what `AgentLoop` runs for one admitted turn (or recovery):

    turn/start, user/message,
    [run/instructions] run/context, when the run context changed,
    then per model call: assistant/chunk..., assistant/message, and per
    requested tool: tool/call, [turn/checkpoint + flush if unsafe], the tool,
    tool/result;
    turn/end + flush.

An `unsafe` tool runs only after its `tool/call` is durable (R8); if that
flush fails it does not run, its call gets an `error` result, and the turn
ends `failed`. Every call gets exactly one result, whatever happens, so the
log pairs every call with one result except across a crash, which
recovery repairs (asking `turnkeep.agent.effects` about unsafe calls).

Budgets (`turnkeep.agent.budgets`) are asked before each model or tool
call; the watchdog (`turnkeep.agent.watchdog`) guards each one; the run
context is built by `turnkeep.agent.context`. Records and texts for calls
that did not finish live in `turnkeep.agent.turns`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, Literal, TypeVar

import attrs

from turnkeep.agent import tools as _tools
from turnkeep.agent.budgets import BudgetExhausted, TurnBudget
from turnkeep.agent.context import ContextPlan
from turnkeep.agent.effects import Reconciler, refuse_if_blocked, settle_unknown
from turnkeep.agent.history import history_of
from turnkeep.agent.manifest import reconcile_warm
from turnkeep.agent.models import Model, ModelRequest, ModelToolCall, TextDelta, Usage
from turnkeep.agent.partial import ChunkWriter, ReplyText, tail_text
from turnkeep.agent.recovery import RecoveryReport, last_turn_number, open_turn
from turnkeep.agent.tools import Tool, ToolContext, may_rerun, replay_policy, tool_spec
from turnkeep.agent.turns import (
    CANCELLED_SAFE_OUTPUT,
    CANCELLED_UNSAFE_OUTPUT,
    NOT_DURABLE_OUTPUT,
    NOT_RUN_CANCELLED_OUTPUT,
    SUMMARY_STATUS,
    NotDurable,
    Running,
    StepCancelled,
    TurnResult,
    call_id_for,
    end_data,
    failure_of,
    name_session,
    uncancel,
)
from turnkeep.agent.usage import UsageMeter
from turnkeep.agent.watchdog import Guard, TimedOut, Watch
from turnkeep.errors import EventRejectedError, FlushError, ModelError, ToolError
from turnkeep.events import (
    AssistantMessageData,
    Manifest,
    RunContextData,
    SessionEvent,
    ToolCall,
    ToolCallData,
    ToolResult,
    ToolResultData,
    ToolResultStatus,
    TurnCheckpoint,
    TurnCheckpointData,
    TurnEnd,
    TurnFailure,
    TurnStart,
    TurnStartData,
    TurnStatus,
    UserMessage,
    UserMessageData,
)
from turnkeep.session import Session

__all__ = ["TurnRunner"]

E = TypeVar("E", bound=SessionEvent)

_CRASHED: Final = "the process stopped during this turn; recovered after restart"


@attrs.define(eq=False)
class TurnRunner:
    """Runs one admitted turn, or the recovery of a cut-off one."""

    agent_id: str
    model: Model
    tools: Mapping[str, Tool]
    instructions: str | None
    running: Running
    flush: Callable[[Session], Awaitable[None]]
    budget: TurnBudget
    context: RunContextData
    plan: ContextPlan
    meter: UsageMeter
    reconcile: Reconciler
    manifest: Callable[[Session], Awaitable[Manifest | None]]
    on_unknown: Literal["report", "block"] = "report"  # tools that do not say
    watch: Watch = attrs.field(factory=Watch)
    guard: Guard = attrs.field(
        init=False, default=attrs.Factory(lambda r: Guard(r.watch.stall_seconds), True)
    )

    @property
    def session(self) -> Session:
        """The session."""
        return self.running.session

    # -- entry points --------------------------------------------------------

    async def new_turn(self, text: str) -> TurnResult:
        """Start the next turn with the user's message and run it to its end."""
        session = self.session
        refuse_if_blocked(session)  # before anything is appended or asked
        await reconcile_warm(session, self.manifest, self._emit)
        turn = last_turn_number(session.events) + 1
        self.meter.start()
        start = self._emit(TurnStart, TurnStartData(turn=turn))
        session.set_summary(status="active")
        return await self._finish(
            turn, start.seq, user_text=text, rerun=(), ask_model=True
        )

    async def recover(
        self, *, continue_turn: bool
    ) -> tuple[RecoveryReport, TurnResult | None]:
        """Answer the open turn's unanswered calls, then close or continue it."""
        session = self.session
        found = open_turn(session.events)
        if found is None:
            return RecoveryReport(session_id=session.id), None
        self.meter.start()
        names = {c.data.call_id: c.data.name for c in found.unanswered}
        cut = tail_text(session.events)
        if cut is not None:  # a model call the crash cut off: keep its text
            self._emit(SessionEvent, AssistantMessageData(text=cut, partial=True))
        rerun = [c.data for c in found.unanswered if may_rerun(c.data, self.tools)]
        unsafe = [c for c in found.unanswered if not may_rerun(c.data, self.tools)]
        emit = functools.partial(self._emit, SessionEvent)
        settled = await settle_unknown(
            session, unsafe, self.reconcile, emit, self._result
        )
        continue_turn = continue_turn and not settled.blocked  # a person decides
        if unsafe:
            # Their results are durable before anything else runs (R8): a
            # crash from here on finds them answered.
            self._emit(
                TurnCheckpoint, TurnCheckpointData(turn=found.turn, reason="recovery")
            )
            await self._durability_point()
        result = await self._finish(
            found.turn,
            found.start_seq,
            user_text=None,
            rerun=rerun,
            ask_model=continue_turn,
        )
        report = RecoveryReport(
            session_id=session.id,
            turn=found.turn,
            interrupted=settled.interrupted,
            rerun=tuple(c.call_id for c in rerun),
            continued=continue_turn,
            names=names,
            settled=settled,
        )
        return report, result

    # -- the turn ------------------------------------------------------------

    async def _finish(
        self,
        turn: int,
        start_seq: int,
        *,
        user_text: str | None,
        rerun: Sequence[ToolCallData],
        ask_model: bool,
    ) -> TurnResult:
        status: TurnStatus = "completed"
        error: str | None = None
        failure: TurnFailure | None = None
        text = ""
        try:
            if user_text is not None:
                said = self._emit(UserMessage, UserMessageData(text=user_text))
                name_session(self.session, said.data.text)
            for data in rerun:
                self._check_cancel()
                await self._execute(turn, data, self.tools[data.name], rerun=True)
            if ask_model:
                text = await self._steps(turn)
            else:
                status, error = "interrupted", _CRASHED
        except StepCancelled:
            status, error = "cancelled", "cancelled by the caller"
        except asyncio.CancelledError:
            if not self.running.cancel_requested:
                raise  # not ours (e.g. the event loop shuts down): like a crash
            uncancel()
            status, error = "cancelled", "cancelled by the caller"
        except NotDurable as exc:
            status, error = "failed", str(exc)
            failure = failure_of(exc)
        except BudgetExhausted as exc:
            status, error = "budget_exhausted", str(exc)
        except TimedOut as exc:
            status, error = "timed_out", str(exc)
        except (ModelError, EventRejectedError) as exc:
            status, error = "failed", str(exc)
            failure = failure_of(exc)
        except Exception as exc:
            # An unexpected error still closes the turn, so the log never
            # keeps a turn open that no crash cut off; then it propagates.
            description = f"{type(exc).__name__}: {exc}"
            # If its flush fails too, the original error matters more; the
            # next turn retries the flush.
            failed = failure_of(exc, "internal")
            with contextlib.suppress(FlushError):
                await self._end(turn, start_seq, "failed", description, text, failed)
            raise
        return await self._end(turn, start_seq, status, error, text, failure)

    async def _steps(self, turn: int) -> str:
        self._record_context()
        budget = self.budget
        budget.start()
        self.guard.arm(budget.limits.deadline)
        while True:
            self._check_cancel()
            budget.before_model_call()
            text, calls = await self._call_model(turn)
            if not calls:
                return text
            for request in calls:
                self._check_cancel()
                budget.before_tool()
                await self._call_tool(turn, request)

    def _record_context(self) -> None:
        """Append the run context if it changed, before the first model call.

        No flush of its own: it becomes durable with the turn's first flush
        (an unsafe tool's intent, or the end), so no durable part of the
        turn is ever without it and a short turn stays one write.
        """
        for data in self.plan.pending(self.session, self.context, self.instructions):
            self._emit(SessionEvent, data)

    async def _end(
        self,
        turn: int,
        start_seq: int,
        status: TurnStatus,
        error: str | None,
        text: str,
        failure: TurnFailure | None = None,
    ) -> TurnResult:
        self.running.phase = "end"
        usage = self.meter.finish()
        # Asked after the turn's work, so it names the world the turn leaves.
        found = await self.manifest(self.session)
        end = self._emit(TurnEnd, end_data(turn, status, error, usage, found, failure))
        self.session.set_summary(status=SUMMARY_STATUS[status])
        await self.flush(self.session)
        return TurnResult(
            session_id=self.session.id,
            turn=turn,
            status=status,
            text=text,
            error=error,
            start_seq=start_seq,
            end_seq=end.seq,
            failure=failure,
        )

    # -- model calls ---------------------------------------------------------

    async def _call_model(self, turn: int) -> tuple[str, list[ModelToolCall]]:
        session = self.session
        request = ModelRequest(
            messages=history_of(session),
            tools=tuple(tool_spec(t) for t in self.tools.values()),
            instructions=self.instructions,
            session_id=session.id,
            turn=turn,
        )
        reply = ReplyText(
            functools.partial(self._emit, SessionEvent),
            self._stream_flush,
            self.watch.stream_flush_seconds,
            writer=ChunkWriter(self.running, self.meter, self.guard),
        )
        calls: list[ModelToolCall] = []
        usage: Usage | None = None
        self.running.phase = "model"
        meter = self.meter
        started = meter.clock()
        try:
            stream = self.model.stream(request)
        except Exception as exc:
            raise ModelError(f"the model failed: {type(exc).__name__}: {exc}") from exc
        try:
            async with self.guard.watching("the model call"):
                async for item in stream:
                    if isinstance(item, TextDelta):
                        if reply.take(item.text):
                            await reply.flush_now()
                    elif isinstance(item, ModelToolCall):
                        calls.append(item)
                    elif isinstance(item, Usage):  # pyright: ignore[reportUnnecessaryIsInstance]
                        usage = item
                    else:
                        raise ModelError(
                            f"the model streamed a {type(item).__name__}; "
                            "expected TextDelta, ModelToolCall or Usage"
                        )
        except (ModelError, EventRejectedError, StepCancelled, TimedOut):
            reply.cut_off()
            raise
        except asyncio.CancelledError:
            reply.cut_off()
            raise
        except Exception as exc:
            # A model adapter's own failure ends the turn as failed, named by
            # its type, instead of escaping and leaving the turn open.
            reply.cut_off()
            raise ModelError(f"the model failed: {type(exc).__name__}: {exc}") from exc
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
            self.running.phase = "between"
            # Charged also for a call that failed or was cancelled: it may
            # have produced output the provider bills.
            self.budget.charge(usage)
            meter.reported(usage)
            meter.model_seconds += meter.clock() - started
        return reply.finished(), calls  # even empty: this call's tool calls follow it

    # -- tool calls ----------------------------------------------------------

    async def _call_tool(self, turn: int, request: ModelToolCall) -> None:
        session = self.session
        tool = self.tools.get(request.name)
        replay = replay_policy(tool) if tool is not None else "unsafe"
        call_id = call_id_for(session.id, session.next_seq)
        arguments = dict(request.arguments)
        policy = _tools.unknown_policy(tool, arguments, self.on_unknown)
        try:
            self._emit(
                ToolCall,
                ToolCallData(
                    call_id=call_id,
                    name=request.name,
                    arguments=arguments,
                    replay=replay,
                    on_unknown=policy,
                ),
            )
        except EventRejectedError as exc:
            self._emit(
                ToolCall,
                ToolCallData(
                    call_id=call_id, name=request.name, arguments={}, replay=replay
                ),
            )
            self._result(
                call_id,
                f"[not run] its arguments could not be recorded: {exc}",
                "error",
            )
            return
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            self._result(
                call_id,
                f"[not run] There is no tool named {request.name!r} (tools: {known}).",
                "error",
            )
            return
        if replay == "unsafe":
            self._emit(
                TurnCheckpoint, TurnCheckpointData(turn=turn, reason="unsafe-tool")
            )
            try:
                await self._durability_point()
            except FlushError as exc:
                self._result(call_id, NOT_DURABLE_OUTPUT, "error")
                raise NotDurable(
                    f"the tool call {call_id} ({request.name}) could not be made "
                    f"durable before it ran, so it did not run: {exc}"
                ) from exc
            if self.running.cancel_requested:
                self._result(call_id, NOT_RUN_CANCELLED_OUTPUT, "error")
                raise StepCancelled
        data = ToolCallData(
            call_id=call_id, name=request.name, arguments=arguments, replay=replay
        )
        await self._execute(turn, data, tool, rerun=False)

    async def _execute(
        self, turn: int, data: ToolCallData, tool: Tool, *, rerun: bool
    ) -> None:
        context = ToolContext(
            call_id=data.call_id,
            session_id=self.session.id,
            agent_id=self.agent_id,
            turn=turn,
            rerun=rerun,
        )
        status: ToolResultStatus = "ok"
        self.running.phase = "tool"
        started = self.meter.clock()
        try:
            # A copy: a tool that mutates its arguments must not change the
            # logged call under the log's feet.
            async with self.guard.watching(f"the tool {data.name!r}"):
                output = await tool.run(_tools.fresh_arguments(data.arguments), context)
            if not isinstance(output, str):  # pyright: ignore[reportUnnecessaryIsInstance]
                output = f"the tool returned {type(output).__name__}, not text"
                status = "error"
        except ToolError as exc:
            output, status = str(exc) or type(exc).__name__, "error"
        except (asyncio.CancelledError, TimedOut):
            self.running.phase = "between"
            unsafe = data.replay != "safe"
            self._result(
                data.call_id,
                CANCELLED_UNSAFE_OUTPUT if unsafe else CANCELLED_SAFE_OUTPUT,
                "interrupted",
            )
            raise
        except Exception as exc:  # noqa: BLE001 - a tool's own failure is the model's to see and handle; the turn goes on
            output, status = f"{type(exc).__name__}: {exc}", "error"
        finally:
            self.running.phase = "between"
            self.meter.tool_seconds += self.meter.clock() - started
        self._result(data.call_id, output, status)

    # -- events and durability ----------------------------------------------

    async def _durability_point(self) -> None:
        self.running.phase = "flush"
        try:
            await self.flush(self.session)
        finally:
            self.running.phase = "between"

    async def _stream_flush(self) -> None:
        # A flush inside a model call is let finish like any other; a cancel
        # that came meanwhile stops the call right after it.
        self.running.phase = "flush"
        try:
            await self.flush(self.session)
        finally:
            self.running.phase = "model"
        self._check_cancel()

    def _check_cancel(self) -> None:
        if self.running.cancel_requested:
            raise StepCancelled

    def _emit(self, kind: type[E], data: object) -> E:
        # The payload names its event type; `kind` only types the result.
        event: E = self.running.session.append(data)  # pyright: ignore[reportAssignmentType]
        self.meter.appended(event)
        self.guard.activity()
        for sink in self.running.sinks:
            sink(event)
        return event

    def _result(self, call_id: str, output: str, status: ToolResultStatus) -> None:
        try:
            self._emit(
                ToolResult,
                ToolResultData(call_id=call_id, output=output, status=status),
            )
        except EventRejectedError as exc:
            # Keep the pairing: a result that cannot be stored becomes a short
            # error result instead of no result at all.
            self._emit(
                ToolResult,
                ToolResultData(
                    call_id=call_id,
                    output=f"[output not recorded] {exc}",
                    status="error",
                ),
            )
