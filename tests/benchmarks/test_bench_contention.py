"""`bench_contention`, run short: ten real processes on one file, both sides.

Speed is not asserted (AGENTS.md); what is held is that the report's
figures come from real flushes, and that a round whose stored events fall
short of the flushes acknowledged stops the benchmark.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_contention


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_contention, "SECONDS", 1.0)
    monkeypatch.setattr(bench_contention, "ROUNDS", 1)


@pytest.mark.slow
@pytest.mark.usefixtures("short")
def test_both_sides_report_latencies_of_real_flushes() -> None:
    result = bench_contention.main()
    assert result["processes"] == 10
    for side in ("raw", "turnkeep"):
        r = result[side]
        assert r["flushes"] > 0, side
        assert r["flushes_per_s"] == r["flushes"], side  # one round of 1 s
        assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"], side


@pytest.mark.slow
@pytest.mark.usefixtures("short")
def test_a_round_that_stored_less_than_it_acknowledged_stops_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = bench_contention._stored_rows  # pyright: ignore[reportPrivateUsage]
    monkeypatch.setattr(
        bench_contention, "_stored_rows", lambda path: counted(path) - 1
    )
    with pytest.raises(SystemExit, match="acknowledged"):
        bench_contention.run_side("turnkeep", tmp_path / "t.sqlite3", 1.0)
