"""`bench_serve`, run small: the figures it reports come from a real run.

Speed is not asserted (AGENTS.md); what is held is that every follower got
every committed event once and in order, and the report's fields.
"""

from __future__ import annotations

import pytest

from benchmarks import bench_serve


@pytest.mark.slow
def test_followers_get_every_event_and_the_figures_are_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bench_serve, "FOLLOWERS", 3)
    monkeypatch.setattr(bench_serve, "EVENTS", 80)
    result = bench_serve.main()
    assert result["every_follower_got_every_event_once_in_order"] is True
    assert result["followers"] == 3
    assert result["events"] == 80
    for key in (
        "writer_alone_events_per_s",
        "writer_events_per_s",
        "delivered_events_per_s",
        "delay_ms_p99",
    ):
        assert result[key] > 0, key
    assert result["delay_ms_p50"] <= result["delay_ms_p99"] <= result["delay_ms_max"]
