"""The `turnkeep` command: inspect, follow, verify, repair, move, reload sessions.

Implemented with click and rich. `main` is the console script's entry point;
`cli` is the click group (tests drive it through `click.testing.CliRunner`).
Each command lives in a module of one idea: `sessions` (ls, title, rm,
fork), `view` (show, tail), `checks` (verify, repair, recover), `exchange`
(export, import), `migrate`, `plugins`, `dev`, `conformance`. How they run
(the store, errors, exit codes) is `runtime`; what they print is `output`.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnkeep.cli.app import cli

__all__ = ["cli", "main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `turnkeep` console script."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="turnkeep")
