"""The throwaway cluster the server-crash tests crash, and only it.

`tests/support/pgserver.py` creates a cluster of the test's own; these checks
hold what the server-crash tests (item 3) rely on: it crashes and restarts
with WAL replay keeping committed rows, the shared server's postmaster does
not restart meanwhile, and nothing of the cluster is left afterwards.
"""

from __future__ import annotations

import psycopg
import pytest
from tests.support.pgserver import postmaster_start_time, throwaway_cluster

pytestmark = pytest.mark.postgres


def test_a_throwaway_cluster_crashes_alone_and_is_removed() -> None:
    shared_since = postmaster_start_time()
    with throwaway_cluster() as cluster:
        assert str(cluster.root) in cluster.dsn  # its own socket, not the shared one
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (n int)")
            conn.execute("INSERT INTO kept VALUES (1), (2)")
        before = postmaster_start_time(cluster.dsn)
        cluster.crash()
        assert not cluster.running()
        assert postmaster_start_time() == shared_since
        cluster.start()
        assert postmaster_start_time(cluster.dsn) != before
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT sum(n) FROM kept").fetchone()
        assert row == (3,)  # committed before the crash: replayed from the WAL
        root = cluster.root
    assert not root.exists()
    assert postmaster_start_time() == shared_since
