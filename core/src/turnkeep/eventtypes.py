"""Event types contributed by plugins through `register_event_types`.

An `EventTypeRegistry` remembers which plugin contributed each tag, refuses
a tag that is built in or already registered, and keeps the host's codec
decoding exactly the registered types: a plugin's types leave with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import attrs
import pluggy

from turnkeep._pluggy import call_plugin_hook
from turnkeep.codec import EventCodec
from turnkeep.errors import ConfigurationError
from turnkeep.events import VOCABULARY, SessionEvent, event_type_name
from turnkeep.hookspecs import RegisterEventType

__all__ = ["EventTypeRegistry"]

_BUILT_IN: Final = frozenset(event_type_name(c) for c in VOCABULARY)


@attrs.define
class EventTypeRegistry:
    """The plugin event types of one host, kept in step with its codec."""

    codec: EventCodec
    _types: dict[str, tuple[type[SessionEvent], object]] = attrs.field(
        init=False, factory=dict[str, tuple[type[SessionEvent], object]]
    )

    def collect(
        self,
        pm: pluggy.PluginManager,
        plugin: object,
        *,
        name_of: Callable[[object], str | None],
    ) -> None:
        """Call `plugin`'s `register_event_types` and add what it registers.

        Raises:
            ConfigurationError: a tag is built in or already registered;
                nothing of this plugin's was added.
        """
        added: dict[str, tuple[type[SessionEvent], object]] = {}

        def register(cls: type[SessionEvent]) -> None:
            tag = event_type_name(cls)
            known = self._types.get(tag) or added.get(tag)
            if known is not None or tag in _BUILT_IN:
                owner = f" by {name_of(known[1])!r}" if known else " (built in)"
                raise ConfigurationError(
                    f"event type {tag!r} is already registered{owner}"
                )
            added[tag] = (cls, plugin)

        callback: RegisterEventType = register
        call_plugin_hook(pm, plugin, "register_event_types", register=callback)
        if added:
            self._types.update(added)
            self._rebuild()

    def drop(self, plugin: object) -> None:
        """Forget the types `plugin` registered."""
        stale = [t for t, (_, owner) in self._types.items() if owner is plugin]
        for tag in stale:
            del self._types[tag]
        if stale:
            self._rebuild()

    def _rebuild(self) -> None:
        self.codec.set_types([cls for cls, _ in self._types.values()])
