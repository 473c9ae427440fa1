"""The users' workload goals: one row per goal and store, plotted and summarised."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks import plots, results as results_file, usergoals

PNG = b"\x89PNG\r\n\x1a\n"


def _size(turns: int, events: int, ready: float) -> dict[str, Any]:
    shape = {
        "events": events,
        "text_bytes": 6_000 * turns,
        "first_call_s": ready * 2,
        "session_rss": 1e6,
    }
    return {
        "turns": turns,
        "ready_s": ready,
        "streamed": shape,
        "one_delta": shape | {"events": events // 40},
        "ratios": {
            "first_call_over_one_delta": 1.1,
            "first_call_over_decode": 3.0,
            "rss_over_goal": 0.5,
        },
    }


def measured() -> dict[str, Any]:
    goals = {
        "ready_ms": 25.0,
        "ready_growth": 1.3,
        "first_call_over_one_delta": 1.2,
        "first_call_over_decode": 1.5,
        "rss_text_factor": 3.0,
        "items_over_sdk": 2.0,
        "state_over_sdk": 1.5,
    }
    opened = {
        "goals": goals,
        "loop": {
            "sqlite": {
                "sizes": [_size(3, 921, 0.010), _size(3300, 1_013_100, 0.040)],
                "ratios": {"ready_growth": 4.0, "ready_ms": 40.0},
            }
        },
        "items": {"items": 100_000, "ratios": {"sqlite": 1.5}},
        "state": {
            "checkpoints": 1200,
            "ratios": {"sqlite": {"first": 1.2, "later": 9.0}},
        },
    }
    stream = {
        "goals": {
            "run_turn_over_raw": 5.0,
            "delta_over_append": 2.0,
            "jsonl_disk_over_one_delta": 1.3,
            "disk_over_text": 2.5,
        },
        "backends": {
            "jsonl": {"ratios": {"disk_over_one_delta": 4.0, "run_turn_over_raw": 3.0}},
            "sqlite": {"ratios": {"disk_over_text": 2.0, "run_turn_over_raw": 6.0}},
        },
        "per_delta": {"ratio": 1.5},
    }
    point = {
        "history_events": 100_000,
        "open_over_pinned": 0.6,
        **{m: {"turns_per_s": 10.0, "p99_ms": 50.0} for m in ("open", "pinned", "raw")},
    }
    fleet = {
        "workers": 4,
        "sessions": 256,
        "goal_open_over_pinned": 0.5,
        "curve": [point],
    }
    return {"bench_open": opened, "bench_stream": stream, "bench_pgfleet": fleet}


def test_every_goal_gets_a_row_saying_whether_it_is_met() -> None:
    rows = {
        (goal, where): (value, ok)
        for goal, where, value, ok in usergoals.rows(measured())
    }
    assert rows[
        ("ready to append, fresh process <= 25 ms", "sqlite, 1,013,100 events")
    ] == (
        "40.00 ms",
        False,
    )
    assert (
        rows[("ready to append, largest / smallest session <= 1.3x", "sqlite")][1]
        is False
    )
    assert rows[
        (
            "add_items, fresh process's first write / SQLiteSession <= 2x",
            "sqlite, 100,000 items",
        )
    ] == ("1.50x", True)
    state = "sqlite, 1,200 checkpoints"
    assert rows[
        ("get_state from a non-writer (first call) / SqliteSaver <= 1.5x", state)
    ][1]
    assert not rows[
        ("get_state from a non-writer (later call) / SqliteSaver <= 1.5x", state)
    ][1]
    assert not rows[("disk per streamed turn / one delta per reply <= 1.3x", "jsonl")][
        1
    ]
    assert rows[("disk per streamed turn / its text <= 2.5x", "sqlite")][1]
    assert rows[("the loop's per-delta path / bare chunk append <= 2x", "memory")][1]
    fleet = "PostgreSQL fleet, no affinity / pinned >= 0.5x (at 100k events)"
    assert rows[(fleet, "100,000 events, 256 sessions")] == ("0.60x", True)


def test_the_summary_and_the_plots_show_them(tmp_path: Path) -> None:
    results = {"machine": results_file.machine(), **measured()}
    text = results_file.summary(results)
    assert (
        "| the loop's per-delta path / bare chunk append <= 2x | memory | 1.50x | yes |"
        in text
    )
    drawn = plots.render(results, tmp_path)
    assert sorted(p.name for p in drawn) == ["open.png", "pgfleet.png"]
    assert all(p.read_bytes().startswith(PNG) for p in drawn)


def test_nothing_is_reported_when_none_of_them_ran() -> None:
    assert usergoals.table({}) == []
    assert usergoals.rows({"bench_open": None}) == []


def test_make_bench_runs_the_users_workload_small_and_all_runs_the_fleet() -> None:
    from benchmarks import __main__ as runner

    names = runner.available()
    quick, _ = runner.select([], names)
    assert {"bench_stream", "bench_open"} <= set(quick)
    assert "bench_pgfleet" not in quick
    assert {"bench_stream", "bench_open", "bench_pgfleet"} <= set(names)


def test_a_quick_run_without_the_peers_still_gets_its_rows() -> None:
    results = measured()
    del results["bench_open"]["items"], results["bench_open"]["state"]
    goals = {goal for goal, _, _, _ in usergoals.rows(results)}
    assert "ready to append, fresh process <= 25 ms" in goals
    assert not any("SQLiteSession" in goal or "SqliteSaver" in goal for goal in goals)
