"""`bench_long` measures every block of every contestant and reports them."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks import bench_long


def test_every_block_is_measured_for_each_contestant(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench_long, "BLOCK", 3)
    results = asyncio.run(bench_long.run(turns=6))
    blocks = results["us_per_turn_by_block"]
    assert set(blocks) == {"memory", "jsonl", "raw"}
    assert all(len(b) == 2 and all(us > 0 for us in b) for b in blocks.values())
    assert results["last_over_first"]["raw"] == blocks["raw"][1] / blocks["raw"][0]
    bench_long.report(results)
    printed = capsys.readouterr().out
    assert "turnkeep JSONL, AgentLoop.run_turn" in printed
    assert "last/first" in printed
