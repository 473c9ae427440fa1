"""`bench_contention`, run short: ten real processes on one file, both sides.

Speed is not asserted (AGENTS.md); what is held is that every flush each
side acknowledged is stored (the benchmark checks it and exits otherwise)
and the report's fields.
"""

from __future__ import annotations

import pytest

from benchmarks import bench_contention


@pytest.mark.slow
def test_both_sides_store_what_they_acknowledged_and_report_latencies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bench_contention, "SECONDS", 1.0)
    result = bench_contention.main()
    assert result["processes"] == 10
    for side in ("raw", "turnkeep"):
        r = result[side]
        assert r["flushes"] > 0, side
        assert r["events_stored"] == r["flushes"] * bench_contention.K, side
        assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"], side
