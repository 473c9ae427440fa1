"""Redaction at the source: running the redaction hooks, and `SecretRedactor`.

`run_redact_event` and `run_redact_text` are how the host applies every
`redact_event` / `redact_text` implementation, in hook order, turning a
failure into `RedactionError` so nothing is stored raw.

`SecretRedactor` is a builtin plugin, registered by the host unless
configuration sets `redact_secrets = false`. It implements `redact_event`
and `redact_text`, so credentials that reach a user message, an assistant
reply (streamed pieces too), a tool's arguments or output, an error text or
a session title are replaced by a marker such as `[REDACTED:api-token]`
before the event joins the log. Every sink (files, rows, sidecars, exports,
model history) therefore only ever sees the marker. Plugin event types are
left as given unless they opt in (`SessionEvent.redact`).

The agent loop holds streamed deltas back for it (`held_stream`,
`turnkeep.heldstream`) so that a secret split across them is redacted in
the context of what follows, and appends what is released with
`Session.append_redacted`, which does not run this plugin's hook again.

Detection is pattern-based (`turnkeep.secretscan`) and deliberately
conservative about what it keeps: a key-looking string is replaced even if
it was harmless. Users add their own patterns (`redact_patterns` in the
configuration, or `extra` here), or write another `redact_event` plugin.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

import attrs
import msgspec
from pluggy import HookImpl

from turnkeep._pluggy import SESSION_EVENT_ARGS, call_impl
from turnkeep.errors import RedactionError
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessage,
    RunContext,
    RunInstructions,
    SessionEvent,
    ToolCall,
    ToolResult,
    TurnEnd,
    UserMessage,
)
from turnkeep.heldstream import HeldStream
from turnkeep.hookspecs import hookimpl
from turnkeep.secretscan import DEFAULT_RULES, SecretScanner, rules_from

if TYPE_CHECKING:
    import pluggy

    from turnkeep.session import Session

__all__ = [
    "DEFAULT_PATTERNS",
    "REDACTOR_NAME",
    "SecretRedactor",
    "builtin_redactor",
    "redact",
    "run_redact_event",
    "run_redact_text",
]

REDACTOR_NAME: Final = "turnkeep.redaction"
"""The name the host registers its `SecretRedactor` under."""

E = TypeVar("E", bound=SessionEvent)


def run_redact_event(
    impls: Sequence[HookImpl], session: Session, event: E, skip: object = None
) -> E:
    """Run every `redact_event` implementation, in hook order.

    Args:
        impls: the implementations.
        session: the session the event is for.
        event: the event.
        skip: a plugin whose implementation is not run (it redacted the
            event already, knowing more: `Session.append_redacted`).

    Raises:
        RedactionError: an implementation raised or broke its contract.
    """
    current = event
    if skip is not None:
        impls = [impl for impl in impls if impl.plugin is not skip]
    for impl in impls[::-1]:  # a copy: hooks may be (un)registered meanwhile
        try:
            if impl.argnames == SESSION_EVENT_ARGS:  # no kwargs to build
                result = cast(object, impl.function(session, current))
            else:
                result = call_impl(impl, session=session, event=current)
        except Exception as exc:
            raise RedactionError(
                f"redacting event {event.type!r} (seq {event.seq}) failed "
                f"in {impl.plugin_name!r}; the event was refused, not stored "
                f"raw: {type(exc).__name__}",
                event_type=event.type,
            ) from exc
        if result is None:
            continue
        if (
            type(result) is not type(event)
            or result.seq != event.seq  # pyright: ignore[reportAttributeAccessIssue]
            or result.time != event.time  # pyright: ignore[reportAttributeAccessIssue]
        ):
            raise RedactionError(
                f"{impl.plugin_name!r} returned a different event from "
                f"redact_event for {event.type!r} (seq {event.seq})",
                event_type=event.type,
            )
        current = cast(E, result)
    return current


def run_redact_text(impls: Sequence[HookImpl], text: str) -> str:
    """Run every `redact_text` implementation, in hook order.

    Raises:
        RedactionError: an implementation raised.
    """
    current = text
    for impl in reversed(impls):
        try:
            result = call_impl(impl, text=current)
        except Exception as exc:
            raise RedactionError(
                f"redacting metadata text failed in {impl.plugin_name!r}: "
                f"{type(exc).__name__}",
                event_type="summary",
            ) from exc
        if isinstance(result, str):
            current = result
    return current


DEFAULT_PATTERNS: Final[tuple[tuple[str, str], ...]] = tuple(
    (rule.name, rule.regex) for rule in DEFAULT_RULES
)
"""(name, regex) pairs replaced by `[REDACTED:<name>]` by default; a pattern
with a group named `secret` replaces only that group (keeping, say, `Bearer `)."""

_TEXT_FIELDS: Final[dict[type[SessionEvent], tuple[str, ...]]] = {
    UserMessage: ("text",),
    AssistantChunk: ("text",),
    AssistantMessage: ("text",),
    ToolCall: ("arguments",),
    ToolResult: ("output",),
    TurnEnd: ("error",),
    RunContext: ("instructions",),
    RunInstructions: ("text",),
}
"""The vocabulary's free-text fields: what people and models write. Ids,
names, numbers and statuses are the loop's own and are not scanned."""


def _streams() -> weakref.WeakKeyDictionary[Session, list[str]]:
    return weakref.WeakKeyDictionary()


@attrs.define(eq=False)
class SecretRedactor:
    """Replaces secrets in event payloads and metadata text with markers.

    Scans the vocabulary's text fields (`_TEXT_FIELDS`) and every string of
    a plugin event type that opts in (`redact = True` on the class, or
    `define_event_type(..., redact=True)`); other plugin types are stored
    exactly as given.

    Args:
        extra: more (name, regex) pairs to redact (these run on every text:
            they have no pre-filter).
        high_entropy: also replace long random-looking tokens (32+ chars of
            mixed case and digits with high entropy). Off by default: it
            also catches hashes and ids.

    Raises:
        ConfigurationError: a pattern is not a valid regex.
    """

    extra: Iterable[tuple[str, str]] = ()
    high_entropy: bool = False
    _scanner: SecretScanner = attrs.field(init=False)
    _streams: weakref.WeakKeyDictionary[Session, list[str]] = attrs.field(
        init=False, factory=_streams
    )
    """Per session, the tail of the reply being streamed (see `_chunk`), in
    a list that is updated in place (cheaper than storing a new key)."""
    _last: tuple[weakref.ReferenceType[Session], list[str]] | None = attrs.field(
        init=False, default=None
    )
    """The session that streamed last and its entry of `_streams`: the
    next piece is most likely its (a look-up in `_streams` costs more)."""
    _streaming: bool = attrs.field(init=False, default=False)
    """Whether `_streams` may hold a reply (cheaper to test than its size)."""

    def __attrs_post_init__(self) -> None:
        self._scanner = SecretScanner(
            rules_from(self.extra, high_entropy=self.high_entropy)
        )

    def text(self, value: str) -> str:
        """Return `value` with every secret replaced by its marker."""
        return self._scanner.scan(value)

    @property
    def hold(self) -> int:
        """K: the most characters a `held_stream` holds a piece back by."""
        return self._scanner.hold

    def held_stream(self) -> HeldStream:
        """A `HeldStream` over these rules, for one streamed reply.

        Append what it releases with `Session.append_redacted(data, self)`:
        it was redacted knowing the text around it.
        """
        return HeldStream(self._scanner)

    @hookimpl(tryfirst=True)
    def redact_event(
        self, session: Session, event: SessionEvent
    ) -> SessionEvent | None:
        """Redact the event's text fields (see the class docstring)."""
        data = event.data
        if isinstance(data, AssistantChunkData):
            return self._chunk(session, event, data)
        if self._streaming:
            self._end_stream(session)
        fields = _TEXT_FIELDS.get(type(event))
        if fields is None:
            if not type(event).redact or isinstance(data, msgspec.Raw):
                return None  # opaque to us: stored exactly as it came
            plain = msgspec.to_builtins(data)
            cleaned, changed = self._walk(plain)
            if not changed:
                return None
            if isinstance(data, msgspec.Struct):
                cleaned = msgspec.convert(cleaned, type(data))
            return msgspec.structs.replace(event, data=cleaned)
        scan = self._scanner.scan
        changes: dict[str, Any] = {}
        for name in fields:
            value = getattr(data, name)
            if type(value) is str:
                cleaned = scan(value)
                if cleaned is not value and cleaned != value:
                    changes[name] = cleaned
            elif value is not None and self._may_hold_secrets(value):
                cleaned, changed = self._walk(value)
                if changed:
                    changes[name] = cleaned
        if not changes:
            return None
        return msgspec.structs.replace(
            event, data=msgspec.structs.replace(data, **changes)
        )

    def _chunk(
        self, session: Session, event: SessionEvent, data: AssistantChunkData
    ) -> SessionEvent | None:
        # A secret can straddle streamed pieces ("Bearer " | "abc..."), so
        # each piece is scanned after the tail of the ones before it.
        last = self._last
        if last is not None and last[0]() is session:
            stream = last[1]
        else:
            stream = self._streams.get(session)
            if stream is None:
                stream = self._streams[session] = [""]
            self._last = (weakref.ref(session), stream)
            self._streaming = True
        cleaned, stream[0] = self._scanner.scan_continued(stream[0], data.text)
        if cleaned is data.text:
            return None
        return msgspec.structs.replace(event, data=AssistantChunkData(text=cleaned))

    def _end_stream(self, session: Session) -> None:
        """The reply `session` streamed ended: forget its tail."""
        self._streams.pop(session, None)
        last = self._last
        if last is not None and last[0]() in (session, None):
            self._last = None
        self._streaming = bool(self._streams)

    @hookimpl(tryfirst=True)
    def redact_text(self, text: str) -> str | None:
        """Redact metadata text."""
        cleaned = self.text(text)
        return cleaned if cleaned != text else None

    def _may_hold_secrets(self, value: object) -> bool:
        """Whether a structure (tool arguments) needs its strings walked.

        One pre-filter pass over the strings `_walk` would scan, joined by
        newlines, instead of a scan per string: each string is there whole,
        and what comes before one only adds places to look at.
        """
        strings: list[str] = []
        _strings(value, strings)
        if not strings:
            return False
        return self._scanner.may_match("\n".join(strings))

    def _walk(self, value: Any) -> tuple[Any, bool]:
        if isinstance(value, str):
            cleaned = self._scanner.scan(value)
            return cleaned, cleaned is not value and cleaned != value
        if isinstance(value, list):
            items = [self._walk(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
            return [v for v, _ in items], any(c for _, c in items)
        if isinstance(value, dict):
            changed = False
            out: dict[Any, Any] = {}
            for key, item in value.items():  # pyright: ignore[reportUnknownVariableType]
                new_key, key_changed = self._walk(key)
                new_item, item_changed = self._walk(item)
                out[new_key] = new_item
                changed = changed or key_changed or item_changed
            return out, changed
        return value, False


def _strings(value: object, into: list[str]) -> None:
    """The strings `SecretRedactor._walk` scans in `value`, into `into`."""
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, dict):
        for key, item in cast("dict[object, object]", value).items():
            _strings(key, into)
            _strings(item, into)
    elif isinstance(value, list):
        for item in cast("list[object]", value):
            _strings(item, into)


def builtin_redactor(pm: pluggy.PluginManager) -> SecretRedactor | None:
    """The host's `SecretRedactor`, if it is registered (`redact_secrets`)."""
    found = pm.get_plugin(REDACTOR_NAME)
    return found if isinstance(found, SecretRedactor) else None


def redact(text: str) -> str:
    """Redact `text` with the default patterns (for messages and logs)."""
    return _default.text(text)


_default: Final = SecretRedactor()
