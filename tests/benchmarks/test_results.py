"""A benchmark run leaves `latest.json`, a summary and the plots behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from benchmarks import bench_scaling, plots, results as results_file

PNG = b"\x89PNG\r\n\x1a\n"


def test_the_machine_is_recorded() -> None:
    machine = results_file.machine()
    assert machine["nproc"] >= 1
    assert machine["cpu"]
    assert machine["python"].split()[1].startswith("3.")
    assert machine["disk"]["type"] != ""
    assert machine["fsync_4k_us"] > 0
    assert machine["packages"]["openai-agents"] != "not installed"
    assert machine["packages"]["langgraph-checkpoint-sqlite"] != "not installed"


@pytest.mark.slow
def test_a_run_writes_its_json_summary_and_every_plot(
    tmp_path: Path, loop_results: dict[str, Any]
) -> None:
    scaling = {
        "load": bench_scaling.load_curve((120, 360), reps=1),
        "concurrency": bench_scaling.concurrency_curve((1, 3), reps=1),
    }
    assert scaling["load"]["events"] == [120, 360]
    assert all(s > 0 for s in scaling["load"]["sqlite.turnkeep_s"])
    assert len(scaling["concurrency"]["sqlite.raw_turns_per_s"]) == 2
    results = {
        "machine": results_file.machine(),
        "bench_loop": loop_results,
        "bench_scaling": scaling,
        "load_average_after": [0.5, 0.4, 0.3],
    }
    written = results_file.write(results, tmp_path / "out")
    names = sorted(p.name for p in written)
    assert names == [
        "concurrency.png",
        "disk.png",
        "latest.json",
        "load.png",
        "per_turn.png",
        "summary.md",
    ]
    for path in written:
        if path.suffix == ".png":
            assert path.read_bytes().startswith(PNG), path
    stored = msgspec.json.decode((tmp_path / "out" / "latest.json").read_bytes())
    assert stored["bench_loop"]["turns"] == loop_results["turns"]
    assert stored["bench_scaling"] == scaling
    summary = (tmp_path / "out" / "summary.md").read_text()
    for label in ("OpenAI Agents SQLiteSession", "LangGraph SqliteSaver", "nproc"):
        assert label in summary
    assert "0.50, 0.40, 0.30" in summary


def test_only_what_was_measured_is_drawn(tmp_path: Path) -> None:
    assert plots.render({"machine": {}}, tmp_path) == []
    assert list(tmp_path.iterdir()) == []


def test_the_rolling_median_follows_the_trend_not_one_slow_turn() -> None:
    assert plots.rolling_median([1.0, 1.0, 50.0, 1.0, 2.0], 3) == [
        1.0,
        1.0,
        1.0,
        1.0,
        2.0,
    ]
