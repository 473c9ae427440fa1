"""Finding credentials in text: the pre-filter and the combined pattern.

A `Rule` (`turnkeep.secretrules`) is a named regex plus the *triggers* any
text it matches must contain (`"eyJ"` for a JWT, `"token"` in any case for
`token = ...`) and, optionally, characters of which a match holds at least
one (`needs`: the `:` or `=` of an assignment). `SecretScanner.scan` tests
those first: a needed character is a `memchr`; the exact triggers needing
it are one regex whose branches all start with that character (`re` skips
to it in C); lowercase triggers are substring searches. Only when a rule's
test passes does the text take ONE compiled alternation of the rules that
passed, whose branches each start with a literal character
(`Rule.search`). Text without any trigger (most of a conversation) is
returned as the same object.

In text beyond ASCII, lowercase triggers of rules with a `reach`
(`token = ...`) are looked for only in the few characters before each
needed character (a `str.find` each), while there are at most `_WINDOWS`
of those. A test with one or two other lowercase triggers (`bearer`) finds
them with a regex per way of writing their first letter (`Variants`).
Otherwise lowercase triggers are searched in the text itself when it holds
none of their letters in upper case (a match would then be there in lower
case), else in one lowered copy. Either way, the characters that `re`
matches to an ASCII letter when ignoring case (the Kelvin sign, the long
s) count as that letter.
Where triggers were found is where the rules' pattern is then tried
(`Rule.lead`), instead of searching the whole text. A rule without
triggers (a user's pattern, the opt-in high-entropy rule) runs on every
text. `turnkeep.redaction` decides which fields are scanned.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

import attrs

from turnkeep.errors import ConfigurationError
from turnkeep.secretprobe import Places, Probe, find_all, lower_copy, near, probes
from turnkeep.secretrules import DEFAULT_RULES, HIGH_ENTROPY, Rule, rules_from

__all__ = [
    "DEFAULT_RULES",
    "HIGH_ENTROPY",
    "Rule",
    "SecretScanner",
    "rules_from",
]


_JSON_PLAIN: Final = re.compile(r'[^"\\\x00-\x1f]*')
"""Text that JSON encoders write as it is (no quote, backslash or control)."""
_FLAGS: Final = re.compile(r"\A\(\?([aiLmsux]+)\)")
_CACHE_LIMIT: Final = 256
_LEAD: Final = 64
"""Context kept before the last word of a streamed piece: enough for the
lead-in of any rule (`Authorization: Bearer `, `password = "`)."""
_OPEN_LIMIT: Final = 16_384
"""The longest open match carried to the next piece (a private key's body)."""


def _branches(rule: Rule) -> str:
    """`rule`'s search form as top-level branches of the combined pattern."""
    body = (rule.search or rule.regex).replace("(?P<secret>", "(?:")
    flags = _FLAGS.match(body)
    if flags is not None:
        body = f"(?{flags.group(1)}:{body[flags.end() :]})"
    return body


@attrs.define(eq=False)
class SecretScanner:
    """Replaces every match of its rules with `[REDACTED:<name>]` in one pass.

    Raises:
        ConfigurationError: a rule's regex does not compile (alone, or
            combined with the others: e.g. a group name used twice).
    """

    rules: tuple[Rule, ...]
    _regexes: tuple[re.Pattern[str], ...] = attrs.field(init=False, default=())
    _always: int = attrs.field(init=False, default=0)
    _probes: tuple[Probe, ...] = attrs.field(init=False, default=())
    _placed: tuple[tuple[int, bool, tuple[str, ...], str], ...] = attrs.field(
        init=False, default=()
    )
    """Per rule: lead, cased, triggers, needs (for `_starts`)."""
    _unled: int = attrs.field(init=False, default=0)
    _compiled: dict[int, re.Pattern[str]] = attrs.field(
        init=False, factory=dict[int, re.Pattern[str]]
    )

    def __attrs_post_init__(self) -> None:
        regexes: list[re.Pattern[str]] = []
        for index, rule in enumerate(self.rules):
            try:
                regexes.append(re.compile(rule.regex))
            except re.error as exc:
                raise ConfigurationError(
                    f"redaction pattern {rule.name!r} is not a valid regex: {exc}"
                ) from exc
            if not rule.triggers:
                self._always |= 1 << index
        self._regexes = tuple(regexes)
        self._probes = probes(self.rules)
        self._placed = tuple(
            (rule.lead or 0, rule.cased, rule.triggers, rule.needs)
            for rule in self.rules
        )
        self._unled = self._always | sum(
            1 << i for i, rule in enumerate(self.rules) if rule.lead is None
        )
        self._pattern((1 << len(self.rules)) - 1)  # every rule compiles together

    def may_match(self, text: str) -> bool:
        """Whether a rule's pre-filter passes on `text`.

        Always, with a rule without triggers; if not, `scan` finds nothing
        in any part of `text`. When `json_safe`, no trigger or needed
        character is escaped in JSON, so a value whose JSON does not pass
        holds no string with anything to redact.
        """
        return self._mask(text) != 0

    @property
    def json_safe(self) -> bool:
        """Whether no trigger or needed character changes in JSON."""
        return all(
            _JSON_PLAIN.fullmatch(t) is not None
            for rule in self.rules
            for t in (*rule.triggers, rule.needs)
        )

    def scan(self, text: str) -> str:
        """Return `text` with every secret replaced (`text` itself if none)."""
        mask, lowered, places = self._prefilter(text)
        if not mask:
            return text
        pieces: list[str] = []
        pos = 0
        for found in self._matches(text, mask, lowered, places):
            pieces.append(text[pos : found.start()])
            pieces.append(self._replace(found, mask))
            pos = found.end()
        if not pieces:
            return text
        pieces.append(text[pos:])
        return "".join(pieces)

    def _matches(
        self, text: str, mask: int, lowered: str | bytes | None, places: Places
    ) -> Iterator[re.Match[str]]:
        """The matches of the rules in `mask`, as `finditer` finds them."""
        pattern = self._pattern(mask)
        starts = self._starts(text, mask, lowered, places)
        if starts is None:
            yield from pattern.finditer(text)
            return
        # Every match starts within its rule's `lead` before one of its
        # triggers, so trying those places in order finds the same matches
        # as a search of the whole text, without reading all of it.
        match = pattern.match
        pos = 0
        for start in starts:
            if start < pos:
                continue
            found = match(text, start)
            if found is not None:
                yield found
                pos = found.end()

    def _starts(
        self, text: str, mask: int, lowered: str | bytes | None, places: Places
    ) -> list[int] | None:
        """Where a match of the rules in `mask` can start, in order.

        `None` when a rule in `mask` has no `lead` (or no triggers).
        `places` holds the triggers found near needed characters;
        `lowered` is the pre-filter's lowered copy; without one, the text
        holds no upper-case letter of a lowercase trigger that was found.
        """
        if mask & self._unled:
            return None
        starts: list[int] = []
        rest = mask
        while rest:
            bit = rest & -rest
            rest ^= bit
            lead, cased, triggers, needs = self._placed[bit.bit_length() - 1]
            for trigger in triggers:
                near = None if cased else places.get((needs, trigger))
                if near is not None:
                    found = near
                elif cased or lowered is None:
                    found = find_all(text, trigger)
                elif isinstance(lowered, str):
                    found = find_all(lowered, trigger)
                else:
                    # Lowered UTF-8: offsets back to characters by decoding
                    # what comes before.
                    found = [
                        len(lowered[:at].decode("utf-8", "surrogatepass"))
                        for at in find_all(lowered, trigger.encode())
                    ]
                if not lead:
                    starts.extend(found)
                    continue
                for at in found:
                    starts.extend(range(max(0, at - lead), at + 1))
        return sorted(set(starts)) if len(starts) > 1 else starts

    def scan_continued(self, context: str, text: str) -> tuple[str, str]:
        """Scan `text` as the continuation of `context` (a streamed reply).

        A secret whose start (`Bearer `, `-----BEGIN`, `sk-`) came in an
        earlier piece is found in `context + text`; the part of it inside
        `text` is replaced. (What an earlier piece already stored stays.)

        Returns:
            The redacted `text`, and the context for the next piece: from
            the start of a match still open at the end (a key whose end has
            not come yet), else `_next_context`.
        """
        whole = context + text
        mask, lowered, places = self._prefilter(whole)
        if not mask:
            return text, _next_context(whole)
        cut = len(context)
        pieces: list[str] = []
        pos = cut
        open_at: int | None = None
        for match in self._matches(whole, mask, lowered, places):
            if match.end() == len(whole):
                open_at = match.start()
            span = self._span(match, mask)
            if span is None or span[1] <= cut:
                continue
            start, end, marker = span
            start = max(start, cut)
            pieces.append(whole[pos:start])
            pieces.append(marker)
            pos = end
        if not pieces:
            redacted = text
        else:
            pieces.append(whole[pos:])
            redacted = "".join(pieces)
        if open_at is not None and len(whole) - open_at <= _OPEN_LIMIT:
            return redacted, whole[open_at:]
        return redacted, _next_context(whole)

    def _mask(self, text: str) -> int:
        """The rules whose pre-filter `text` passes (plus those without one)."""
        return self._prefilter(text)[0]

    def _prefilter(self, text: str) -> tuple[int, str | bytes | None, Places]:
        """`_mask`, the lowered copy of `text` if one was made, and `Places`."""
        mask = self._always
        lowered: str | bytes | None = None
        places: Places = {}
        for needs, exact, masks, lower, lower_b, upper, reach, variants in self._probes:
            if needs:
                for char in needs:
                    if char in text:
                        break
                else:
                    continue
            if exact is not None:
                found = exact.search(text)
                while found is not None:
                    mask |= masks[found.lastindex or 0]
                    found = exact.search(text, found.start() + 1)
            if not lower:
                continue
            if (
                reach
                and lowered is None
                and not text.isascii()
                and near(text, needs, reach, lower, places)
            ):
                # Outside ASCII, a search of the whole text (or lowering a
                # copy of it) costs more than a look before each needed
                # character; in ASCII it is a `memchr` or two.
                for trigger, rules in lower:
                    if (needs, trigger) in places:
                        mask |= rules
                continue
            for char in upper:
                if char in text:
                    break
            else:
                # None of the triggers' letters is upper case here, so a
                # trigger in any case is one in lower case.
                for trigger, rules in lower:
                    if trigger in text:
                        mask |= rules
                continue
            if variants:
                for trigger, rules, ways in variants:
                    key = (needs, trigger)
                    for way, finder in ways:
                        if way != trigger[0] and way not in text:
                            continue
                        found = finder.search(text)
                        while found is not None:
                            places.setdefault(key, []).append(found.start())
                            found = finder.search(text, found.start() + 1)
                    if key in places:
                        mask |= rules
                continue
            if lowered is None:
                lowered = lower_copy(text)
            if isinstance(lowered, str):
                for trigger, rules in lower:
                    if trigger in lowered:
                        mask |= rules
            else:
                for trigger_b, rules in lower_b:
                    if trigger_b in lowered:
                        mask |= rules
        return mask, lowered, places

    def _pattern(self, mask: int) -> re.Pattern[str]:
        pattern = self._compiled.get(mask)
        if pattern is None:
            branches = [
                _branches(rule) for i, rule in enumerate(self.rules) if mask >> i & 1
            ]
            try:
                pattern = re.compile("|".join(branches))
            except re.error as exc:
                raise ConfigurationError(
                    f"the redaction patterns do not combine into one regex: {exc}; "
                    "rename groups other than `secret` and avoid backreferences"
                ) from exc
            if len(self._compiled) >= _CACHE_LIMIT:
                self._compiled.clear()
            self._compiled[mask] = pattern
        return pattern

    def _span(self, match: re.Match[str], mask: int) -> tuple[int, int, str] | None:
        """What to replace of `match` and with which marker (`None`: keep it).

        The combined pattern has no groups (they would cost its fast start),
        so the rule that matched is the first of `mask` whose own regex
        matches at the same place: alternation tries branches in order.
        """
        text = match.string
        start = match.start()
        for index, rule in enumerate(self.rules):
            if not mask >> index & 1:
                continue
            own = self._regexes[index].match(text, start)
            if own is None:
                continue
            if rule.check is not None and not rule.check(own.group(0)):
                return None
            marker = f"[REDACTED:{rule.name}]"
            if "secret" in own.re.groupindex and own.start("secret") >= 0:
                return own.start("secret"), own.end("secret"), marker
            return start, own.end(), marker
        # The search form of a rule matched where its regex does not; a
        # marker is safer than keeping what looked like a secret.
        return start, match.end(), "[REDACTED:secret]"

    def _replace(self, match: re.Match[str], mask: int) -> str:
        span = self._span(match, mask)
        whole = match.group(0)
        if span is None:
            return whole
        start, end, marker = span
        offset = match.start()
        if end < match.end():
            return whole[: start - offset] + marker + whole[end - offset :]
        return whole[: start - offset] + marker


def _next_context(whole: str) -> str:
    """What the next streamed piece is scanned after.

    The word still being written at the end of `whole` (a key, a URL, a JWT
    split anywhere), with `_LEAD` characters before it.
    """
    last = whole.rfind(" ")
    tail = whole[last + 1 :]
    if "\n" in tail or "\t" in tail:  # rare: a later newline or tab
        last = max(last, whole.rfind("\n"), whole.rfind("\t"))
    last = max(last, len(whole) - _OPEN_LIMIT)
    return whole[max(0, last - _LEAD) :]
