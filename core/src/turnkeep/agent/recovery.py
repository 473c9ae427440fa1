"""Reading a log for recovery: open turns, unanswered calls, pairing, reports.

Pure functions over a session's events, used by `AgentLoop.recover` (which
acts on what they find) and by tests and tools that check a stored log.

A log written by the loop keeps these invariants, in every state a crash
can leave on disk:

- turns are numbered from 1 and each `turn/start` is closed by one
  `turn/end` of the same number, except possibly the last one (the *open*
  turn: the process stopped inside it);
- every `tool/result` answers exactly one earlier `tool/call`, and every
  call of a closed turn has exactly one result;
- so only calls of the open turn can lack a result: recovery answers them.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from turnkeep.events import SessionEvent, ToolCall, ToolResult, TurnEnd, TurnStart

__all__ = [
    "OpenTurn",
    "RecoveryReport",
    "Settled",
    "last_turn_number",
    "open_turn",
    "pairing_problems",
]


@attrs.frozen
class OpenTurn:
    """A turn the log started but never ended.

    Attributes:
        turn: its number.
        start_seq: the seq of its `turn/start`.
        unanswered: its tool calls that have no result, in log order.
    """

    turn: int
    start_seq: int
    unanswered: tuple[ToolCall, ...]


def last_turn_number(events: Sequence[SessionEvent]) -> int:
    """The number of the last turn started in the log (0 if none)."""
    for event in reversed(events):
        if isinstance(event, TurnStart):
            return event.data.turn
    return 0


def open_turn(events: Sequence[SessionEvent]) -> OpenTurn | None:
    """Return the turn the log ends inside, or `None` if it ends between turns."""
    start = None
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if isinstance(event, TurnEnd):
            return None
        if isinstance(event, TurnStart):
            start = index
            break
    if start is None:
        return None
    tail = events[start:]
    answered = {e.data.call_id for e in tail if isinstance(e, ToolResult)}
    unanswered = tuple(
        e for e in tail if isinstance(e, ToolCall) and e.data.call_id not in answered
    )
    turn = events[start]
    assert isinstance(turn, TurnStart)  # noqa: S101 - found by the loop above
    return OpenTurn(turn=turn.data.turn, start_seq=start, unanswered=unanswered)


def pairing_problems(events: Sequence[SessionEvent]) -> list[str]:
    """Describe every break of the call/result and turn invariants (none: `[]`).

    Calls without a result are allowed only in the open turn at the end of
    the log, which is what a crash leaves and what recovery answers.
    """
    problems: list[str] = []
    calls: dict[str, int] = {}
    results: dict[str, int] = {}
    current: int | None = None
    turn_calls: list[str] = []

    def close_turn(where: int) -> None:
        for call_id in turn_calls:
            if call_id not in results:
                problems.append(
                    f"call {call_id!r} of turn {current} has no result "
                    f"(turn closed at seq {where})"
                )
        turn_calls.clear()

    for event in events:
        if isinstance(event, TurnStart):
            if current is not None:
                problems.append(
                    f"turn {event.data.turn} starts at seq {event.seq} inside "
                    f"turn {current}"
                )
                close_turn(event.seq)
            current = event.data.turn
        elif isinstance(event, TurnEnd):
            if event.data.turn != current:
                problems.append(
                    f"turn/end for turn {event.data.turn} at seq {event.seq} "
                    f"closes turn {current}"
                )
            close_turn(event.seq)
            current = None
        elif isinstance(event, ToolCall):
            call_id = event.data.call_id
            if call_id in calls:
                problems.append(f"call id {call_id!r} is used twice")
            calls[call_id] = event.seq
            turn_calls.append(call_id)
        elif isinstance(event, ToolResult):
            call_id = event.data.call_id
            if call_id not in calls:
                problems.append(
                    f"result at seq {event.seq} answers no earlier call ({call_id!r})"
                )
            if call_id in results:
                problems.append(f"call {call_id!r} has two results")
            results[call_id] = event.seq
    return problems


@attrs.frozen
class Settled:
    """What recovery recorded for the unsafe calls a crash left unanswered.

    Attributes:
        interrupted: calls whose outcome stays unknown.
        done: calls a reconciler found had taken effect.
        not_done: calls a reconciler found had not.
        by: the plugin that settled each call of `done` and `not_done`.
        notes: why a call stayed unknown, when there is something to say.
        blocked: the session's unknown calls that block turns (of this turn
            or earlier ones), after recovery.
    """

    interrupted: tuple[str, ...] = ()
    done: tuple[str, ...] = ()
    not_done: tuple[str, ...] = ()
    by: dict[str, str] = attrs.field(factory=dict[str, str])
    notes: dict[str, str] = attrs.field(factory=dict[str, str])
    blocked: tuple[str, ...] = ()


@attrs.frozen
class RecoveryReport:
    """What recovery found in a session's log and what it did.

    Attributes:
        session_id: the session.
        turn: the open turn that was recovered (`None`: the log ended
            between turns and nothing was done).
        interrupted: ids of calls answered as *interrupted, outcome unknown*
            (unsafe calls; never run again).
        rerun: ids of safe calls that were run again.
        continued: the turn was continued by calling the model again
            (otherwise it was closed with `turn/end` status `interrupted`).
        names: the tool name of every call id above.
        settled: what the `reconcile_effect` hook settled among the unsafe
            calls (`turnkeep.agent.effects`).
    """

    session_id: str
    turn: int | None = None
    interrupted: tuple[str, ...] = ()
    rerun: tuple[str, ...] = ()
    continued: bool = False
    names: dict[str, str] = attrs.field(factory=dict[str, str])
    settled: Settled = attrs.field(factory=Settled)

    @property
    def recovered(self) -> bool:
        """Whether the log ended inside a turn."""
        return self.turn is not None

    def describe(self) -> str:
        """Say in plain words what recovery did."""
        if self.turn is None:
            return "The session ended cleanly after its last turn; nothing to recover."
        lines = [f"Turn {self.turn} was cut off by a crash."]
        for call_id in self.interrupted:
            lines.append(
                f"- {self.names.get(call_id, 'a tool')} (call {call_id}) had "
                "started but its result was never saved: reported as "
                "interrupted, outcome unknown. It was NOT run again."
            )
        for call_id in self.settled.done:
            lines.append(
                f"- {self.names.get(call_id, 'a tool')} (call {call_id}) had "
                "started and its result was never saved; "
                f"{self.settled.by.get(call_id, 'a plugin')} checked and found it "
                "DONE: its result was recorded. It was NOT run again."
            )
        for call_id in self.settled.not_done:
            lines.append(
                f"- {self.names.get(call_id, 'a tool')} (call {call_id}) had "
                "started and its result was never saved; "
                f"{self.settled.by.get(call_id, 'a plugin')} checked and found it "
                "had NOT happened: the model may call it again."
            )
        for call_id, note in self.settled.notes.items():
            lines.append(f"- call {call_id}: {note}")
        for call_id in self.rerun:
            lines.append(
                f"- {self.names.get(call_id, 'a tool')} (call {call_id}) is safe "
                "to repeat and was run again."
            )
        if not (self.interrupted or self.rerun or self.settled.done) and not (
            self.settled.not_done
        ):
            lines.append("- No tool call was left without a result.")
        if self.settled.blocked:
            lines.append(
                f"- BLOCKED: the outcome of {', '.join(self.settled.blocked)} is "
                "unknown and its tool blocks new turns until a person resolves "
                "it (turnkeep resolve, or AgentLoop.resolve)."
            )
        lines.append(
            "The turn was continued by asking the model again."
            if self.continued
            else "The turn was closed as interrupted."
        )
        return "\n".join(lines)
