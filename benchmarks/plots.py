"""The PNG plots of a benchmark run (matplotlib, a bench-only package).

- `per_turn.png`: cost of each turn against its index, every contestant of
  `bench_loop` (a rolling median, so a single slow fsync does not hide the
  trend);
- `disk.png`: bytes on disk against turns for the stores of the loop's
  turns, and the payload;
- `load.png`: load time against session size (`bench_scaling`);
- `concurrency.png`: durable turns per second against concurrent sessions
  (`bench_scaling`);
- `open.png`: a fresh process's time to append, and to the model's first
  call, against the session's events, per backend (`bench_open`);
- `pgfleet.png`: turns per second and p99 of the PostgreSQL fleet, with no
  affinity, pinned and raw, against the history size (`bench_pgfleet`).

A plot whose data the run did not measure is not drawn.
"""

from __future__ import annotations

import importlib
import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
# Typed as Any: matplotlib's annotations leave many keyword arguments unknown,
# which pyright's strict mode would flag at every call.
plt: Any = importlib.import_module("matplotlib.pyplot")

#: Colour per store, line style per path: one reading across every plot.
COLOURS = {
    "jsonl": "tab:blue",
    "sqlite": "tab:green",
    "openai": "tab:orange",
    "langgraph": "tab:red",
    "payload": "black",
}
STYLES = {
    "run_turn": "-",
    "append_flush": "-",
    "raw_loop": ":",
    "raw_append": ":",
}


def _style(key: str) -> dict[str, Any]:
    store, _, path = key.partition(".")
    if store == "peer":
        return {"color": COLOURS[path], "linestyle": "-"}
    return {"color": COLOURS[store], "linestyle": STYLES.get(path, "-")}


def rolling_median(values: list[float], window: int) -> list[float]:
    """Median of each value and the `window - 1` before it."""
    return [
        statistics.median(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def per_turn(loop: dict[str, Any], out: Path) -> Path:
    contestants = loop["contestants"]
    window = max(1, loop["turns"] // 50)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    panels = (
        (axes[0], ("run_turn", "raw_loop", "peer"), "the loop's turns"),
        (axes[1], ("append_flush", "raw_append"), "Session.append x 12 + flush"),
    )
    for ax, paths, title in panels:
        for key, entry in contestants.items():
            store, _, path = key.partition(".")
            if (store if store == "peer" else path) not in paths:
                continue
            ys = [us / 1e3 for us in rolling_median(entry["per_turn_us"], window)]
            ax.plot(range(1, len(ys) + 1), ys, label=entry["label"], **_style(key))
        ax.set_yscale("log")
        ax.set_xlabel("turn")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel(f"ms per turn (rolling median of {window})")
    return _save(fig, out / "per_turn.png")


def disk(loop: dict[str, Any], out: Path) -> Path:
    samples = loop["disk_samples"]
    fig, ax = plt.subplots(figsize=(8, 5))
    turns = samples["turns"]
    for key, entry in loop["contestants"].items():
        if key in samples:
            mb = [b / 1e6 for b in samples[key]]
            ax.plot(turns, mb, label=entry["label"], marker=".", **_style(key))
    ax.plot(
        turns,
        [b / 1e6 for b in samples["payload"]],
        label="payload (JSON of the events)",
        color=COLOURS["payload"],
        linestyle="--",
    )
    ax.set_yscale("log")
    ax.set_xlabel("turns")
    ax.set_ylabel("MB on disk (stores open, WAL included)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out / "disk.png")


def load(curve: dict[str, Any], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 5))
    sizes = curve["events"]
    for backend in ("jsonl", "sqlite"):
        colour = COLOURS[backend]
        name = "JSONL" if backend == "jsonl" else "SQLite"
        ax.plot(
            sizes,
            [s * 1e3 for s in curve[f"{backend}.turnkeep_s"]],
            color=colour,
            marker="o",
            label=f"turnkeep {name}: load + decode",
        )
        ax.plot(
            sizes,
            [s * 1e3 for s in curve[f"{backend}.raw_s"]],
            color=colour,
            marker="o",
            linestyle=":",
            label=f"raw {name}: read + msgspec decode",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("events in the session")
    ax.set_ylabel("ms (warm, median)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out / "load.png")


def concurrency(curve: dict[str, Any], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 5))
    sessions = curve["sessions"]
    ax.plot(
        sessions,
        curve["sqlite.turnkeep_turns_per_s"],
        color=COLOURS["sqlite"],
        marker="o",
        label="turnkeep SQLite (group commit)",
    )
    ax.plot(
        sessions,
        curve["sqlite.raw_turns_per_s"],
        color=COLOURS["sqlite"],
        marker="o",
        linestyle=":",
        label="raw SQLite, one transaction per turn",
    )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent sessions")
    ax.set_ylabel(f"durable turns per second ({curve['turns_per_session']} each)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out / "concurrency.png")


def open_per_request(measured: dict[str, Any], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 5))
    colours = {**COLOURS, "postgres": "tab:purple"}
    for backend, figures in measured["loop"].items():
        rows = figures["sizes"]
        events = [row["streamed"]["events"] for row in rows]
        colour = colours.get(backend, "gray")
        for ys, style, what in (
            ([row["ready_s"] for row in rows], "-", "ready to append"),
            (
                [row["streamed"]["first_call_s"] for row in rows],
                "--",
                "to first model call",
            ),
            (
                [row["one_delta"]["first_call_s"] for row in rows],
                ":",
                "to first model call, one delta per reply",
            ),
        ):
            ax.plot(
                events,
                [y * 1e3 for y in ys],
                color=colour,
                linestyle=style,
                marker="o",
                label=f"{backend}: {what}",
            )
    ax.axhline(25, color="black", linewidth=0.8, linestyle="-.", label="goal: 25 ms")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("events in the session (streamed replies)")
    ax.set_ylabel("ms in a fresh process (median)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, out / "open.png")


def pgfleet(measured: dict[str, Any], out: Path) -> Path:
    points = measured["curve"]
    history = [p["history_events"] for p in points]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    styles = {
        "open": ("tab:purple", "-", "no affinity: open + turn + close"),
        "pinned": ("tab:purple", "--", "pinned: run_turn"),
        "raw": ("black", ":", "raw psycopg"),
    }
    for mode, (colour, style, label) in styles.items():
        axes[0].plot(
            history,
            [p[mode]["turns_per_s"] for p in points],
            color=colour,
            linestyle=style,
            marker="o",
            label=label,
        )
        axes[1].plot(
            history,
            [p[mode]["p99_ms"] for p in points],
            color=colour,
            linestyle=style,
            marker="o",
            label=label,
        )
    axes[0].set_ylabel(f"turns per second, {measured['workers']} processes")
    axes[1].set_ylabel("p99 of a request, ms")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel(f"events per session ({measured['sessions']} sessions)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, out / "pgfleet.png")


def render(results: dict[str, Any], out: Path) -> list[Path]:
    """Draw every plot the results have data for; return the files."""
    drawn: list[Path] = []
    loop = results.get("bench_loop")
    if loop is not None:
        drawn += [per_turn(loop, out), disk(loop, out)]
    scaling = results.get("bench_scaling")
    if scaling is not None:
        drawn += [load(scaling["load"], out), concurrency(scaling["concurrency"], out)]
    opened = results.get("bench_open")
    if opened is not None:
        drawn.append(open_per_request(opened, out))
    fleet = results.get("bench_pgfleet")
    if fleet is not None:
        drawn.append(pgfleet(fleet, out))
    return drawn
