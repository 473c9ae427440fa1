"""`bench_pgfleet`, run small: three fleets of worker processes per history size."""

from __future__ import annotations

import os

import psycopg
import pytest

from benchmarks import bench_pgfleet, streamed


@pytest.mark.slow
@pytest.mark.postgres
def test_each_fleet_takes_every_request_and_the_schemas_are_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bench_pgfleet, "HISTORY", (300, 600))
    monkeypatch.setattr(bench_pgfleet, "WORKERS", 2)
    monkeypatch.setattr(bench_pgfleet, "SESSIONS", 4)
    monkeypatch.setattr(bench_pgfleet, "REQUESTS", 6)
    results = bench_pgfleet.main()
    assert results is not None
    points = results["curve"]
    # The second size is what the first fleets left: 1 + 3 turns per session.
    assert [p["history_events"] for p in points] == [307, 4 * 307]
    for point in points:
        for mode in bench_pgfleet.MODES:
            figures = point[mode]
            assert figures["turns_per_s"] > 0
            assert 0 < figures["p50_ms"] <= figures["p99_ms"]
        assert point["open_over_pinned"] == pytest.approx(
            point["open"]["turns_per_s"] / point["pinned"]["turns_per_s"]
        )
    with psycopg.connect(streamed.DSN) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE %s",
            (f"tk_bench_pgfleet_{os.getpid()}%",),
        ).fetchone()
    assert left == (0,)


def test_a_raw_turn_holds_the_events_a_streamed_turn_appends() -> None:
    rows = bench_pgfleet_rows()
    assert [seq for _, seq, _ in rows] == list(range(10, 10 + len(rows)))
    # turn/start, the user's message, the call, its result, 300 deltas, the
    # reply, turn/end: within one event of what the loop appends.
    assert abs(len(rows) - bench_pgfleet.EVENTS_PER_TURN) <= 2


def bench_pgfleet_rows() -> list[tuple[str, int, bytes]]:
    from benchmarks import fleet_worker

    return fleet_worker.raw_turn_rows("s", 10, 1)
