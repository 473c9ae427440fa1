"""The per-delta benchmark measures what it names, at a small size."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks import bench_delta


@pytest.fixture
def few_deltas(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(bench_delta, "DELTAS", 12)
    monkeypatch.setattr(bench_delta, "TRIES", 1)
    return 12


def test_the_reply_is_ordinary_prose_in_deltas_of_five(few_deltas: int) -> None:
    deltas = bench_delta.pieces()
    assert len(deltas) == few_deltas
    assert {len(d) for d in deltas} == {bench_delta.SIZE}


def test_a_round_reports_every_contestant_and_the_ratios(few_deltas: int) -> None:
    results = asyncio.run(bench_delta.measure(1))
    assert set(results["us_per_delta"]) == {
        "bare",
        "bare_redacted",
        "loop",
        "loop_off",
        "model",
    }
    assert results["loop_over_bare"] > 0
    bench_delta.report(results)


@pytest.mark.parametrize("kind", ["bare", "loop", "loop1"])
def test_the_callgrind_modes_run(few_deltas: int, kind: str) -> None:
    asyncio.run(bench_delta._ir(kind, 1))  # pyright: ignore[reportPrivateUsage]
