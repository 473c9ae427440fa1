"""Reading `turnkeep import`'s input: bytes to JSON values, or one clear error.

Whatever a user hands `import` (a file of another program, a truncated
download, a binary file, `'[' * 100000`), the result is either the decoded
values or an `ImportInputError` that names the file and the line: empty,
not UTF-8, nested deeper than `MAX_DEPTH`, not JSON, or not the expected
shape. The depth is checked before decoding, by a scan that never recurses,
so no input reaches a recursion limit (nor is stored so deep that reading
it back could). Line numbers of items are found only when one is reported.
Other agents' logs (pi sessions, Codex rollouts) are read line by line with
`read_records`, which names a bad line and says when the last one is cut
short.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final, cast

import attrs
import msgspec

from turnkeep.errors import ImportInputError

__all__ = [
    "MAX_DEPTH",
    "Items",
    "Record",
    "check_text",
    "first_object",
    "input_error",
    "line_at",
    "read_items",
    "read_records",
    "too_deep",
]

MAX_DEPTH: Final = 200
"""The deepest nesting of lists and objects an import accepts."""

# A JSON string (escapes included) or one structural character.
_TOKEN: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[][{},:]')
_AT_BYTE: Final = re.compile(r"\s*\(byte (\d+)\)")
_BOM: Final = b"\xef\xbb\xbf"
_EXPECTED: Final = (
    "expected a turnkeep export, a JSON list of chat messages or session "
    "items, a request body with a `messages` list, or JSON lines (a pi "
    "session, a Codex rollout)"
)


def input_error(
    name: str, line: int, problem: str, *, item: int | None = None
) -> ImportInputError:
    """The error for `problem` at `line` of the file `name`."""
    return ImportInputError(
        f"{name}, line {line}: {problem}", path=name, line=line, item=item
    )


def line_at(data: bytes, offset: int) -> int:
    """The 1-based line holding byte `offset` (its first non-blank byte on)."""
    while offset < len(data) and data[offset : offset + 1] in b" \t\r\n":
        offset += 1
    return data.count(b"\n", 0, min(offset, len(data))) + 1


def check_text(data: bytes, name: str) -> bytes:
    """`data` without a UTF-8 byte order mark, once it is readable as JSON text.

    Raises:
        ImportInputError: the input is empty, not UTF-8, or nested deeper
            than `MAX_DEPTH`.
    """
    data = data.removeprefix(_BOM)
    if not data.strip():
        raise input_error(name, 1, f"the file is empty; {_EXPECTED}")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise input_error(
            name,
            line_at(data, exc.start),
            f"the file is not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x});"
            f" {_EXPECTED}",
        ) from None
    deep = too_deep(data)
    if deep is not None:
        raise input_error(
            name,
            line_at(data, deep),
            f"lists and objects are nested more than {MAX_DEPTH} deep",
        )
    return data


def too_deep(data: bytes) -> int | None:
    """The offset where `data` nests lists and objects past `MAX_DEPTH`, if it does.

    A scan that never recurses, so it runs before anything decodes `data`.
    """
    depth = 0
    for token in _TOKEN.finditer(data):
        char = token.group()
        if char in (b"[", b"{"):
            depth += 1
            if depth > MAX_DEPTH:
                return token.start()
        elif char in (b"]", b"}"):
            depth = max(depth - 1, 0)
    return None


@attrs.frozen
class Items:
    """The items of an input, and how to find each one's line.

    Attributes:
        data: the input (to find lines in).
        values: the decoded items.
        lines: the line of each item when known already (JSON lines).
        body: the items were a request body's `messages` list.
    """

    data: bytes
    values: list[object]
    lines: Sequence[int] | None = None
    body: bool = False

    def line_of(self, index: int) -> int:
        """The line where item `index` starts."""
        if self.lines is not None:
            return self.lines[index]
        offsets = _item_offsets(self.data, body=self.body)
        return line_at(self.data, offsets[index]) if index < len(offsets) else 1


def read_items(data: bytes, name: str) -> Items:
    """The items of a JSON list, a `{"messages": [...]}` body, or JSON lines.

    `data` has passed `check_text`.

    Raises:
        ImportInputError: the input is not JSON, or none of these shapes.
    """
    try:
        document: object = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        return _json_lines(data, name, exc)
    body = isinstance(document, dict) and "messages" in document
    if body:
        document = cast("dict[str, object]", document)["messages"]
        if not isinstance(document, list):
            raise input_error(
                name,
                line_at(data, _messages_offset(data)),
                f"`messages` must be a list, not {json_type(document)}",
            )
    if not isinstance(document, list):
        found = json_type(cast("object", document))
        raise input_error(name, line_at(data, 0), f"found {found}; {_EXPECTED}")
    return Items(data=data, values=cast("list[object]", document), body=body)


def _json_lines(data: bytes, name: str, whole: msgspec.DecodeError) -> Items:
    values: list[object] = []
    lines: list[int] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            values.append(msgspec.json.decode(line))
        except msgspec.DecodeError as exc:
            if values:  # JSON lines up to here: this line is the bad one
                raise input_error(
                    name, number, f"not JSON ({_plain(exc)}); {_EXPECTED}"
                ) from None
            # Not JSON lines: report where the whole document went wrong.
            raise input_error(
                name, _where(data, whole), f"not JSON ({_plain(whole)}); {_EXPECTED}"
            ) from None
        lines.append(number)
    return Items(data=data, values=values, lines=lines)


Record = tuple[int, dict[str, Any]]
"""One line of a JSON-lines log: its 1-based number and its object."""


def first_object(data: bytes) -> dict[str, Any] | None:
    """The first non-blank line of `data` as a JSON object, if it is one."""
    for line in data.split(b"\n"):
        if line.strip():
            try:
                value: object = msgspec.json.decode(line)
            except msgspec.DecodeError:
                return None
            return cast("dict[str, Any]", value) if isinstance(value, dict) else None
    return None


def read_records(data: bytes, name: str, what: str) -> list[Record]:
    """Every non-blank line of the log `data` (a `what`), each a JSON object.

    `data` has passed `check_text`.

    Raises:
        ImportInputError: a line is not JSON, or not an object (its number
            named); a last line cut short says so.
    """
    lines = data.split(b"\n")
    last = max((n for n, line in enumerate(lines) if line.strip()), default=-1)
    records: list[Record] = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        number = index + 1
        try:
            value: object = msgspec.json.decode(line)
        except msgspec.DecodeError as exc:
            if index == last and "truncated" in str(exc):
                problem = (
                    f"the last line is cut short (the {what} ends inside a record, "
                    "as when it is copied while being written); remove that line "
                    "to import the rest"
                )
            else:
                problem = (
                    f"not JSON ({_plain(exc)}); each line of a {what} is a JSON object"
                )
            raise input_error(name, number, problem) from None
        if not isinstance(value, dict):
            raise input_error(
                name,
                number,
                f"found {json_type(value)}; each line of a {what} is a JSON object",
            )
        records.append((number, cast("dict[str, Any]", value)))
    return records


def _plain(exc: msgspec.DecodeError) -> str:
    return _AT_BYTE.sub("", str(exc))


def _where(data: bytes, exc: msgspec.DecodeError) -> int:
    found = _AT_BYTE.search(str(exc))
    if found is None:  # truncated: the input ended too soon
        return data.rstrip().count(b"\n") + 1
    return line_at(data, int(found.group(1)))


def json_type(value: object) -> str:
    """What kind of JSON value `value` is, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _messages_offset(data: bytes) -> int:
    depth = 0
    key = False
    for token in _TOKEN.finditer(data):
        char = token.group()
        if depth == 1 and char == b'"messages"':
            key = True
        elif char == b":" and key and depth == 1:
            return token.end()
        elif char in (b"[", b"{"):
            depth += 1
        elif char in (b"]", b"}"):
            depth -= 1
        elif char == b",":
            key = False
    return 0


def _item_offsets(data: bytes, *, body: bool) -> list[int]:
    """Where each item of the top list (or of the body's `messages`) starts."""
    start = _messages_offset(data) if body else 0
    offsets: list[int] = []
    depth = 0
    for token in _TOKEN.finditer(data, start):
        char = token.group()
        if char in (b"[", b"{"):
            depth += 1
            if depth == 1 and char == b"[":
                offsets.append(token.end())
        elif char in (b"]", b"}"):
            depth -= 1
            if depth == 0:
                break
        elif char == b"," and depth == 1:
            offsets.append(token.end())
    return offsets
