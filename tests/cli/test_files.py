"""What the command writes is private (0600, folders 0700) whatever the umask.

Issue 12 point 11: `export -o`, and the stores `import` and `migrate`
create, with a permissive umask (0o022, the usual default, and 0o000).
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from tests.cli.conftest import new_store
from tests.cli.support import Store, cli, converse

from turnkeep.cli.files import private_dir, write_private

UMASKS = (0o022, 0o000)


@pytest.fixture(params=UMASKS, ids=lambda m: f"umask{m:03o}")
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """Run the test under a permissive umask (restored afterwards)."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_private_tree(root: Path) -> None:
    """Every folder under `root` (and itself) is 0700, every file 0600."""
    assert mode(root) == 0o700, root
    for path in root.rglob("*"):
        if path.is_dir():
            assert mode(path) == 0o700, path
        else:
            assert mode(path) == 0o600, path


def test_export_to_a_new_file_is_private(
    store: Store, tmp_path: Path, umask: int
) -> None:
    del umask
    asyncio.run(converse(store, "s", prompts=("hi",)))
    out = tmp_path / "new" / "deeper" / "s.jsonl"
    result = cli("export", "s", "-o", str(out), store=store)
    assert result.exit_code == 0, result.stderr
    assert mode(out) == 0o600
    assert mode(out.parent) == 0o700
    assert mode(out.parent.parent) == 0o700
    lines = out.read_bytes().splitlines()
    assert lines[1:] == cli("export", "s", store=store).stdout_bytes.splitlines()[1:]
    assert [p.name for p in out.parent.iterdir()] == ["s.jsonl"]  # no temp left


def test_export_over_an_existing_file_makes_it_private(
    store: Store, tmp_path: Path, umask: int
) -> None:
    del umask
    asyncio.run(converse(store, "s", prompts=("hi",)))
    out = tmp_path / "s.jsonl"
    out.write_bytes(b"old")
    out.chmod(0o644)
    assert cli("export", "s", "-o", str(out), store=store).exit_code == 0
    assert mode(out) == 0o600
    assert out.read_bytes().startswith(b'{"format":"turnkeep-export"')


def test_export_to_a_device_writes_in_place(store: Store) -> None:
    asyncio.run(converse(store, "s", prompts=("hi",)))
    before = mode(Path("/dev/null"))
    assert cli("export", "s", "-o", "/dev/null", store=store).exit_code == 0
    assert mode(Path("/dev/null")) == before
    assert Path("/dev/null").is_char_device()


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_stores_the_command_creates_are_private(
    backend: str, tmp_path: Path, umask: int
) -> None:
    del umask
    chat = tmp_path / "chat.json"
    chat.write_bytes(msgspec.json.encode([{"role": "user", "content": "hi"}]))
    imported = new_store(backend, tmp_path / "imported")
    result = cli("import", str(chat), "--id", "s", store=imported)
    assert result.exit_code == 0, result.stderr
    assert_private_tree(tmp_path / "imported")
    other = "sqlite" if backend == "jsonl" else "jsonl"
    migrated = new_store(other, tmp_path / "migrated")
    result = cli("migrate", "--from", imported.spec, "--to", migrated.spec, "--all")
    assert result.exit_code == 0, result.output
    assert_private_tree(tmp_path / "migrated")


def test_write_private_replaces_atomically(
    tmp_path: Path, umask: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    del umask
    target = tmp_path / "a" / "f"
    private_dir(target.parent)
    target.write_bytes(b"old")

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", failing_fsync)
        with pytest.raises(OSError, match="Input/output"):
            write_private(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in target.parent.iterdir()] == ["f"]
    write_private(target, b"new")
    assert target.read_bytes() == b"new"
    assert mode(target) == 0o600
    assert mode(target.parent) == 0o700


def test_private_dir_leaves_existing_folders_alone(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    private_dir(shared / "mine" / "inner")
    assert mode(shared) == 0o755
    assert mode(shared / "mine") == 0o700
    assert mode(shared / "mine" / "inner") == 0o700
