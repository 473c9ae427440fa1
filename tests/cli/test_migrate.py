"""`turnkeep migrate` across every installed backend pair, interrupted and resumed.

Each pair is interrupted in the middle of a session (Ctrl-C, as a
`KeyboardInterrupt` from the destination's write) and run again: sessions
already complete are skipped, the partial one continues from the
destination's next seq, and at the end every session matches the source
byte for byte, with its header and summary. The source never changes. One
run per direction between the embedded backends is killed with SIGKILL
instead, at whatever point it reached.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.cli.conftest import make_store
from tests.cli.support import (
    SCRIPT,
    Store,
    cli,
    converse,
    crash_in_turn,
    one_line_error,
)

from turnkeep.codec import EventRecord
from turnkeep_jsonl import JsonlPersistence
from turnkeep_postgres import PostgresPersistence
from turnkeep_sqlite import SqlitePersistence

BATCH = 4
CLASSES: dict[str, type[Any]] = {
    "jsonl": JsonlPersistence,
    "sqlite": SqlitePersistence,
    "postgres": PostgresPersistence,
}


def populate(store: Store) -> list[str]:
    """Four sessions of different shapes; returns their ids, newest first."""
    asyncio.run(converse(store, "small", prompts=("hi",)))
    assert (
        cli("fork", "small", "--at", "3", "--id", "forked", store=store).exit_code == 0
    )
    asyncio.run(crash_in_turn(store, "cut"))
    asyncio.run(
        converse(store, "big", prompts=tuple(f"question {i}" for i in range(5)))
    )
    assert cli("title", "big", "The big one", store=store).exit_code == 0
    ids = asyncio.run(store.ids())
    assert ids[0] == "big"
    return ids


def json_lines(stdout: str) -> list[dict[str, Any]]:
    return [msgspec.json.decode(line) for line in stdout.splitlines() if line]


def assert_same(source: Store, target: Store, ids: Sequence[str]) -> None:
    for sid in ids:
        a = asyncio.run(source.load(sid))
        b = asyncio.run(target.load(sid))
        assert b.events == a.events, sid
        assert b.meta.header == a.meta.header, sid
        want, have = a.meta.summary, b.meta.summary
        assert (have.title, have.first_prompt, have.status) == (
            want.title,
            want.first_prompt,
            want.status,
        ), sid


def interrupted_then_resumed(
    source: Store, target: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = populate(source)
    before = source.digest() if source.name != "postgres" else None
    sizes = {sid: len(asyncio.run(source.load(sid)).events) for sid in ids}
    # Ctrl-C during the second write of the second session: the first is
    # complete, the second half copied, the rest untouched.
    stop_at = math.ceil(sizes[ids[0]] / BATCH) + 1
    assert sizes[ids[1]] > BATCH
    cls = CLASSES[target.name]
    original = cls.append
    calls = itertools.count()

    async def append(self: Any, session_id: str, events: Sequence[EventRecord]) -> None:
        if next(calls) == stop_at:
            raise KeyboardInterrupt
        await original(self, session_id, events)

    monkeypatch.setattr(cls, "append", append)
    spec = ("--from", source.spec, "--to", target.spec)
    first = cli("migrate", *spec, "--all", "--batch", str(BATCH), "--json")
    monkeypatch.undo()
    assert first.exit_code == 130, first.output
    assert "run the same command again" in first.stderr
    assert asyncio.run(target.ids()) == ids[:2]
    partial = asyncio.run(target.load(ids[1])).events
    assert len(partial) == BATCH

    second = cli("migrate", *spec, "--all", "--batch", str(BATCH), "--json")
    assert second.exit_code == 0, second.output
    *done, report = json_lines(second.stdout)
    actions = {d["session_id"]: (d["action"], d["copied"]) for d in done}
    assert actions[ids[0]] == ("complete", 0)
    assert actions[ids[1]] == ("resumed", sizes[ids[1]] - BATCH)
    for sid in ids[2:]:
        assert actions[sid] == ("copied", sizes[sid])
    assert report["ok"] is True
    assert {
        c["session_id"]: c["destination_events"] for c in report["verified"]
    } == sizes
    assert_same(source, target, ids)

    third = cli("migrate", *spec, "--all")
    assert third.exit_code == 0
    assert "counts and checksums match" in third.stdout
    if before is not None:
        assert source.digest() == before, "migrate modified its source"


@pytest.mark.parametrize(
    ("source", "target"), [("jsonl", "sqlite"), ("sqlite", "jsonl")]
)
def test_migrate_between_embedded_backends_resumes(
    source: str, target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    interrupted_then_resumed(
        make_store(source, tmp_path / "src"),
        make_store(target, tmp_path / "dst"),
        monkeypatch,
    )


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("jsonl", "postgres"),
        ("postgres", "jsonl"),
        ("sqlite", "postgres"),
        ("postgres", "sqlite"),
    ],
)
def test_migrate_with_postgres_resumes(
    source: str,
    target: str,
    pg_store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def pick(name: str) -> Store:
        return pg_store if name == "postgres" else make_store(name, tmp_path / name)

    interrupted_then_resumed(pick(source), pick(target), monkeypatch)


@pytest.mark.parametrize(
    ("source", "target"), [("jsonl", "sqlite"), ("sqlite", "jsonl")]
)
def test_migrate_killed_midway_resumes(
    source: str, target: str, tmp_path: Path
) -> None:
    src = make_store(source, tmp_path / "src")
    dst = make_store(target, tmp_path / "dst")
    ids = populate(src)
    before = src.digest()
    command = [str(SCRIPT), "migrate", "--from", src.spec, "--to", dst.spec, "--all"]
    proc = subprocess.Popen(
        [*command, "--batch", "1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # one session is done: kill it from here
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert msgspec.json.decode(first)["session_id"] == ids[0]

    resumed = subprocess.run([*command, "--json"], capture_output=True, check=False)
    assert resumed.returncode == 0, resumed.stderr
    *done, report = json_lines(resumed.stdout.decode())
    assert sorted(d["session_id"] for d in done) == sorted(ids)
    assert [d["action"] for d in done if d["session_id"] == ids[0]] == ["complete"]
    assert report["ok"] is True
    assert_same(src, dst, ids)
    assert src.digest() == before


def test_migrate_never_overwrites_a_different_session(tmp_path: Path) -> None:
    src = make_store("jsonl", tmp_path / "src")
    dst = make_store("sqlite", tmp_path / "dst")
    asyncio.run(converse(src, "same", prompts=("one",)))
    asyncio.run(converse(src, "other", prompts=("two",)))
    asyncio.run(converse(dst, "same", prompts=("something else",)))
    kept = asyncio.run(dst.load("same")).events
    result = cli("migrate", "--from", src.spec, "--to", dst.spec, "--all", "--json")
    assert result.exit_code == 1
    *done, report = json_lines(result.stdout)
    actions = {d["session_id"]: d["action"] for d in done}
    assert actions == {"same": "conflict", "other": "copied"}
    assert report["ok"] is False
    assert asyncio.run(dst.load("same")).events == kept
    assert_same(src, dst, ["other"])


def test_migrate_selected_sessions_and_usage(tmp_path: Path) -> None:
    src = make_store("jsonl", tmp_path / "src")
    dst = make_store("sqlite", tmp_path / "dst")
    asyncio.run(converse(src, "a", prompts=("one",)))
    asyncio.run(converse(src, "b", prompts=("two",)))
    spec = ("--from", src.spec, "--to", dst.spec)
    result = cli("migrate", *spec, "b")
    assert result.exit_code == 0, result.output
    assert asyncio.run(dst.ids()) == ["b"]
    missing = cli("migrate", *spec, "ghost", "--json")
    assert missing.exit_code == 1
    (line, _report) = json_lines(missing.stdout)
    assert line["action"] == "failed"
    assert "'ghost'" in line["error"]
    assert cli("migrate", *spec).exit_code == 2
    assert cli("migrate", *spec, "--all", "a").exit_code == 2
    assert cli("migrate", "--from", src.spec, "--to", src.spec, "--all").exit_code == 2
    assert (
        cli("migrate", "--from", "bad spec", "--to", dst.spec, "--all").exit_code == 2
    )
    unknown = cli("migrate", "--from", "nosuch:/x", "--to", dst.spec, "--all")
    assert unknown.exit_code == 1
    assert "nosuch" in one_line_error(unknown)
