"""Store specs: a backend and its location in one string (`sqlite:./s.db`).

Owns `StoreSpec` and its parsing (`jsonl:PATH`, `sqlite:PATH`,
`postgres:DSN`, or a backend name alone) and the configuration overrides a
spec stands for. Used by the `turnkeep` command's `--store` option and by
the framework adapters that take `store="sqlite:PATH"`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs

__all__ = ["StoreSpec", "parse_spec", "redact_dsn"]

_NAME: Final = re.compile(r"[a-z][a-z0-9_-]*")


@attrs.frozen
class StoreSpec:
    """A backend chosen on the command line, with its location.

    Attributes:
        backend: the backend's name (its entry point and configuration key).
        options: options for `[backends.<backend>]` that override the
            configured ones (`path`, or `dsn` and `schema`).
    """

    backend: str
    options: dict[str, str] = attrs.field(factory=dict[str, str])

    def overrides(self) -> dict[str, Any]:
        """Configuration overrides selecting this backend and only its plugin."""
        plugins: object = "none" if self.backend == "memory" else [self.backend]
        values: dict[str, Any] = {"persistence": self.backend, "plugins": plugins}
        if self.options:
            values["backends"] = {self.backend: dict(self.options)}
        return values

    def describe(self) -> str:
        """The spec for messages (a DSN's password masked)."""
        if "dsn" in self.options:
            return f"{self.backend}:{redact_dsn(self.options['dsn'])}"
        if "path" in self.options:
            return f"{self.backend}:{self.options['path']}"
        return self.backend


def parse_spec(text: str) -> StoreSpec:
    """Parse `NAME[:TARGET]`.

    `TARGET` is the backend's `path` (made absolute), or for `postgres` its
    `dsn`; a `schema` parameter in the DSN (`?schema=x` in a URI, `schema=x`
    in a key/value string) is turnkeep's and becomes the `schema` option.

    Raises:
        ValueError: the spec is malformed.
    """
    name, sep, target = text.partition(":")
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"{text!r} is not a store spec; expected NAME:TARGET such as "
            "jsonl:./sessions, sqlite:./s.db or postgres:postgresql://host/db"
        )
    if not sep:
        return StoreSpec(name)
    if not target:
        raise ValueError(f"store spec {text!r} names no location after the colon")
    if name == "postgres":
        dsn, schema = _split_schema(target)
        found = {"dsn": dsn} | ({"schema": schema} if schema else {})
        return StoreSpec(name, found)
    return StoreSpec(name, {"path": str(Path(target).expanduser().absolute())})


def _split_schema(dsn: str) -> tuple[str, str | None]:
    if "://" in dsn:
        parts = urlsplit(dsn)
        query = parse_qsl(parts.query, keep_blank_values=True)
        schema = next((v for k, v in query if k == "schema"), None)
        rest = urlencode([(k, v) for k, v in query if k != "schema"])
        return urlunsplit(parts._replace(query=rest)), schema
    match = re.search(r"(?:^|\s)schema\s*=\s*(\S+)", dsn)
    if match is None:
        return dsn, None
    return (dsn[: match.start()] + dsn[match.end() :]).strip(), match.group(1)


def redact_dsn(dsn: str) -> str:
    """A DSN with its password masked, for printing."""
    masked = re.sub(r"(://[^/:@\s]*:)[^@/\s]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", masked)
