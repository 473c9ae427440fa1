"""What the commands print: consoles, JSON, safe text, times, questions.

Owns the rule that stored text never reaches a terminal raw: session ids,
titles and messages are untrusted, so control characters (terminal escape
sequences) and bidirectional overrides are shown escaped, and rich markup
is never interpreted in them; in ids, which are printed on one line, line
breaks and tabs are escaped too. JSON goes to stdout through msgspec, one
document (or one line per record) per command.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from datetime import datetime
from typing import Final

import click
import msgspec
from rich.console import Console

from turnkeep.cli.runtime import CliError

__all__ = [
    "clean",
    "clean_id",
    "confirm",
    "console",
    "emit_json",
    "emit_json_line",
    "emit_raw_line",
    "format_size",
    "format_time",
    "shorten",
]

_UNSAFE: Final = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
_encoder: Final = msgspec.json.Encoder()


def clean(text: str) -> str:
    """`text` with control characters and direction overrides made visible."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


_UNSAFE_IN_LINE: Final = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def clean_id(text: str) -> str:
    """A session or call id (one line) with every control character visible.

    Unlike `clean`, tabs and line breaks are escaped too (a newline shows as
    a backslash and `x0a`): an id that holds one would otherwise end its row
    early and print a fake one.
    """
    return _UNSAFE_IN_LINE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def shorten(text: str, width: int) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis."""
    flat = " ".join(clean(text).split())
    return flat if len(flat) <= width else flat[: max(width - 1, 0)] + "…"


def console(*, err: bool = False) -> Console:
    """A console on the current stdout (or stderr); no markup in content."""
    return Console(
        file=sys.stderr if err else sys.stdout,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=False,
    )


def emit_json(value: object) -> None:
    """Print one JSON document (indented) on stdout."""
    click.echo(msgspec.json.format(_encoder.encode(value), indent=2).decode())


def emit_json_line(value: object) -> None:
    """Print one compact JSON line on stdout, flushed (for streams)."""
    click.echo(_encoder.encode(value).decode())
    sys.stdout.flush()


def emit_raw_line(raw: bytes) -> None:
    """Print stored JSON bytes verbatim as one line, flushed."""
    click.echo(raw.decode("utf-8", "replace"))
    sys.stdout.flush()


_UNITS: Final = ("KiB", "MiB", "GiB", "TiB", "PiB")


def format_size(size: int) -> str:
    """A byte count for people: `512 B`, `12.3 KiB`, `4.0 MiB` (powers of 1024)."""
    if size < 1024:
        return f"{size} B"
    value = size / 1024
    for unit in _UNITS[:-1]:
        if round(value, 1) < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_UNITS[-1]}"


def format_time(ms: int) -> str:
    """Epoch milliseconds as local time, to the second."""
    if ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


async def confirm(question: str, *, yes: bool, nothing_done: str) -> None:
    """Ask `question` unless `yes`; stop the command unless answered yes.

    Raises:
        CliError: the answer was not yes, there is nobody to ask (end of
            input), or Ctrl-C was pressed (exit 1).
    """
    if yes:
        return
    click.echo(f"{question} [y/N]: ", nl=False, err=True)
    try:
        answer = await _read_line()
    except asyncio.CancelledError:
        # Ctrl-C cancels the command's task (asyncio's own SIGINT handling):
        # at a question, that is a no. The task ends with this error.
        click.echo("", err=True)
        answer = None
    if answer is None or answer.strip().lower() not in ("y", "yes"):
        raise CliError(
            f"not confirmed; {nothing_done} (pass --yes to skip the question)"
        )


async def _read_line() -> str | None:
    """One line of stdin (`None` at its end), read without blocking the loop.

    The loop watches the descriptor, so Ctrl-C reaches the command whichever
    thread the signal lands on (a blocking read in the main thread would
    wait for Enter when a backend's worker thread took the signal).
    """
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()  # set() is idempotent: the loop may call it often
    try:
        fd = sys.stdin.fileno()
        loop.add_reader(fd, ready.set)
    except (OSError, ValueError):
        # No descriptor the loop can watch (a regular file, a test runner's
        # buffer): reading cannot wait for anyone, so read it directly.
        line = sys.stdin.readline()
        return line or None
    data = b""
    try:
        while not data.endswith(b"\n"):
            await ready.wait()
            ready.clear()
            chunk = os.read(fd, 1024)
            if not chunk:
                break
            data += chunk
    finally:
        loop.remove_reader(fd)
    return data.decode(errors="replace") if data else None
