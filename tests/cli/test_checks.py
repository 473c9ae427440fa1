"""`turnkeep verify`, `repair` and `recover` against JSONL and SQLite stores."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from tests.cli.support import (
    TORN,
    Store,
    cli,
    converse,
    crash_in_turn,
    damage,
    log_file,
    one_line_error,
    tear,
)

from turnkeep.agent.recovery import open_turn, pairing_problems
from turnkeep.codec import EventCodec
from turnkeep.events import ToolResult, TurnEnd


def test_verify_a_healthy_store(store: Store) -> None:
    asyncio.run(converse(store, "a"))
    asyncio.run(converse(store, "b", prompts=("hi",)))
    before = store.digest()
    one = cli("verify", "a", store=store)
    assert one.exit_code == 0, one.stdout
    assert "ok       a" in one.stdout
    every = cli("verify", "--all", store=store)
    assert every.exit_code == 0
    assert "2 session(s) checked: no problems" in every.stdout
    assert store.digest() == before


def test_verify_reports_damage_with_session_offset_and_meaning(store: Store) -> None:
    asyncio.run(converse(store, "good", prompts=("hi",)))
    # One record per event: the damage below hits the row of a given seq.
    asyncio.run(converse(store, "bad", prompts=("a", "b", "c", "d"), session_format=2))
    damage(store, "bad")
    before = store.digest()
    result = cli("verify", "--all", store=store)
    assert result.exit_code == 1
    (problem,) = [line for line in result.stdout.splitlines() if "PROBLEM" in line]
    assert "bad" in problem
    assert "corrupt" in problem
    assert "at offset" in problem
    assert "ok       good" in result.stdout
    report: dict[str, Any] = msgspec.json.decode(
        cli("verify", "bad", "--json", store=store).stdout
    )
    (session,) = report["sessions"]
    (found,) = session["problems"]
    assert found["session_id"] == "bad"
    assert found["kind"] == "corrupt"
    assert isinstance(found["offset"], int)
    assert found["fatal"] is True
    assert store.digest() == before, "verify changed the store"


def test_verify_of_an_unknown_session_is_a_problem(store: Store) -> None:
    result = cli("verify", "ghost", store=store)
    assert result.exit_code == 1
    assert "missing" in result.stdout


def test_verify_needs_a_selection(store: Store) -> None:
    assert cli("verify", store=store).exit_code == 2
    assert cli("verify", "--all", "a", store=store).exit_code == 2


def test_verify_notes_a_torn_tail_without_failing(jsonl_store: Store) -> None:
    asyncio.run(converse(jsonl_store, "s"))
    offset = tear(jsonl_store, "s")
    result = cli("verify", "s", store=jsonl_store)
    assert result.exit_code == 0
    assert (
        f"unacknowledged tail of {len(TORN)} bytes at offset {offset}" in result.stdout
    )
    assert "turnkeep repair s" in result.stdout


def test_repair_shows_asks_quarantines_and_cuts(jsonl_store: Store) -> None:
    asyncio.run(converse(jsonl_store, "s"))
    events = asyncio.run(jsonl_store.load("s")).events
    offset = tear(jsonl_store, "s")
    log = log_file(jsonl_store, "s")
    acknowledged = log.read_bytes()[:offset]
    before = jsonl_store.digest()

    declined = cli("repair", "s", input="n\n", store=jsonl_store)
    assert declined.exit_code == 1
    assert f"tail of {len(TORN)} bytes at offset {offset}" in declined.stderr
    assert "would be cut" in declined.stderr
    assert "nothing was cut" in declined.stderr
    assert jsonl_store.digest() == before

    done = cli("repair", "s", "--json", input="y\n", store=jsonl_store)
    assert done.exit_code == 0, done.stderr
    cut: dict[str, Any] = msgspec.json.decode(done.stdout)
    assert (cut["offset"], cut["length"]) == (offset, len(TORN))
    assert Path(cut["quarantine"]).read_bytes() == TORN
    assert log.read_bytes().startswith(acknowledged)
    assert TORN not in log.read_bytes()
    assert asyncio.run(jsonl_store.load("s")).events == events

    again = cli("repair", "s", store=jsonl_store)
    assert again.exit_code == 0
    assert "nothing to repair" in again.stdout


def test_repair_on_a_transactional_backend_has_nothing_to_do(
    sqlite_store: Store,
) -> None:
    asyncio.run(converse(sqlite_store, "s", prompts=("hi",)))
    before = sqlite_store.digest()
    result = cli("repair", "s", store=sqlite_store)
    assert result.exit_code == 0
    assert "keeps no torn tails" in result.stdout
    assert sqlite_store.digest() == before


def test_repair_refusals(store: Store, hold: Callable[[Store, str], object]) -> None:
    ghost = cli("repair", "ghost", store=store)
    assert ghost.exit_code == 1
    assert "'ghost'" in one_line_error(ghost)
    if store.name != "jsonl":
        return
    # One record per event: the damage below hits the row of a given seq.
    asyncio.run(converse(store, "bad", prompts=("a", "b", "c", "d"), session_format=2))
    damage(store, "bad")
    tear(store, "bad")
    before = store.digest()
    damaged = cli("repair", "bad", "--yes", store=store)
    assert damaged.exit_code == 1
    assert "'bad'" in one_line_error(damaged)
    assert store.digest() == before
    asyncio.run(converse(store, "busy", prompts=("hi",)))
    hold(store, "busy")
    tear(store, "busy")
    busy = cli("repair", "busy", "--yes", store=store)
    assert busy.exit_code == 1
    assert "another process" in one_line_error(busy)


def _decoded(store: Store, session_id: str) -> list[Any]:
    stored = asyncio.run(store.load(session_id)).events
    return list(EventCodec().decode_log(stored, session_id=session_id))


def test_recover_settles_a_cut_turn_and_never_reruns(store: Store) -> None:
    asyncio.run(crash_in_turn(store, "s"))
    result = cli("recover", "s", store=store)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "turn 1 was cut off" in out
    assert "deploy (call c-deploy)" in out
    assert "NOT run again" in out
    assert "runs no tools" in out  # the safe call was reported, not re-run
    events = _decoded(store, "s")
    assert open_turn(events) is None
    assert pairing_problems(events) == []
    results = {
        e.data.call_id: e.data.status for e in events if isinstance(e, ToolResult)
    }
    assert results == {"c-deploy": "interrupted", "c-ls": "interrupted"}
    (end,) = [e for e in events if isinstance(e, TurnEnd)]
    assert end.data.status == "interrupted"
    assert asyncio.run(store.load("s")).meta.summary.status == "interrupted"
    verified = cli("verify", "s", store=store)
    assert verified.exit_code == 0

    before = store.digest()
    again = cli("recover", "s", store=store)
    assert again.exit_code == 0
    assert "nothing to recover" in again.stdout
    assert store.digest() == before, "recovering a clean session wrote to it"


def test_recover_all_as_json(store: Store) -> None:
    asyncio.run(crash_in_turn(store, "cut"))
    asyncio.run(converse(store, "clean", prompts=("hi",)))
    result = cli("recover", "--all", "--json", store=store)
    assert result.exit_code == 0
    done = {r["session_id"]: r for r in msgspec.json.decode(result.stdout)}
    assert done["clean"]["turn"] is None
    assert done["cut"]["turn"] == 1
    assert done["cut"]["interrupted"] == ["c-deploy", "c-ls"]
    assert done["cut"]["safe_not_rerun"] == ["c-ls"]


def test_recover_refuses_a_session_another_process_writes(
    store: Store, hold: Callable[[Store, str], object]
) -> None:
    asyncio.run(crash_in_turn(store, "s"))
    hold(store, "s")
    before = store.digest()
    result = cli("recover", "s", store=store)
    assert result.exit_code == 1
    line = one_line_error(result)
    assert "'s'" in line
    assert "another process" in line
    assert store.digest() == before
    ghost = cli("recover", "ghost", store=store)
    assert ghost.exit_code == 1
    assert "'ghost'" in one_line_error(ghost)
