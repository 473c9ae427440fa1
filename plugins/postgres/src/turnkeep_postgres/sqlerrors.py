"""Turning psycopg's errors into turnkeep's, and describing a server safely.

Every `psycopg.Error` that leaves the backend goes through `storage_error`
(`raise ... from` keeps the driver error as the cause). `describe_server`
renders a connection string without its password, so no message, log line
or exception ever carries a credential.
"""

from __future__ import annotations

import psycopg
from psycopg import conninfo

from turnkeep.errors import StorageError

__all__ = [
    "connection_lost",
    "describe_error",
    "describe_server",
    "disk_full",
    "storage_error",
]

# SQLSTATE classes and codes whose meaning we name in the message.
_HINTS: dict[str, str] = {
    "57014": "a statement ran past statement_timeout_ms (or was cancelled)",
    "55P03": "a row was locked by another worker's transaction past lock_timeout_ms",
    "40P01": "the server broke a deadlock between two workers",
    "25P03": "the server ended a transaction idle past its timeout",
    "57P01": "the server terminated the connection (pg_terminate_backend or shutdown)",
    "57P02": "the server crashed and terminated the connection",
    "57P03": "the server is starting up or shutting down",
    "53300": "the server has no free connection slots (lower pool_max_size)",
    "42501": "the configured role lacks a privilege on the turnkeep schema",
}


def describe_server(dsn: str) -> str:
    """`user@host:port/dbname` of a connection string, never its password."""
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<unparsable connection string>"
    user = params.get("user") or "<default user>"
    host = params.get("host") or params.get("hostaddr") or "<default host>"
    port = params.get("port") or "5432"
    dbname = params.get("dbname") or "<default database>"
    return f"{user}@{host}:{port}/{dbname}"


def connection_lost(exc: BaseException) -> bool:
    """Whether `exc` means the connection is unusable (not a refused statement)."""
    if isinstance(exc, psycopg.OperationalError):
        sqlstate = exc.sqlstate or ""
        # A statement timeout or lock timeout is an OperationalError whose
        # connection is still fine; only class 08 and server shutdowns are not.
        return not sqlstate or sqlstate.startswith(("08", "57P"))
    return isinstance(exc, psycopg.InterfaceError)


def _reason(exc: psycopg.Error) -> tuple[str, str]:
    """`exc`'s SQLSTATE (or "") and what it means: what we know, its first line."""
    sqlstate = exc.sqlstate or ""
    hint = _HINTS.get(sqlstate)
    if hint is None and connection_lost(exc):
        hint = "the connection to the server was lost"
    text = str(exc).strip()
    detail = text.splitlines()[0] if text else type(exc).__name__
    return sqlstate, f"{hint}: {detail}" if hint else detail


def disk_full(exc: BaseException) -> bool:
    """Whether `exc`, or an error it was raised from, is the server's full disk."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, psycopg.Error) and seen.sqlstate == "53100":
            return True
        seen = seen.__cause__
    return False


def describe_error(exc: psycopg.Error) -> str:
    """What `exc` means, in one line (for messages that say more around it)."""
    sqlstate, reason = _reason(exc)
    return f"[SQLSTATE {sqlstate}] {reason}" if sqlstate else reason


def storage_error(exc: psycopg.Error, doing: str, where: str) -> StorageError:
    """A `StorageError` for `exc`, raised while `doing`, against server `where`.

    The caller raises it `from exc`.
    """
    sqlstate, reason = _reason(exc)
    code = f" [SQLSTATE {sqlstate}]" if sqlstate else ""
    return StorageError(
        f"PostgreSQL at {where} failed while {doing}{code}: {reason}. Nothing of "
        "this operation was acknowledged; retry it (a flush is retried by the "
        "next flush)."
    )
