"""What a plugin's `render_transcript` returns: the history a log means.

A plugin whose event types encode a history of their own (items that later
events remove, as a framework's session does) says through
`render_transcript` what that history is, entry by entry, so `turnkeep
show` prints what the log means rather than one line per event.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import msgspec

from turnkeep.errors import HookContractError

__all__ = ["TranscriptEntry", "checked_transcript"]


class TranscriptEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of a rendered history.

    Attributes:
        label: who or what it is (`"user"`, `"assistant"`, `"tool call
            search"`), printed as a heading.
        text: its content, printed below the label (may be empty).
        note: a remark about the log rather than history (how many items a
            pop or clear removed), printed dimmed.
    """

    label: str
    text: str = ""
    note: bool = False


def checked_transcript(result: object) -> list[TranscriptEntry] | None:
    """What a `render_transcript` call returned, checked.

    Raises:
        HookContractError: it is neither `None` nor a sequence of
            `TranscriptEntry`.
    """
    if result is None:
        return None
    if type(result) in (list, tuple):  # no narrowing: its items are unknown
        entries = list(cast("Sequence[object]", result))
        if all(isinstance(e, TranscriptEntry) for e in entries):
            return cast("list[TranscriptEntry]", entries)
    raise HookContractError(
        "render_transcript must return a list of TranscriptEntry or None, "
        f"not {type(result).__name__}"
    )
