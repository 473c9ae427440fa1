"""Refusing payload values that would not come back from storage as they went in.

JSON has text, numbers, booleans, null, arrays and objects with text keys.
msgspec encodes much more (a `set` as an array, a `datetime` or `bytes` as
text, `NaN` as null, a tuple as an array, a dataclass as an object), but
where the schema says `Any` it decodes only what JSON has, so the live event
and the stored one would differ. Where the schema names the type (a `bytes`
or `datetime` field of a typed struct) msgspec decodes it back exactly.

`checks_for` builds, per event class, a check that walks only the parts of
its payload typed `Any` (for the vocabulary: the arguments of `tool/call`);
classes without such parts get no check at all, so the hot path pays one
dict lookup. A value is accepted when it decodes equal to itself: `str`,
`int`, finite `float`, `bool`, `None`, `list` and `dict` with text keys
(subclasses too: an `IntEnum` comes back as the equal `int`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Final

import msgspec
import msgspec.inspect as mi

from turnkeep.errors import LossyPayloadError
from turnkeep.events import SessionEvent

__all__ = ["Check", "checks_for"]

Check = Callable[[SessionEvent], None]
"""Raises `LossyPayloadError` for an event whose payload would change."""

_Walk = Callable[[Any], None]


class _Lossy(Exception):
    """Raised deep in a walk; the path is collected while it unwinds."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        self.trail: list[str] = []


_HINTS: Final[dict[type, str]] = {
    set: "a set (stored as a list; pass a sorted list)",
    frozenset: "a frozenset (stored as a list; pass a sorted list)",
    tuple: "a tuple (stored as a list; pass a list)",
    bytes: "bytes (stored as base64 text; encode them yourself, or declare a "
    "bytes field in a typed payload)",
    bytearray: "a bytearray (stored as base64 text)",
}


def _describe(value: object) -> str:
    for kind, hint in _HINTS.items():
        if isinstance(value, kind):
            return hint
    if isinstance(value, float):
        return f"{value!r} (JSON has no {value!r}; it would be stored as null)"
    name = type(value).__qualname__
    return (
        f"a {name} (stored as something else; pass text, a number, a list or "
        f"a dict, or declare a field of type {name} in a typed payload)"
    )


def _walk_any(value: Any) -> None:
    cls: type = type(value)  # pyright: ignore[reportUnknownVariableType]
    if cls is str or cls is int or cls is bool or value is None:
        return
    if cls is float:
        if value - value != 0.0:  # NaN or ±inf, without a function call
            raise _Lossy(_describe(value))
        return
    if cls is dict:
        _walk_dict(value)
        return
    if cls is list:
        _walk_list(value)
        return
    _walk_subclass(value)


_PLAIN: Final = frozenset({str, int, bool, type(None)})
"""Types accepted without a call: most values are one of them."""


def _walk_dict(value: dict[Any, Any]) -> None:
    for key, item in value.items():
        if type(key) is not str and not isinstance(key, str):
            raise _Lossy(_bad_key(key))
        if type(item) in _PLAIN:
            continue
        try:
            _walk_any(item)
        except _Lossy as exc:
            exc.trail.append(key)
            raise


def _walk_list(value: list[Any]) -> None:
    for index, item in enumerate(value):
        if type(item) in _PLAIN:
            continue
        try:
            _walk_any(item)
        except _Lossy as exc:
            exc.trail.append(f"[{index}]")
            raise


def _walk_subclass(value: object) -> None:
    # Subclasses of the JSON types come back as the base type, equal to them.
    if isinstance(value, bool | str | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Lossy(_describe(value))
        return
    if isinstance(value, dict):
        _walk_dict(value)  # pyright: ignore[reportUnknownArgumentType]
        return
    if isinstance(value, list):
        _walk_list(value)  # pyright: ignore[reportUnknownArgumentType]
        return
    raise _Lossy(_describe(value))


def _plan(info: mi.Type, seen: dict[type, _Walk | None]) -> _Walk | None:
    """A walk over the `Any` parts of a value of type `info` (`None`: none)."""
    if isinstance(info, mi.AnyType):
        return _walk_any
    if isinstance(info, mi.StructType):
        return _struct_plan(info, seen)
    if isinstance(info, mi.DictType):
        return _dict_plan(info, seen)
    if isinstance(info, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        item = _plan(info.item_type, seen)
        return None if item is None else _each(item)
    if isinstance(info, mi.UnionType):
        return _union_plan(info, seen)
    return None  # a declared type: msgspec decodes it back as it is


def _struct_plan(info: mi.StructType, seen: dict[type, _Walk | None]) -> _Walk | None:
    cls = info.cls
    if cls in seen:
        known = seen[cls]
        if known is not None:
            return known

        def later(value: Any) -> None:  # a recursive type, still being planned
            walk = seen[cls]
            if walk is not None:
                walk(value)

        return later
    seen[cls] = None
    parts = [(f.name, p) for f in info.fields if (p := _plan(f.type, seen))]
    if not parts:
        return None
    if len(parts) == 1 and parts[0][1] is _values_any:
        # `tool/call` arguments: one call per event on the hot path.
        fused = _field_values_any(parts[0][0])
        seen[cls] = fused
        return fused

    def walk(value: Any) -> None:
        for name, part in parts:
            try:
                part(getattr(value, name))
            except _Lossy as exc:
                exc.trail.append(name)
                raise

    seen[cls] = walk
    return walk


def _dict_plan(info: mi.DictType, seen: dict[type, _Walk | None]) -> _Walk | None:
    item = _plan(info.value_type, seen)
    if isinstance(info.key_type, mi.AnyType):
        return _walk_dict if item is _walk_any else _keys_and(item)
    if item is None:
        return None  # declared keys and values
    if item is _walk_any:
        return _values_any

    def walk(value: Any) -> None:
        for key, entry in value.items():
            try:
                item(entry)
            except _Lossy as exc:
                exc.trail.append(str(key))
                raise

    return walk


def _values_any(value: Any) -> None:
    for key, entry in value.items():
        if type(entry) in _PLAIN:
            continue
        try:
            _walk_any(entry)
        except _Lossy as exc:
            exc.trail.append(str(key))
            raise


def _field_values_any(name: str) -> _Walk:
    def walk(value: Any) -> None:
        for key, entry in getattr(value, name).items():
            if type(entry) in _PLAIN:
                continue
            try:
                _walk_any(entry)
            except _Lossy as exc:
                exc.trail.append(str(key))
                exc.trail.append(name)
                raise

    return walk


def _keys_and(item: _Walk | None) -> _Walk:
    def walk(value: Any) -> None:
        for key, entry in value.items():
            if not isinstance(key, str):
                raise _Lossy(_bad_key(key))
            if item is not None:
                try:
                    item(entry)
                except _Lossy as exc:
                    exc.trail.append(key)
                    raise

    return walk


def _bad_key(key: object) -> str:
    return f"a {type(key).__qualname__} key {key!r} (object keys are stored as text)"


def _each(item: _Walk) -> _Walk:
    def walk(value: Any) -> None:
        for index, entry in enumerate(value):
            try:
                item(entry)
            except _Lossy as exc:
                exc.trail.append(f"[{index}]")
                raise

    return walk


def _union_plan(info: mi.UnionType, seen: dict[type, _Walk | None]) -> _Walk | None:
    if any(isinstance(t, mi.AnyType) for t in info.types):
        return _walk_any
    by_class: list[tuple[type, _Walk]] = []
    for member in info.types:
        part = _plan(member, seen)
        if part is None:
            continue
        if isinstance(member, mi.StructType):
            by_class.append((member.cls, part))
        elif isinstance(member, mi.DictType):
            by_class.append((dict, part))
        else:
            by_class.append((list, part))  # the array types
    if not by_class:
        return None

    def walk(value: Any) -> None:
        for cls, part in by_class:
            if isinstance(value, cls):
                part(value)
                return

    return walk


def _check(cls: type[SessionEvent], walk: _Walk) -> Check:
    def check(event: SessionEvent) -> None:
        try:
            walk(event.data)
        except _Lossy as exc:
            path = ".".join(["data", *reversed(exc.trail)]).replace(".[", "[")
            raise LossyPayloadError(
                f"event {event.type!r} (seq {event.seq}) was refused: {path} is "
                f"{exc.what}; it would not be stored as it is in memory",
                event_type=event.type,
                path=path,
            ) from None

    return check


def checks_for(classes: Iterable[type[SessionEvent]]) -> dict[type, Check]:
    """The check of each class whose payload has `Any`-typed parts."""
    checks: dict[type, Check] = {}
    seen: dict[type, _Walk | None] = {}
    for cls in classes:
        data = next(f.type for f in msgspec.structs.fields(cls) if f.name == "data")
        if data is msgspec.Raw:
            continue
        walk = _plan(mi.type_info(data), seen)
        if walk is not None:
            checks[cls] = _check(cls, walk)
    return checks
