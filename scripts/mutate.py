"""Mutation testing of the durability-critical modules (`make mutate`).

Runs cosmic-ray over each area below: every mutant of the area's modules
(a changed comparison, a `True` made `False`, a loop that never runs, an
exception type swapped, a number moved by one, ...) is applied to the file
in place, the tests that own the area run against it (`-x`: the first
failure kills it), and the file is put back. A mutant no test notices
survives: a place where a real bug of that shape would ship green.

The full set is thousands of mutants at tens of seconds each, so a run
takes a seeded sample per area (`--sample`, `--seed`; `--sample 0` takes
every mutant). Prints each area's kill ratio and every survivor (file,
line, operator, diff), then the total. Exit status 0 either way: the
ratio is a figure to read, not a gate.

The mutated files are restored after each mutant; an interrupted run is
cleaned up with `git checkout` of the area's modules (the script refuses
to start where they hold uncommitted changes, so nothing of yours is lost).
"""

# cosmic-ray ships no type information; its objects are used as documented.
# It is imported where it is used, so the configuration can be checked by the
# test suite, which runs without it (`make mutate` installs it).
# pyright: reportUnknownMemberType=false, reportUnknownVariableType=false
# pyright: reportMissingTypeStubs=false

from __future__ import annotations

import argparse
import random
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
"""Where this interpreter's `cosmic-ray` commands are."""


@dataclass(frozen=True)
class Area:
    """Modules to mutate and the tests that own them."""

    name: str
    modules: tuple[str, ...]
    tests: tuple[str, ...]


AREAS = (
    Area(
        "jsonl",
        (
            "plugins/jsonl/src/turnkeep_jsonl/writer.py",
            "plugins/jsonl/src/turnkeep_jsonl/claim.py",
            "plugins/jsonl/src/turnkeep_jsonl/scan.py",
        ),
        (
            "tests/plugins/jsonl/test_conformance.py",
            "tests/plugins/jsonl/test_backend.py",
            "tests/plugins/jsonl/test_takeover.py",
        ),
    ),
    Area(
        "sqlite",
        ("plugins/sqlite/src/turnkeep_sqlite/writes.py",),
        ("tests/plugins/sqlite/test_conformance.py",),
    ),
    Area(
        "postgres",
        ("plugins/postgres/src/turnkeep_postgres/writes.py",),
        ("tests/plugins/postgres/test_backend.py",),
    ),
    Area(
        "writebehind",
        ("core/src/turnkeep/writebehind.py",),
        (
            "tests/conformance/test_memory.py",
            "tests/core/test_session.py",
            "tests/core/test_write_path_edges.py",
            "tests/loop/test_lifecycle.py",
        ),
    ),
    Area(
        "gate",
        ("core/src/turnkeep/agent/gate.py",),
        ("tests/loop/test_durability.py", "tests/loop/test_loop.py"),
    ),
    Area(
        "guard",
        ("core/src/turnkeep/serve/guard.py",),
        ("tests/serve/test_guard.py", "tests/serve/test_csrf.py"),
    ),
)

SKIPPED_OPERATORS = (
    # Mostly nonsense in this code (`a + b` as `a ** b`, `x | y` as `x << y`):
    # of the arithmetic swaps only + and - stay.
    r"core/ReplaceBinaryOperator_(?!Add_Sub$|Sub_Add$)",
    # Removing `@attrs.define` or `@hookimpl` breaks every test at import.
    r"core/RemoveDecorator",
    r"core/VariableInserter",
    r"core/VariableReplacer",
)


def config_text(area: Area, timeout: float) -> str:
    """The cosmic-ray configuration of one area (TOML)."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "not soak",
        *area.tests,
    ]

    def toml(value: object) -> str:
        # A JSON string or list of strings is a TOML basic string or array.
        return msgspec.json.encode(value).decode()

    return (
        "[cosmic-ray]\n"
        f"module-path = {toml(list(area.modules))}\n"
        f"timeout = {timeout}\n"
        "excluded-modules = []\n"
        f"test-command = {toml(shlex.join(command))}\n"
        "\n[cosmic-ray.distributor]\nname = 'local'\n"
        "\n[cosmic-ray.filters.operators-filter]\n"
        f"exclude-operators = {toml(list(SKIPPED_OPERATORS))}\n"
    )


def run(*argv: str) -> None:
    """Run a command in the repository; stop the script if it fails."""
    subprocess.run(argv, cwd=ROOT, check=True)  # noqa: S603 - our own argv


def sample(session: Path, size: int, rng: random.Random) -> tuple[int, int]:
    """Skip all but `size` of the pending mutants; (kept, candidates)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        pending = [item.job_id for item in db.pending_work_items]
        if size <= 0 or size >= len(pending):
            return len(pending), len(pending)
        keep = set(rng.sample(pending, size))
        dropped = [job for job in pending if job not in keep]
        db.set_multiple_results(
            dropped,
            WorkResult(output="not sampled", worker_outcome=WorkerOutcome.SKIPPED),
        )
        return size, len(pending)


def tally(session: Path, area: Area) -> tuple[int, int]:
    """Print the area's outcome; returns (killed, survived)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    killed = survived = 0
    survivors: list[str] = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            if result.test_outcome == TestOutcome.SURVIVED:
                survived += 1
                (mutation,) = item.mutations
                survivors.append(
                    f"  {mutation.module_path}:{mutation.start_pos[0]} "
                    f"{mutation.operator_name}\n{_indent(result.diff or '')}"
                )
            else:
                killed += 1  # failed tests, a timeout, or a mutant that breaks
    total = killed + survived
    ratio = f"{killed / total:.0%}" if total else "n/a"
    print(f"{area.name}: {killed} of {total} mutants killed ({ratio})")
    for line in survivors:
        print(line)
    return killed, survived


def _indent(diff: str) -> str:
    lines = [line for line in diff.splitlines() if line.startswith(("+", "-"))]
    kept = [line for line in lines if not line.startswith(("+++", "---"))]
    return "\n".join(f"      {line}" for line in kept)


def clean(area: Area) -> bool:
    """Whether the area's modules match git's index (nothing uncommitted)."""
    done = subprocess.run(  # noqa: S603 - our own argv
        ["git", "diff", "--quiet", "--", *area.modules],  # noqa: S607 - git on PATH
        cwd=ROOT,
        check=False,
    )
    return done.returncode == 0


def main() -> int:
    """Run the chosen areas; print their kill ratios and survivors."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("areas", nargs="*", help="areas to run (default: all)")
    parser.add_argument("--sample", type=int, default=8, help="mutants per area")
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    chosen = [a for a in AREAS if not args.areas or a.name in args.areas]
    unknown = set(args.areas) - {a.name for a in AREAS}
    if unknown:
        parser.error(
            f"unknown areas {sorted(unknown)}; known: {[a.name for a in AREAS]}"
        )
    rng = random.Random(args.seed)  # noqa: S311 - a sample, not a secret
    killed = survived = 0
    work = Path(tempfile.mkdtemp(prefix="turnkeep-mutate-"))
    print(f"sessions in {work} (seed {args.seed}, {args.sample} per area)")
    for area in chosen:
        if not clean(area):
            print(f"{area.name}: uncommitted changes in its modules; left out")
            continue
        config = work / f"{area.name}.toml"
        config.write_text(config_text(area, args.timeout))
        session = work / f"{area.name}.sqlite"
        try:
            run(
                sys.executable,
                "-m",
                "pytest",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                "-m",
                "not soak",
                *area.tests,
            )  # the baseline must pass
            run(str(BIN / "cosmic-ray"), "init", str(config), str(session))
            run(str(BIN / "cr-filter-operators"), str(session), str(config))
            kept, candidates = sample(session, args.sample, rng)
            print(f"{area.name}: {kept} of {candidates} mutants")
            run(str(BIN / "cosmic-ray"), "exec", str(config), str(session))
        finally:
            if not clean(area):  # interrupted in the middle of a mutant
                run("git", "checkout", "--", *area.modules)
        k, s = tally(session, area)
        killed, survived = killed + k, survived + s
    total = killed + survived
    if total:
        print(f"total: {killed} of {total} mutants killed ({killed / total:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
