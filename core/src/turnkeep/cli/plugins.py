"""What is installed and what is active: `turnkeep plugins`.

Lists the `turnkeep` entry points with their distributions and versions,
the backends each one registers, which backend is active, and why: which
configuration source set `persistence` (the same sources, in the same order
of precedence, as `turnkeep.config.load_config`), or that the default was
taken.
"""

from __future__ import annotations

import importlib.metadata
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, cast

import click
import msgspec
from rich.table import Table
from rich.text import Text

from turnkeep.backends import ENTRY_POINT_GROUP
from turnkeep.cli.output import clean, console, emit_json
from turnkeep.cli.runtime import (
    StoreSpec,
    common_options,
    config_for,
    describe_error,
    execute,
    one_line,
    options,
    redact_dsn,
)
from turnkeep.config import DEFAULT_BACKEND, Config, structure_config
from turnkeep.errors import ConfigurationError
from turnkeep.host import Host

__all__ = ["REDACTION_OFF", "persistence_source", "register"]

REDACTION_OFF: Final = (
    "secret redaction is off (redact_secrets = false): keys, tokens and "
    "passwords in messages and tool calls are stored as they were typed"
)


class PluginRow(msgspec.Struct, frozen=True, kw_only=True):
    """One installed entry point."""

    name: str
    module: str
    distribution: str | None
    version: str | None
    backends: list[str]
    loaded: bool
    error: str | None = None


class _Report(msgspec.Struct, frozen=True, kw_only=True):
    plugins: list[PluginRow]
    builtin_backends: list[str]
    active: str | None
    reason: str
    location: str | None
    redaction: bool
    warnings: list[str]
    error: str | None


def persistence_source(
    start: Path, env: Mapping[str, str], spec: StoreSpec | None
) -> str | None:
    """Where `persistence` was set, or `None` when nothing set it."""
    if spec is not None:
        return "the --store option"
    for directory in (start, *start.parents):
        own = directory / "turnkeep.toml"
        if own.is_file():
            if "persistence" in _toml(own):
                return str(own)
            break  # load_config reads only the nearest turnkeep.toml
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if not candidate.is_file():
            continue
        tool: object = _toml(candidate).get("tool", {})
        section: object = (
            cast("dict[str, object]", tool).get("turnkeep")
            if isinstance(tool, dict)
            else None
        )
        if isinstance(section, dict):
            if "persistence" in section:
                return f"{candidate} [tool.turnkeep]"
            break  # the nearest pyproject.toml with [tool.turnkeep] is the one read
    if "TURNKEEP_PERSISTENCE" in env:
        return "the TURNKEEP_PERSISTENCE environment variable"
    return None


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return {}  # load_config reports unreadable files itself


@click.command(
    "plugins",
    epilog="\b\nExamples:\n  turnkeep plugins\n  turnkeep plugins --json",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@common_options
def plugins(as_json: bool) -> None:
    """List installed turnkeep plugins, their versions, and the active backend."""

    async def body() -> int:
        spec = options().store
        config = config_for(spec)
        entry_points = sorted(
            importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
            key=lambda e: e.name,
        )
        host = Host(config)
        error: str | None = None
        try:
            await host.start()
        except Exception as exc:  # noqa: BLE001 - reported as part of the listing
            error = one_line(describe_error(exc))
        try:
            report = _report(host, config, entry_points, spec, error)
        finally:
            await host.aclose()
        if as_json:
            emit_json(report)
        else:
            _print(report)
        return 1 if error else 0

    execute(body)


def _report(
    host: Host,
    config: Config,
    entry_points: list[importlib.metadata.EntryPoint],
    spec: StoreSpec | None,
    error: str | None,
) -> _Report:
    backends = host.backends
    loaded = set(host.plugin_names())
    rows: list[PluginRow] = []
    for ep in entry_points:
        dist = ep.dist
        owned = sorted(
            n for n, b in backends.items() if host.pm.get_name(b.plugin) == ep.name
        )
        rows.append(
            PluginRow(
                name=ep.name,
                module=ep.value,
                distribution=dist.name if dist is not None else None,
                version=dist.version if dist is not None else None,
                backends=owned,
                loaded=ep.name in loaded,
            )
        )
    builtin = sorted(
        n
        for n, b in backends.items()
        if host.pm.get_name(b.plugin) not in {r.name for r in rows}
    )
    active = host.persistence_name
    source = persistence_source(Path.cwd(), os.environ, spec)
    if source is not None:
        reason = f"set by {source}"
    elif active == DEFAULT_BACKEND:
        reason = (
            f"the default ({DEFAULT_BACKEND!r}, installed); nothing sets `persistence`"
        )
    else:
        reason = "nothing sets `persistence` and the default backend is not installed"
    warnings: list[str] = []
    if not config.redact_secrets:
        warnings.append(REDACTION_OFF)
    return _Report(
        plugins=rows,
        builtin_backends=builtin,
        active=active,
        reason=reason,
        location=_location(host, config, active),
        redaction=config.redact_secrets,
        warnings=warnings,
        error=error,
    )


def _location(host: Host, config: Config, active: str | None) -> str | None:
    entry = host.backends.get(active) if active is not None else None
    if entry is None:
        return None
    # A backend that keeps files says where (its default included).
    path = getattr(host.require_persistence(), "path", None)
    if isinstance(path, str | os.PathLike):
        return os.fspath(cast("str | os.PathLike[str]", path))
    if entry.config_type is None:
        return None
    try:
        structured = structure_config(
            config.backends.get(entry.name, {}),
            entry.config_type,
            source=f"[backends.{entry.name}]",
        )
    except ConfigurationError:
        return None  # the host reported it already
    dsn = getattr(structured, "dsn", None)
    if isinstance(dsn, str):
        schema = getattr(structured, "schema", None)
        where = redact_dsn(dsn) or "(libpq defaults)"
        return f"{where} schema {schema}" if isinstance(schema, str) else where
    return None


def _print(report: _Report) -> None:
    out = console()
    table = Table(box=None, header_style="bold")
    for name in ("PLUGIN", "DISTRIBUTION", "VERSION", "BACKENDS", "LOADED"):
        table.add_column(name, no_wrap=True)
    for row in report.plugins:
        table.add_row(
            Text(clean(row.name)),
            Text(clean(row.distribution or "?")),
            Text(clean(row.version or "?")),
            ", ".join(row.backends) or "-",
            "yes" if row.loaded else "no",
        )
    out.print(table)
    out.print(f"built-in backends: {', '.join(report.builtin_backends) or '-'}")
    active = report.active or "none"
    out.print(
        Text.assemble(
            ("active backend: ", "bold"), (active, "bold"), f" ({report.reason})"
        )
    )
    if report.location is not None:
        out.print(f"location: {clean(report.location)}")
    for warning in report.warnings:
        out.print(Text(f"warning: {warning}", "bold yellow"))
    if report.error is not None:
        out.print(Text(f"error: {report.error}", "bold red"))


def register(group: click.Group) -> None:
    """Add this module's commands to the `turnkeep` group."""
    group.add_command(plugins)
