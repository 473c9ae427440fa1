"""The LangGraph checkpointer benchmark, run small: every saver, every step.

Speed is never asserted (AGENTS.md); these tests hold that each contestant
ran the whole graph, sync and async, that what the summary is built from is
there, and that the PostgreSQL savers take part wherever a server answers.
"""

from __future__ import annotations

import asyncio

import pytest
from tests.support import pgserver

from benchmarks import bench_langgraph, results as results_file

STEPS = 12


@pytest.mark.slow
@pytest.mark.postgres
def test_every_saver_runs_the_graph_and_is_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pgserver.require_server()
    monkeypatch.setattr(bench_langgraph, "STEPS", STEPS)
    results = bench_langgraph.measure(reps=1)

    table = results["contestants"]
    sync = {
        "memory",
        "turnkeep_sqlite",
        "turnkeep_jsonl",
        "sqlite_saver",
        "turnkeep_postgres",
        "postgres_saver",
    }
    assert set(table) == sync | {f"{key}_async" for key in sync} | {
        "turnkeep_sqlite_host_async"
    }
    assert results["steps"] == STEPS
    assert results["payload_bytes"] > 0
    for key, entry in table.items():
        assert entry["mode"] == ("async" if key.endswith("_async") else "sync"), key
        assert entry["us_per_step"] > 0, key
        assert entry["growth"] > 0, key
        if key.startswith("memory"):
            assert entry["over_memory"] == 1.0, key
        else:
            assert entry["disk_bytes"] > 0, key
    assert set(results["ratios"]) == {
        f"{backend}{mode}_{what}_vs_langgraph"
        for backend in ("sqlite", "postgres")
        for mode in ("", "_async")
        for what in ("time", "disk", "growth")
    }
    summary = results_file.summary(
        {"machine": results_file.machine(), "bench_langgraph": results}
    )
    assert "TurnkeepSaver, SQLite" in summary
    assert "LangGraph PostgresSaver" in summary
    assert "async: LangGraph AsyncSqliteSaver" in summary
    assert "async: LangGraph AsyncPostgresSaver" in summary
    assert "async: TurnkeepSaver, PostgreSQL" in summary


def test_a_run_checks_the_graph_finished() -> None:
    """`run` refuses a graph that stopped early (its asserts are the check)."""
    memory = bench_langgraph.contestants()["memory"][1]
    texts = ["x" * 10] * bench_langgraph.STEPS
    with memory(None) as (saver, _):  # type: ignore[arg-type]
        steps = bench_langgraph.run(saver, texts, "t")
    assert len(steps) == bench_langgraph.STEPS


def test_an_async_run_checks_the_graph_finished() -> None:
    """`arun` runs the whole graph with `ainvoke` on the saver's async methods."""
    memory = bench_langgraph.async_contestants()["memory_async"][1]
    texts = ["x" * 10] * bench_langgraph.STEPS

    async def go() -> list[float]:
        async with memory(None) as (saver, _):  # type: ignore[arg-type]
            return await bench_langgraph.arun(saver, texts, "t")

    assert len(asyncio.run(go())) == bench_langgraph.STEPS
