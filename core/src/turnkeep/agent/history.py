"""The model history of each live session, kept up to date as events arrive.

The loop asks for the history before every model call; `history_of` keeps
one `turnkeep.agent.messages.History` per live session, so each call reads
only the events appended since the previous one instead of deriving the
history from the whole log. If a session's log is no longer a continuation
of what was read (events trimmed after a rejected flush, a session
reloaded), it starts over from the log it is given.
"""

from __future__ import annotations

import weakref
from typing import Final

from turnkeep.agent.historyview import HistoryView
from turnkeep.agent.messages import History, Message
from turnkeep.session import Session

__all__ = ["History", "history_of"]


_histories: Final = weakref.WeakKeyDictionary[Session, History]()


def history_of(session: Session) -> HistoryView[Message]:
    """Return the model history of a live session (incrementally maintained).

    Equal to `derive_messages(session.events)`; each call reads only the
    events appended since the previous call for the same session, and
    copies nothing of what it read before (see `HistoryView`).
    """
    log = session.events
    history = _histories.get(session)
    if history is None or not history.follows(log):
        # First use, or the log is not the one it followed (events trimmed
        # after a rejected flush, a reload): derive afresh.
        history = _histories[session] = History()
    return history.messages(log)
