"""The Agents SDK session benchmark, run small: every contestant, every column.

Speed is never asserted (AGENTS.md); this holds what `make bench` reports:
each contestant measured on the same items as the SDK's `SQLiteSession`,
with its ratio to it, and the bytes its store holds.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import bench_openai_agents as bench


@pytest.mark.slow
@pytest.mark.postgres  # the PostgreSQL contestant must be measured
def test_every_contestant_has_every_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "TURNS", 5)
    monkeypatch.setattr(bench, "ITEMS", 40)
    monkeypatch.setattr(bench, "GETS", 3)
    results: dict[str, Any] = bench.main()
    contestants = results["contestants"]
    assert bench.BASELINE in contestants
    assert {
        "TurnkeepSession sqlite",
        "TurnkeepSession jsonl",
        "TurnkeepSession postgres",
        "SQLAlchemySession sqlite (SDK)",
        "SQLAlchemySession postgres (SDK)",
    } <= set(contestants)
    for name, figures in contestants.items():
        for key, _ in bench.COLUMNS:
            assert figures[key] > 0, (name, key)
        assert figures["bytes"] > 0, name
        assert set(results["ratios"][name]) == {k for k, _ in bench.COLUMNS} | {"bytes"}
    assert all(r == 1.0 for r in results["ratios"][bench.BASELINE].values())
