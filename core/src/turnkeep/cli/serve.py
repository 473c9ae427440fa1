"""`turnkeep serve`: the HTTP/SSE service and the web page over the store.

The service itself is `turnkeep.serve` (extra `turnkeep[serve]`); this
module only reads the command line, opens the store, and runs it. When the
extra is missing, the command says which one to install.
"""

from __future__ import annotations

import errno
from typing import Final

import attrs
import click

from turnkeep.cli.runtime import CliError, common_options, execute, open_store
from turnkeep.config import ServeConfig

__all__ = ["EXIT_BIND", "MISSING_SERVE", "SERVE_MODULES", "register"]

EXIT_BIND: Final = 3
"""The exit status when the address cannot be bound (a busy port, ...)."""

SERVE_MODULES: Final = frozenset({"starlette", "uvicorn", "sse_starlette", "anyio"})
"""The top-level modules the `serve` extra installs."""

MISSING_SERVE: Final = (
    "`turnkeep serve` needs the `serve` extra ({name} is not installed); install "
    "it with: pip install 'turnkeep[serve]'"
)


@click.command(
    "serve",
    epilog="\b\nExamples:\n"
    "  turnkeep serve                          # http://127.0.0.1:8765/\n"
    "  turnkeep --store sqlite:./s.db serve --port 9000\n"
    "  turnkeep serve --new-token                # print a strong token\n"
    "  turnkeep serve --recover-every 60s        # settle crashed turns\n"
    "  TURNKEEP_SERVE__TOKEN=... turnkeep serve --host 0.0.0.0 --behind-proxy",
)
@click.option("--host", "bind", metavar="ADDRESS", help="Address to bind [127.0.0.1].")
@click.option("--port", type=click.IntRange(1, 65535), help="TCP port [8765].")
@click.option(
    "--open-reads",
    is_flag=True,
    default=None,
    help="Serve the read endpoints and the page without the token.",
)
@click.option(
    "--recover-every",
    metavar="DURATION",
    help="Run the recovery sweep this often (60s, 5m) [serve.recover_every].",
)
@click.option(
    "--prune-every",
    metavar="DURATION",
    help="Apply the [retention] policy this often (1h) [serve.prune_every].",
)
@click.option(
    "--behind-proxy",
    is_flag=True,
    default=None,
    help="A reverse proxy bounds connections and slow requests in front of "
    "this service (needed to bind other than loopback; docs/serve.md).",
)
@click.option(
    "--new-token",
    is_flag=True,
    help="Print a strong token for TURNKEEP_SERVE__TOKEN and exit.",
)
@common_options
def serve(
    bind: str | None,
    port: int | None,
    open_reads: bool | None,
    recover_every: str | None,
    prune_every: str | None,
    behind_proxy: bool | None,
    new_token: bool,
) -> None:
    """Serve the store's sessions over HTTP: JSON, SSE and a web page.

    Shows committed events only. Writes (POST /recover) need the bearer
    token (TURNKEEP_SERVE__TOKEN or [serve] token), and so do reads unless
    --open-reads. Binding an address other than loopback needs a token and
    a reverse proxy in front (--behind-proxy). A token shorter than 22
    characters is refused; --new-token prints one. With --recover-every
    the service settles sessions a crash left inside a turn on a timer;
    with --prune-every it applies [retention] on its own.
    """
    try:
        from turnkeep.serve.run import listen, serve as run, url
        from turnkeep.serve.ticks import check_timers
        from turnkeep.serve.tokens import new_token as make_token
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if top not in SERVE_MODULES:
            raise
        click.echo(f"turnkeep: {MISSING_SERVE.format(name=top)}", err=True)
        raise click.exceptions.Exit(2) from None
    if new_token:
        click.echo(make_token())
        return

    async def body() -> int:
        async with open_store() as store:
            config = store.host.config.serve
            changes: dict[str, object] = {}
            if bind is not None:
                changes["host"] = bind
            if port is not None:
                changes["port"] = port
            if open_reads is not None:
                changes["open_reads"] = open_reads
            if recover_every is not None:
                changes["recover_every"] = recover_every
            if prune_every is not None:
                changes["prune_every"] = prune_every
            if behind_proxy is not None:
                changes["behind_proxy"] = behind_proxy
            config = attrs.evolve(config, **changes)
            check_timers(store.host, config)
            try:
                sock = listen(config)
            except OSError as exc:
                raise CliError(_cannot_bind(config, exc), code=EXIT_BIND) from exc
            click.echo(
                f"turnkeep: serving {store.name} sessions on {url(config)}", err=True
            )
            if config.recover_every is not None:
                every = config.recover_every.total_seconds()
                click.echo(f"turnkeep: recovery sweep every {every:g}s", err=True)
            await run(store.host, config, sock)
        return 0

    execute(body, interrupted=0)


def _cannot_bind(config: ServeConfig, exc: OSError) -> str:
    host, port = config.host, config.port
    if exc.errno == errno.EADDRINUSE:
        return (
            f"cannot serve on {host} port {port}: the port is in use; stop what "
            "holds it or pick another with --port"
        )
    why = exc.strerror or str(exc)
    return f"cannot serve on {host} port {port}: {why}; check --host"


def register(group: click.Group) -> None:
    """Add `serve` to the `turnkeep` group."""
    group.add_command(serve)
