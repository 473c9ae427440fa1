"""Finding credentials in text: the rules, their pre-filter, the combined pattern.

A `Rule` is a named regex plus, optionally, the lowercase *triggers* that
any text it matches must contain (`"eyj"` for a JWT). `SecretScanner.scan`
first looks for the triggers with `in` (C-speed substring search), then runs
ONE compiled alternation of the rules without triggers and those whose
triggers were found. Every branch of that alternation starts with a literal
character (`Rule.search`), so Python's `re` skips in C to the positions
where a secret could start; most text costs a handful of substring searches
and one such skip.

A rule without triggers runs on every text: the default rules that start
with a rare character, the opt-in high-entropy rule, a user's pattern.
`turnkeep.redaction` decides which fields are scanned.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Final

import attrs

from turnkeep.errors import ConfigurationError

__all__ = ["DEFAULT_RULES", "HIGH_ENTROPY", "Rule", "SecretScanner"]


@attrs.frozen
class Rule:
    """One kind of secret.

    Attributes:
        name: the kind, shown in the marker `[REDACTED:<name>]`.
        regex: what to replace. A group named `secret` replaces only that
            group (keeping, say, `Bearer `). A leading `(?i)` is allowed.
        triggers: lowercase substrings of which every match contains at
            least one; empty means the rule runs on every text.
        search: the same language as `regex`, written so that every
            top-level branch starts with a case-sensitive literal character
            (a word boundary moves behind it, as a lookbehind). Python's `re` then
            skips every position that cannot start a match in C, which makes
            the combined pass several times faster. Defaults to `regex`.
        check: called with the matched text; returns whether to replace it
            (the high-entropy rule measures the token).
    """

    name: str
    regex: str
    triggers: tuple[str, ...] = ()
    search: str | None = None
    check: Callable[[str], bool] | None = None


def _bounded(first: str, rest: str) -> str:
    """`<first><rest>` after a word boundary, starting with its literal."""
    return f"{first}(?<=\\b{first}){rest}"


def _any_case(words: str, rest: str) -> str:
    """`(?i)(?:<words>)<rest>` as branches that each start with a literal."""
    heads: dict[str, list[str]] = {}
    for word in words.split("|"):
        heads.setdefault(word[0].lower(), []).append(word[1:])
    return "|".join(
        f"{head}(?i:{'|'.join(tails)}){rest}"
        for first, tails in heads.items()
        for head in (first, first.upper())
    )


_ASSIGNED: Final = r"""["']?\s{0,3}[:=]\s{0,3}["']?(?P<secret>[^\s"',;]{6,})"""
_BEARER: Final = r"\s+(?P<secret>[A-Za-z0-9._~+/=-]{8,})"
_SK_TAIL: Final = r"k-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{16,}"


def _assignment(words: str, *triggers: str) -> Rule:
    return Rule(
        "secret-assignment",
        f"(?i)(?:{words}){_ASSIGNED}",
        triggers,
        _any_case(words, _ASSIGNED),
    )


DEFAULT_RULES: Final[tuple[Rule, ...]] = (
    Rule(
        "private-key",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?"
        r"(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|$)",
        (),
    ),
    Rule(
        "aws-access-key",
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b",
        (),
        _bounded("A", r"(?:KIA|SIA|GPA|IDA|ROA|NPA)[0-9A-Z]{16}\b"),
    ),
    Rule(
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        ("eyj",),
        _bounded("e", r"yJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    ),
    Rule(
        "api-token",
        rf"\b[srp]{_SK_TAIL}",
        ("k-",),
        "|".join(_bounded(c, _SK_TAIL) for c in "srp"),
    ),
    Rule(
        "api-token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
        (),
        _bounded("g", r"(?:h[pousr]_[A-Za-z0-9]{20,}|ithub_pat_[A-Za-z0-9_]{20,})"),
    ),
    Rule(
        "api-token",
        r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
        (),
        _bounded("x", r"ox[abposr]-[A-Za-z0-9-]{10,}"),
    ),
    Rule(
        "api-token",
        r"\bAIza[0-9A-Za-z_-]{35}\b",
        (),
        _bounded("A", r"Iza[0-9A-Za-z_-]{35}\b"),
    ),
    Rule(
        "bearer",
        rf"(?i)\bbearer{_BEARER}",
        (),
        "|".join(_bounded(c, f"(?i:earer){_BEARER}") for c in "bB"),
    ),
    Rule("url-password", r"://[^/\s:@]+:(?P<secret>[^@\s/]+)@"),
    _assignment("password|passwd", "passw"),
    _assignment("secret", "secret"),
    _assignment("token", "token"),
    _assignment("api_key|apikey|access_key", "key"),
)
"""The credential shapes redacted by default.

Rules whose search form starts with a character that is rare in prose (`-`,
`A`, `:`, `x`, `b`, `g`) have no triggers: the combined pass skips to those
characters in C, which is cheaper than looking for their triggers. Rules
that start with a common letter (`sk-`, `eyJ`, `token`) have triggers."""

_ENTROPY_BITS: Final = 4.0


def _random_looking(token: str) -> bool:
    if not (
        any(c.isdigit() for c in token)
        and any(c.isupper() for c in token)
        and any(c.islower() for c in token)
    ):
        return False
    counts = Counter(token)
    total = len(token)
    bits = -sum(c / total * math.log2(c / total) for c in counts.values())
    return bits >= _ENTROPY_BITS


HIGH_ENTROPY: Final = Rule(
    "high-entropy",
    r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{32,}={0,2}",
    check=_random_looking,
)
"""Opt-in: 32+ characters of mixed case and digits with high entropy."""

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
    _triggers: tuple[tuple[str, int], ...] = attrs.field(init=False, default=())
    _triggers_b: tuple[tuple[bytes, int], ...] = attrs.field(init=False, default=())
    _compiled: dict[int, re.Pattern[str]] = attrs.field(
        init=False, factory=dict[int, re.Pattern[str]]
    )

    def __attrs_post_init__(self) -> None:
        by_trigger: dict[str, int] = {}
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
            for trigger in rule.triggers:
                by_trigger[trigger] = by_trigger.get(trigger, 0) | 1 << index
        self._regexes = tuple(regexes)
        self._triggers = tuple(by_trigger.items())
        self._triggers_b = tuple((t.encode(), m) for t, m in by_trigger.items())
        self._pattern((1 << len(self.rules)) - 1)  # every rule compiles together

    def scan(self, text: str) -> str:
        """Return `text` with every secret replaced (`text` itself if none)."""
        mask = self._mask(text)
        if not mask:
            return text
        return self._pattern(mask).sub(lambda m: self._replace(m, mask), text)

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
        mask = self._mask(whole)
        if not mask:
            return text, _next_context(whole)
        cut = len(context)
        pieces: list[str] = []
        pos = cut
        open_at: int | None = None
        for match in self._pattern(mask).finditer(whole):
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
        """The rules whose triggers `text` holds (plus those without any)."""
        mask = self._always
        if text.isascii():
            probe = text.lower()
            for trigger, rules in self._triggers:
                if trigger in probe:
                    mask |= rules
        else:
            # Substring search on UCS-4 text is several times slower than on
            # bytes; the triggers are ASCII, so UTF-8 finds the same ones.
            probe_b = text.encode("utf-8", "surrogatepass").lower()
            for trigger_b, rules in self._triggers_b:
                if trigger_b in probe_b:
                    mask |= rules
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
    last = len(whole) - _OPEN_LIMIT
    for space in (" ", "\n", "\t"):
        last = max(last, whole.rfind(space))
    return whole[max(0, last - _LEAD) :]


def rules_from(
    patterns: Iterable[tuple[str, str]], *, high_entropy: bool
) -> tuple[Rule, ...]:
    """The default rules, then `patterns` (name, regex), then high entropy."""
    extra = tuple(Rule(name, regex) for name, regex in patterns)
    return (*DEFAULT_RULES, *extra, *((HIGH_ENTROPY,) if high_entropy else ()))
