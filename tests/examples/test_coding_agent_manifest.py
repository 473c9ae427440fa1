"""The coding agent's commit manifest: its workspace's tree hash in every turn/end.

A turn's end names `workspace` -> the tree hash (`coding_agent.manifest`);
a resume whose workspace changed since is refused (`ManifestDriftError`,
the CLI says `--accept-drift`) or, accepted, recorded as `run/drift`. The
hash is cheap on an unchanged tree: each file's hash is kept by its stat.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from tests.examples.support import configure
from tests.loop.support import backend_host_config

from coding_agent import Workspace, open_agent
from coding_agent.manifest import RACY_SECONDS, TreeHasher, store_paths
from turnkeep import Host, SessionEvent
from turnkeep.errors import ManifestDriftError
from turnkeep.events import RunDrift, TurnEnd
from turnkeep.testing import Reply, ScriptedModel


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "workspace"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    (root / "notes.txt").write_text("remember\n")
    return Workspace(root)


def age(root: Path, seconds: float = 10 * RACY_SECONDS) -> None:
    """Set every file's mtime `seconds` back (past the racy window)."""
    past = time.time() - seconds
    for directory, _dirs, files in os.walk(root):
        for name in files:
            os.utime(os.path.join(directory, name), (past, past), follow_symlinks=False)


def load(tmp_path: Path, session_id: str) -> list[SessionEvent]:
    async def read() -> list[SessionEvent]:
        async with Host(backend_host_config("jsonl", tmp_path)) as host:
            loaded = await host.require_persistence().load(session_id)
            return host.codec.decode_log(loaded.events, session_id=session_id)

    return asyncio.run(read())


# -- the tree hash ----------------------------------------------------------------


def test_an_unchanged_tree_rehashes_nothing(workspace: Workspace) -> None:
    root = workspace.root
    age(root)
    hasher = TreeHasher(root)
    first = hasher.tree_hash()
    assert hasher.hashed == 2
    assert hasher.tree_hash() == first
    assert hasher.hashed == 2  # only stat'ed
    assert hasher.listing().keys() == {"src/app.py", "notes.txt"}


def test_the_hash_follows_content_not_timestamps(workspace: Workspace) -> None:
    root = workspace.root
    age(root)
    hasher = TreeHasher(root)
    first = hasher.tree_hash()
    app = root / "src" / "app.py"
    app.write_text("print('hi')\n")  # same bytes, new mtime
    assert hasher.tree_hash() == first
    app.write_text("print('bye')\n")
    changed = hasher.tree_hash()
    assert changed != first
    (root / "src" / "new.py").write_text("")
    assert hasher.tree_hash() not in (first, changed)
    (root / "src" / "new.py").unlink()
    assert hasher.tree_hash() == changed
    assert TreeHasher(root).tree_hash() == changed  # a fresh process agrees


def test_a_recent_write_of_the_same_size_and_mtime_is_still_seen(
    workspace: Workspace,
) -> None:
    """Within the racy window a file is hashed again, whatever its stat says."""
    app = workspace.root / "src" / "app.py"
    hasher = TreeHasher(workspace.root)
    first = hasher.tree_hash()
    stamp = app.stat().st_mtime_ns
    app.write_text("print('HI')\n")  # same size
    os.utime(app, ns=(stamp, stamp))  # same mtime, as a coarse clock would give
    assert hasher.tree_hash() != first


def test_git_and_the_store_are_not_the_workspace(
    workspace: Workspace, tmp_path: Path
) -> None:
    root = workspace.root
    age(root)
    before = TreeHasher(root).tree_hash()
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "store").mkdir()
    (root / "store" / "s.jsonl").write_text("{}\n")
    (root / "db.sqlite3").write_text("x")
    (root / "db.sqlite3-wal").write_text("x")
    skip = store_paths(
        {
            "jsonl": {"path": str(root / "store")},
            "sqlite": {"path": str(root / "db.sqlite3")},
        }
    )
    assert TreeHasher(root, skip).tree_hash() == before
    assert TreeHasher(root).tree_hash() != before  # the store is content otherwise


def test_a_symlink_is_versioned_by_its_target(workspace: Workspace) -> None:
    root = workspace.root
    (root / "link").symlink_to("notes.txt")
    hasher = TreeHasher(root)
    first = hasher.tree_hash()
    (root / "link").unlink()
    (root / "link").symlink_to("src/app.py")
    assert hasher.tree_hash() != first


# -- the agent --------------------------------------------------------------------


def test_a_changed_workspace_is_refused_on_resume_unless_accepted(
    workspace: Workspace, tmp_path: Path
) -> None:
    config = backend_host_config("jsonl", tmp_path)
    replies = [Reply(text="hello"), Reply(text="again")]

    async def first() -> str:
        async with Host(config) as host:
            loop = await open_agent(host, workspace, model=ScriptedModel(replies))
            await loop.run_turn("hi")
            await loop.close()
            return loop.session_id

    async def resume(session_id: str, *, accept: bool) -> str:
        async with Host(config) as host:
            loop = await open_agent(
                host,
                workspace,
                model=ScriptedModel(replies),
                session_id=session_id,
                accept_drift=accept,
            )
            result = await loop.run_turn("again?")
            await loop.close()
            return result.status

    session_id = asyncio.run(first())
    [end] = [e for e in load(tmp_path, session_id) if isinstance(e, TurnEnd)]
    recorded = TreeHasher(workspace.root).tree_hash()
    assert end.data.manifest == {"workspace": recorded}

    (workspace.root / "notes.txt").write_text("edited by hand\n")
    before = load(tmp_path, session_id)

    async def refused() -> None:
        async with Host(config) as host:
            with pytest.raises(ManifestDriftError) as caught:
                await open_agent(
                    host, workspace, model=ScriptedModel(replies), session_id=session_id
                )
            [difference] = caught.value.differences
            assert difference.name == "workspace"
            assert difference.recorded == recorded
            assert difference.current == TreeHasher(workspace.root).tree_hash()
            assert not host.sessions.list()  # refused and let go

    asyncio.run(refused())
    assert load(tmp_path, session_id) == before  # nothing appended
    assert asyncio.run(resume(session_id, accept=True)) == "completed"
    events = load(tmp_path, session_id)
    [drift] = [e for e in events if isinstance(e, RunDrift)]
    now = TreeHasher(workspace.root).tree_hash()
    assert drift.data.manifest == {"workspace": now}
    ends = [e for e in events if isinstance(e, TurnEnd)]
    assert ends[-1].data.manifest == {"workspace": now}


def test_a_store_inside_the_workspace_is_no_drift(
    workspace: Workspace, tmp_path: Path
) -> None:
    store = workspace.root / ".sessions"
    config = backend_host_config("jsonl", tmp_path)
    config.backends["jsonl"]["path"] = str(store)
    replies = [Reply(text="hello"), Reply(text="again")]

    async def run(session_id: str | None) -> str:
        async with Host(config) as host:
            loop = await open_agent(
                host, workspace, model=ScriptedModel(replies), session_id=session_id
            )
            await loop.run_turn("hi")
            await loop.close()
            return loop.session_id

    session_id = asyncio.run(run(None))
    assert asyncio.run(run(session_id)) == session_id  # not refused


def test_the_command_line_refuses_a_changed_workspace_and_names_the_flag(
    workspace: Workspace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from coding_agent import cli

    monkeypatch.chdir(tmp_path)
    configure(tmp_path, "jsonl", tmp_path)
    models = iter(
        [
            ScriptedModel([Reply(text="hello")]),
            ScriptedModel([Reply(text="hello"), Reply(text="again")]),
            ScriptedModel([Reply(text="hello"), Reply(text="again")]),
        ]
    )
    monkeypatch.setattr(cli, "choose_model", lambda: (next(models), "test"))
    root = str(workspace.root)
    assert cli.main(["--workspace", root, "hi"]) == 0
    out = capsys.readouterr().out
    [session_id] = [
        line[9:] for line in out.splitlines() if line.startswith("session: ")
    ]
    (workspace.root / "src" / "app.py").write_text("changed\n")
    assert cli.main(["--workspace", root, "--session", session_id, "more"]) == 2
    err = capsys.readouterr().err
    assert "workspace: recorded sha256:" in err
    assert "--accept-drift" in err
    flag = ["--accept-drift"]
    assert cli.main(["--workspace", root, "--session", session_id, *flag, "more"]) == 0
    assert "drift recorded (changed since the last turn): workspace:" in (
        capsys.readouterr().out
    )


def test_loops_over_two_workspaces_on_one_host_name_their_own(
    workspace: Workspace, tmp_path: Path
) -> None:
    other_root = tmp_path / "other"
    other_root.mkdir()
    (other_root / "readme.md").write_text("another project\n")
    other = Workspace(other_root)

    async def both() -> tuple[str, str]:
        async with Host(backend_host_config("jsonl", tmp_path)) as host:
            ids: list[str] = []
            for root in (workspace, other):
                loop = await open_agent(host, root, model=ScriptedModel(["hi"]))
                await loop.run_turn("hi")
                await loop.close()
                ids.append(loop.session_id)
            return ids[0], ids[1]

    first, second = asyncio.run(both())
    for session_id, root in ((first, workspace), (second, other)):
        [end] = [e for e in load(tmp_path, session_id) if isinstance(e, TurnEnd)]
        assert end.data.manifest == {"workspace": TreeHasher(root.root).tree_hash()}
