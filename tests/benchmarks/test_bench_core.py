"""The per-event benchmark's callgrind modes, run without callgrind.

Each `--ir` mode must do the work it names and nothing else, or the
instruction differences it reports measure something else.
"""

from __future__ import annotations

import pytest

from benchmarks import bench_core


@pytest.fixture
def few_events(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(bench_core, "IR_EVENTS", 24)
    return 24


def test_the_flushing_mode_stores_every_event(
    few_events: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored: list[int] = []
    append = bench_core._Sink.append

    async def counting(self: bench_core._Sink, *args: object, **kw: object) -> None:
        await append(self, *args, **kw)  # type: ignore[arg-type]
        stored.append(self.acknowledged)

    monkeypatch.setattr(bench_core._Sink, "append", counting)
    bench_core.ir_mode("turnkeep_append")
    assert stored[-1] == few_events


def test_the_append_only_mode_stores_nothing(
    few_events: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[object] = []

    async def recording(*args: object, **kw: object) -> None:
        calls.append(args)

    monkeypatch.setattr(bench_core._Sink, "append", recording)
    bench_core.ir_mode("turnkeep_append_only")
    assert calls == []


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(SystemExit, match="unknown mode"):
        bench_core.ir_mode("turnkeep_apend")
