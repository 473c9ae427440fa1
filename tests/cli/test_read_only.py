"""Read-only commands work on a store the user cannot write (issue 12 point 13).

`ls`, `show`, `verify` and `export` on a JSONL folder mounted read-only.
Tests run as root, where `chmod` does not stop writes, so the store is
bind-mounted read-only in a private mount namespace (`unshare -m`); as
another user, `chmod -R a-w` does the same. Either way a write fails with
EROFS/EACCES, so a command that writes (a lock file, a repaired tail, a
migrated header) fails here.

SQLite is not covered yet: every SQLite read first opens the writer
connection (to migrate), so it fails with SQLITE_CANTOPEN on a read-only
folder; see the CLI helper's report for issue 12.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.cli.support import SCRIPT, Store, converse

COMMANDS = (
    ["ls"],
    ["ls", "--json"],
    ["show", "s"],
    ["show", "s", "--events"],
    ["verify", "--all"],
    ["verify", "s"],
    ["export", "s"],
)


def run_read_only(root: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """`turnkeep ARGS` with `root` (and all below it) read-only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEP_")}
    command = [str(SCRIPT), *args]
    if os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "a-w", str(root)], check=True)
        try:
            return subprocess.run(command, capture_output=True, text=True, env=env)
        finally:
            subprocess.run(["chmod", "-R", "u+w", str(root)], check=True)
    unshare = shutil.which("unshare")
    assert unshare is not None, "unshare (util-linux) is needed to mount read-only"
    quoted = shlex.quote(str(root))
    script = (
        f"mount --bind -o ro {quoted} {quoted} && "
        f"touch {quoted}/probe 2>/dev/null && exit 99; exec {shlex.join(command)}"
    )
    done = subprocess.run(
        [unshare, "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode != 99, "the bind mount did not make the store read-only"
    return done


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


def test_the_read_only_mount_stops_a_command_that_writes(jsonl_store: Store) -> None:
    """The harness has teeth: `title` writes, so it fails on the same mount."""
    asyncio.run(converse(jsonl_store, "s"))
    before = jsonl_store.digest()
    done = run_read_only(
        jsonl_store.path.parent, ["--store", jsonl_store.spec, "title", "s", "new"]
    )
    assert done.returncode == 1, done.stderr
    assert jsonl_store.digest() == before
