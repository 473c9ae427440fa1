"""Paths a user names are never written through a symbolic link (R21).

`export -o`, `backup DEST` and every other file the command writes at a
path from its user: a link at that path (to a file, a FIFO, nowhere) is
refused with `UnsafePathError` naming it and nothing is written anywhere; a
pipe or terminal named directly is written in place; `-o -` is stdout; a
folder on the way reached through another user's link inside a sticky
world-writable folder is refused, as Linux's `protected_symlinks` does.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import stat
import threading
from pathlib import Path

import pytest
from tests.cli.support import Store, cli, converse, one_line_error
from tests.support import needs

from turnkeep.cli.files import safe_folder, write_private
from turnkeep.errors import UnsafePathError

NOBODY = 65534


@pytest.fixture
def exported(jsonl_store: Store) -> Store:
    """A store holding session `s` (one turn)."""
    asyncio.run(converse(jsonl_store, "s", prompts=("hi",)))
    return jsonl_store


def digest(path: Path) -> tuple[str, int]:
    info = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), stat.S_IMODE(info.st_mode)


def test_export_refuses_a_link_to_a_file_and_leaves_the_file_alone(
    exported: Store, tmp_path: Path
) -> None:
    victim = tmp_path / "etc" / "owned-by-someone"
    victim.parent.mkdir()
    victim.write_bytes(b"precious\n")
    victim.chmod(0o644)
    before = digest(victim)
    link = tmp_path / "out" / "out.jsonl"
    link.parent.mkdir()
    link.symlink_to(victim)
    result = cli("export", "s", "-o", str(link), store=exported)
    assert result.exit_code == 1
    line = one_line_error(result)
    assert str(link) in line
    assert "symbolic link" in line
    assert digest(victim) == before
    assert link.is_symlink()
    assert [p.name for p in victim.parent.iterdir()] == ["owned-by-someone"]
    assert [p.name for p in link.parent.iterdir()] == ["out.jsonl"]


def test_export_refuses_a_dangling_link_and_creates_nothing(
    exported: Store, tmp_path: Path
) -> None:
    where = tmp_path / "elsewhere"
    where.mkdir()
    link = tmp_path / "out.jsonl"
    link.symlink_to(where / "created-through-the-link")
    result = cli("export", "s", "-o", str(link), store=exported)
    assert result.exit_code == 1
    assert "symbolic link" in one_line_error(result)
    assert list(where.iterdir()) == []


def test_a_link_to_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    # Opening a FIFO for writing blocks until a reader comes: refusing the
    # link must happen before any open, or this test hangs.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "out"
    link.symlink_to(fifo)
    with pytest.raises(UnsafePathError, match="symbolic link") as caught:
        write_private(link, b"data")
    assert str(link) in str(caught.value)
    assert caught.value.code == "unsafe-path"


def test_a_fifo_named_directly_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "pipes" / "fifo"
    fifo.parent.mkdir()
    os.mkfifo(fifo, 0o640)
    got: list[bytes] = []

    def read() -> None:
        with fifo.open("rb") as pipe:
            got.append(pipe.read())

    reader = threading.Thread(target=read)
    reader.start()
    write_private(fifo, b"through the pipe\n")
    reader.join(timeout=30)
    assert got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert stat.S_IMODE(fifo.lstat().st_mode) == 0o640
    assert [p.name for p in fifo.parent.iterdir()] == ["fifo"]


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        with pytest.raises(UnsafePathError, match="a socket"):
            write_private(path, b"data")


def test_dash_means_standard_output(
    exported: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli("export", "s", "-o", "-", store=exported)
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes.startswith(b'{"format":"turnkeep-export"')
    lines = result.stdout_bytes.splitlines()
    assert lines[1:] == cli("export", "s", store=exported).stdout_bytes.splitlines()[1:]
    assert not (tmp_path / "-").exists()


def test_backup_refuses_a_link_as_its_destination(
    exported: Store, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    link = tmp_path / "dest"
    link.symlink_to(empty)
    result = cli("backup", str(link), store=exported)
    assert result.exit_code == 1
    line = one_line_error(result)
    assert "symbolic link" in line
    assert str(link) in line
    assert list(empty.iterdir()) == []


@pytest.fixture
def sticky(tmp_path: Path) -> Path:
    """A shared folder as `/tmp` is: world-writable and sticky."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


def _planted(sticky: Path, target: Path, *, uid: int) -> Path:
    link = sticky / "reports"
    link.symlink_to(target)
    os.lchown(link, uid, uid)
    return link


def test_a_folder_through_another_users_link_in_a_sticky_folder_is_refused(
    exported: Store, sticky: Path, tmp_path: Path
) -> None:
    needs.root("to give a link away")
    target = tmp_path / "root-only"
    target.mkdir(mode=0o700)
    link = _planted(sticky, target, uid=NOBODY)
    out = link / "s.jsonl"
    result = cli("export", "s", "-o", str(out), store=exported)
    assert result.exit_code == 1
    line = one_line_error(result)
    assert str(link) in line
    assert "another user" in line
    assert list(target.iterdir()) == []
    result = cli("backup", str(link / "backup"), store=exported)
    assert result.exit_code == 1
    assert "another user" in one_line_error(result)
    assert list(target.iterdir()) == []
    # deeper: the link is reached through a link of the user's own
    own = tmp_path / "own"
    own.symlink_to(sticky)
    with pytest.raises(UnsafePathError, match="another user"):
        safe_folder(own / "reports" / "deeper")
    assert list(target.iterdir()) == []


def test_links_the_rule_allows_are_followed(
    exported: Store, sticky: Path, tmp_path: Path
) -> None:
    needs.root("to give a folder away")
    target = tmp_path / "mine"
    target.mkdir(mode=0o700)
    link = _planted(sticky, target, uid=os.geteuid())  # our own link
    assert (
        cli("export", "s", "-o", str(link / "a.jsonl"), store=exported).exit_code == 0
    )
    assert (target / "a.jsonl").is_file()
    link.unlink()
    os.chown(sticky, NOBODY, NOBODY)  # the link's owner owns the folder too
    link = _planted(sticky, target, uid=NOBODY)
    assert (
        cli("export", "s", "-o", str(link / "b.jsonl"), store=exported).exit_code == 0
    )
    assert (target / "b.jsonl").is_file()
    plain = tmp_path / "plain"  # not sticky: any owner's link is followed
    plain.mkdir()
    other = plain / "reports"
    other.symlink_to(target)
    os.lchown(other, NOBODY, NOBODY)
    write_private(other / "c.jsonl", b"x")
    assert (target / "c.jsonl").read_bytes() == b"x"
