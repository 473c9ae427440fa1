"""Which of `run_command`'s commands only read: the rest block when interrupted.

A `run_command` call whose outcome is unknown (the process stopped, or the
turn was cancelled or timed out, while the command ran) blocks the session
(`on_unknown: block`, see `turnkeep.agent.effects`) unless its command only
reads: then it is merely reported as interrupted, and the model may look
and run it again. Which commands only read is decided from the command
line alone, by a short allow-list; anything not on it, including every
interpreter, build tool and script, counts as writing.

On the list: a bare program name (a path such as `./ls` may be anything)
from `READ_ONLY`; `find` without an action that writes or runs something
(`-delete`, `-exec`, `-fprint`, ...); `git` with a subcommand from
`READ_ONLY_GIT` right after it (no global options, which can set any
configuration) and no `--output`. A token that a shell would read as a
redirection, a pipe or a command separator (`>`, `|`, `;`, `&&`, ...) makes
any command writing: `run_command` runs no shell, so such a command is at
best not what its author meant.

This classes commands by what they are for, not by what they might do: a
repository's own configuration can make `git status` run a program. It
decides how an interruption is handled, it confines nothing.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import Final

__all__ = ["READ_ONLY", "READ_ONLY_GIT", "command_writes", "writes"]

READ_ONLY: Final = frozenset(
    {
        "basename",
        "cat",
        "cmp",
        "diff",
        "dirname",
        "du",
        "echo",
        "egrep",
        "false",
        "fgrep",
        "grep",
        "head",
        "id",
        "ls",
        "nl",
        "printenv",
        "pwd",
        "realpath",
        "stat",
        "tail",
        "true",
        "uname",
        "wc",
        "which",
        "whoami",
    }
)
"""Programs that only read whatever their arguments."""

READ_ONLY_GIT: Final = frozenset(
    {"blame", "describe", "diff", "log", "ls-files", "rev-parse", "shortlog", "show"}
    | {"status"}
)
"""`git` subcommands that only read (with no `--output`)."""

_FIND_ACTIONS: Final = frozenset(
    {"-delete", "-exec", "-execdir", "-ok", "-okdir"}
    | {"-fls", "-fprint", "-fprint0", "-fprintf"}
)
"""`find` expressions that change files or run programs."""

_SHELL_TOKEN: Final = re.compile(r"^(\d*[<>]|[|;&`]|\$\()")
"""A token a shell would not pass on as an argument (`>`, `2>&1`, `|`, `&&`).

Only at a token's start: `grep 'a|b'` and `grep -- '->'` only read."""


def writes(argv: Sequence[str]) -> bool:
    """Whether the command `argv` may write (anything not known to only read)."""
    if not argv or "/" in argv[0]:
        return True
    if any(_SHELL_TOKEN.match(token) for token in argv):
        return True
    program, arguments = argv[0], argv[1:]
    if program == "find":
        return any(a in _FIND_ACTIONS for a in arguments)
    if program == "rg":
        # `--pre` runs a program on every file searched.
        return any(a.startswith("--pre") for a in arguments)
    if program == "git":
        return (
            not arguments
            or arguments[0] not in READ_ONLY_GIT
            or any(a.startswith("--output") for a in arguments)
        )
    return program not in READ_ONLY


def command_writes(command: str) -> bool:
    """`writes` for a command line as `run_command` splits it (unsplittable: yes)."""
    try:
        return writes(shlex.split(command))
    except ValueError:
        return True
