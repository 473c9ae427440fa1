"""The secret scanner's pre-filter: which rules a text can match, and where.

`turnkeep.secretscan` runs it (see its docstring); this module builds it
from the rules and holds the searches, which need no scanner. Every search
is a `memchr` (`char in text`, `str.find` of one character), a substring
search, or a regex run over a few characters: `re` reads text one
character at a time several times slower than `memchr`, so it is never run
over a whole text unless a character it needs is there more than `CAP`
times.

- A `Gate` per character some rule `needs`. When the character is there,
  each of its places (at most `CAP`) is looked at: the exact triggers that
  hold it are one regex matched there (`Gate.exact`), and the lowercase
  triggers of rules with a `reach` are one regex searched in a lowered copy
  of the `reach` characters before it (`Gate.near`).
- A `Loose` group per `needs` for the triggers not found that way: exact
  ones that do not hold a character their rule needs are substring
  searches, lowercase ones `AnyCase` searches; run when one of the needed
  characters is there (always, for rules without `needs`).
- `AnyCase`: a lowercase trigger in any case is either written in lower
  case (a substring search), or holds one of the few characters that `re`
  matches to one of its letters when ignoring case (its upper-case letters,
  and `FOLD`); the trigger's regex is then searched around each of those.

Each trigger found adds where a match of its rules can start (`lead`
characters before it, at most) to `starts`, so the rules' pattern is tried
only there.
"""

from __future__ import annotations

import re
from typing import Final, TypeVar

import attrs

from turnkeep.errors import ConfigurationError
from turnkeep.secretrules import Rule

__all__ = [
    "CAP",
    "FOLD",
    "AnyCase",
    "Gate",
    "Loose",
    "any_case",
    "any_case_all",
    "at_places",
    "find_all",
    "lower_copy",
    "plan",
]

_Text = TypeVar("_Text", str, bytes)
CAP: Final = 8
"""Places of a needed (or upper-case) character looked at one by one; past
that (code, JSON), one search of the whole text is cheaper."""
FOLD: Final = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}
"""The non-ASCII characters `re` matches to an ASCII letter when ignoring
case (`(?i)s` matches the long s, U+017F), as that letter: the length
stays, and so do the offsets."""
_FOLDED: Final = tuple(chr(c) for c in FOLD)


@attrs.frozen
class AnyCase:
    """A lowercase trigger looked for in any case.

    Attributes:
        trigger: the trigger (lowercase ASCII).
        rules: the rules it belongs to (a bit each).
        lead: how far before it their matches start, at most.
        needle: the part searched as written: the trigger without its
            first letter when that leaves three characters or more (`earer`
            finds `bearer` and `Bearer`: one upper-case letter fewer to
            look for), else the trigger.
        shift: where `needle` starts in the trigger.
        ascii: the upper-case letters of `needle`.
        others: those and the non-ASCII characters of `FOLD` that `re`
            matches to its letters when ignoring case.
        finder: the trigger, ignoring case.
    """

    trigger: str
    rules: int
    lead: int
    needle: str
    shift: int
    ascii: str
    others: str
    finder: re.Pattern[str]


@attrs.frozen
class Gate:
    """A character that some rules need, and what is looked for at its places.

    Attributes:
        char: the character.
        bit: its bit in the set of needed characters found in a text.
        exact: the exact triggers holding `char`, each branch starting with
            it (the part before it is a lookbehind), or `None`.
        hits: per exact trigger: the trigger, where `char` is in it, its
            rules and their lead (several may hold at one place).
        near: the lowercase triggers of rules with a `reach`, each branch
            ending in an empty group (searched in a lowered copy of the
            `reach` characters before `char`), or `None`.
        near_rules: by the `lastindex` of a `near` match: rules and lead.
        far: the same triggers as `AnyCase`s, for text where `char` is
            there more than `CAP` times.
        reach: how far before `char` those triggers start, at most.
    """

    char: str
    bit: int
    exact: re.Pattern[str] | None
    hits: tuple[tuple[str, int, int, int], ...]
    near: re.Pattern[str] | None
    near_rules: tuple[tuple[int, int], ...]
    far: tuple[AnyCase, ...]
    reach: int


@attrs.frozen
class Loose:
    """Triggers searched in the whole text once one of `bits` was found.

    Attributes:
        bits: the `Gate` bits of the rules' needed characters (0: always).
        exact: (trigger, rules, lead): searched as written.
        lower: searched in any case.
    """

    bits: int
    exact: tuple[tuple[str, int, int], ...]
    lower: tuple[AnyCase, ...]


def _any_case(trigger: str, rules: int, lead: int) -> AnyCase:
    shift = 1 if len(trigger) > 3 and trigger[0].isalpha() else 0
    needle = trigger[shift:]
    upper = "".join(dict.fromkeys(c.upper() for c in needle if c.isalpha()))
    folded = "".join(chr(c) for c, a in FOLD.items() if a in needle)
    return AnyCase(
        trigger,
        rules,
        lead,
        needle,
        shift,
        upper,
        upper + folded,
        re.compile(f"(?i:{re.escape(trigger)})"),
    )


def _exact(char: str, triggers: dict[str, tuple[int, int]]) -> re.Pattern[str]:
    """One regex for `triggers`, each branch starting with `char`.

    The part of a trigger before `char` is a lookbehind, so the regex is
    matched at a place of `char`.
    """
    branches: list[str] = []
    for trigger in triggers:
        at = trigger.index(char)
        head = f"(?<={re.escape(trigger[: at + 1])})" if at > 0 else ""
        branches.append(head + re.escape(trigger[at + 1 :]))
    return re.compile(f"{re.escape(char)}(?:{'|'.join(branches)})")


def _near(
    triggers: dict[str, tuple[int, int]],
) -> tuple[re.Pattern[str], tuple[tuple[int, int], ...]]:
    """Lowercase `triggers` in any case, longest first.

    A branch's rules include those of every trigger it starts with: where
    two triggers start at one place, the longer one is the branch taken.
    """
    ordered = sorted(triggers, key=len, reverse=True)
    rules: list[tuple[int, int]] = [(0, 0)]
    for trigger in ordered:
        bits, lead = 0, 0
        for other, (other_bits, other_lead) in triggers.items():
            if trigger.startswith(other):
                bits |= other_bits
                lead = max(lead, other_lead)
        rules.append((bits, lead))
    body = "|".join(f"{re.escape(t)}()" for t in ordered)
    return re.compile(body), tuple(rules)


def _check(rule: Rule) -> None:
    if rule.needs and not rule.triggers:
        raise ConfigurationError(
            f"redaction rule {rule.name!r} has `needs` but no triggers"
        )
    for trigger in rule.triggers:
        if not trigger or not (
            rule.cased or (trigger.isascii() and trigger == trigger.lower())
        ):
            raise ConfigurationError(
                f"redaction rule {rule.name!r}: trigger {trigger!r} must be "
                "non-empty lowercase ASCII (or the rule `cased`)"
            )


def plan(rules: tuple[Rule, ...]) -> tuple[tuple[Gate, ...], tuple[Loose, ...]]:
    """The pre-filter of `rules`: a `Gate` per needed character, `Loose` groups.

    Raises:
        ConfigurationError: a rule has `needs` but no triggers, or a
            trigger that is not found in any case is not lowercase ASCII.
    """
    chars: dict[str, int] = {}
    exact: dict[str, dict[str, tuple[int, int]]] = {}
    near: dict[str, dict[str, tuple[int, int]]] = {}
    reach: dict[str, int] = {}
    loose: dict[str, tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]] = {}
    for index, rule in enumerate(rules):
        _check(rule)
        for char in rule.needs:
            chars.setdefault(char, 1 << len(chars))
        bit, lead = 1 << index, rule.lead or 0
        for trigger in rule.triggers:
            if rule.cased:
                at = min(
                    (trigger.index(c) for c in rule.needs if c in trigger), default=-1
                )
                into = exact.setdefault(trigger[at], {}) if at >= 0 else None
            elif rule.needs and rule.reach:
                for char in rule.needs:
                    words = near.setdefault(char, {})
                    old_bits, old_lead = words.get(trigger, (0, 0))
                    words[trigger] = (old_bits | bit, max(old_lead, lead))
                    reach[char] = max(reach.get(char, 0), rule.reach)
                continue
            else:
                into = None
            if into is None:
                group = loose.setdefault(rule.needs, ({}, {}))
                into = group[0] if rule.cased else group[1]
            old_bits, old_lead = into.get(trigger, (0, 0))
            into[trigger] = (old_bits | bit, max(old_lead, lead))
    gates: list[Gate] = []
    for char, bit in chars.items():
        found = exact.get(char, {})
        words = near.get(char, {})
        pattern, near_rules = _near(words) if words else (None, ())
        gates.append(
            Gate(
                char,
                bit,
                _exact(char, found) if found else None,
                tuple((t, t.index(char), b, lead) for t, (b, lead) in found.items()),
                pattern,
                near_rules,
                tuple(_any_case(t, b, lead) for t, (b, lead) in words.items()),
                reach.get(char, 0),
            )
        )
    groups = tuple(
        Loose(
            sum(chars[c] for c in set(needs)),
            tuple((t, b, lead) for t, (b, lead) in cased.items()),
            tuple(_any_case(t, b, lead) for t, (b, lead) in lower.items()),
        )
        for needs, (cased, lower) in loose.items()
    )
    return tuple(gates), groups


def at_places(text: str, gate: Gate, starts: list[int]) -> int:
    """The rules whose triggers are at the places of `gate.char`; adds starts.

    Up to `CAP` places are looked at one by one; from the next, the exact
    triggers are one search of the rest of the text, and the key words of
    the `near` rules are found in the whole text (`any_case_all`).
    """
    rules = 0
    exact, hits, window = gate.exact, gate.hits, gate.near
    char, reach, near_rules = gate.char, gate.reach, gate.near_rules
    at = text.find(char)
    seen = 0
    while at >= 0:
        seen += 1
        if seen > CAP:
            if window is not None:
                rules |= any_case_all(text, gate.far, starts)
            if exact is not None:
                found = exact.search(text, at)
                while found is not None:
                    rules |= _hits(text, found.start(), hits, starts)
                    found = exact.search(text, found.start() + 1)
            return rules
        if exact is not None and exact.match(text, at) is not None:
            rules |= _hits(text, at, hits, starts)
        if window is not None:
            # A lowered copy of the few characters before `at` (with `FOLD`
            # applied: same length) and a case-sensitive regex: `re`
            # ignoring case costs several times more per character.
            low = at - reach if at > reach else 0
            part = text[low:at]
            if not part.isascii():
                part = part.translate(FOLD)
            part = part.lower()
            found = window.search(part)
            while found is not None:
                bits, lead = near_rules[found.lastindex or 0]
                start = found.start()
                rules |= bits
                starts.extend(range(low + start - lead, low + start + 1))
                found = window.search(part, start + 1)
        at = text.find(char, at + 1)
    return rules


def _hits(
    text: str, at: int, hits: tuple[tuple[str, int, int, int], ...], starts: list[int]
) -> int:
    """Every exact trigger holding the needed character at `at`.

    One regex branch matched there, but another trigger may hold there too
    (`xoxb-----BEGIN`: Slack's and a private key's).
    """
    rules = 0
    for trigger, offset, bits, lead in hits:
        start = at - offset
        if start >= 0 and text.startswith(trigger, start):
            rules |= bits
            starts.extend(range(start - lead, start + 1))
    return rules


def any_case(text: str, way: AnyCase, starts: list[int]) -> bool:
    """Find `way.trigger` in `text` in any case; add where its matches start.

    Returns whether it was (or may be) there.
    """
    found = False
    needle = way.needle
    if needle in text:
        # As written after its first letter: the trigger, if anywhere,
        # starts one before (in either case).
        lead, back = way.lead, way.shift
        at = text.find(needle)
        while at >= 0:
            found = True
            start = at - back
            starts.extend(range(start - lead, start + 1))
            at = text.find(needle, at + 1)
    seen = 0
    for char in way.ascii if text.isascii() else way.others:
        if char not in text:
            continue
        # An occurrence holding `char` at `at` lies within `size`
        # characters of it: the trigger's regex is searched there only.
        search, size, lead = way.finder.search, len(way.trigger), way.lead
        at = text.find(char)
        while at >= 0:
            seen += 1
            if seen > CAP:
                return _lowered(text, ((way.trigger, lead),), starts) or found
            end = at + size
            hit = search(text, at - size + 1 if at >= size else 0, end)
            while hit is not None:
                found = True
                start = hit.start()
                starts.extend(range(start - lead, start + 1))
                hit = search(text, start + 1, end)
            at = text.find(char, at + 1)
    return found


def any_case_all(text: str, ways: tuple[AnyCase, ...], starts: list[int]) -> int:
    """`any_case` for several triggers with one lowered copy; their rules found."""
    rules = 0
    for way, hit in zip(
        ways,
        _each_lowered(text, tuple((w.trigger, w.lead) for w in ways), starts),
        strict=True,
    ):
        if hit:
            rules |= way.rules
    return rules


def _lowered(
    text: str, triggers: tuple[tuple[str, int], ...], starts: list[int]
) -> bool:
    return any(_each_lowered(text, triggers, starts))


def _each_lowered(
    text: str, triggers: tuple[tuple[str, int], ...], starts: list[int]
) -> list[bool]:
    """Whether each trigger is in a lowered copy of `text`; adds starts."""
    lowered = lower_copy(text)
    found: list[bool] = []
    for trigger, lead in triggers:
        if isinstance(lowered, str):
            places = find_all(lowered, trigger)
        else:
            # Lowered UTF-8: offsets back to characters by decoding what
            # comes before.
            places = [
                len(lowered[:at].decode("utf-8", "surrogatepass"))
                for at in find_all(lowered, trigger.encode())
            ]
        for at in places:
            starts.extend(range(at - lead, at + 1))
        found.append(bool(places))
    return found


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


def find_all(haystack: _Text, needle: _Text) -> list[int]:
    """Every position of `needle` in `haystack` (overlapping ones too)."""
    found: list[int] = []
    at = haystack.find(needle)  # pyright: ignore[reportArgumentType]
    while at >= 0:
        found.append(at)
        at = haystack.find(needle, at + 1)  # pyright: ignore[reportArgumentType]
    return found
