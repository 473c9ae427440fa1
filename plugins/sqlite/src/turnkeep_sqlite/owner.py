"""Who owns a session, and whether that owner is still alive.

Every writer role recorded in the database carries the owner's *token* (random,
one per backend instance) and a `ProcessIdentity` (`turnkeep.owners`): pid,
host, boot id, process start time and pid namespace. A claimant treats the
recorded owner as gone, and takes the session without `steal`, when the
identity proves it (docs/adr/0007-sqlite-session-ownership.md):

- another boot of this machine (the boot id differs);
- no process with that pid, or a zombie, or a different process that reused
  the pid (its start time differs);
- this very process, but an instance that was closed or collected.

Whenever the identity cannot be checked (another host, another pid namespace,
no `/proc`), the owner counts as alive: the claimant must `steal`, and the
generation fence keeps that safe.
"""

from __future__ import annotations

import threading
from typing import Final

import msgspec

from turnkeep.owners import (
    ProcessIdentity,
    current_identity,
    is_this_process,
    process_alive,
)

__all__ = [
    "ProcessIdentity",
    "current_identity",
    "holder_alive",
    "is_alive",
    "live_tokens",
]

_identity_decoder: Final = msgspec.json.Decoder(ProcessIdentity)

_live_lock = threading.Lock()
_live: set[str] = set()


def live_tokens() -> _LiveTokens:
    """The registry of owner tokens of this process's open backend instances."""
    return _LIVE


class _LiveTokens:
    def add(self, token: str) -> None:
        with _live_lock:
            _live.add(token)

    def discard(self, token: str) -> None:
        with _live_lock:
            _live.discard(token)

    def __contains__(self, token: str) -> bool:
        with _live_lock:
            return token in _live


_LIVE: Final = _LiveTokens()


def is_alive(token: str, owner: ProcessIdentity) -> bool:
    """Whether the recorded owner may still be writing (see the module doc)."""
    if is_this_process(owner):
        return token in _LIVE
    return process_alive(owner)


def holder_alive(token: str | None, info: bytes | None) -> bool:
    """Whether a session row's recorded owner (`owner_token`, `owner_info`) lives.

    No token: nobody holds the row. An owner record that does not decode
    counts as alive: a reader never assumes an owner it cannot read is gone.
    """
    if token is None:
        return False
    try:
        owner = _identity_decoder.decode(info or b"")
    except msgspec.DecodeError:
        return True
    return is_alive(token, owner)
