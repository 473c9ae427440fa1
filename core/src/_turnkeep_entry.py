"""The `turnkeep` console script's entry point, outside the `turnkeep` package.

Importing anything inside `turnkeep` first runs `turnkeep/__init__.py`,
which loads the agent loop and the host (a noticeable part of a second). A
Ctrl-C in that time would end in a `KeyboardInterrupt` traceback, before
`turnkeep.cli.main` could catch it; starting here, the first statement that
can be interrupted is already inside the handler. Everything else is
`turnkeep.cli.main`.
"""

from __future__ import annotations

import contextlib
import sys

__all__ = ["main"]

EXIT_INTERRUPTED = 130


def main() -> None:
    """Run the `turnkeep` command; a Ctrl-C at any moment exits 130."""
    try:
        from turnkeep.cli import main as run

        run()
    except KeyboardInterrupt:
        interrupted()


def interrupted() -> None:
    """Say so in one line and exit 130 (another Ctrl-C meanwhile changes nothing)."""
    with contextlib.suppress(KeyboardInterrupt, OSError):  # the status says it
        sys.stderr.write("turnkeep: interrupted\n")
        sys.stderr.flush()
    raise SystemExit(EXIT_INTERRUPTED)
