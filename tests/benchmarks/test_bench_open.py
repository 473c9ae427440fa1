"""`bench_open`, run small: each span in a fresh process, next to its baseline.

Speed is never asserted (AGENTS.md); these tests hold that every figure
comes from a process that did what the module says, on what was stored.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_open


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_open, "TURNS", (1, 2))
    monkeypatch.setattr(bench_open, "REPS", 1)
    monkeypatch.setattr(bench_open, "ITEMS", 40)
    monkeypatch.setattr(bench_open, "CHECKPOINTS", 4)


@pytest.mark.slow
@pytest.mark.usefixtures("small")
def test_the_loop_spans_cover_every_size_and_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    figures = bench_open.report_loop(
        "sqlite", bench_open.loop_figures("sqlite", tmp_path, "")
    )
    rows = figures["sizes"]
    assert [row["turns"] for row in rows] == [1, 2]
    assert rows[0]["streamed"]["events"] < rows[1]["streamed"]["events"]
    for row in rows:
        streamed_row, one = row["streamed"], row["one_delta"]
        # The same conversation: the same turns, one event per reply apart.
        assert streamed_row["text_bytes"] == one["text_bytes"]
        assert streamed_row["events"] > one["events"]
        assert 0 < streamed_row["first_call_s"] < streamed_row["turn_s"]
        assert streamed_row["turn_s"] <= streamed_row["close_s"]
        # The decoded history is the one the model was given: a user
        # message, a tool call and its result, the reply, per stored turn
        # (and the new turn's user message).
        assert streamed_row["messages"] == 4 * row["turns"] + 1
        assert row["ready_s"] > 0
    printed = capsys.readouterr().out
    assert "(goal <= 1.3:" in printed
    assert "ready to append" in printed


@pytest.mark.slow
@pytest.mark.usefixtures("small")
def test_the_peers_first_write_and_read_are_measured_beside_turnkeep(
    tmp_path: Path,
) -> None:
    items = bench_open.items_figures(["sqlite"], tmp_path, "")
    assert set(items["first_write_s"]) == {"sdk", "sqlite"}
    assert items["ratios"]["sqlite"] > 0
    state = bench_open.state_figures(["sqlite"], tmp_path, "")
    seconds = state["seconds"]
    # Both readers saw the whole thread: the first message and one per step.
    assert seconds["sdk"]["messages"] == seconds["sqlite"]["messages"] == 5
    assert set(state["ratios"]["sqlite"]) == {"first", "later"}
