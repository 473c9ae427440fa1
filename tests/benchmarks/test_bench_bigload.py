"""`bench_bigload` (reliability item 31) measures a whole load and its baseline."""

from __future__ import annotations

import pytest

from benchmarks import bench_bigload


@pytest.mark.parametrize("backend", bench_bigload.BACKENDS)
def test_a_small_session_is_measured_in_fresh_processes(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    figures = bench_bigload.measure(backend, 300, reps=1)
    assert figures["events"] == 300
    assert figures["store_bytes"] > 300 * 100
    for kind in ("load", "raw"):
        assert figures[f"{kind}_s"] > 0
        assert figures[f"{kind}_rss"] >= 0
    assert figures["load_over_raw"] == figures["load_s"] / figures["raw_s"]
    bench_bigload.report(backend, figures)
    printed = capsys.readouterr().out
    assert "load + decode" in printed
    assert "(goal <= 0.003 s:" in printed
    assert "decoded events alone" in printed


def test_the_time_goal_is_the_items_scaled_to_the_size() -> None:
    assert bench_bigload.time_goal(100_000) == 1.0
    assert bench_bigload.time_goal(1_000_000) == bench_bigload.GOALS["load_s_1m"]
