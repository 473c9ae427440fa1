"""What a benchmark run leaves behind: `latest.json`, a summary and the plots.

`make bench` writes them to `benchmarks/results/` (not committed);
`make bench-docs` writes a full run to `docs/benchmarks/`, which the
documentation site shows. The file records the machine beside the numbers:
ratios travel between machines, microseconds do not.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from benchmarks import usergoals

DEFAULT_OUT = Path(__file__).parent / "results"
PACKAGES = (
    "turnkeep",
    "msgspec",
    "pluggy",
    "openai-agents",
    "langgraph",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "langchain-core",
    "matplotlib",
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _filesystem(path: str) -> dict[str, str]:
    """The mount that holds `path`: device, filesystem type, disk model."""
    best = ("", "unknown", "unknown")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount, kind, *_ = line.split()
            inside = path == mount or path.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(best[0]):
                best = (mount, device, kind)
    except OSError:
        pass
    mount, device, kind = best
    out = {"mount": mount, "device": device, "type": kind}
    block = Path("/sys/block") / Path(device).name
    for name, file in (("model", "device/model"), ("rotational", "queue/rotational")):
        try:
            out[name] = (block / file).read_text().strip() or "unknown"
        except OSError:
            out[name] = "unknown"
    return out


def _fsync_us(samples: int = 50) -> float:
    """Median microseconds of a 4 KiB write + fsync in the temp directory."""
    fd, name = tempfile.mkstemp(prefix="bench-fsync-")
    try:
        times: list[float] = []
        block = b"x" * 4096
        for _ in range(samples):
            t = time.perf_counter()
            os.write(fd, block)
            os.fsync(fd)
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1e6
    finally:
        os.close(fd)
        os.unlink(name)


def _commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],  # noqa: S607 - git on PATH
            capture_output=True,
            text=True,
            check=False,
            cwd=Path(__file__).parent,
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def machine() -> dict[str, Any]:
    """The machine and software a run measured on."""
    versions: dict[str, str] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "system": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "sqlite": sqlite3.sqlite_version,
        "disk": _filesystem(tempfile.gettempdir()),
        "fsync_4k_us": round(_fsync_us(), 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "packages": versions,
    }


def write(results: dict[str, Any], out: Path) -> list[Path]:
    """Write `latest.json`, `summary.md` and the plots into `out`."""
    from benchmarks import plots  # matplotlib is a bench-only package

    out.mkdir(parents=True, exist_ok=True)
    written = [out / "latest.json", out / "summary.md"]
    written[0].write_bytes(msgspec.json.format(msgspec.json.encode(results)) + b"\n")
    written[1].write_text(summary(results))
    written += plots.render(results, out)
    return written


def _fmt_ratio(value: float, goal: str) -> str:
    return f"{value:.2f}x (goal {goal})"


def summary(results: dict[str, Any]) -> str:
    """A Markdown summary: the headline ratios and the machine."""
    lines: list[str] = []
    loop = results.get("bench_loop")
    if loop is not None:
        c, r = loop["contestants"], loop["ratios"]
        lines += [
            f"Measured at T = {loop['turns']:,} turns, "
            f"{loop['events_per_loop_turn']:.0f} events per loop turn, median of "
            f"{loop['reps']} runs; LangGraph stored the same turns after the "
            "others, alone.",
            "",
            "| contestant | µs per turn | last 10 / first 10 | disk / payload |",
            "| --- | ---: | ---: | ---: |",
        ]
        for entry in c.values():
            disk = entry.get("disk_over_payload")
            lines.append(
                f"| {entry['label']} | {entry['us_per_turn']:,.0f} | "
                f"{entry['last10_over_first10']:.2f} | "
                f"{'' if disk is None else f'{disk:.2f}x'} |"
            )
        lines += [
            "",
            "| ratio | JSONL | SQLite |",
            "| --- | ---: | ---: |",
        ]
        for key, text, goal in (
            ("run_turn_over_raw", "`run_turn` / raw write behind the hop", "≤ 1.6"),
            (
                "append_flush_over_raw",
                "`append` + `flush` / raw write behind the hop",
                "≤ 1.3",
            ),
            ("openai_over_run_turn", "OpenAI `SQLiteSession` / `run_turn`", "≥ 1.8"),
            ("langgraph_over_run_turn", "LangGraph `SqliteSaver` / `run_turn`", "≥ 8"),
        ):
            lines.append(
                f"| {text} | {_fmt_ratio(r['jsonl'][key], goal)} | "
                f"{_fmt_ratio(r['sqlite'][key], goal)} |"
            )
        lines.append("")
    lines += usergoals.table(results)
    lines += _long(results.get("bench_long"))
    lines += _langgraph(results.get("bench_langgraph"))
    m = results["machine"]
    disk = m["disk"]
    lines += [
        "| machine | |",
        "| --- | --- |",
        f"| date, commit | {m['date']}, `{m['commit']}` |",
        f"| CPU | {m['cpu']}, `nproc` = {m['nproc']} |",
        f"| system | {m['system']} |",
        f"| Python, SQLite | {m['python']}, SQLite {m['sqlite']} |",
        f"| disk | {disk['type']} on {disk['device']} (model {disk['model']}, "
        f"rotational {disk['rotational']}); 4 KiB write + fsync "
        f"{m['fsync_4k_us']:.0f} µs |",
        f"| load average before / after | {_loads(m['load_average'])} / "
        f"{_loads(results.get('load_average_after', []))} |",
        "",
    ]
    return "\n".join(lines)


def _long(long: dict[str, Any] | None) -> list[str]:
    """The long-session table (`bench_long`), if it ran."""
    if long is None:
        return []
    from benchmarks.bench_long import LABELS

    blocks, ratios = long["us_per_turn_by_block"], long["last_over_first"]
    drift = long["over_raw_drift"]
    lines = [
        f"One session of {long['turns']:,} turns, in lockstep; the median turn "
        f"of the first and the last block of {long['block']:,}, and last / first "
        "divided by raw's (the machine's own drift over the run taken out).",
        "",
        "| contestant | first block, µs | last block, µs | last / first | / raw's |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for key, label in LABELS.items():
        lines.append(
            f"| {label} | {blocks[key][0]:,.0f} | {blocks[key][-1]:,.0f} | "
            f"{ratios[key]:.2f} | {drift[key]:.2f} |"
        )
    lines.append("")
    return lines


def _langgraph(lg: dict[str, Any] | None) -> list[str]:
    """The LangGraph checkpointer table (`bench_langgraph`), if it ran."""
    if lg is None:
        return []
    lines = [
        f"A LangGraph graph of {lg['steps']} steps (one message each), "
        f"median of {lg['reps']} runs; time against `InMemorySaver` run the "
        "same way (`invoke`, or `ainvoke` for the async rows), disk against "
        f"the messages' text ({lg['payload_bytes']:,} bytes).",
        "",
        "| saver | µs per step | / in memory | last 20 / first 20 | disk bytes "
        "| disk / payload |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for e in lg["contestants"].values():
        lines.append(
            f"| {e['label']} | {e['us_per_step']:,.0f} | {e['over_memory']:.2f} | "
            f"{e['growth']:.2f} | {e['disk_bytes']:,.0f} | "
            f"{e['disk_over_payload']:.2f}x |"
        )
    lines.append("")
    return lines


def _loads(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values) or "unknown"
