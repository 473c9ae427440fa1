"""A turnkeep plugin that pauses while it loads, starts or sees an event.

`TK_TEST_PAUSE_AT=plugin-import` pauses while the host imports it,
`plugin-apply` while the host starts it, `session-event` at the fifth event
an `import` appends (a command in the middle of its work). See `tkpause`.
"""

from __future__ import annotations

from tkpause import pause, wanted

from turnkeep.events import SessionEvent
from turnkeep.hookspecs import PluginHost, hookimpl
from turnkeep.session import Session

if wanted("plugin-import"):
    pause("plugin-import")


@hookimpl
def plugin_apply(host: PluginHost) -> None:
    """Pause while the host starts this plugin."""
    del host
    if wanted("plugin-apply"):
        pause("plugin-apply")


@hookimpl
def session_event(session: Session, event: SessionEvent) -> None:
    """Pause at the fifth event of a session."""
    del session
    if event.seq == 4 and wanted("session-event"):
        pause("session-event")
