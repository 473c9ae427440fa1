"""The `turnkeep` click group: global options and the commands it holds.

Each command module contributes its commands through a `register(group)`
function, so this module is only the list of them.
"""

from __future__ import annotations

import click

from turnkeep.cli import (
    audit,
    backup,
    cancel,
    checks,
    conformance,
    dev,
    exchange,
    migrate,
    plugins,
    resolve,
    retention,
    serve,
    sessions,
    view,
)
from turnkeep.cli.runtime import Options, common_options

__all__ = ["cli"]


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="Examples:\n\n\b\n"
    "  turnkeep ls\n"
    "  turnkeep --store sqlite:./sessions.db show 01jx...\n"
    "  turnkeep migrate --from jsonl:./old --to postgres:postgresql://db/app --all\n"
    "\nExit status: 0 ok, 1 problems found or bad input, 2 usage.",
)
@click.version_option(package_name="turnkeep", prog_name="turnkeep")
@common_options
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Inspect, follow, verify, repair and move durable turnkeep sessions.

    Every command works on the backend that configuration selects
    (turnkeep.toml, [tool.turnkeep] in pyproject.toml, TURNKEEP_* variables),
    or on the store that --store names.
    """
    ctx.ensure_object(Options)


for _module in (
    sessions,
    cancel,
    retention,
    view,
    checks,
    resolve,
    audit,
    backup,
    exchange,
    migrate,
    plugins,
    dev,
    conformance,
    serve,
):
    _module.register(cli)
