"""What the commands print: consoles, JSON, safe text, times, questions.

Owns the rule that stored text never reaches a terminal raw: session ids,
titles and messages are untrusted, so control characters (terminal escape
sequences) and bidirectional overrides are shown escaped, and rich markup
is never interpreted in them. JSON goes to stdout through msgspec, one
document (or one line per record) per command.
"""

from __future__ import annotations

import re
import signal
import sys
import threading
from collections.abc import Generator
from contextlib import contextmanager
from datetime import datetime
from typing import Final

import click
import msgspec
from rich.console import Console

from turnkeep.cli.runtime import CliError

__all__ = [
    "clean",
    "confirm",
    "console",
    "emit_json",
    "emit_json_line",
    "emit_raw_line",
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


def format_time(ms: int) -> str:
    """Epoch milliseconds as local time, to the second."""
    if ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


@contextmanager
def _interruptible() -> Generator[None]:
    """Let Ctrl-C raise at once, instead of asyncio's cancel-the-task handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


async def confirm(question: str, *, yes: bool, nothing_done: str) -> None:
    """Ask `question` unless `yes`; stop the command unless answered yes.

    Raises:
        CliError: the answer was no, or there is nobody to ask (exit 1).
    """
    if yes:
        return
    try:
        with _interruptible():
            # Asked on the event loop's own thread, blocking it: nothing else
            # runs while a person decides (a worker thread stuck in a read
            # would keep the process alive after Ctrl-C).
            answered = click.confirm(question, default=False, err=True)
    except click.exceptions.Abort:  # Ctrl-C or end of input: a no
        answered = False
    if not answered:
        raise CliError(
            f"not confirmed; {nothing_done} (pass --yes to skip the question)"
        )
