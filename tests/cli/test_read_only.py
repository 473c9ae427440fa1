"""Read-only commands work on a store the user cannot write (issue 12 point 13).

`ls`, `show`, `verify`, `export` and `audit` on a JSONL folder, an SQLite folder and
an SQLite file (in a writable folder) that are read-only
(`tests.support.readonly`: a read-only bind mount as root, `chmod`
otherwise), where a command that writes (a lock file, a repaired tail, a
migrated header, an SQLite writer connection) fails.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest
from tests.cli.conftest import make_store
from tests.cli.support import SCRIPT, Store, converse
from tests.support import readonly as read_only

COMMANDS = (
    ["ls"],
    ["ls", "--json"],
    ["show", "s"],
    ["show", "s", "--events"],
    ["verify", "--all"],
    ["verify", "s"],
    ["export", "s"],
    ["audit"],
    ["audit", "s", "--json"],
)


def run_read_only(root: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """`turnkeep ARGS` with `root` (a folder and all below it, or a file) read-only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEP_")}
    return read_only.run_read_only(root, [str(SCRIPT), *args], env=env)


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_read_only_commands_on_a_read_only_jsonl_folder(
    jsonl_store: Store, args: list[str]
) -> None:
    asyncio.run(converse(jsonl_store, "s"))
    before = jsonl_store.digest()
    done = run_read_only(jsonl_store.path.parent, ["--store", jsonl_store.spec, *args])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert "Traceback" not in done.stderr
    assert jsonl_store.digest() == before


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_read_only_commands_on_a_read_only_sqlite_folder(
    sqlite_store: Store, args: list[str]
) -> None:
    """The folder holds the file alone (the writer closed: no -wal, no -shm)."""
    asyncio.run(converse(sqlite_store, "s"))
    folder = sqlite_store.path.parent
    before = sqlite_store.digest()
    # That read (`mode=ro`) left an empty -wal and a -shm behind; without
    # them SQLite cannot open the WAL index in a read-only folder.
    for suffix in ("-wal", "-shm"):
        sidecar = sqlite_store.path.with_name(sqlite_store.path.name + suffix)
        assert suffix == "-shm" or sidecar.stat().st_size == 0
        sidecar.unlink()
    assert sorted(p.name for p in folder.iterdir()) == [sqlite_store.path.name]
    file_bytes = sqlite_store.path.read_bytes()
    done = run_read_only(folder, ["--store", sqlite_store.spec, *args])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert "Traceback" not in done.stderr
    assert sqlite_store.digest() == before
    assert sqlite_store.path.read_bytes() == file_bytes


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_read_only_commands_on_a_read_only_sqlite_file(
    sqlite_store: Store, args: list[str]
) -> None:
    """The file is read-only, its folder writable (SQLite may add its -shm)."""
    asyncio.run(converse(sqlite_store, "s"))
    before = sqlite_store.digest()
    file_bytes = sqlite_store.path.read_bytes()
    done = run_read_only(sqlite_store.path, ["--store", sqlite_store.spec, *args])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert "Traceback" not in done.stderr
    assert sqlite_store.digest() == before
    assert sqlite_store.path.read_bytes() == file_bytes


@pytest.mark.parametrize(
    ("name", "target"), [("jsonl", "folder"), ("sqlite", "folder"), ("sqlite", "file")]
)
def test_the_read_only_mount_stops_a_command_that_writes(
    tmp_path: Path, name: str, target: str
) -> None:
    """The harness has teeth: `title` writes, so it fails on the same mount.

    It fails with a clear message naming the store, not a traceback.
    """
    store = make_store(name, tmp_path)
    asyncio.run(converse(store, "s"))
    before = store.digest()
    root = store.path if target == "file" else store.path.parent
    done = run_read_only(root, ["--store", store.spec, "title", "s", "new"])
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    if name == "sqlite":
        assert str(store.path) in done.stderr
    assert store.digest() == before
