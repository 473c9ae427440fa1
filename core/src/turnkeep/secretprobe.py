"""The secret scanner's pre-filter: its tests and the searches they run.

`turnkeep.secretscan` owns how these are used (see its docstring); this
module keeps the parts that need no scanner: a `Probe` per distinct
`Rule.needs`, the lowered copy, the look just before each needed
character (`near`), and finding every place of a substring.
"""

from __future__ import annotations

import re
from typing import Final, TypeVar

from turnkeep.errors import ConfigurationError
from turnkeep.secretrules import Rule

__all__ = [
    "FOLD",
    "Places",
    "Probe",
    "Variants",
    "find_all",
    "lower_copy",
    "near",
    "probes",
]

_Text = TypeVar("_Text", str, bytes)
_WINDOWS: Final = 24
"""Needed characters up to which triggers are looked for just before each
(more, as in code or JSON, and one search of the whole text is cheaper)."""
FOLD: Final = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}
"""The non-ASCII characters `re` matches to an ASCII letter when ignoring
case (`(?i)s` matches the long s, U+017F), as that letter: the length
stays, and so do the offsets."""
_FOLDED: Final = tuple(chr(c) for c in FOLD)
Places = dict[tuple[str, str], list[int]]
"""(needs, trigger): where the trigger starts, found near needed characters."""


Probe = tuple[
    str,
    "re.Pattern[str] | None",
    tuple[int, ...],
    tuple[tuple[str, int], ...],
    tuple[tuple[bytes, int], ...],
    str,
    int,
    "tuple[Variants, ...]",
]
"""One pre-filter test: characters one of which must be there; one regex
finding the exact triggers (its match's `lastindex` indexes their rules);
lowercase triggers (and as UTF-8), and the upper-case letters of those
with the characters folded to them (any of them there: the lowercase
triggers are looked for in a lowered copy); how far before a needed
character those triggers start (0: unknown); and, for a test without
one and with few lowercase triggers, `Variants` to find those with instead
of a lowered copy."""
Variants = tuple[str, int, tuple[tuple[str, "re.Pattern[str]"], ...]]
"""A lowercase trigger, its rules, and one regex per way its first
character can be written (`b(?i:earer)`, `B(?i:earer)`): each starts with a
literal, which `re` skips to in C, and `(?i)` matches the rest in any case
(twice that is cheaper than lowering a copy of a text not in ASCII)."""
_VARIANTS: Final = 2
"""Lowercase triggers up to which a test uses `Variants`."""


def _exact(
    needs: str, triggers: dict[str, int]
) -> tuple[re.Pattern[str], tuple[int, ...]]:
    """One regex for `triggers`, each branch ending in an empty group.

    A trigger holding one of `needs` is found from that character, with
    the part before it as a lookbehind: then every branch starts with the
    same literal, and `re` skips to it in C (a substring search per
    trigger reads the whole text each time).
    """
    by_anchor: dict[str, list[str]] = {}
    masks: list[int] = [0]
    for trigger, rules in triggers.items():
        at = min((i for i, c in enumerate(trigger) if c in needs), default=-1)
        anchor = trigger[at] if at >= 0 else ""
        head = f"(?<={re.escape(trigger[: at + 1])})" if at > 0 else ""
        tail = re.escape(trigger[at + 1 :] if at >= 0 else trigger)
        by_anchor.setdefault(anchor, []).append(f"{head}{tail}()")
        masks.append(rules)
    return (
        re.compile(
            "|".join(
                f"{re.escape(anchor)}(?:{'|'.join(branches)})"
                for anchor, branches in by_anchor.items()
            )
        ),
        tuple(masks),
    )


def probes(rules: tuple[Rule, ...]) -> tuple[Probe, ...]:
    """The pre-filter of `rules`: one test per distinct `needs`.

    Raises:
        ConfigurationError: a rule has `needs` but no triggers, or a
            trigger that is not found in any case is not lowercase ASCII.
    """
    groups: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    reach: dict[str, int] = {}
    for index, rule in enumerate(rules):
        if rule.needs and not rule.triggers:
            raise ConfigurationError(
                f"redaction rule {rule.name!r} has `needs` but no triggers"
            )
        cased, lower = groups.setdefault(rule.needs, ({}, {}))
        if not rule.cased and rule.triggers:
            if rule.needs and rule.reach and reach.get(rule.needs, 1):
                reach[rule.needs] = max(reach.get(rule.needs, 0), rule.reach)
            else:
                reach[rule.needs] = 0  # a rule without a bound: no windows
        for trigger in rule.triggers:
            if not trigger or not (
                rule.cased or (trigger.isascii() and trigger == trigger.lower())
            ):
                raise ConfigurationError(
                    f"redaction rule {rule.name!r}: trigger {trigger!r} must be "
                    "non-empty lowercase ASCII (or the rule `cased`)"
                )
            into = cased if rule.cased else lower
            into[trigger] = into.get(trigger, 0) | 1 << index
    probes: list[Probe] = []
    for needs, (cased, lower) in groups.items():
        exact, masks = _exact(needs, cased) if cased else (None, ())
        if cased or lower:
            probes.append(
                (
                    needs,
                    exact,
                    masks,
                    tuple(lower.items()),
                    tuple((t.encode(), m) for t, m in lower.items()),
                    "".join(
                        sorted(
                            {c.upper() for t in lower for c in t if c.isalpha()}
                            | {chr(c) for t in lower for c, a in FOLD.items() if a in t}
                        )
                    ),
                    reach.get(needs, 0),
                    ()
                    if reach.get(needs, 0) or len(lower) > _VARIANTS
                    else tuple(_variants(t, m) for t, m in lower.items()),
                )
            )
    return tuple(probes)


def _variants(trigger: str, rules: int) -> Variants:
    first = trigger[0]
    ways = {first, first.upper(), *(chr(c) for c, a in FOLD.items() if a == first)}
    rest = f"(?i:{re.escape(trigger[1:])})" if trigger[1:] else ""
    return (
        trigger,
        rules,
        tuple(
            (way, re.compile(re.escape(way) + rest))
            # the trigger as written first: found without a gate
            for way in sorted(ways, key=lambda w: w != first)
        ),
    )


def lower_copy(text: str) -> str | bytes:
    """`text` in lower case, with `FOLD` applied; as UTF-8 unless ASCII.

    Substring search on UCS-2/4 text is slower than on bytes, and lowering
    it slower still; the triggers are ASCII, so lowered UTF-8 finds the
    same ones.
    """
    if text.isascii():
        return text.lower()
    for char in _FOLDED:
        if char in text:
            text = text.translate(FOLD)
            break
    return text.encode("utf-8", "surrogatepass").lower()


def near(
    text: str,
    needs: str,
    reach: int,
    lower: tuple[tuple[str, int], ...],
    places: Places,
) -> bool:
    """Find `lower` in the `reach` characters before each of `needs`.

    Adds where each found trigger starts to `places`; `False` (and nothing
    added) when there are more than `_WINDOWS` needed characters.
    """
    ends: list[int] = []
    for char in needs:
        at = text.find(char)
        while at >= 0:
            if len(ends) == _WINDOWS:
                return False
            ends.append(at)
            at = text.find(char, at + 1)
    for end in ends:
        start = max(0, end - reach)
        window = text[start:end]
        if not window.isascii():
            for char in _FOLDED:
                if char in window:
                    window = window.translate(FOLD)
                    break
        window = window.lower()
        for trigger, _ in lower:
            at = window.find(trigger)
            while at >= 0:
                places.setdefault((needs, trigger), []).append(start + at)
                at = window.find(trigger, at + 1)
    return True


def find_all(haystack: _Text, needle: _Text) -> list[int]:
    """Every position of `needle` in `haystack` (overlapping ones too)."""
    found: list[int] = []
    at = haystack.find(needle)  # pyright: ignore[reportArgumentType]
    while at >= 0:
        found.append(at)
        at = haystack.find(needle, at + 1)  # pyright: ignore[reportArgumentType]
    return found
