"""The credential shapes: `Rule`, the default rules, the high-entropy rule.

A rule is a regex plus its pre-filter (`triggers`, `needs`); how rules are
combined and run is `turnkeep.secretscan`'s (which re-exports these names).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Final

import attrs

__all__ = ["DEFAULT_HOLD", "DEFAULT_RULES", "HIGH_ENTROPY", "Rule", "rules_from"]


@attrs.frozen
class Rule:
    """One kind of secret.

    Attributes:
        name: the kind, shown in the marker `[REDACTED:<name>]`.
        regex: what to replace. A group named `secret` replaces only that
            group (keeping, say, `Bearer `). A leading `(?i)` is allowed.
        triggers: substrings of which every match contains at least one;
            lowercase ones are found in any case unless `cased`; empty
            means the rule runs on every text.
        needs: characters of which every match contains at least one
            (tested first: a `memchr` each); empty: no such test.
        cased: the triggers are found exactly as written.
        lead: how far into a match its trigger starts, at most (`sk-`: 1);
            then the regex runs only there, not over the whole text.
            `None`: unknown.
        search: the same language as `regex`, written so that every
            top-level branch starts with a case-sensitive literal character
            (a word boundary moves behind it, as a lookbehind). Python's `re` then
            skips every position that cannot start a match in C, which makes
            the combined pass several times faster. Defaults to `regex`.
        check: called with the matched text; returns whether to replace it
            (the high-entropy rule measures the token).
        reach: how far before one of `needs` a match's (lowercase) trigger
            starts, at most (`password" =`: 12); then the triggers are
            looked for only in the `reach` characters before each needed
            character, not in a lowered copy of the whole text. `None`:
            unknown (or unbounded).
        hold: the most characters from where a match starts to where the
            text decides it (the match found and closed, or shown not to
            be one), for the secrets the rule is written for; a longer
            match is decided at this length (`turnkeep.heldstream`). For a
            match that may go on (a key's body), where it is recognised.
            `None`: `DEFAULT_HOLD`.
    """

    name: str
    regex: str
    triggers: tuple[str, ...] = ()
    search: str | None = None
    check: Callable[[str], bool] | None = None
    needs: str = ""
    cased: bool = False
    lead: int | None = None
    reach: int | None = None
    hold: int | None = None


DEFAULT_HOLD: Final = 128
"""`Rule.hold` of a rule that does not say (a user's pattern, the
high-entropy rule)."""


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
_GAP: Final = 4
"""The most characters `_ASSIGNED` allows between the word and its `:`/`=`."""
_BEARER: Final = r"\s+(?P<secret>[A-Za-z0-9._~+/=-]{8,})"
_SK_TAIL: Final = r"k-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{16,}"
_JWT_TAIL: Final = r"[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*)?"


def _assignment(words: str, *triggers: str, lead: int = 0) -> Rule:
    # From where a trigger starts in a word to the word's end, plus the gap.
    reach = _GAP + max(
        len(word) - word.index(trigger)
        for word in words.split("|")
        for trigger in triggers
        if trigger in word
    )
    return Rule(
        "secret-assignment",
        f"(?i)(?:{words}){_ASSIGNED}",
        triggers,
        _any_case(words, _ASSIGNED),
        needs=":=",
        lead=lead,
        reach=reach,
        hold=32,
    )


_AWS: Final = ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA")
_GITHUB: Final = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")


DEFAULT_RULES: Final[tuple[Rule, ...]] = (
    Rule(
        "private-key",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?"
        r"(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|$)",
        ("-----BEGIN",),
        needs="-",
        cased=True,
        lead=0,
        hold=64,
    ),
    Rule(
        "aws-access-key",
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b",
        _AWS,
        _bounded("A", r"(?:KIA|SIA|GPA|IDA|ROA|NPA)[0-9A-Z]{16}\b"),
        needs="A",
        cased=True,
        lead=0,
        hold=24,
    ),
    Rule(
        # The signature is optional (an unsigned token is one too), so a
        # token is recognised at its payload's start, not at its end.
        "jwt",
        rf"\beyJ{_JWT_TAIL}",
        ("eyJ",),
        _bounded("e", f"yJ{_JWT_TAIL}"),
        needs="J",
        cased=True,
        lead=0,
        hold=128,
    ),
    Rule(
        "api-token",
        rf"\b[srp]{_SK_TAIL}",
        ("k-",),
        "|".join(_bounded(c, _SK_TAIL) for c in "srp"),
        needs="-",
        cased=True,
        lead=1,
        hold=48,
    ),
    Rule(
        "api-token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
        _GITHUB,
        _bounded("g", r"(?:h[pousr]_[A-Za-z0-9]{20,}|ithub_pat_[A-Za-z0-9_]{20,})"),
        needs="_",
        cased=True,
        lead=0,
        hold=40,
    ),
    Rule(
        "api-token",
        r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
        tuple(f"xox{c}-" for c in "abposr"),
        _bounded("x", r"ox[abposr]-[A-Za-z0-9-]{10,}"),
        needs="-",
        cased=True,
        lead=0,
        hold=32,
    ),
    Rule(
        "api-token",
        r"\bAIza[0-9A-Za-z_-]{35}\b",
        ("AIza",),
        _bounded("A", r"Iza[0-9A-Za-z_-]{35}\b"),
        needs="A",
        cased=True,
        lead=0,
        hold=48,
    ),
    Rule(
        "bearer",
        rf"(?i)\bbearer{_BEARER}",
        ("bearer",),
        "|".join(_bounded(c, f"(?i:earer){_BEARER}") for c in "bB"),
        lead=0,
        hold=32,
    ),
    Rule(
        "url-password",
        r"://[^/\s:@]+:(?P<secret>[^@\s/]+)@",
        ("://",),
        needs=":",  # in its trigger: looked at where the assignments' `:` are
        cased=True,
        lead=0,
        hold=128,  # decided at its `@`: a user and password of ~120 together
    ),
    _assignment("password|passwd", "passw"),
    _assignment("secret", "secret"),
    _assignment("token", "token"),
    _assignment("api_key|apikey|access_key", "_key", "apikey", lead=6),
)
"""The credential shapes redacted by default.

Every default rule has triggers, so text without any (most of a
conversation) skips the regex pass; those whose matches hold a character
that is rare in prose (`-`, `A`, `J`, `_`, `:` or `=`) test it first.
`tests/core/test_redaction_prefilter.py` checks that the pre-filter never
drops a match the rules alone would find."""

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


def rules_from(
    patterns: Iterable[tuple[str, str]], *, high_entropy: bool
) -> tuple[Rule, ...]:
    """The default rules, then `patterns` (name, regex), then high entropy."""
    extra = tuple(Rule(name, regex) for name, regex in patterns)
    return (*DEFAULT_RULES, *extra, *((HIGH_ENTROPY,) if high_entropy else ()))
