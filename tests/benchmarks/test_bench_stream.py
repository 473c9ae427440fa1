"""`bench_stream`, run small: every figure measured on every store.

Speed is never asserted (AGENTS.md); these tests hold that each figure is
measured against the baseline the module says, on the turns it says.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from benchmarks import bench_stream, streamed


def _figures(
    backend: str, root: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, object]:
    monkeypatch.setattr(bench_stream, "TURNS", 3)
    return bench_stream.backend_figures(backend, root / backend, "tk_test_stream")


def test_each_store_is_timed_and_sized_against_its_baselines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for backend in ("jsonl", "sqlite"):
        figures = _figures(backend, tmp_path, monkeypatch)
        us, disk = figures["us_per_turn"], figures["disk_per_turn"]
        assert isinstance(us, dict)
        assert isinstance(disk, dict)
        assert set(us) == {"streamed", "one_delta", "raw"}
        assert all(v > 0 for v in us.values())
        # A streamed turn stores its 300 deltas as one packed record, which
        # carries the reply's message too: about the one-delta turn's size.
        assert disk["streamed"] > 0
        assert disk["one_delta"] > 0
        assert disk["streamed"] < 1.5 * disk["one_delta"]
        ratios = figures["ratios"]
        assert isinstance(ratios, dict)
        assert all(r > 0 for r in ratios.values())
    printed = capsys.readouterr().out
    assert "the raw durable write of its text" in printed
    assert "(goal <= 1.3:" in printed  # JSONL's disk goal
    assert "(goal <= 2.5:" in printed  # SQLite's


def test_the_raw_write_stores_exactly_the_text_the_turn_carries(tmp_path: Path) -> None:
    raw = bench_stream.RawFile(tmp_path)
    for turn in (2, 3):
        raw.write(bench_stream.turn_text("c", turn))
    raw.close()
    expected = sum(streamed.turn_text_bytes("c", t) for t in (2, 3))
    assert (tmp_path / "raw.txt").stat().st_size == expected


def test_a_streamed_reply_is_the_one_delta_reply_cut_in_300() -> None:
    text = streamed.reply("c", 4)
    assert len(text) == streamed.DELTAS * streamed.DELTA_CHARS


def test_the_per_delta_cost_is_measured_against_a_bare_append() -> None:
    figures = asyncio.run(bench_stream.per_delta(2))
    assert figures["delta_us"] > 0
    assert figures["append_us"] > 0
    assert figures["ratio"] == pytest.approx(figures["delta_us"] / figures["append_us"])


@pytest.mark.postgres
def test_postgres_is_sized_from_its_schema_and_the_schemas_are_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    figures = _figures("postgres", tmp_path, monkeypatch)
    disk = figures["disk_per_turn"]
    assert isinstance(disk, dict)
    assert disk["streamed"] > 0
    with psycopg.connect(streamed.DSN) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'tk_test_stream%'"
        ).fetchone()
    assert left == (0,)
