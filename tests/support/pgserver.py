"""The PostgreSQL servers the tests use: the shared one, and throwaway clusters.

- The shared server comes from `TURNKEEP_TEST_POSTGRES_DSN` (default: the
  machine's, `postgresql://postgres@127.0.0.1:5432/test`). `require_server`
  skips a test only where no server is installed at all; where one is
  installed (or `TURNKEEP_REQUIRE_POSTGRES=1`, which `.ci/run` sets, or
  the DSN is given explicitly) an unreachable server fails the test.
- `ThrowawayCluster`: a cluster of its own (`initdb` into a temporary
  directory, a Unix socket there, its own port) for tests that crash the
  server; the shared server is never stopped by a test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Generator
from pathlib import Path

import attrs
import psycopg
import pytest
from psycopg import sql

DSN = os.environ.get(
    "TURNKEEP_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)
START_HINT = (
    "no PostgreSQL server at TURNKEEP_TEST_POSTGRES_DSN "
    f"({DSN.split('@')[-1]}); start the machine's server with "
    "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` "
    "or point TURNKEEP_TEST_POSTGRES_DSN at one"
)
ETC = Path("/etc/postgresql")
LIB = Path("/usr/lib/postgresql")
REQUIRE_ENV = "TURNKEEP_REQUIRE_POSTGRES"


def server_up(dsn: str | None = None, timeout: int = 3) -> bool:
    """Whether the server at `dsn` (default: the test server) accepts connections."""
    try:
        with psycopg.connect(
            dsn or DSN, connect_timeout=timeout, autocommit=True
        ) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def drop_schema(schema: str, dsn: str | None = None) -> None:
    """Drop `schema` and everything in it, if it exists (default: test server)."""
    with psycopg.connect(dsn or DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


def installed() -> bool:
    """Whether this machine has a PostgreSQL server installed."""
    return ETC.is_dir() or shutil.which("pg_ctlcluster") is not None


def required() -> bool:
    """Whether the PostgreSQL tests must run (fail, not skip, without a server).

    They must wherever a server is installed, where CI says so
    (`TURNKEEP_REQUIRE_POSTGRES=1`), and where the DSN is given explicitly.
    """
    return (
        os.environ.get(REQUIRE_ENV) == "1"
        or "TURNKEEP_TEST_POSTGRES_DSN" in os.environ
        or installed()
    )


def require_server() -> None:
    """Pass if the test server is up; else fail, or skip where none is installed."""
    if server_up():
        return
    if required():
        pytest.fail(
            f"PostgreSQL is installed (or required) but the test server is down: "
            f"{START_HINT}",
            pytrace=False,
        )
    pytest.skip(START_HINT)


def bin_dir() -> Path:
    """The newest installed server's binaries (`initdb`, `pg_ctl`)."""
    found = sorted(
        (p for p in LIB.glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1]
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError(f"no initdb under {LIB} or on PATH")
    return Path(initdb).parent


def free_port() -> int:
    """A TCP port nothing listens on now (the throwaway cluster's own)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@attrs.define
class ThrowawayCluster:
    """A PostgreSQL cluster of the test's own, in a temporary directory.

    `initdb` refuses to run as root, so as root every server command runs as
    the `postgres` user (`runuser`), which owns the directory. The server
    listens only on a Unix socket in that directory (no TCP), under a port
    number of its own, so it can never collide with the shared server.

    Attributes:
        root: the temporary directory (data directory, socket, log).
        port: the cluster's port number (the socket's name).
        bin: the server binaries used.
    """

    root: Path
    port: int
    bin: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    @property
    def dsn(self) -> str:
        """A libpq connection string reaching this cluster's socket."""
        return f"host={self.root} port={self.port} user=postgres dbname=postgres"

    def _run(self, *argv: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run(
            [*prefix, *argv],
            capture_output=True,
            text=True,
            check=False,
            cwd=self.root,  # the postgres user may not enter the caller's cwd
        )
        if done.returncode != 0:
            tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}\n"
                f"server log tail:\n{tail}"
            )

    def init(self) -> None:
        """Create the data directory (trust auth, superuser `postgres`)."""
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",  # a throwaway directory: its creation need not be durable
        )
        settings = (
            "listen_addresses = ''\n"
            f"port = {self.port}\n"
            f"unix_socket_directories = '{self.root}'\n"
            "max_connections = 50\n"
            "shared_buffers = 16MB\n"
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(settings)

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
            "-w", "-t", "120", "start",
        )  # fmt: skip

    def crash(self) -> None:
        """Stop the server without a checkpoint (WAL replay on the next start)."""
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-m", "immediate",
            "stop",
        )  # fmt: skip

    def running(self) -> bool:
        """Whether the server runs (its postmaster answers)."""
        return server_up(self.dsn, timeout=2)


def postmaster_start_time(dsn: str | None = None) -> str:
    """When the server at `dsn` (default: the test server) last started."""
    with psycopg.connect(dsn or DSN, autocommit=True) as conn:
        row = conn.execute("SELECT pg_postmaster_start_time()::text").fetchone()
    assert row is not None
    return str(row[0])


@contextlib.contextmanager
def throwaway_cluster() -> Generator[ThrowawayCluster]:
    """A started cluster of the caller's own; stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="tk-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    cluster = ThrowawayCluster(root=root, port=free_port(), bin=bin_dir())
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        if (cluster.data / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError):
                cluster.crash()  # nothing in it is worth a checkpoint
        shutil.rmtree(root, ignore_errors=True)
