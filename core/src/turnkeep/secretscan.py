"""Finding credentials in text: the pre-filter and the combined pattern.

A `Rule` (`turnkeep.secretrules`) is a named regex plus the *triggers* any
text it matches must contain (`"eyJ"` for a JWT, `"token"` in any case for
`token = ...`) and, optionally, characters of which a match holds at least
one (`needs`: the `:` or `=` of an assignment). `SecretScanner.scan` runs
the pre-filter first (`turnkeep.secretprobe`): a `memchr` per needed
character, then, at the few places of the ones found, the triggers that
hold them (one regex matched there) and the key words of rules with a
`reach` (one case-insensitive regex over the characters just before);
triggers not found that way are substring searches, in any case where the
rule asks (`bearer`). Text without any trigger (most of a conversation) is
returned as the same object, having been read only by `memchr` and
substring searches.

Only the rules whose triggers were found take ONE compiled alternation
(`Rule.search`), and only where their matches can start (`Rule.lead`
before each trigger found), instead of over the whole text. A rule without
triggers (a user's pattern, the opt-in high-entropy rule), or without a
`lead`, runs on the whole text. `turnkeep.redaction` decides which fields
are scanned.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

import attrs

from turnkeep.errors import ConfigurationError
from turnkeep.secretprobe import Gate, Loose, any_case, at_places, plan
from turnkeep.secretrules import (
    DEFAULT_HOLD,
    DEFAULT_RULES,
    HIGH_ENTROPY,
    Rule,
    rules_from,
)

__all__ = [
    "DEFAULT_RULES",
    "HIGH_ENTROPY",
    "Rule",
    "SecretScanner",
    "Survey",
    "rules_from",
]


_FLAGS: Final = re.compile(r"\A\(\?([aiLmsux]+)\)")
_CACHE_LIMIT: Final = 256
_LEAD: Final = 64
"""Context kept before the last word of a streamed piece: enough for the
lead-in of any rule (`Authorization: Bearer `, `password = "`)."""
_OPEN_LIMIT: Final = 16_384
"""The longest open match carried to the next piece (a private key's body)."""


Found = tuple[int, int, tuple[int, int, str] | None]
"""A match: its start, its end, and what to replace (`SecretScanner._span`)."""


@attrs.frozen
class Survey:
    """Where a text may hold secrets, for holding a stream back.

    Attributes:
        starts: where matches of the rules whose triggers are there can
            start, ascending (empty when `anywhere`).
        anywhere: a rule found can match anywhere (it has no triggers or
            no `lead`): `starts` does not bound it.
        wait: the most characters those rules need past a start to decide
            it (their largest `Rule.hold`).
        matches: the matches, as `scan` finds them.
    """

    starts: list[int]
    anywhere: bool
    wait: int
    matches: list[Found]


def _quiet(rules: tuple[Rule, ...], hold: int) -> int:
    """How far before a text's end a match can start unseen by the pre-filter.

    Its trigger may be cut at the end (`lead` plus the trigger less one
    character), or the character its rule needs may not have come yet
    (`lead` plus `reach`; unbounded, so `hold`, without a `reach`).
    """
    quiet = 0
    for rule in rules:
        if not rule.triggers:
            continue
        lead = rule.lead if rule.lead is not None else hold
        quiet = max(quiet, lead + max(len(t) for t in rule.triggers) - 1)
        if rule.needs and any(
            not any(c in t for c in rule.needs) for t in rule.triggers
        ):
            quiet = max(quiet, lead + rule.reach if rule.reach is not None else hold)
    return min(quiet, hold)


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
    _gates: tuple[Gate, ...] = attrs.field(init=False, default=())
    _loose: tuple[Loose, ...] = attrs.field(init=False, default=())
    _unled: int = attrs.field(init=False, default=0)
    _compiled: dict[int, re.Pattern[str]] = attrs.field(
        init=False, factory=dict[int, re.Pattern[str]]
    )
    hold: int = attrs.field(init=False, default=0)
    """The longest `Rule.hold` of the rules: how far a streamed text is held
    back at most (`turnkeep.heldstream`)."""
    quiet: int = attrs.field(init=False, default=0)
    """How far a streamed text without triggers is held back (`_quiet`)."""
    _holds: tuple[int, ...] = attrs.field(init=False, default=())

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
        self._gates, self._loose = plan(self.rules)
        self._unled = self._always | sum(
            1 << i for i, rule in enumerate(self.rules) if rule.lead is None
        )
        self._pattern((1 << len(self.rules)) - 1)  # every rule compiles together
        self._holds = tuple(
            DEFAULT_HOLD if rule.hold is None else rule.hold for rule in self.rules
        )
        self.hold = max(self._holds, default=0)
        self.quiet = _quiet(self.rules, self.hold)

    def survey(self, text: str, pos: int = 0) -> Survey | None:
        """Where `text` may hold secrets (`None`: no rule's trigger is there).

        Matches are looked for from `pos` on (where a scan of the text
        before would go on: after its last match).
        """
        starts: list[int] = []
        mask = self._prefilter(text, starts)
        if not mask:
            return None
        ordered = sorted(set(starts))
        found = [
            (m.start(), m.end(), self._span(m, mask))
            for m in self._matches(text, mask, ordered, pos)
        ]
        anywhere = bool(mask & self._unled)
        wait = max(h for i, h in enumerate(self._holds) if mask >> i & 1)
        return Survey([] if anywhere else ordered, anywhere, wait, found)

    def may_match(self, text: str) -> bool:
        """Whether a rule's pre-filter passes on `text`.

        Always, with a rule without triggers; if not, `scan` finds nothing
        in `text` or in any part of it.
        """
        return self._prefilter(text, []) != 0

    def scan(self, text: str) -> str:
        """Return `text` with every secret replaced (`text` itself if none)."""
        starts: list[int] = []
        mask = self._prefilter(text, starts)
        if not mask:
            return text
        pieces: list[str] = []
        pos = 0
        for found in self._matches(text, mask, starts):
            pieces.append(text[pos : found.start()])
            pieces.append(self._replace(found, mask))
            pos = found.end()
        if not pieces:
            return text
        pieces.append(text[pos:])
        return "".join(pieces)

    def _matches(
        self, text: str, mask: int, starts: list[int], pos: int = 0
    ) -> Iterator[re.Match[str]]:
        """The matches of the rules in `mask`, as `finditer` finds them.

        `starts` holds every place where a match of those rules can start
        (`None`-like when a rule in `mask` has no `lead` or no triggers:
        then the whole text is searched).
        """
        pattern = self._pattern(mask)
        if mask & self._unled:
            yield from pattern.finditer(text, pos)
            return
        # Every match starts within its rule's `lead` before one of its
        # triggers, so trying those places in order finds the same matches
        # as a search of the whole text, without reading all of it: a place
        # tried in between where the pattern matched would have been found
        # by the search too.
        match = pattern.match
        for start in sorted(set(starts)) if len(starts) > 1 else starts:
            if start < pos:
                continue
            found = match(text, start)
            if found is not None:
                yield found
                pos = found.end()

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
        starts: list[int] = []
        mask = self._prefilter(whole, starts)
        if not mask:
            return text, _next_context(whole)
        cut = len(context)
        pieces: list[str] = []
        pos = cut
        open_at: int | None = None
        for match in self._matches(whole, mask, starts):
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

    def _prefilter(self, text: str, starts: list[int]) -> int:
        """The rules whose triggers `text` holds (plus those without any).

        Adds where their matches can start to `starts`.
        """
        mask = self._always
        seen = 0
        for gate in self._gates:
            char = gate.char
            if char not in text:
                continue
            seen |= gate.bit
            if gate.exact is not None or gate.near is not None:
                mask |= at_places(text, gate, starts)
        for group in self._loose:
            if group.bits and not seen & group.bits:
                continue
            for trigger, rules, lead in group.exact:
                at = text.find(trigger)
                while at >= 0:
                    mask |= rules
                    starts.extend(range(at - lead, at + 1))
                    at = text.find(trigger, at + 1)
            for way in group.lower:
                if any_case(text, way, starts):
                    mask |= way.rules
        return mask

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
    # Conditionals rather than `max`: this runs for every streamed piece.
    last = whole.rfind(" ")
    if "\n" in whole or "\t" in whole:  # rare: a later newline or tab
        last = max(last, whole.rfind("\n"), whole.rfind("\t"))
    floor = len(whole) - _OPEN_LIMIT
    if last < floor:
        last = floor
    start = last - _LEAD
    return whole[start:] if start > 0 else whole
