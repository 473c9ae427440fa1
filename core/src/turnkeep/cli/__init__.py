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

import contextlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, NoReturn

if TYPE_CHECKING:
    import click

__all__ = ["EXIT_INTERRUPTED", "EXTRA_MODULES", "interrupted", "main"]

EXIT_INTERRUPTED: Final = 130
"""The status of a command the user interrupted (Ctrl-C)."""

EXTRA_MODULES: Final = frozenset({"click", "rich", "watchfiles"})
"""The top-level modules the `cli` extra installs."""

MISSING_EXTRA: Final = (
    "turnkeep: the `turnkeep` command needs the `cli` extra ({name} is not "
    "installed); install it with: pip install 'turnkeep[cli]'"
)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `turnkeep` console script (through `_turnkeep_entry`).

    Exits with status 2 and says which extra to install when the command's
    own dependencies are missing. A Ctrl-C at any moment (importing the
    command, parsing, loading plugins, running) exits 130 with one line,
    never a traceback.
    """
    try:
        raise SystemExit(_main(argv))
    except KeyboardInterrupt:
        interrupted()


def interrupted() -> NoReturn:
    """Say `turnkeep: interrupted` and exit 130."""
    with contextlib.suppress(KeyboardInterrupt, OSError):  # the status says it
        print("turnkeep: interrupted", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_INTERRUPTED)


def _main(argv: Sequence[str] | None) -> int:
    try:
        group = _load()
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if top not in EXTRA_MODULES:
            raise
        print(MISSING_EXTRA.format(name=top), file=sys.stderr)
        return 2
    import click

    args = list(argv) if argv is not None else None
    try:
        # Not standalone: click would turn a Ctrl-C into "Aborted!", status 1.
        done = group.main(args=args, prog_name="turnkeep", standalone_mode=False)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        click.echo("Aborted!", err=True)  # a refused confirmation, end of input
        return 1
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except BrokenPipeError:
        # The reader went away (`turnkeep ls | head`): nothing more to say.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - flushed at exit
        return 1
    return done if isinstance(done, int) else 0


def _load() -> click.Group:
    # Imported here, not at the top, so a missing extra can be named.
    from turnkeep.cli.app import cli as group

    return group
