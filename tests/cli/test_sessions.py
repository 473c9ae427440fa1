"""`turnkeep ls`, `title`, `rm`, `fork` against JSONL and SQLite stores."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from tests.cli.support import SCRIPT, Store, cli, converse, one_line_error

from turnkeep.cli.output import format_size
from turnkeep.codec import EventCodec
from turnkeep.events import (
    ToolCallData,
    TurnCheckpointData,
    TurnStartData,
    UserMessageData,
)


def sessions(result_stdout: str) -> list[dict[str, Any]]:
    page: dict[str, Any] = msgspec.json.decode(result_stdout)
    return page["sessions"]


def test_ls_of_an_empty_store(store: Store) -> None:
    result = cli("ls", store=store)
    assert result.exit_code == 0
    assert "no sessions stored" in result.stdout
    result = cli("ls", "--json", store=store)
    assert msgspec.json.decode(result.stdout) == {"sessions": [], "next_cursor": None}


def test_ls_pages_newest_first_with_summaries(store: Store) -> None:
    for sid in ("first", "second", "third"):
        asyncio.run(converse(store, sid, prompts=(f"hello from {sid}",)))
    listed = sessions(cli("ls", "--json", store=store).stdout)
    assert [s["id"] for s in listed] == ["third", "second", "first"]
    assert {s["title"] for s in listed} == {
        f"hello from {i}" for i in ("first", "second", "third")
    }
    assert all(s["events"] > 0 and s["status"] == "idle" for s in listed)

    page = cli("ls", "--limit", "2", store=store)
    assert page.exit_code == 0
    assert "third" in page.stdout
    assert "second" in page.stdout
    assert "first" not in page.stdout
    (hint,) = page.stderr.splitlines()
    cursor = hint.split("--cursor ", 1)[1]
    rest = cli("ls", "--limit", "2", "--cursor", cursor, "--json", store=store)
    assert [s["id"] for s in sessions(rest.stdout)] == ["first"]
    everything = cli("ls", "--limit", "1", "--all", "--json", store=store)
    assert [s["id"] for s in sessions(everything.stdout)] == [
        "third",
        "second",
        "first",
    ]


def test_ls_shows_turns_and_size_from_the_summaries(store: Store) -> None:
    asyncio.run(converse(store, "three", prompts=("one", "two", "three")))
    asyncio.run(converse(store, "one", prompts=("only",)))
    stored = {sid: asyncio.run(store.load(sid)) for sid in ("three", "one")}
    # The stored records' bytes (a streamed reply is one packed record).
    size = {sid: sum(map(len, asyncio.run(store.records(sid)))) for sid in stored}
    (listed_one, listed_three) = sessions(cli("ls", "--json", store=store).stdout)
    assert (listed_one["id"], listed_three["id"]) == ("one", "three")
    assert (listed_three["turns"], listed_three["size"]) == (3, size["three"])
    assert (listed_one["turns"], listed_one["size"]) == (1, size["one"])
    assert listed_three["events"] == len(stored["three"].events)

    result = cli("ls", store=store)
    assert result.exit_code == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["ID", "TITLE", "UPDATED", "TURNS", "STATUS", "SIZE"]
    three = next(r for r in rows if r.startswith("three"))
    assert three.split()[-4:] == ["3", "idle", *format_size(size["three"]).split()]
    assert size["three"] >= 1024  # shown in KiB, with one decimal
    assert three.endswith(" KiB")


def test_ls_keeps_one_line_per_session_in_a_narrow_terminal(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(converse(store, "s1", prompts=("only",)))
    long_title = "a title far too long for the terminal " * 4
    assert cli("title", "s1", long_title, store=store).exit_code == 0
    monkeypatch.setenv("COLUMNS", "80")
    result = cli("ls", store=store)
    assert result.exit_code == 0, result.stderr
    header, row, *rest = result.stdout.splitlines()
    assert rest == []  # the title gave way instead of wrapping
    assert header.split() == ["ID", "TITLE", "UPDATED", "TURNS", "STATUS", "SIZE"]
    assert row.startswith("s1 ")
    assert "\u2026" in row  # cut with an ellipsis
    assert row.split()[-4:-2] == ["1", "idle"]
    assert row.endswith(("B", "KiB"))


def test_sizes_are_shown_for_people() -> None:
    assert [format_size(n) for n in (0, 512, 1023, 1024, 12_595, 3 * 2**20)] == [
        "0 B",
        "512 B",
        "1023 B",
        "1.0 KiB",
        "12.3 KiB",
        "3.0 MiB",
    ]
    assert format_size(2**20 - 1) == "1.0 MiB"  # rounds up into the next unit


def test_ls_refuses_a_cursor_it_did_not_make(store: Store) -> None:
    asyncio.run(converse(store, "s", prompts=("hi",)))
    result = cli("ls", "--cursor", "not-a-cursor", store=store)
    assert result.exit_code == 1
    assert "cursor" in one_line_error(result)


def test_ls_filters_by_status_and_update_time(store: Store) -> None:
    for sid in ("first", "second", "third"):
        asyncio.run(converse(store, sid, prompts=(f"hello from {sid}",)))
    listed = sessions(cli("ls", "--json", store=store).stdout)
    stamps = {s["id"]: s["updated_at"] for s in listed}
    assert len(set(stamps.values())) == 3

    def ids(*args: str) -> list[str]:
        result = cli("ls", "--json", *args, store=store)
        assert result.exit_code == 0, result.stderr
        return [s["id"] for s in sessions(result.stdout)]

    assert ids("--status", "idle") == ["third", "second", "first"]
    assert ids("--status", "failed,interrupted") == []
    assert ids("--updated-after", str(stamps["first"])) == ["third", "second"]
    assert ids("--updated-before", str(stamps["third"])) == ["second", "first"]
    assert ids(
        "--updated-after",
        str(stamps["first"]),
        "--updated-before",
        str(stamps["third"]),
        "--status",
        "idle",
    ) == ["second"]
    assert ids("--updated-after", "2000-01-01T00:00:00Z", "--limit", "1", "--all") == [
        "third",
        "second",
        "first",
    ]
    assert ids("--updated-before", "2000-01-01") == []
    empty = cli("ls", "--status", "closed", store=store)
    assert empty.exit_code == 0
    assert "no sessions match" in empty.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--status", "sleeping"), "unknown status 'sleeping'"),
        (("--status", "idle,,failed"), "empty status"),
        (("--updated-after", "yesterday"), "cannot read 'yesterday' as a time"),
        (("--updated-before", "2026-13-01"), "as a time"),
        (("--updated-after", "99999999999999999999"), "out of range"),
    ],
)
def test_ls_refuses_a_bad_filter(
    store: Store, args: tuple[str, ...], words: str
) -> None:
    asyncio.run(converse(store, "s", prompts=("hi",)))
    result = cli("ls", *args, store=store)
    assert result.exit_code == 1
    assert words in one_line_error(result)


def test_ls_shows_stored_text_without_terminal_escapes(store: Store) -> None:
    asyncio.run(converse(store, "s\x1b[2Jx", prompts=("\x1b]0;owned\x07 hi",)))
    result = cli("ls", store=store)
    assert result.exit_code == 0
    assert "\x1b" not in result.stdout
    assert "\x07" not in result.stdout
    assert "s\\x1b[2Jx" in result.stdout


def test_an_id_with_line_breaks_or_tabs_cannot_fake_a_row(store: Store) -> None:
    forged = "s\nghost\tx\r\u2028y"
    asyncio.run(converse(store, forged, prompts=("hi",)))
    listed = cli("ls", store=store)
    assert listed.exit_code == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if line.strip()]
    assert len(rows) == 2, listed.stdout  # the header and one session
    assert "s\\x0aghost\\x09x\\x0d\\x2028y" in rows[1]
    shown = cli("show", forged, store=store)
    assert shown.exit_code == 0, shown.stderr
    (header,) = [line for line in shown.stdout.splitlines() if "ghost" in line]
    assert header.startswith("session  s\\x0aghost")
    titled = cli("title", forged, "t", store=store)
    assert titled.stdout.count("\n") == 1


def test_a_call_id_with_a_line_break_cannot_fake_a_line(store: Store) -> None:
    async def write() -> None:
        async with store.host() as host:
            session = host.sessions.create("s")
            session.append(TurnStartData(turn=1))
            session.append(UserMessageData(text="go"))
            session.append(ToolCallData(call_id="c\nFORGED", name="f", arguments={}))
            session.append(TurnCheckpointData(turn=1, reason="unsafe-tool"))
            await session.flush()

    asyncio.run(write())
    shown = cli("show", "s", store=store)
    assert shown.exit_code == 0, shown.stderr
    assert not [line for line in shown.stdout.splitlines() if "FORGED" in line[:8]]
    assert "c\\x0aFORGED" in shown.stdout


def test_title_changes_the_summary_only(store: Store) -> None:
    asyncio.run(converse(store, "s", prompts=("hi",)))
    before = asyncio.run(store.load("s"))
    result = cli("title", "s", "Trip planning", store=store)
    assert result.exit_code == 0, result.stderr
    after = asyncio.run(store.load("s"))
    assert after.events == before.events
    assert after.meta.summary.title == "Trip planning"
    assert cli("title", "s", "", store=store).exit_code == 0
    assert asyncio.run(store.load("s")).meta.summary.title is None


def test_title_of_an_unknown_session(store: Store) -> None:
    result = cli("title", "ghost", "x", store=store)
    assert result.exit_code == 1
    assert "'ghost'" in one_line_error(result)


def test_rm_asks_and_deletes_only_when_told(store: Store) -> None:
    asyncio.run(converse(store, "s", prompts=("hi",)))
    declined = cli("rm", "s", input="n\n", store=store)
    assert declined.exit_code == 1
    assert "nothing was deleted" in declined.stderr
    assert asyncio.run(store.ids()) == ["s"]
    no_terminal = cli("rm", "s", store=store)  # nobody to answer: not deleted
    assert no_terminal.exit_code == 1
    assert asyncio.run(store.ids()) == ["s"]
    accepted = cli("rm", "s", input="y\n", store=store)
    assert accepted.exit_code == 0, accepted.stderr
    assert asyncio.run(store.ids()) == []


def test_rm_yes_deletes_several(store: Store) -> None:
    for sid in ("a", "b", "c"):
        asyncio.run(converse(store, sid, prompts=("hi",)))
    result = cli("rm", "--yes", "a", "c", store=store)
    assert result.exit_code == 0, result.stderr
    assert asyncio.run(store.ids()) == ["b"]


def test_rm_of_an_unknown_session(store: Store) -> None:
    result = cli("rm", "--yes", "ghost", store=store)
    assert result.exit_code == 1
    assert "'ghost'" in one_line_error(result)


def test_rm_refuses_a_session_another_process_writes(
    store: Store, hold: Callable[[Store, str], object]
) -> None:
    asyncio.run(converse(store, "s", prompts=("hi",)))
    hold(store, "s")
    result = cli("rm", "--yes", "s", store=store)
    assert result.exit_code == 1
    line = one_line_error(result)
    assert "'s'" in line
    assert "held by another live process" in line
    assert "nothing was deleted" in line
    assert "turnkeep rm --force s" in line
    assert asyncio.run(store.ids()) == ["s"]


def test_rm_force_deletes_a_held_session_and_the_holder_is_told(
    store: Store, hold: Callable[..., subprocess.Popen[bytes]]
) -> None:
    asyncio.run(converse(store, "s", prompts=("hi",)))
    holder = hold(store, "s", probe=True)
    result = cli("rm", "--yes", "--force", "s", store=store)
    assert result.exit_code == 0, result.stderr
    assert asyncio.run(store.ids()) == []
    assert holder.stdin is not None
    assert holder.stdout is not None
    holder.stdin.close()
    told = holder.stdout.readline().decode()
    assert told.startswith("SessionDeletedError:"), told
    assert "deleted" in told
    assert holder.wait(timeout=60) == 0
    assert asyncio.run(store.ids()) == []  # the holder brought nothing back


def test_fork_copies_the_log_with_a_parent_header(store: Store) -> None:
    asyncio.run(converse(store, "src"))
    source = asyncio.run(store.load("src"))
    result = cli("fork", "src", "--id", "copy", store=store)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "copy"
    fork = asyncio.run(store.load("copy"))
    assert fork.events == source.events
    parent = fork.meta.header.parent
    assert parent is not None
    assert (parent.session_id, parent.seq) == ("src", len(source.events))
    assert fork.meta.summary.title == source.meta.summary.title


def test_fork_at_a_seq_keeps_that_prefix(store: Store) -> None:
    asyncio.run(converse(store, "src"))
    source = asyncio.run(store.load("src"))
    result = cli("fork", "src", "--at", "5", "--title", "retry", store=store)
    assert result.exit_code == 0, result.stderr
    new_id = result.stdout.strip()
    fork = asyncio.run(store.load(new_id))
    assert fork.events == source.events[:5]
    assert fork.meta.summary.title == "retry"
    # Cut inside a turn: the fork is marked for recovery.
    assert fork.meta.summary.status == "interrupted"
    EventCodec().decode_log(fork.events, session_id=new_id)


def test_fork_refusals(store: Store) -> None:
    asyncio.run(converse(store, "src", prompts=("hi",)))
    count = len(asyncio.run(store.load("src")).events)
    too_far = cli("fork", "src", "--at", str(count + 1), store=store)
    assert too_far.exit_code == 1
    assert f"{count} events" in one_line_error(too_far)
    asyncio.run(converse(store, "taken", prompts=("hi",)))
    taken = cli("fork", "src", "--id", "taken", store=store)
    assert taken.exit_code == 1
    assert "'taken' already exists" in one_line_error(taken)
    ghost = cli("fork", "ghost", store=store)
    assert ghost.exit_code == 1
    assert "'ghost'" in one_line_error(ghost)
    zero = cli("fork", "src", "--at", "0", store=store)
    assert zero.exit_code == 2  # usage: a fork needs at least one event


def test_ctrl_c_at_the_question_deletes_nothing(store: Store) -> None:
    asyncio.run(converse(store, "s", prompts=("hi",)))
    proc = subprocess.Popen(
        [str(SCRIPT), "--store", store.spec, "rm", "s"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        seen = b""
        while not seen.endswith(b"[y/N]: "):  # the question has no newline
            chunk = os.read(proc.stderr.fileno(), 1024)
            assert chunk, seen
            seen += chunk
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 1
        assert b"nothing was deleted" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert asyncio.run(store.ids()) == ["s"]
