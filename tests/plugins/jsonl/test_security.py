"""Plan items 27 and 28: planted symlinks, file modes.

- 27: a symlink to a canary outside the store is planted at each predictable
  path (store directory, group directory, log, temp file, sidecar, lock,
  quarantine file, catalog, their directories), then sessions are created,
  flushed, repaired, loaded, listed, updated: the canary never changes and
  every operation that meets the link fails with a typed error.
- 28: under umask 000 and 077, directories come out 0700 and files 0600
  (temporary files included); a store directory others may write to, or
  owned by another user, is refused; `nobody` cannot read a session file.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.support import needs

from plugins.jsonl.helpers import meta, turn
from support.faultyops import CountedTokens, NoSyncFileOps
from turnkeep.errors import StorageError, TurnkeepError
from turnkeep.meta import SessionSummary
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.names import group_name, session_name

# -- 27: planted symlinks ------------------------------------------------------------


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[Callable[[], Path]]:
    """A canary file and a canary directory outside the store; unchanged at the end."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary").write_bytes(b"do not touch")
    (outside / "canary").chmod(0o644)
    (outside / "dir").mkdir()
    (outside / "dir" / "inside").write_bytes(b"nor this")

    def snapshot() -> str:
        h = hashlib.sha256()
        for path in sorted(outside.rglob("*")):
            h.update(
                f"{path.relative_to(outside)}:{stat.S_IMODE(path.stat().st_mode)}".encode()
            )
            if path.is_file():
                h.update(path.read_bytes())
        return h.hexdigest()

    before = snapshot()
    yield lambda: outside
    assert snapshot() == before, "the canary changed"


def plant(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    link.parent.chmod(0o700)
    link.symlink_to(target)


# For each planted path: which of the five actions must meet it and refuse.
# (create + flush, claim + flush with a repair, load, update, list)
EXPECT: dict[str, set[int]] = {
    "store": {0, 1, 2, 3, 4},
    "group": {0},
    "log": {1, 2, 3},
    "temp-log": {0},
    "sidecar": {1, 2, 3},
    "temp-sidecar": {3},
    "lock": {0},
    "locks-dir": {0},
    "quarantine": {1},
    "quarantine-dir": {1},
    "catalog": {0, 1, 3, 4},
    "catalog-lock": {0, 1, 3},
}
STORED_FIRST = {
    "log",
    "sidecar",
    "temp-sidecar",
    "quarantine",
    "quarantine-dir",
    "catalog",
}


def planted_paths(store: Path, where: str, tail_at: int) -> tuple[list[Path], bool]:
    """Where to plant for `where`, and whether the target is a directory.

    Temporary and quarantine names carry a token; the backend under test
    uses counted tokens, so the first few possible names are all planted.
    """
    group = store / group_name("/w")
    stem = session_name("s")
    tokens = [f"{n:016x}" for n in range(1, 7)]
    return {
        "store": ([store], True),
        "group": ([group], True),
        "log": ([group / f"{stem}.jsonl"], False),
        "temp-log": ([group / f".{stem}.{t}.jsonl.tmp" for t in tokens], False),
        "sidecar": ([group / f"{stem}.meta"], False),
        "temp-sidecar": ([group / f".{stem}.{t}.meta.tmp" for t in tokens], False),
        "lock": ([store / "locks" / f"{stem}.lock"], False),
        "locks-dir": ([store / "locks"], True),
        "quarantine": (
            [store / "quarantine" / f"{stem}.{tail_at}.{t}.broken" for t in tokens],
            False,
        ),
        "quarantine-dir": ([store / "quarantine"], True),
        "catalog": ([store / "catalog.jsonl"], False),
        "catalog-lock": ([store / "catalog.lock"], False),
    }[where]


@pytest.mark.parametrize("where", sorted(EXPECT))
@pytest.mark.asyncio
async def test_a_planted_symlink_fails_closed(
    tmp_path: Path, canary: Callable[[], Path], where: str
) -> None:
    outside = canary()
    store = tmp_path / "store"
    tail_at = 0
    if where in STORED_FIRST:
        # A stored session, stopped without a release, with a torn tail.
        first = JsonlPersistence(store, ops=NoSyncFileOps())
        await first.create(meta("s", title="t"))
        await first.append("s", turn(0, 0))
        first._impl.close()
        log = next(store.glob("g-*/*.jsonl"))
        tail_at = log.stat().st_size
        with log.open("ab") as f:
            f.write(b'{"type":"user/message","se')
    paths, is_dir = planted_paths(store, where, tail_at)
    target = outside / ("dir" if is_dir else "canary")
    for path in paths:
        path.unlink(missing_ok=True)
        plant(path, target)
    other = "s2" if where in STORED_FIRST else "s"

    async def create_and_flush(b: JsonlPersistence) -> None:
        await b.create(meta(other))
        await b.append(other, turn(0, 0))

    async def claim_and_flush(b: JsonlPersistence) -> None:
        await b.append("s", turn(1, 1))  # a claim: repair, then an owner epoch

    async def load(b: JsonlPersistence) -> None:
        await b.load("s")

    async def update(b: JsonlPersistence) -> None:
        await b.update("s", SessionSummary(title="x"))

    async def listing(b: JsonlPersistence) -> None:
        await b.list()

    actions = [create_and_flush, claim_and_flush, load, update, listing]
    refused: set[int] = set()
    for index, action in enumerate(actions):
        backend = JsonlPersistence(store, ops=CountedTokens())
        try:
            await action(backend)
        except TurnkeepError:
            refused.add(index)
        finally:
            try:
                await backend.aclose()
            except TurnkeepError:
                refused.add(index)
    assert EXPECT[where] <= refused, f"{where}: refused only {sorted(refused)}"
    assert all(p.is_symlink() for p in paths), "a planted link was replaced"


# -- 28: modes -------------------------------------------------------------------------


def modes(store: Path) -> dict[str, int]:
    return {
        str(p.relative_to(store)): stat.S_IMODE(p.lstat().st_mode)
        for p in [store, *store.rglob("*")]
    }


class ModeSpy(NoSyncFileOps):
    """Records the mode of every temporary file right before it is renamed."""

    def __init__(self) -> None:
        self.temp_modes: list[int] = []

    def replace(self, src: str, dst: str, *, dir_fd: int) -> None:
        self.temp_modes.append(stat.S_IMODE(os.stat(src, dir_fd=dir_fd).st_mode))
        super().replace(src, dst, dir_fd=dir_fd)


@pytest.fixture
def umask() -> Iterator[Callable[[int], int]]:
    """Set the process umask for the test (restored afterwards)."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


@pytest.mark.parametrize("mask", [0o000, 0o077], ids=["umask-000", "umask-077"])
@pytest.mark.asyncio
async def test_directories_are_0700_and_files_0600_whatever_the_umask(
    tmp_path: Path, umask: Callable[[int], int], mask: int
) -> None:
    umask(mask)
    store = tmp_path / "store"
    spy = ModeSpy()
    backend = JsonlPersistence(store, ops=spy)
    await backend.create(meta("s", title="t"))
    await backend.append("s", turn(0, 0))
    await backend.update("s", SessionSummary(title="u"))
    backend._impl.close()  # a crash: no release
    log = next(store.glob("g-*/*.jsonl"))
    with log.open("ab") as f:
        f.write(b"torn")
    again = JsonlPersistence(store, ops=spy)
    await again.append("s", turn(len((await again.load("s")).events), 1))
    await again.aclose()
    found = modes(store)
    assert any(name.endswith(".broken") for name in found)  # the repair ran
    for name, mode in found.items():
        path = store / name
        if path.is_dir():
            assert mode == 0o700, name
        else:
            assert mode == 0o600, name
    assert spy.temp_modes
    assert set(spy.temp_modes) == {0o600}


async def _try(store: Path, action: str) -> None:
    backend = JsonlPersistence(store)
    try:
        if action == "create":
            await backend.create(meta("s"))
        elif action == "load":
            await backend.load("s")
        else:
            await backend.list()
    finally:
        await backend.aclose()


@pytest.mark.parametrize("problem", ["group-writable", "world-writable", "foreign"])
@pytest.mark.parametrize("action", ["create", "load", "list"])
def test_an_unsafe_store_directory_is_refused(
    tmp_path: Path, problem: str, action: str
) -> None:
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    if problem == "group-writable":
        store.chmod(0o770)
    elif problem == "world-writable":
        store.chmod(0o703)
    else:
        os.chown(store, 65534, 65534)
    with pytest.raises(StorageError, match="refusing"):
        asyncio.run(_try(store, action))
    assert list(store.iterdir()) == []


async def _secret_session(store: Path) -> None:
    backend = JsonlPersistence(store)
    await backend.create(meta("s", title="secret"))
    await backend.append("s", turn(0, 0, tag="secret"))
    await backend.update("s", SessionSummary(title="secret"))
    await backend.aclose()


# A shell, not Python: the test's interpreter may live where nobody can go.
READ_AS_NOBODY = (
    'for f; do head -c 1 "$f" >/dev/null 2>&1 && echo "READ $f"; done; exit 0'
)


def test_nobody_can_read_a_session_file(tmp_path: Path) -> None:
    needs.root("to become nobody")
    top = Path(tempfile.mkdtemp())
    try:
        top.chmod(0o755)  # only the store's own modes stand in the way
        store = top / "store"
        asyncio.run(_secret_session(store))
        files = [p for p in store.rglob("*") if p.is_file()]
        assert len(files) >= 4  # log, sidecar, catalog, locks...

        def as_nobody() -> str:
            done = subprocess.run(
                ["/bin/sh", "-c", READ_AS_NOBODY, "sh", *map(str, files)],
                user=65534,
                capture_output=True,
                text=True,
                check=True,
            )
            return done.stdout

        assert as_nobody() == ""
        # Even with every directory opened up, the files' own 0600 holds.
        dirs = [store, *(p for p in store.rglob("*") if p.is_dir())]
        for d in dirs:
            d.chmod(0o755)
        assert as_nobody() == ""
    finally:
        shutil.rmtree(top)


# -- refusals name their reason --------------------------------------------------------


@pytest.mark.parametrize("action", ["create", "load", "list"])
def test_a_symlinked_store_directory_is_refused_as_a_link(
    tmp_path: Path, action: str
) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    store = tmp_path / "store"
    store.symlink_to(real)
    with pytest.raises(StorageError, match="is a symbolic link") as caught:
        asyncio.run(_try(store, action))
    assert "Not a directory" not in str(caught.value)
    assert list(real.iterdir()) == []


@pytest.mark.parametrize("problem", ["group-writable", "symlink"])
def test_a_session_in_a_refused_group_directory_names_it(
    tmp_path: Path, problem: str
) -> None:
    store = tmp_path / "store"
    asyncio.run(_secret_session(store))
    group = store / group_name("/w")
    if problem == "group-writable":
        group.chmod(0o770)
        reason = "lets others write"
    else:
        moved = tmp_path / "elsewhere"
        group.rename(moved)
        group.symlink_to(moved)
        reason = "symbolic link"
    before = {p.name: p.read_bytes() for p in group.iterdir()}
    with pytest.raises(StorageError, match=reason) as caught:
        asyncio.run(_try(store, "load"))
    assert str(group) in str(caught.value)
    assert {p.name: p.read_bytes() for p in group.iterdir()} == before
    assert not asyncio.run(_has(store, "other"))  # absent is still absent


async def _has(store: Path, session_id: str) -> bool:
    backend = JsonlPersistence(store)
    try:
        return await backend.has(session_id)
    finally:
        await backend.aclose()
