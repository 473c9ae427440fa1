"""What a plugin's `render_transcript` returns: the history a log means.

A plugin whose event types encode a history of their own (items that later
events remove, as a framework's session does) says through
`render_transcript` what that history is, entry by entry, so `turnkeep
show` prints what the log means rather than one line per event.
"""

from __future__ import annotations

import msgspec

__all__ = ["TranscriptEntry"]


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
