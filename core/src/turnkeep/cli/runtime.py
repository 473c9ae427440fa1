"""How every `turnkeep` command runs: options, the store, errors, exit codes.

Owns the options every command shares (`--store`, `--debug`; specs are
parsed by `turnkeep.storespec`), opening a `Host` on the selected backend
(and closing it), and turning failures into one line on stderr with a
meaningful exit status:

- 0: done, nothing wrong;
- 1: problems found, or bad input (an unknown session, a damaged, foreign,
  newer or locked store ...): one line naming the session and what to do;
- 2: usage (click's own errors);
- 130: interrupted (Ctrl-C), unless a command treats that as its normal end.

Tracebacks are printed only with `--debug`.
"""

from __future__ import annotations

import asyncio
import errno
import sys
import traceback
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Final, NoReturn, TypeVar

import attrs
import click
import msgspec

from turnkeep.clock import Clock, now_ms
from turnkeep.config import Config, load_config
from turnkeep.errors import (
    ConfigurationError,
    SessionCorruptError,
    SessionDeletedError,
    SessionExistsError,
    SessionFencedError,
    SessionHeldError,
    SessionLockedError,
    SessionNotFoundError,
    StorageError,
    TurnkeepError,
    UnsupportedFormatError,
)
from turnkeep.host import Host
from turnkeep.persistence import SessionPersistence
from turnkeep.storespec import StoreSpec, parse_spec, redact_dsn

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_PROBLEMS",
    "CliError",
    "Opened",
    "Options",
    "StoreSpec",
    "about",
    "common_options",
    "config_for",
    "execute",
    "fail",
    "open_store",
    "options",
    "parse_spec",
    "redact_dsn",
]

EXIT_PROBLEMS: Final = 1
EXIT_INTERRUPTED: Final = 130

F = TypeVar("F", bound=Callable[..., Any])


class CliError(Exception):
    """A failure the command detected itself: printed as one line, exit 1."""

    def __init__(self, message: str, *, code: int = EXIT_PROBLEMS) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str) -> NoReturn:
    """Stop the command with a one-line error (exit 1)."""
    raise CliError(message)


# -- options -------------------------------------------------------------------


@attrs.define
class Options:
    """What the shared options selected (kept on the click context)."""

    store: StoreSpec | None = None
    debug: bool = False


def options() -> Options:
    """The current command's shared options."""
    return click.get_current_context().ensure_object(Options)


def _set_store(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        try:
            ctx.ensure_object(Options).store = parse_spec(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=_param) from exc


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(Options).debug = True


def common_options(fn: F) -> F:
    """Add `--store` and `--debug` (accepted before or after the command)."""
    fn = click.option(
        "--debug",
        is_flag=True,
        expose_value=False,
        callback=_set_debug,
        help="Print tracebacks for errors.",
    )(fn)
    return click.option(
        "--store",
        metavar="SPEC",
        expose_value=False,
        callback=_set_store,
        help="Use this store instead of the configured one: jsonl:PATH, "
        "sqlite:PATH, postgres:DSN (or a backend name alone).",
    )(fn)


# -- opening the store ---------------------------------------------------------


def config_for(spec: StoreSpec | None) -> Config:
    """The configuration a command runs with (`spec` overrides the files).

    Raises:
        ConfigurationError: a configuration file or value is invalid.
    """
    return load_config(overrides=spec.overrides() if spec is not None else None)


@attrs.frozen
class Opened:
    """A started host and its active backend."""

    host: Host
    backend: SessionPersistence
    name: str


@asynccontextmanager
async def open_store(
    spec: StoreSpec | None = None, *, clock: Clock = now_ms, create: bool = False
) -> AsyncGenerator[Opened]:
    """Start a host on the selected backend; close it afterwards.

    `spec` defaults to the `--store` option; without one, configuration
    chooses (files, environment, or the default backend). A store named
    explicitly by its path must exist unless `create` (the commands that
    write new sessions: `import`, `migrate --to`): a typo'd path would
    otherwise read as an empty store. The default store not existing yet
    is normal.

    Raises:
        CliError: an explicitly named store's path does not exist.
        PersistenceNotConfiguredError: no backend is active.
        ConfigurationError, PluginNotFoundError, UnknownBackendError: see
            `Host.start`.
    """
    chosen = spec if spec is not None else options().store
    host = Host(config_for(chosen), clock=clock)
    try:
        await host.start()
        backend = host.require_persistence()
        if chosen is not None and not create:
            _check_exists(chosen)
    except BaseException:
        await host.aclose()
        raise
    name = host.persistence_name or "?"
    try:
        yield Opened(host=host, backend=backend, name=name)
    finally:
        await host.aclose()


_DENIED: Final = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def _denied(exc: BaseException) -> bool:
    """Whether a storage error comes from the system refusing access.

    Only then is "check the permissions" advice; a damaged file or another
    application's database says what to do in its own message.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _DENIED:
            return True
        seen = seen.__cause__
    return False


def _check_exists(spec: StoreSpec) -> None:
    path = spec.options.get("path")
    if path is None or Path(path).exists():
        return
    raise CliError(
        f"no store at {path}; check the path (import and migrate --to "
        "create a new store)"
    )


# -- running a command ---------------------------------------------------------


def execute(
    body: Callable[[], Awaitable[int | None]], *, interrupted: int = EXIT_INTERRUPTED
) -> NoReturn:
    """Run a command's async body and exit with its status.

    Args:
        body: the command; returns its exit status (`None`: 0).
        interrupted: the status when the user presses Ctrl-C (a follow
            mode ends that way normally, and passes 0).
    """
    debug = options().debug

    async def main() -> int | None:
        return await body()

    try:
        code = asyncio.run(main())
    except KeyboardInterrupt:
        if interrupted:
            click.echo("turnkeep: interrupted", err=True)
        raise click.exceptions.Exit(interrupted) from None
    except click.exceptions.Exit:
        raise
    except click.ClickException:
        raise
    except click.exceptions.Abort:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure ends as one line
        if debug:
            traceback.print_exception(exc, file=sys.stderr)
        code = _code(exc)
        click.echo(f"turnkeep: {one_line(describe_error(exc))}", err=True)
        raise click.exceptions.Exit(code) from None
    raise click.exceptions.Exit(code or 0)


def _code(exc: BaseException) -> int:
    return exc.code if isinstance(exc, CliError) else EXIT_PROBLEMS


def one_line(text: str) -> str:
    """`text` on one line (messages may quote multi-line input)."""
    return " ".join(text.split())


def describe_error(exc: BaseException, session_id: str | None = None) -> str:
    """What went wrong and what to do, for a person (naming `session_id`)."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, CliError):
        return message
    if session_id is not None and repr(session_id) not in message:
        message = f"session {session_id!r}: {message}"
    if isinstance(exc, SessionHeldError):
        return (
            f"session {exc.session_id!r} is held by another live process, so "
            "nothing was deleted; stop that process (or wait until it "
            f"finishes), or run `turnkeep rm --force {exc.session_id}` to "
            "delete it anyway (that process is told its session was deleted)"
        )
    if isinstance(exc, SessionLockedError):
        who = f"session {session_id!r}" if session_id is not None else "the session"
        return (
            f"{who} is being written by another process; stop that process (or "
            "wait until it finishes) and try again"
        )
    if isinstance(exc, SessionDeletedError):
        return message
    if isinstance(exc, SessionFencedError):
        return f"{message} (another process took the session over; try again)"
    if isinstance(exc, SessionNotFoundError):
        return f"{message} (`turnkeep ls` lists the stored sessions)"
    if isinstance(exc, SessionCorruptError):
        return (
            f"{message} (`turnkeep verify {exc.session_id}` reports the damage; "
            "restore the session from a backup)"
        )
    if isinstance(exc, UnsupportedFormatError):
        return f"{message} (upgrade turnkeep and its backend to read it)"
    if isinstance(exc, SessionExistsError):
        return f"{message} (choose another id)"
    if isinstance(exc, StorageError) and _denied(exc):
        return f"{message} (check the store's location and permissions)"
    if isinstance(exc, ConfigurationError):
        return f"{message} (see `turnkeep plugins` and docs/configuration.md)"
    if isinstance(exc, TurnkeepError):
        return message
    if isinstance(exc, msgspec.DecodeError | msgspec.ValidationError):
        return f"invalid input: {message}"
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        return f"cannot use{where}: {exc.strerror or message}"
    return (
        f"internal error: {type(exc).__name__}: {message} (run again with --debug "
        "for the traceback, and please report it)"
    )


class about:
    """Name a session in any turnkeep error raised inside the block.

    Usable with `with` and `async with`; the error becomes a `CliError`
    whose one line names the session and says what to do.
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, TurnkeepError):
            raise CliError(describe_error(exc, self.session_id)) from exc

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(kind, exc, tb)
