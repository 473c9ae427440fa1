"""The documentation site builds in strict mode, with every page it promises.

`make site` runs the same build; a warning (a broken link, a missing page or
anchor, a snippet whose file is gone) fails it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mkdocs.config import load_config

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "mkdocs.yml"
PLOTS = ("per_turn.png", "disk.png", "load.png", "concurrency.png")


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    # Not --quiet: it hides warnings from strict mode's count, and the build
    # then succeeds whatever it found.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [
            *(sys.executable, "-m", "mkdocs", "build", "--strict"),
            *("--config-file", str(config), "--site-dir", str(site)),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
        timeout=600,
    )


def nav_files(config: Path) -> set[str]:
    def walk(items: object) -> set[str]:
        found: set[str] = set()
        if isinstance(items, str):
            found.add(items)
        elif isinstance(items, dict):
            for value in items.values():
                found |= walk(value)
        elif isinstance(items, list):
            for value in items:
                found |= walk(value)
        return found

    return walk(load_config(str(config))["nav"])


@pytest.mark.slow
def test_the_site_builds_without_a_warning(tmp_path: Path) -> None:
    done = build(CONFIG, tmp_path / "site")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert not re.search(r"^WARNING", output, flags=re.M), output
    benchmarks = (tmp_path / "site" / "benchmarks" / "index.html").read_text()
    for plot in PLOTS:
        assert (tmp_path / "site" / "benchmarks" / plot).is_file(), plot
        assert plot in benchmarks, plot
    # The machine the plots came from is on the page (the included summary).
    assert "nproc" in benchmarks
    start = (tmp_path / "site" / "index.html").read_text()
    assert "Quick start" in start, "the getting-started page is the README"


@pytest.mark.slow
def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the guide](guide.md).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        f"INHERIT: {CONFIG}\ndocs_dir: {docs}\nnav:\n  - index.md\nexclude_docs: ''\n"
    )
    done = build(config, tmp_path / "site")
    assert done.returncode != 0
    assert "guide.md" in done.stdout + done.stderr


def test_every_promised_page_is_in_the_navigation() -> None:
    pages = nav_files(CONFIG)
    for page in (
        "docs/index.md",
        "docs/architecture.md",
        "docs/hooks.md",
        "docs/writing-a-backend.md",
        "docs/cli.md",
        "docs/deploy-postgres.md",
        "docs/serve.md",
        "docs/reliability.md",
        "docs/benchmarks.md",
    ):
        assert (ROOT / page).is_file(), page
        assert page.removeprefix("docs/") in pages, page
    docs = ROOT / "docs"
    for folder in ("formats", "adr"):
        every = {p.relative_to(docs).as_posix() for p in docs.glob(f"{folder}/*.md")}
        assert every, folder
        assert every <= pages, every - pages


def test_the_committed_plots_come_with_their_machine() -> None:
    folder = ROOT / "docs" / "benchmarks"
    for plot in PLOTS:
        assert (folder / plot).read_bytes().startswith(b"\x89PNG"), plot
    summary = (folder / "summary.md").read_text()
    for field in ("nproc", "CPU", "disk", "Python", "load average"):
        assert field in summary, field
