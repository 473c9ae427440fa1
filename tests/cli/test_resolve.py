"""`turnkeep resolve`: a blocked effect resolved by hand, on JSONL and SQLite."""

from __future__ import annotations

import asyncio

import msgspec
from tests.cli.support import Store, cli, one_line_error
from tests.loop.test_effects import blocked_log, model_for_turn_3

from turnkeep import AgentLoop
from turnkeep.agent.recovery import open_turn
from turnkeep.codec import EventCodec
from turnkeep.errors import EffectBlockedError
from turnkeep.events import EffectResolved, SessionEvent


def decoded(store: Store) -> list[SessionEvent]:
    stored = asyncio.run(store.load("s")).events
    return list(EventCodec().decode_log(stored, session_id="s"))


async def store_blocked(store: Store) -> tuple[str, str]:
    async with store.host() as host:
        return await blocked_log(host)


async def next_turn(store: Store) -> str:
    async with store.host() as host:
        loop = await AgentLoop.resume(
            "agent", "s", host=host, model=model_for_turn_3(), context="override"
        )
        try:
            return (await loop.run_turn("go on")).status
        except EffectBlockedError:
            return "blocked"
        finally:
            await loop.close()


def test_resolve_unblocks_a_session_and_records_who_and_why(store: Store) -> None:
    finished, cut = asyncio.run(store_blocked(store))
    # The log ends inside the turn: resolve recovers it first.
    assert open_turn(decoded(store)) is not None

    usage = cli("resolve", "s", cut, store=store)
    assert usage.exit_code == 2
    unknown = cli("resolve", "s", "call_nope", "--done", store=store)
    assert unknown.exit_code == 1
    assert "no tool call 'call_nope'" in one_line_error(unknown)
    answered = cli("resolve", "s", finished, "--not-done", store=store)
    assert answered.exit_code == 1
    assert "not of unknown outcome" in one_line_error(answered)
    assert asyncio.run(next_turn(store)) == "blocked"

    done = cli(
        "resolve",
        "s",
        cut,
        "--done",
        "--result",
        "wrote it",
        "--reason",
        "looked",
        "--by",
        "ana",
        store=store,
    )
    assert done.exit_code == 0, done.stderr
    assert f"call {cut} took effect (recorded by ana)" in done.stdout
    assert "the session accepts new turns" in done.stdout
    [resolved] = [e for e in decoded(store) if isinstance(e, EffectResolved)]
    assert (resolved.data.call_id, resolved.data.outcome) == (cut, "done")
    assert (resolved.data.result, resolved.data.by) == ("wrote it", "ana")
    assert resolved.data.reason == "looked"

    again = cli("resolve", "s", cut, "--not-done", store=store)
    assert again.exit_code == 1
    assert asyncio.run(next_turn(store)) == "completed"


def test_resolve_not_done_names_this_user_by_default(store: Store) -> None:
    _finished, cut = asyncio.run(store_blocked(store))
    refused = cli("resolve", "s", cut, "--not-done", "--result", "x", store=store)
    assert refused.exit_code == 2
    result = cli("resolve", "s", cut, "--not-done", store=store)
    assert result.exit_code == 0, result.stderr
    assert "did NOT take effect" in result.stdout
    [resolved] = [e for e in decoded(store) if isinstance(e, EffectResolved)]
    assert resolved.data.outcome == "not_done"
    assert " pid " in resolved.data.by


def test_done_and_not_done_together_are_refused_and_record_nothing(
    store: Store,
) -> None:
    _finished, cut = asyncio.run(store_blocked(store))
    for flags in (("--done", "--not-done"), ("--not-done", "--done")):
        both = cli("resolve", "s", cut, *flags, store=store)
        assert both.exit_code == 2
        assert "--done and --not-done are mutually exclusive" in both.stderr
    assert not [e for e in decoded(store) if isinstance(e, EffectResolved)]
    assert asyncio.run(next_turn(store)) == "blocked"


def test_show_marks_a_blocked_session_and_names_the_command(store: Store) -> None:
    _finished, cut = asyncio.run(store_blocked(store))
    resolve = f"turnkeep resolve s {cut} --done|--not-done"

    def blocked() -> list[dict[str, str]]:
        shown = cli("show", "s", "--json", store=store)
        assert shown.exit_code == 0, shown.stderr
        return msgspec.json.decode(shown.stdout)["blocked_calls"]

    # Cut off by the crash, before and after `recover` closes the turn.
    assert blocked() == [{"call_id": cut, "tool": "act", "resolve": resolve}]
    recovered = cli("recover", "s", store=store)
    assert recovered.exit_code == 0
    assert f"BLOCKED: call {cut} may have taken effect" in recovered.stdout
    assert resolve in " ".join(recovered.stdout.split())
    assert blocked() == [{"call_id": cut, "tool": "act", "resolve": resolve}]
    text = cli("show", "s", store=store).stdout
    assert f"BLOCKED  call {cut} (act)" in text
    assert resolve in " ".join(text.split())
    assert cli("resolve", "s", cut, "--not-done", store=store).exit_code == 0
    assert blocked() == []
    assert "BLOCKED" not in cli("show", "s", store=store).stdout
