"""`bench_long` measures every block of every contestant and reports them."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks import bench_long, results as results_file


def test_every_block_is_measured_for_each_contestant(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench_long, "BLOCK", 3)
    results = asyncio.run(bench_long.run(turns=6))
    blocks = results["us_per_turn_by_block"]
    assert set(blocks) == {"memory", "jsonl", "raw"}
    assert all(len(b) == 2 and all(us > 0 for us in b) for b in blocks.values())
    ratios = results["last_over_first"]
    assert ratios["raw"] == blocks["raw"][1] / blocks["raw"][0]
    assert results["over_raw_drift"]["jsonl"] == ratios["jsonl"] / ratios["raw"]
    bench_long.report(results)
    printed = capsys.readouterr().out
    assert "turnkeep JSONL, AgentLoop.run_turn" in printed
    assert "last/first" in printed


def test_the_summary_shows_the_first_and_last_block() -> None:
    long = {
        "turns": 2000,
        "block": 1000,
        "us_per_turn_by_block": {
            "memory": [300.0, 330.0],
            "jsonl": [900.0, 990.0],
            "raw": [500.0, 450.0],
        },
        "last_over_first": {"memory": 1.1, "jsonl": 1.1, "raw": 0.9},
        "over_raw_drift": {"memory": 1.22, "jsonl": 1.22, "raw": 1.0},
    }
    text = results_file.summary({"machine": results_file.machine(), "bench_long": long})
    assert "One session of 2,000 turns" in text
    assert "| turnkeep JSONL, AgentLoop.run_turn | 900 | 990 | 1.10 | 1.22 |" in text
    assert "| raw write+fsync (hop), the same turn | 500 | 450 | 0.90 | 1.00 |" in text
