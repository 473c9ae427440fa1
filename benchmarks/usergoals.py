"""The goals of the users' workload, each with what this run measured.

`bench_open`, `bench_stream` and `bench_pgfleet` print their figures as
they go; this gathers them, one row per goal and store, for the end of a
run and for `summary.md`. A goal whose benchmark did not run is left out.
"""

from __future__ import annotations

from typing import Any

Row = tuple[str, str, str, bool]
"""The goal, where it was measured, the figure, whether the goal is met."""


def _at_most(goal: str, where: str, value: float, limit: float, unit: str = "x") -> Row:
    return goal, where, f"{value:.2f}{unit}", value <= limit


def _open(opened: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    goals = opened["goals"]
    for backend, figures in opened["loop"].items():
        last = figures["sizes"][-1]
        events = f"{backend}, {last['streamed']['events']:,} events"
        r, lr = figures["ratios"], last["ratios"]
        out += [
            _at_most(
                "ready to append, fresh process <= 25 ms",
                events,
                r["ready_ms"],
                goals["ready_ms"],
                " ms",
            ),
            _at_most(
                "ready to append, largest / smallest session <= 1.3x",
                backend,
                r["ready_growth"],
                goals["ready_growth"],
            ),
            _at_most(
                "to the first model call, streamed / one delta per reply <= 1.2x",
                events,
                lr["first_call_over_one_delta"],
                goals["first_call_over_one_delta"],
            ),
            _at_most(
                "to the first model call / msgspec decode of its messages <= 1.5x",
                events,
                lr["first_call_over_decode"],
                goals["first_call_over_decode"],
            ),
            _at_most(
                "RSS of the live streamed session / (3x text + 2 MB) <= 1",
                events,
                lr["rss_over_goal"],
                1.0,
            ),
        ]
    # The quick run leaves the peers' fresh processes out.
    items: dict[str, Any] = opened.get("items") or {"ratios": {}}
    for backend, ratio in items["ratios"].items():
        out.append(
            _at_most(
                "add_items, fresh process's first write / SQLiteSession <= 2x",
                f"{backend}, {items['items']:,} items",
                ratio,
                goals["items_over_sdk"],
            )
        )
    state: dict[str, Any] = opened.get("state") or {"ratios": {}}
    for backend, ratios in state["ratios"].items():
        for when in ("first", "later"):
            out.append(
                _at_most(
                    f"get_state from a non-writer ({when} call) / SqliteSaver <= 1.5x",
                    f"{backend}, {state['checkpoints']:,} checkpoints",
                    ratios[when],
                    goals["state_over_sdk"],
                )
            )
    return out


def _stream(stream: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    goals = stream["goals"]
    for backend, figures in stream["backends"].items():
        r = figures["ratios"]
        if backend == "jsonl":
            out.append(
                _at_most(
                    "disk per streamed turn / one delta per reply <= 1.3x",
                    backend,
                    r["disk_over_one_delta"],
                    goals["jsonl_disk_over_one_delta"],
                )
            )
        else:
            out.append(
                _at_most(
                    "disk per streamed turn / its text <= 2.5x",
                    backend,
                    r["disk_over_text"],
                    goals["disk_over_text"],
                )
            )
        out.append(
            _at_most(
                "streamed run_turn / raw durable write of its text <= 5x",
                backend,
                r["run_turn_over_raw"],
                goals["run_turn_over_raw"],
            )
        )
    delta = stream["per_delta"]
    out.append(
        _at_most(
            "the loop's per-delta path / bare chunk append <= 2x",
            "memory",
            delta["ratio"],
            goals["delta_over_append"],
        )
    )
    return out


def _fleet(fleet: dict[str, Any]) -> list[Row]:
    last = fleet["curve"][-1]
    ratio = last["open_over_pinned"]
    return [
        (
            "PostgreSQL fleet, no affinity / pinned >= 0.5x (at 100k events)",
            f"{last['history_events']:,} events, {fleet['sessions']} sessions",
            f"{ratio:.2f}x",
            ratio >= fleet["goal_open_over_pinned"],
        )
    ]


def _loop(loop: dict[str, Any]) -> list[Row]:
    return [
        _at_most(
            "the benchmark turn stays flat: last 10 / first 10 <= 1.1",
            f"{key}, T = {loop['turns']:,}",
            loop["contestants"][key]["last10_over_first10"],
            1.1,
        )
        for key in ("jsonl.run_turn", "sqlite.run_turn")
    ]


def rows(results: dict[str, Any]) -> list[Row]:
    """Every goal whose benchmark ran, with its figure."""
    out: list[Row] = []
    for key, gather in (
        ("bench_open", _open),
        ("bench_stream", _stream),
        ("bench_pgfleet", _fleet),
        ("bench_loop", _loop),
    ):
        measured = results.get(key)
        if measured:
            out += gather(measured)
    return out


def table(results: dict[str, Any]) -> list[str]:
    """The rows as a Markdown table (nothing when no benchmark of them ran)."""
    found = rows(results)
    if not [r for r in found if not r[0].startswith("the benchmark turn")]:
        return []
    lines = ["| goal | measured on | this run | met |", "| --- | --- | ---: | --- |"]
    lines += [f"| {g} | {w} | {v} | {'yes' if ok else 'no'} |" for g, w, v, ok in found]
    return [*lines, ""]


def report(results: dict[str, Any]) -> None:
    """Print the rows (at the end of a run)."""
    found = rows(results)
    if not [r for r in found if not r[0].startswith("the benchmark turn")]:
        return
    print("\nthe users' workload, against its goals:")
    for goal, where, value, ok in found:
        print(f"  {'met    ' if ok else 'NOT met'} {value:>9}  {goal}  [{where}]")
