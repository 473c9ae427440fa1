"""The callbacks and host view that hooks receive (re-exported by `turnkeep.hookspecs`).

`PluginHost` is what `plugin_apply` and `plugin_dispose` see of the host;
`RegisterPersistence` and `RegisterEventType` are the `register` callbacks
of `register_persistence` and `register_event_types`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from turnkeep.codec import EventCodec
    from turnkeep.config import Config
    from turnkeep.events import SessionEvent
    from turnkeep.store import SessionStore

__all__ = ["PluginHost", "RegisterEventType", "RegisterPersistence"]


class PluginHost(Protocol):
    """What a plugin sees of its host in `plugin_apply` and `plugin_dispose`.

    Implemented by `turnkeep.Host`. Typed as a protocol so that the hook
    contract does not depend on the host's module (which registers plugins
    that implement these hooks).
    """

    @property
    def config(self) -> Config:
        """The host's configuration."""
        ...

    @property
    def codec(self) -> EventCodec:
        """The event codec (built-in vocabulary plus registered types)."""
        ...

    @property
    def sessions(self) -> SessionStore:
        """The live sessions (`sessions.list()`)."""
        ...


class RegisterPersistence(Protocol):
    """The `register` callback that `register_persistence` receives."""

    def __call__(
        self,
        name: str,
        factory: Callable[[Any], object],
        config_type: type[Any] | None = None,
    ) -> None:
        """Contribute backend `name`.

        Args:
            name: the backend's configuration key (`persistence = "<name>"`).
            factory: builds the backend from its structured options (an
                instance of `config_type`, or `None`).
            config_type: the attrs class of its `[backends.<name>]` options,
                or `None` when it takes none.

        Raises:
            PersistenceConflictError: the plugin registers `name` twice.
        """
        ...


class RegisterEventType(Protocol):
    """The `register` callback that `register_event_types` receives."""

    def __call__(self, cls: type[SessionEvent]) -> None:
        """Contribute event class `cls` (its tag must be new).

        Raises:
            ConfigurationError: the tag is built in or already registered.
        """
        ...
