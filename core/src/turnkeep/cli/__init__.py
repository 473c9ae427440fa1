"""The `turnkeep` command: inspect, follow, verify, repair, move, reload sessions.

Implemented with click and rich, which come with the extra `turnkeep[cli]`.
`main` is the console script's entry point; `turnkeep.cli.app.cli` is the
click group (tests drive it through `click.testing.CliRunner`). Each command
lives in a module of one idea: `sessions` (ls, title, rm, fork), `view`
(show, tail), `checks` (verify, repair, recover), `exchange` (export,
import), `migrate`, `plugins`, `dev`, `conformance`. How they run (the
store, errors, exit codes) is `runtime`; what they print is `output`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import click

__all__ = ["EXTRA_MODULES", "main"]

EXTRA_MODULES: Final = frozenset({"click", "rich", "watchfiles"})
"""The top-level modules the `cli` extra installs."""

MISSING_EXTRA: Final = (
    "turnkeep: the `turnkeep` command needs the `cli` extra ({name} is not "
    "installed); install it with: pip install 'turnkeep[cli]'"
)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `turnkeep` console script.

    Exits with status 2 and says which extra to install when the command's
    own dependencies are missing.
    """
    try:
        group = _load()
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if top not in EXTRA_MODULES:
            raise
        print(MISSING_EXTRA.format(name=top), file=sys.stderr)
        raise SystemExit(2) from None
    group.main(args=list(argv) if argv is not None else None, prog_name="turnkeep")


def _load() -> click.Group:
    # Imported here, not at the top, so a missing extra can be named.
    from turnkeep.cli.app import cli as group

    return group
