"""What a backend can do beyond the protocol, asked without calling it blindly.

Backends written against earlier versions of `SessionPersistence` lack some
methods or parameters; core asks here, once, rather than failing at a call:
whether `delete` can force, `list` filters, `append` carries a summary,
`held` probes owners, and whether the backend stores packed records
(`stores_packs`, [packs] in `turnkeep.persistence`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import cast

from turnkeep.errors import ConfigurationError
from turnkeep.persistence import HoldProbe, SessionPersistence

__all__ = [
    "appends_summary",
    "delete_session",
    "filters_natively",
    "probe_held",
    "stores_packs",
]


def stores_packs(backend: SessionPersistence) -> bool:
    """Whether `backend` keeps records of `span` > 1 (see [packs]).

    A backend says so with a true class attribute `stores_packs`; one
    written before packs existed would store a pack as one event and lose
    count of the seqs, so it is handed one record per event instead.
    """
    return getattr(backend, "stores_packs", False) is True


async def delete_session(
    backend: SessionPersistence, session_id: str, *, force: bool = False
) -> None:
    """`backend.delete(session_id, force=force)`, also for older backends.

    A backend written before `force` existed takes `delete(session_id)`
    only: it is called that way unless `force` is asked for.

    Raises:
        ConfigurationError: `force` was asked of a backend whose `delete`
            takes no `force` (nothing was deleted).
        SessionNotFoundError, SessionHeldError: as `delete`.
    """
    if not force:
        await backend.delete(session_id)
        return
    if not _takes_force(backend.delete):
        raise ConfigurationError(
            f"the backend {type(backend).__qualname__} cannot force a delete (its "
            "delete() takes no `force`); nothing was deleted. Stop the session's "
            "holder, then delete without force"
        )
    await backend.delete(session_id, force=True)


def _takes_force(delete: object) -> bool:
    return _takes(delete, "force", unreadable=True)  # no signature: just try it


def filters_natively(backend: SessionPersistence) -> bool:
    """Whether `backend.list` takes `where=` (see [list-filter])."""
    return _takes(backend.list, "where", unreadable=False)


def appends_summary(backend: SessionPersistence) -> bool:
    """Whether `backend.append` takes `summary=` (see [summary-append]).

    Asked once, when a backend is put to use, not per flush. A backend
    written before `summary` existed (or a wrapper whose `append` does not
    pass it on) answers false: its summaries are stored with `update`.
    """
    return _takes(backend.append, "summary", unreadable=False)


def _takes(method: object, name: str, *, unreadable: bool) -> bool:
    try:
        parameters = inspect.signature(method).parameters  # pyright: ignore[reportArgumentType]
    except (TypeError, ValueError):
        return unreadable
    return name in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


async def probe_held(
    backend: SessionPersistence, session_ids: Sequence[str]
) -> dict[str, bool] | None:
    """`backend.held(session_ids)`, or `None` for a backend without `held`.

    `None` means unknown: a backend written before `held` existed cannot
    tell a crashed owner from a live one, so callers keep what its
    summaries say. No call is made for an empty `session_ids`.

    Raises:
        InvalidSessionIdError: as `held`.
    """
    probe = getattr(backend, "held", None)
    if probe is None:
        return None
    if not session_ids:
        return {}
    return await cast("HoldProbe", backend).held(session_ids)
