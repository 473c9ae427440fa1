"""Redaction at the source: running the redaction hooks, and `SecretRedactor`.

`run_redact_event` and `run_redact_text` are how the host applies every
`redact_event` / `redact_text` implementation, in hook order, turning a
failure into `RedactionError` so nothing is stored raw.

A builtin plugin, registered by the host when configuration sets
`redact_secrets = true`. It implements `redact_event` and `redact_text`, so
credentials that reach a user message, a tool's arguments or output, an error
text or a session title are replaced by a marker such as
`[REDACTED:api-token]` before the event joins the log. Every sink (files,
rows, sidecars, exports, model history) therefore only ever sees the marker.

Detection is pattern-based and deliberately conservative about what it
keeps: a key-looking string is replaced even if it was harmless. Users add
their own patterns by passing `extra` (name, regex) pairs, or write another
`redact_event` plugin.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

import attrs
import msgspec
from pluggy import HookImpl

from turnkeep._pluggy import call_impl
from turnkeep.errors import RedactionError
from turnkeep.events import SessionEvent
from turnkeep.hookspecs import hookimpl

if TYPE_CHECKING:
    from turnkeep.session import Session

__all__ = [
    "DEFAULT_PATTERNS",
    "SecretRedactor",
    "redact",
    "run_redact_event",
    "run_redact_text",
]

E = TypeVar("E", bound=SessionEvent)


def run_redact_event(impls: Sequence[HookImpl], session: Session, event: E) -> E:
    """Run every `redact_event` implementation, in hook order.

    Raises:
        RedactionError: an implementation raised or broke its contract.
    """
    current = event
    for impl in list(reversed(impls)):
        try:
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


DEFAULT_PATTERNS: Final[tuple[tuple[str, str], ...]] = (
    (
        "private-key",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z0-9 ]*PRIVATE "
        r"KEY-----|$)",
    ),
    ("aws-access-key", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b"),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    ("api-token", r"\b(?:sk|rk|pk)-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{16,}"),
    ("api-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    ("api-token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("api-token", r"\bAIza[0-9A-Za-z_-]{35}\b"),
    ("bearer", r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/=-]{8,})"),
    ("url-password", r"://[^/\s:@]+:(?P<secret>[^@\s/]+)@"),
    (
        "secret-assignment",
        r"(?i)(?:password|passwd|secret|token|api_key|apikey|access_key)[\"']?"
        r"\s{0,3}[:=]\s{0,3}[\"']?(?P<secret>[^\s\"',;]{6,})",
    ),
)
"""(name, regex) pairs replaced by `[REDACTED:<name>]`; a pattern with a group
named `secret` replaces only that group (keeping, say, `Bearer `)."""

_CANDIDATE: Final = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{32,}={0,2}")
_ENTROPY_BITS: Final = 4.0


def _entropy(text: str) -> float:
    counts = Counter(text)
    total = len(text)
    return -sum(c / total * math.log2(c / total) for c in counts.values())


def _high_entropy(match: re.Match[str]) -> str:
    token = match.group(0)
    has_digit = any(c.isdigit() for c in token)
    has_upper = any(c.isupper() for c in token)
    has_lower = any(c.islower() for c in token)
    if has_digit and has_upper and has_lower and _entropy(token) >= _ENTROPY_BITS:
        return "[REDACTED:high-entropy]"
    return token


def _keep_context(marker: str) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        start, end = match.span("secret")
        whole = match.group(0)
        offset = match.start()
        return whole[: start - offset] + marker + whole[end - offset :]

    return replace


@attrs.define(eq=False)
class SecretRedactor:
    """Replaces secrets in event payloads and metadata text with markers.

    Args:
        extra: more (name, regex) pairs to redact.
        high_entropy: also replace long random-looking tokens (32+ chars of
            mixed case and digits with high entropy).
    """

    extra: Iterable[tuple[str, str]] = ()
    high_entropy: bool = True
    _patterns: list[tuple[re.Pattern[str], str]] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._patterns = [
            (re.compile(regex), f"[REDACTED:{name}]")
            for name, regex in (*DEFAULT_PATTERNS, *self.extra)
        ]

    def text(self, value: str) -> str:
        """Return `value` with every secret replaced by its marker."""
        for pattern, marker in self._patterns:
            if "secret" in pattern.groupindex:
                value = pattern.sub(_keep_context(marker), value)
            else:
                value = pattern.sub(marker, value)
        if self.high_entropy:
            value = _CANDIDATE.sub(_high_entropy, value)
        return value

    @hookimpl(tryfirst=True)
    def redact_event(self, event: SessionEvent) -> SessionEvent | None:
        """Redact every string (keys included) inside the event's payload."""
        data = event.data
        if isinstance(data, msgspec.Raw):
            return None  # opaque data of an unknown type: stored as it came
        plain = msgspec.to_builtins(data)
        cleaned, changed = self._walk(plain)
        if not changed:
            return None
        if isinstance(data, msgspec.Struct):
            cleaned = msgspec.convert(cleaned, type(data))
        return msgspec.structs.replace(event, data=cleaned)

    @hookimpl(tryfirst=True)
    def redact_text(self, text: str) -> str | None:
        """Redact metadata text."""
        cleaned = self.text(text)
        return cleaned if cleaned != text else None

    def _walk(self, value: Any) -> tuple[Any, bool]:
        if isinstance(value, str):
            cleaned = self.text(value)
            return cleaned, cleaned != value
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


def redact(text: str) -> str:
    """Redact `text` with the default patterns (for messages and logs)."""
    return _default.text(text)


_default: Final = SecretRedactor()
