"""`turnkeep show` and `turnkeep tail`, and how bad input is reported.

Bad input (an unknown id, a damaged store, a store of another user, a newer
format, an unreadable store) is one line on stderr naming the session and
what to do, exit status 1, and a traceback only with `--debug`.
"""

from __future__ import annotations

import asyncio
import queue
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import msgspec
import pytest
from tests.cli.conftest import chowned
from tests.cli.support import (
    SCRIPT,
    Store,
    age,
    cli,
    converse,
    crash_in_turn,
    damage,
    one_line_error,
    store_dir,
)
from tests.support import needs

from turnkeep import AgentLoop
from turnkeep.agent.messages import derive_messages, encode_messages
from turnkeep.codec import EventCodec
from turnkeep.testing import Reply, ScriptedModel


def test_show_renders_the_conversation_with_tool_results(store: Store) -> None:
    asyncio.run(converse(store, "s"))
    result = cli("show", "s", store=store)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    for expected in (
        "session  s",
        "user",
        "hello",
        "assistant",
        "reply 0",
        "tool call lookup",
        '{"q":"x"}',
        "ok: found x",
        "turn 3",
    ):
        assert expected in out, expected
    assert "INTERRUPTED" not in out
    # The call's result is printed right under the call.
    assert out.index("tool call lookup") < out.index("ok: found x")


def test_show_marks_interrupted_calls_and_the_cut_turn(store: Store) -> None:
    asyncio.run(crash_in_turn(store, "s"))
    out = cli("show", "s", store=store).stdout
    assert out.count("INTERRUPTED: no result, outcome unknown") == 2
    assert "tool call deploy" in out
    assert "turn 1 was cut off" in out
    assert "turnkeep recover s" in out


def test_show_events_prints_the_stored_bytes_verbatim(store: Store) -> None:
    asyncio.run(converse(store, "s"))
    stored = asyncio.run(store.load("s")).events
    result = cli("show", "s", "--events", store=store)
    assert result.exit_code == 0
    assert result.stdout.encode().splitlines() == stored


def test_show_messages_is_derive_messages(store: Store) -> None:
    asyncio.run(crash_in_turn(store, "s"))
    stored = asyncio.run(store.load("s")).events
    expected = encode_messages(
        derive_messages(EventCodec().decode_log(stored, session_id="s"))
    )
    result = cli("show", "s", "--messages", store=store)
    assert result.exit_code == 0
    assert msgspec.json.decode(result.stdout) == msgspec.json.decode(expected)


def test_show_totals_the_usage_of_the_turns(store: Store) -> None:
    asyncio.run(converse(store, "s"))
    out = cli("show", "s", store=store).stdout
    assert "usage    3 turn(s): tokens in not reported, out not reported;" in out
    shown: dict[str, Any] = msgspec.json.decode(
        cli("show", "s", "--json", store=store).stdout
    )
    usage = shown["usage"]
    assert usage["turns"] == 3
    assert usage["input_tokens"] is None
    assert usage["events"] > 0
    assert usage["bytes"] > 0


def test_show_json(store: Store) -> None:
    asyncio.run(crash_in_turn(store, "s"))
    shown: dict[str, Any] = msgspec.json.decode(
        cli("show", "s", "--json", store=store).stdout
    )
    assert shown["session"]["id"] == "s"
    assert shown["open_turn"] == 1
    assert shown["interrupted_calls"] == ["c-deploy", "c-ls"]
    assert shown["messages"][0] == {"role": "user", "content": "deploy to prod"}


def test_show_takes_one_output_mode(store: Store) -> None:
    result = cli("show", "s", "--events", "--json", store=store)
    assert result.exit_code == 2


def test_unknown_session_is_one_line_and_a_traceback_only_with_debug(
    store: Store,
) -> None:
    asyncio.run(converse(store, "s", prompts=("hi",)))
    result = cli("show", "ghost", store=store)
    assert result.exit_code == 1
    line = one_line_error(result)
    assert "'ghost'" in line
    assert "turnkeep ls" in line
    debug = cli("show", "ghost", "--debug", store=store)
    assert debug.exit_code == 1
    assert "Traceback" in debug.stderr
    assert "SessionNotFoundError" in debug.stderr


def test_corrupt_session(store: Store) -> None:
    asyncio.run(converse(store, "s", prompts=("a", "b", "c", "d"), session_format=2))
    damage(store, "s")
    for command in (("show", "s"), ("tail", "s"), ("export", "s")):
        result = cli(*command, store=store)
        assert result.exit_code == 1, command
        line = one_line_error(result)
        assert "'s'" in line
        assert "turnkeep verify s" in line


def test_newer_format(store: Store) -> None:
    asyncio.run(converse(store, "s", prompts=("hi",)))
    age(store, "s")
    result = cli("show", "s", store=store)
    assert result.exit_code == 1
    line = one_line_error(result)
    assert "'s'" in line
    assert "upgrade" in line.lower()


def test_store_owned_by_another_user(store: Store) -> None:
    needs.root("to give a directory away")
    asyncio.run(converse(store, "s", prompts=("hi",)))
    with chowned(store_dir(store)):
        for command in (("ls",), ("show", "s")):
            result = cli(*command, store=store)
            assert result.exit_code == 1, command
            line = one_line_error(result)
            assert "uid 54321" in line
            assert str(store_dir(store)) in line


def test_unreadable_store(store: Store, tmp_path: Path) -> None:
    if store.name == "jsonl":
        store.path.rmdir()
        store.path.write_bytes(b"not a directory")
    else:
        store.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        store.path.write_bytes(b"this is not an SQLite database" * 200)
    result = cli("ls", store=store)
    assert result.exit_code == 1
    line = one_line_error(result)
    assert str(store.path) in line
    assert "is a file; the jsonl store is a directory" in line.lower() or (
        "not an sqlite database" in line.lower()
    )
    # Damage is not a permissions problem: no advice to check them.
    assert "permissions" not in line


def test_unknown_store_backend_and_bad_specs() -> None:
    missing = cli("--store", "nosuch:/tmp/x", "ls")
    assert missing.exit_code == 1
    assert "nosuch" in one_line_error(missing)
    malformed = cli("--store", "Not A Spec", "ls")
    assert malformed.exit_code == 2


def test_no_backend_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNKEEP_PERSISTENCE", "none")
    result = cli("ls")
    assert result.exit_code == 1
    assert "no persistence backend is active" in one_line_error(result)


def test_tail_prints_the_last_events(store: Store) -> None:
    asyncio.run(converse(store, "s"))
    stored = asyncio.run(store.load("s")).events
    result = cli("tail", "s", "-n", "3", store=store)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    assert lines[-1].split()[0] == str(len(stored) - 1)
    assert "turn/end" in lines[-1]
    raw = cli("tail", "s", "-n", "2", "--json", store=store)
    assert raw.stdout.encode().splitlines() == stored[-2:]
    assert cli("tail", "s", "-n", "0", store=store).stdout == ""


def test_tail_of_an_unknown_session(store: Store) -> None:
    result = cli("tail", "ghost", store=store)
    assert result.exit_code == 1
    assert "'ghost'" in one_line_error(result)


def _lines(stream: IO[bytes]) -> queue.Queue[bytes]:
    """Lines of a pipe, read by a thread (so the test can wait with a bound)."""
    lines: queue.Queue[bytes] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)
        lines.put(b"")

    threading.Thread(target=pump, daemon=True).start()
    return lines


async def _turn(store: Store, session_id: str, text: str) -> None:
    async with store.host() as host:
        loop = await AgentLoop.resume(
            "test-agent",
            session_id,
            host=host,
            model=ScriptedModel([Reply(text)] * 9),
            context="override",  # a writer of turns, not the session's own agent
        )
        await loop.run_turn(text)
        await loop.close()


def test_tail_follow_prints_each_committed_event_once_across_writer_restarts(
    store: Store, hold: Callable[[Store, str], subprocess.Popen[bytes]]
) -> None:
    asyncio.run(converse(store, "s", prompts=("one",)))
    start = len(asyncio.run(store.load("s")).events) - 1
    proc = subprocess.Popen(
        [
            str(SCRIPT),
            "--store",
            store.spec,
            "tail",
            "-f",
            "--json",
            "-n",
            "1",
            "--interval",
            "0.05",
            "s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        lines = _lines(proc.stdout)
        seqs = [msgspec.json.decode(lines.get(timeout=60))["seq"]]  # following now
        # Writers come and go: a clean restart per turn, one killed mid-way.
        asyncio.run(_turn(store, "s", "two"))
        holder = hold(store, "s")
        holder.kill()  # a writer that dies without releasing the session
        holder.wait()
        asyncio.run(_turn(store, "s", "after a kill"))
        asyncio.run(_turn(store, "s", "three"))
        total = len(asyncio.run(store.load("s")).events)
        while len(seqs) < total - start:
            line = lines.get(timeout=60)
            assert line, proc.stderr.read() if proc.stderr else "tail ended"
            seqs.append(msgspec.json.decode(line)["seq"])
        assert seqs == list(range(start, total))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert lines.get(timeout=60) == b""  # nothing printed twice at the end
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
