"""Plan item 25 for SQLite: settings that cannot be durable are refused.

- `synchronous` below FULL is refused, or accepted with an explicit opt-in
  that is logged;
- a database that cannot be switched to WAL is refused;
- a database on a network file system is refused unless opted in (checked
  against a mount table, as `/proc/self/mountinfo` reports one);
- the settings actually in force are the ones asked for.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from turnkeep.errors import ConfigurationError, StorageError
from turnkeep_sqlite import SqliteConfig, SqlitePersistence
from turnkeep_sqlite.files import filesystem_type, prepare_database_file

from .conftest import meta, turn_records


@pytest.mark.parametrize("level", ["NORMAL", "OFF"])
@pytest.mark.asyncio
async def test_synchronous_below_full_is_refused(
    level: str, open_store: Callable[..., SqlitePersistence]
) -> None:
    store = open_store(synchronous=level)
    with pytest.raises(ConfigurationError, match="below FULL"):
        await store.create(meta("s"))
    with pytest.raises(ConfigurationError):  # and stays refused for writes
        await store.create(meta("t"))
    assert not await store.has("s")  # reads need no writer, so no durability


@pytest.mark.asyncio
async def test_synchronous_below_full_with_opt_in_is_logged(
    open_store: Callable[..., SqlitePersistence],
    raw_db: Callable[[], sqlite3.Connection],
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = open_store(synchronous="NORMAL", allow_non_durable=True)
    with caplog.at_level(logging.WARNING, logger="turnkeep_sqlite"):
        await store.create(meta("s"))
        await store.append("s", turn_records(0, 0))
    assert any("synchronous=1" in r.getMessage() for r in caplog.records)
    assert raw_db().execute("SELECT count(*) FROM events").fetchone()[0] == 3


@pytest.mark.parametrize("level", ["FULL", "EXTRA"])
@pytest.mark.asyncio
async def test_durable_settings_are_in_force(
    level: str, open_store: Callable[..., SqlitePersistence]
) -> None:
    store = open_store(synchronous=level)
    await store.create(meta("s"))
    conn = store._writer._conn
    assert conn is not None
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert (
        conn.execute("PRAGMA synchronous").fetchone()[0]
        == {"FULL": 2, "EXTRA": 3}[level]
    )
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.isolation_level is None  # every write is an explicit BEGIN IMMEDIATE


@pytest.mark.asyncio
async def test_a_database_that_cannot_enter_wal_is_refused(
    db_path: Path, open_store: Callable[..., SqlitePersistence]
) -> None:
    db_path.parent.mkdir(mode=0o700)
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("CREATE TABLE t (x)")
        other.execute("BEGIN")
        other.execute("SELECT * FROM t").fetchall()  # a reader in rollback mode
        store = open_store(busy_timeout_ms=200)
        with pytest.raises(StorageError):
            await store.create(meta("s"))
        other.execute("COMMIT")
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        other.close()


MOUNTINFO = """\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:35 / {nfs} rw,relatime shared:20 - nfs4 server:/export rw,vers=4.2
41 22 0:36 / {smb} rw,relatime shared:21 - cifs //server/share rw
42 22 0:37 / {tmp} rw,relatime shared:22 - tmpfs tmpfs rw
"""


@pytest.fixture
def mounts(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    dirs = {name: tmp_path / name for name in ("nfs", "smb", "tmp")}
    for d in dirs.values():
        d.mkdir(mode=0o700)
    table = tmp_path / "mountinfo"
    table.write_text(MOUNTINFO.format(**{k: str(v) for k, v in dirs.items()}))
    return table, dirs


def test_file_system_type_is_read_from_the_mount_table(
    mounts: tuple[Path, dict[str, Path]],
) -> None:
    table, dirs = mounts
    assert filesystem_type(dirs["nfs"] / "deeper", table) == "nfs4"
    assert filesystem_type(dirs["smb"], table) == "cifs"
    assert filesystem_type(dirs["tmp"], table) == "tmpfs"
    assert filesystem_type(Path("/usr"), table) == "ext4"


@pytest.mark.parametrize("fs", ["nfs", "smb"])
def test_network_file_systems_are_refused_unless_opted_in(
    mounts: tuple[Path, dict[str, Path]], fs: str
) -> None:
    table, dirs = mounts
    path = dirs[fs] / "s.sqlite3"
    with pytest.raises(ConfigurationError, match="file system"):
        prepare_database_file(path, allow_network=False, mountinfo=table)
    assert not path.exists()
    prepare_database_file(path, allow_network=True, mountinfo=table)
    assert path.exists()


def test_local_file_systems_are_accepted(mounts: tuple[Path, dict[str, Path]]) -> None:
    table, dirs = mounts
    prepare_database_file(
        dirs["tmp"] / "s.sqlite3", allow_network=False, mountinfo=table
    )


def test_unknown_options_are_configuration_errors() -> None:
    from turnkeep.config import structure_config

    with pytest.raises(ConfigurationError, match="journal"):
        structure_config(
            {"journal": "delete"}, SqliteConfig, source="[backends.sqlite]"
        )
    with pytest.raises(ConfigurationError):
        structure_config({"synchronous": "SOMETIMES"}, SqliteConfig, source="env")
    with pytest.raises(ConfigurationError):
        structure_config({"busy_timeout_ms": "0"}, SqliteConfig, source="env")
