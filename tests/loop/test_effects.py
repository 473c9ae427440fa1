"""The `reconcile_effect` hook: recovery asks plugins whether a cut-off call ran."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import pytest
from tests.loop.support import SharedMemory, SpyTool, shared_host, stored_events
from tests.loop.test_recovery import crashed_log

from turnkeep import AgentLoop, Host, derive_messages, hookimpl
from turnkeep.agent.effects import NOT_DONE_OUTPUT
from turnkeep.agent.messages import INTERRUPTED_TOOL_OUTPUT
from turnkeep.agent.recovery import open_turn, pairing_problems
from turnkeep.agent.sweep import recover_interrupted
from turnkeep.agent.tools import unknown_policy
from turnkeep.agent.turns import call_id_for
from turnkeep.effects import EffectOutcome, done, not_done, unknown
from turnkeep.errors import (
    CallNotFoundError,
    EffectBlockedError,
    EffectNotUnknownError,
    EffectReconcileError,
)
from turnkeep.events import (
    AssistantMessageData,
    EffectResolved,
    SessionEvent,
    ToolCall,
    ToolCallData,
    ToolResult,
    ToolResultData,
    TurnEndData,
    TurnStart,
    TurnStartData,
    UserMessageData,
)
from turnkeep.session import Session
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel


@attrs.define(eq=False)
class Checker:
    """A reconciler answering `answer` (or raising `fail`) for every call."""

    answer: EffectOutcome | str | None = None
    fail: Exception | None = None
    asked: list[str] = attrs.field(factory=list[str])

    @hookimpl
    def reconcile_effect(self, session: Session, call: ToolCall) -> object:
        self.asked.append(call.data.call_id)
        if self.fail is not None:
            raise self.fail
        return self.answer


@attrs.define(eq=False)
class AsyncChecker:
    answer: EffectOutcome

    @hookimpl
    async def reconcile_effect(self, call: ToolCall) -> EffectOutcome:
        return self.answer


@attrs.define(eq=False)
class FirstChecker(Checker):
    @hookimpl(tryfirst=True)
    def reconcile_effect(self, session: Session, call: ToolCall) -> object:
        return super().reconcile_effect(session, call)


def results(events: Sequence[SessionEvent]) -> dict[str, ToolResult]:
    return {e.data.call_id: e for e in events if isinstance(e, ToolResult)}


async def crash(shared: SharedMemory, *names: str) -> list[str]:
    async with shared_host(shared) as host:
        return await crashed_log(host, "s", [(n, "unsafe") for n in names])


async def resume(
    host: Host, checkers: Sequence[tuple[str, object]], **kwargs: object
) -> AgentLoop:
    for name, checker in checkers:
        host.register(checker, name)
    model = kwargs.pop("model", ScriptedModel([]))
    return await AgentLoop.resume(
        "agent",
        "s",
        host=host,
        model=model,  # pyright: ignore[reportArgumentType]
        tools=[SpyTool("act")],
        **kwargs,  # pyright: ignore[reportArgumentType]
    )


@pytest.mark.asyncio
async def test_done_records_the_result_and_who_settled_it() -> None:
    shared = SharedMemory()
    (call_id,) = await crash(shared, "act")
    async with shared_host(shared) as host:
        loop = await resume(host, [("ledger", Checker(done("paid 5 EUR")))])
        report = loop.recovery
        assert report is not None
        assert (report.settled.done, report.interrupted) == ((call_id,), ())
        assert report.settled.by == {call_id: "ledger"}
        assert "found it DONE" in report.describe()
        stored = await stored_events(host, "s")
        resolved, result = stored[-4:-2]  # then turn/checkpoint, turn/end
        assert isinstance(resolved, EffectResolved)
        assert resolved.data.call_id == call_id
        assert (resolved.data.outcome, resolved.data.result) == ("done", "paid 5 EUR")
        assert resolved.data.by == "reconcile_effect:ledger"
        assert isinstance(result, ToolResult)
        assert (result.data.status, result.data.output) == ("ok", "paid 5 EUR")
        assert pairing_problems(stored) == []
        assert open_turn(stored) is None
        tool = [m for m in derive_messages(stored) if m.role == "tool"]
        assert [m.content for m in tool] == ["paid 5 EUR"]
        await loop.close()


@pytest.mark.asyncio
async def test_not_done_tells_the_model_it_may_call_again() -> None:
    shared = SharedMemory()
    (call_id,) = await crash(shared, "act")
    act = SpyTool("act")
    # The script goes by the history's assistant messages (two so far).
    replies = [Reply("unused"), Reply("unused")]
    model = ScriptedModel(
        [*replies, Reply("again", (ScriptedCall("act", {}),)), Reply("done now")]
    )
    async with shared_host(shared) as host:
        host.register(Checker(not_done()), "ledger")
        loop = await AgentLoop.resume(
            "agent", "s", host=host, model=model, tools=[act], continue_turn=True
        )
        report = loop.recovery
        assert report is not None
        assert (report.settled.not_done, report.interrupted) == ((call_id,), ())
        assert "had NOT happened" in report.describe()
        stored = await stored_events(host, "s")
        answer = results(stored)[call_id]
        assert (answer.data.status, answer.data.output) == ("error", NOT_DONE_OUTPUT)
        [resolved] = [e for e in stored if isinstance(e, EffectResolved)]
        assert (resolved.data.outcome, resolved.data.result) == ("not_done", None)
        # The model saw that it did not happen, and called it once more.
        seen = [m for m in model.requests[0].messages if m.role == "tool"]
        assert [m.content for m in seen] == [NOT_DONE_OUTPUT]
        assert len(act.calls) == 1
        assert act.calls[0].call_id != call_id
        await loop.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("answer", [unknown("no ledger entry yet"), None])
async def test_unknown_or_no_answer_stays_interrupted(
    answer: EffectOutcome | None,
) -> None:
    shared = SharedMemory()
    (call_id,) = await crash(shared, "act")
    async with shared_host(shared) as host:
        checker = Checker(answer)
        loop = await resume(host, [("ledger", checker)])
        report = loop.recovery
        assert report is not None
        assert checker.asked == [call_id]
        assert report.interrupted == (call_id,)
        assert report.settled.done == report.settled.not_done == ()
        if answer is not None:
            assert report.settled.notes == {call_id: "ledger: no ledger entry yet"}
            assert "no ledger entry yet" in report.describe()
        stored = await stored_events(host, "s")
        assert not any(isinstance(e, EffectResolved) for e in stored)
        answer_event = results(stored)[call_id]
        assert answer_event.data.status == "interrupted"
        assert answer_event.data.output == INTERRUPTED_TOOL_OUTPUT
        await loop.close()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("checker", "why"),
    [
        (Checker(fail=OSError("ledger offline")), "ledger offline"),
        (Checker("done"), "answered str"),
    ],
)
async def test_a_failing_reconciler_is_a_typed_error_and_nothing_is_lost(
    checker: Checker, why: str
) -> None:
    shared = SharedMemory()
    first, second = await crash(shared, "act", "act")
    async with shared_host(shared) as host:
        before = await stored_events(host, "s")
    async with shared_host(shared) as host:
        with pytest.raises(EffectReconcileError, match=why) as caught:
            await resume(host, [("ledger", checker)])
        assert (caught.value.call_id, caught.value.plugin) == (first, "ledger")
        assert caught.value.code == "effect-reconcile"
        assert not host.sessions.list()  # let go: the session is not held
        assert await stored_events(host, "s") == before  # nothing appended
    # Fixed (here: removed), recovery runs again and settles the turn.
    async with shared_host(shared) as host:
        loop = await resume(host, [("ledger", Checker(done("ok")))])
        assert loop.recovery is not None
        assert loop.recovery.settled.done == (first, second)
        await loop.close()


@pytest.mark.asyncio
async def test_a_failing_reconciler_fails_the_next_turn_before_it_starts() -> None:
    shared = SharedMemory()
    await crash(shared, "act")
    async with shared_host(shared) as host:
        before = await stored_events(host, "s")
        # Taken without the loop's recovery: the next turn recovers first.
        session = await host.sessions.resume("s")
        loop = AgentLoop("agent", host, ScriptedModel([]), {}, session.id)
        host.register(Checker(fail=RuntimeError("boom")), "ledger")
        with pytest.raises(EffectReconcileError, match="boom"):
            await loop.run_turn("hello")
        assert list(session.events) == before
        await loop.close()


@pytest.mark.asyncio
async def test_several_reconcilers_precedence() -> None:
    """Hook order (last registered first, `tryfirst` before); disagreement: unknown."""

    async def settle(checkers: Sequence[tuple[str, object]]) -> tuple[str, ...]:
        shared = SharedMemory()
        (call_id,) = await crash(shared, "act")
        async with shared_host(shared) as host:
            loop = await resume(host, checkers)
            report = loop.recovery
            assert report is not None
            stored = await stored_events(host, "s")
            await loop.close()
        answer = results(stored)[call_id]
        by = report.settled.by.get(call_id, "")
        note = report.settled.notes.get(call_id, "")
        return answer.data.status, answer.data.output, by, note

    # Both say done: the last registered is asked first and wins.
    got = await settle([("a", Checker(done("from a"))), ("b", Checker(done("from b")))])
    assert got == ("ok", "from b", "b", "")
    # tryfirst moves an implementation to the front.
    got = await settle(
        [("a", FirstChecker(done("from a"))), ("b", Checker(done("from b")))]
    )
    assert got == ("ok", "from a", "a", "")
    # Abstentions (None, unknown) do not hide a definite answer.
    got = await settle(
        [("a", Checker(not_done())), ("b", Checker(unknown())), ("c", Checker(None))]
    )
    assert got == ("error", NOT_DONE_OUTPUT, "a", "")
    # Async implementations are awaited.
    got = await settle([("a", AsyncChecker(done("async")))])
    assert got == ("ok", "async", "a", "")
    # A disagreement keeps the outcome unknown, and says why.
    status, output, by, note = await settle(
        [("a", Checker(done("from a"))), ("b", Checker(not_done()))]
    )
    assert (status, output, by) == ("interrupted", INTERRUPTED_TOOL_OUTPUT, "")
    assert note == "the reconcilers disagree (b says not done, a says done)"


@pytest.mark.asyncio
async def test_the_crash_sweep_asks_the_reconcilers() -> None:
    shared = SharedMemory()
    first, second = await crash(shared, "act", "pay")

    @attrs.define(eq=False)
    class ByName:
        @hookimpl
        def reconcile_effect(self, call: ToolCall) -> EffectOutcome:
            return done("paid") if call.data.name == "pay" else unknown()

    async with shared_host(shared) as host:
        host.register(ByName(), "bank")
        [swept] = await recover_interrupted(host, session_ids=["s"])
        assert swept.action == "recovered"
        assert swept.report is not None
        assert swept.report.interrupted == (first,)
        assert swept.report.settled.done == (second,)
        stored = await stored_events(host, "s")
        assert results(stored)[second].data.output == "paid"
        assert pairing_problems(stored) == []


# -- a per-tool policy for effects that stay unknown ---------------------------


@attrs.define(eq=False)
class BlockingTool(SpyTool):
    """An unsafe tool that blocks turns when a call's outcome is unknown."""

    on_unknown: object = "block"


async def blocked_log(host: Host, policy: str = "block") -> tuple[str, str]:
    """Store a log whose turn 2 a crash cut off in a call of policy `policy`.

    Turn 1 made a call that finished (`ok`). Returns (finished, cut off).
    """
    session = host.sessions.create("s")
    ids: list[str] = []
    for turn in (1, 2):
        session.append(TurnStartData(turn=turn))
        session.append(UserMessageData(text=f"turn {turn}"))
        session.append(AssistantMessageData(text="working"))
        call_id = call_id_for("s", session.next_seq)
        ids.append(call_id)
        session.append(
            ToolCallData(call_id=call_id, name="act", arguments={}, on_unknown=policy)  # pyright: ignore[reportArgumentType]
        )
        if turn == 1:
            session.append(ToolResultData(call_id=call_id, output="fine"))
            session.append(AssistantMessageData(text="done"))
            session.append(TurnEndData(turn=1, status="completed"))
    await session.flush()
    await host.sessions.close("s")
    return ids[0], ids[1]


def model_for_turn_3() -> ScriptedModel:
    # The script goes by the history's assistant messages (three so far).
    return ScriptedModel([Reply("x"), Reply("x"), Reply("x"), Reply("after")])


@pytest.mark.asyncio
async def test_a_blocking_unknown_effect_refuses_turns_until_resolved() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as host:
        finished, cut = await blocked_log(host)
    model = model_for_turn_3()
    async with shared_host(shared) as host:
        loop = await AgentLoop.resume(
            "agent",
            "s",
            host=host,
            model=model,
            tools=[BlockingTool("act")],
            continue_turn=True,
        )
        report = loop.recovery
        assert report is not None
        assert report.interrupted == (cut,)
        assert report.settled.blocked == (cut,)
        assert not report.continued  # a person decides first, not the model
        assert "BLOCKED" in report.describe()
        before = await stored_events(host, "s")
        with pytest.raises(EffectBlockedError, match=cut) as caught:
            await loop.run_turn("go on")
        assert caught.value.call_ids == (cut,)
        assert caught.value.code == "effect-blocked"
        assert model.requests == []  # refused before any model call
        assert list(host.sessions.get("s").events) == before  # nothing appended

        with pytest.raises(CallNotFoundError):
            await loop.resolve("call_nope", done=True)
        with pytest.raises(EffectNotUnknownError):
            await loop.resolve(finished, done=True)  # it has a result
        with pytest.raises(EffectNotUnknownError):
            await loop.resolve(cut, done=False, result="a result for not done?")
        assert list(host.sessions.get("s").events) == before

        resolved = await loop.resolve(
            cut, done=True, result="file written", by="ana", reason="checked it"
        )
        stored = await stored_events(host, "s")
        assert stored[-1] == resolved  # durable when resolve returns
        assert (resolved.data.outcome, resolved.data.result) == ("done", "file written")
        assert (resolved.data.by, resolved.data.reason) == ("ana", "checked it")
        with pytest.raises(EffectNotUnknownError):
            await loop.resolve(cut, done=False)  # resolved already

        result = await loop.run_turn("go on")
        assert (result.status, result.text) == ("completed", "after")
        note = model.requests[0].messages[-2]
        assert note.role == "user"
        assert note.content.startswith(f"[resolved] Tool call {cut}")
        assert (
            "checked by ana: it DID take effect; its result: file written."
            in note.content
        )
        assert "Reason: checked it" in note.content
        await loop.close()
    # Cold and warm histories agree across the resolution.
    async with shared_host(shared) as host:
        stored = await stored_events(host, "s")
    warm = model.requests[0].messages
    ends = [e.seq for e in stored if isinstance(e, TurnStart)]
    assert tuple(derive_messages(stored[: ends[-1] + 2])) == warm


@pytest.mark.asyncio
async def test_a_blocked_session_stays_blocked_across_restarts_and_the_sweep() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as host:
        _finished, cut = await blocked_log(host)
    # The crash sweep settles the cut-off turn (no tools, no model) ...
    async with shared_host(shared) as host:
        [swept] = await recover_interrupted(host, session_ids=["s"])
        assert swept.report is not None
        assert swept.report.settled.blocked == (cut,)
    # ... and every later process is refused until someone resolves it.
    for _ in range(2):
        async with shared_host(shared) as host:
            loop = await AgentLoop.resume(
                "agent",
                "s",
                host=host,
                model=model_for_turn_3(),
                tools=[BlockingTool("act")],
                context="override",
            )
            with pytest.raises(EffectBlockedError):
                await loop.run_turn("go on")
            await loop.close()
    async with shared_host(shared) as host:
        loop = await AgentLoop.resume(
            "agent",
            "s",
            host=host,
            model=model_for_turn_3(),
            tools=[BlockingTool("act")],
            context="override",
        )
        await loop.resolve(cut, done=False, reason="no file there")
        result = await loop.run_turn("go on")
        assert result.status == "completed"
        await loop.close()


@pytest.mark.asyncio
async def test_report_is_the_default_policy_and_does_not_block() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as host:
        _finished, cut = await blocked_log(host, policy="report")
    async with shared_host(shared) as host:
        loop = await AgentLoop.resume(
            "agent", "s", host=host, model=model_for_turn_3(), tools=[SpyTool("act")]
        )
        assert loop.recovery is not None
        assert loop.recovery.settled.blocked == ()
        assert (await loop.run_turn("go on")).status == "completed"
        # A reported unknown call may still be resolved, for the record.
        event = await loop.resolve(cut, done=False)
        assert event.data.by  # this user, host and pid
        await loop.close()


def test_the_policy_a_tool_declares() -> None:
    def writes(arguments: Mapping[str, Any]) -> str:
        return "block" if arguments.get("write") else "report"

    assert unknown_policy(SpyTool("a"), {}) == "report"
    assert unknown_policy(BlockingTool("a"), {}) == "block"
    assert unknown_policy(BlockingTool("a", replay="safe"), {}) == "report"
    assert unknown_policy(BlockingTool("a", on_unknown=writes), {"write": 1}) == "block"
    assert unknown_policy(BlockingTool("a", on_unknown=writes), {}) == "report"
    assert unknown_policy(BlockingTool("a", on_unknown="later"), {}) == "report"


@pytest.mark.asyncio
async def test_the_call_records_its_policy_before_it_runs() -> None:
    def writes(arguments: Mapping[str, Any]) -> str:
        return "block" if arguments.get("write") else "report"

    tool = BlockingTool("act", on_unknown=writes)
    model = ScriptedModel(
        [Reply("", (ScriptedCall("act", {"write": True}), ScriptedCall("act", {})))]
    )
    async with shared_host(SharedMemory()) as host:
        loop = AgentLoop.create("agent", host=host, model=model, tools=[tool])
        await loop.run_turn("go")
        calls = [
            e
            for e in host.sessions.get(loop.session_id).events
            if isinstance(e, ToolCall)
        ]
        assert [c.data.on_unknown for c in calls] == ["block", "report"]
        await loop.close()
