"""`make bench`'s lead benchmark, run small: every contestant, every turn.

Speed is never asserted here (AGENTS.md: speed claims are benchmarks); these
tests hold what the results file and the plots are built from.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.benchmarks.conftest import TURNS

from benchmarks import __main__ as runner, bench_loop


@pytest.mark.slow
def test_every_contestant_is_timed_on_every_turn(loop_results: dict[str, Any]) -> None:
    results = loop_results
    contestants = results["contestants"]
    assert isinstance(contestants, dict)
    assert set(contestants) == set(bench_loop.LABELS)
    for key, entry in contestants.items():
        curve = entry["per_turn_us"]
        assert len(curve) == TURNS, key
        assert all(us > 0 for us in curve), key
        assert entry["us_per_turn"] == pytest.approx(sum(curve) / TURNS), key
    # 15 events a turn, and the first turn records the run context.
    assert results["events_per_loop_turn"] == pytest.approx((15 * TURNS + 1) / TURNS)
    ratios = results["ratios"]
    assert isinstance(ratios, dict)
    for backend in bench_loop.BACKENDS:
        assert set(ratios[backend]) == {
            "run_turn_over_raw",
            "append_flush_over_raw",
            "openai_over_run_turn",
            "langgraph_over_run_turn",
        }


@pytest.mark.slow
def test_disk_is_sampled_as_the_session_grows(loop_results: dict[str, Any]) -> None:
    results = loop_results
    samples = results["disk_samples"]
    assert isinstance(samples, dict)
    assert samples["turns"] == list(range(1, TURNS + 1))
    payload = samples["payload"]
    assert payload == sorted(payload)
    assert payload[0] > 0
    assert payload[-1] == results["payload_bytes"]
    for key in bench_loop.LOOP_STORES:
        assert len(samples[key]) == TURNS, key
        assert samples[key][-1] > samples[key][0], key
    contestants = results["contestants"]
    assert isinstance(contestants, dict)
    # The raw JSONL writer stores the payload and a newline per event: the
    # yardstick measures what it should.
    raw = contestants["jsonl.raw_loop"]["disk_bytes"]
    assert raw == results["payload_bytes"] + 15 * TURNS + 1


def test_the_users_path_runs_first() -> None:
    names = ["bench_core", "bench_sqlite", "bench_loop", "bench_jsonl"]
    assert runner.order(names) == [
        "bench_loop",
        "bench_core",
        "bench_jsonl",
        "bench_sqlite",
    ]


def test_make_bench_runs_the_quick_set_and_all_runs_every_module() -> None:
    names = runner.available()
    assert names[0] == "bench_loop"
    assert {"bench_postgres", "bench_contention", "bench_hop"} <= set(names)
    quick, is_quick = runner.select([], names)
    assert is_quick
    assert quick[0] == "bench_loop"
    assert set(quick) <= set(names)
    # The slow modules (minutes) stay out of the quick run.
    assert "bench_postgres" not in quick
    assert "bench_contention" not in quick
    assert runner.select(["--all"], names) == (names, False)
    assert runner.select(["sqlite", "bench_loop"], names) == (
        ["bench_sqlite", "bench_loop"],
        False,
    )


def test_an_unknown_module_is_refused_naming_the_modules() -> None:
    names = runner.available()
    with pytest.raises(SystemExit, match=r"no benchmark 'bench_nope'.*bench_loop"):
        runner.select(["nope"], names)
